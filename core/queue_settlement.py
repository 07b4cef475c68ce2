"""How a queue's entries are settled: held by a consumer until acked, rejected or requeued.

The other half of a queue from dispatch (core/queue.py): dispatch gives ready entries out;
this is everything that happens to an entry from then on. An acquired entry is counted
against its consumer's credit (and its shared window) until it is acked (gone, its store
record acked), rejected (dead-lettered or dropped) or requeued (back at its original place,
delivery count + 1); an entry that leaves without an ack (expired, dropped from the head,
rejected) is dead-lettered if the queue says so.

`QueueSettlement` is a base class of `Queue`, not an object the queue holds: `ack` runs once
per message and acquiring / releasing once per delivery, and a delegating call would cost
each of them a Python call on the hot path that benchmarks/kernel.py measures.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from herald.core.errors import PreconditionFailed
from herald.core.queue_entry import DeadLetterReason
from herald.core.ready_list import ACQUIRED, GONE, READY

if TYPE_CHECKING:
    from herald.core.consumer import Consumer
    from herald.core.queue import Queue
    from herald.core.queue_args import QueueArguments
    from herald.core.queue_clock import QueueClock
    from herald.core.queue_entry import QueueEntry
    from herald.core.queue_services import QueueInterceptors, QueueOwner
    from herald.core.ready_list import ReadyList
    from herald.core.store import Store

__all__ = ["QueueSettlement"]


class QueueSettlement:
    """The settling half of `Queue`: acquiring, acking, rejecting, requeueing, removing."""

    # The queue's state it works on, set by `Queue.__init__`.
    name: str
    vhost: QueueOwner
    args: QueueArguments
    ready: ReadyList
    clock: QueueClock
    deleted: bool
    unacked_count: int
    _store: Store
    _interceptors: QueueInterceptors
    _acked: int
    _expired: int
    _dead: int

    if TYPE_CHECKING:  # what `Queue` provides

        def dispatch(self) -> None: ...

        def enforce_limits(self) -> None: ...

    # -- handing out -----------------------------------------------------------------------
    def _acquire(self, consumer: Consumer, entry: QueueEntry) -> None:
        entry.state = ACQUIRED
        entry.consumer = consumer
        consumer.unacked[entry.offset] = entry
        consumer.unacked_bytes += entry.size
        limit = consumer.limit
        if limit is not None:
            limit.count += 1
            limit.bytes += entry.size
        self.unacked_count += 1

    def _deliver_no_ack(self, entry: QueueEntry) -> None:
        entry.state = GONE
        self._settle(entry)

    def _unacquire(self, entry: QueueEntry) -> bool:
        """Take the entry back from its consumer; True if that dispatched this queue already."""
        consumer = entry.consumer
        assert consumer is not None
        del consumer.unacked[entry.offset]
        consumer.unacked_bytes -= entry.size
        entry.consumer = None
        self.unacked_count -= 1
        limit = consumer.limit
        return limit is not None and limit.release(entry.size) and consumer in limit.consumers

    # -- settlement ------------------------------------------------------------------------
    def ack(self, entry: QueueEntry) -> None:
        """The consumer processed the entry: it leaves the queue."""
        if entry.state != ACQUIRED:
            if self.deleted:
                return  # RabbitMQ: settling a delivery of a deleted queue is not an error
            raise PreconditionFailed(f"unknown delivery of queue '{self.name}'")
        dispatched = self._unacquire(entry)
        entry.state = GONE
        if entry.stored:
            self._settle(entry)
        self._acked += 1
        on_ack = self._interceptors.on_ack
        if on_ack is not None:
            on_ack(self.vhost.name, self.name, entry.message)
            dispatched = False  # it may have changed what can be pushed
        if self.ready.count and not dispatched:
            self.dispatch()

    def reject(self, entry: QueueEntry, *, requeue: bool) -> None:
        """nack/reject: back to the queue (redelivered), or dead-lettered / dropped."""
        if entry.state != ACQUIRED:
            if self.deleted:
                return  # RabbitMQ: settling a delivery of a deleted queue is not an error
            raise PreconditionFailed(f"unknown delivery of queue '{self.name}'")
        self._unacquire(entry)
        if self.deleted:
            entry.state = GONE  # went with its queue (a basic.get holder's): nothing to dead-letter
            return
        if requeue:
            self._requeue(entry)
            self.enforce_limits()
            self.dispatch()
        else:
            self._remove(entry, DeadLetterReason.REJECTED)
            self.dispatch()

    def release(self, holder: Consumer) -> None:
        """Requeue everything `holder` has not acked (channel closed, consumer gone)."""
        holder.detach_limit()
        if holder.unacked and not self.deleted:
            for entry in sorted(holder.unacked.values(), key=lambda e: e.offset):
                self._unacquire(entry)
                self._requeue(entry)
            self.enforce_limits()
            self.dispatch()

    def _requeue(self, entry: QueueEntry) -> None:
        entry.state = READY
        entry.delivery_count += 1
        if entry.stored:
            self._store.note_delivery(entry.stored, entry.offset, entry.delivery_count)
        self.ready.requeue(entry)
        if entry.expires_at is not None:
            self.clock.track(entry)

    # -- leaving without an ack --------------------------------------------------------------
    def expire_entry(self, entry: QueueEntry) -> None:
        """A ready entry's TTL passed (called by the queue's clock)."""
        self.ready.discard(entry)
        self._remove(entry, DeadLetterReason.EXPIRED)

    def _remove(self, entry: QueueEntry, reason: DeadLetterReason) -> None:
        """An entry leaves without an ack: dead-letter it if the queue says so."""
        entry.state = GONE
        if reason is DeadLetterReason.EXPIRED:
            self._expired += 1
        if self.args.dead_letter_exchange is not None and self.vhost.dead_letter(
            entry.message,
            cast("Queue", self),
            reason,  # the only subclass there is
        ):
            self._dead += 1
        self._settle(entry)

    def _settle(self, entry: QueueEntry) -> None:
        if entry.stored:
            self._store.ack(entry.stored, entry.offset)
            entry.stored = 0

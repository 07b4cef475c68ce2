"""Queues: the only place messages wait.

A queue keeps its ready entries in delivery order (`ReadyList`) and hands them to consumers
with credit, round-robin within the highest consumer priority that has credit. An entry is
acquired by one consumer until it is acked (gone), rejected (dead-lettered or dropped) or
requeued (back at its original place, delivery count + 1).

Everything here is synchronous and non-blocking: a publish, an ack or a credit change runs the
dispatch loop in the caller's task, which is what makes the kernel fast on one core.
Durable state goes through the store: persistent messages in durable queues are appended
once per message (here when it has one queue, by the virtual host for several) and acked by
the queue (core/queue_settlement.py).

A queue is made by its type's factory (hook `herald_queue_types`; this class is the `classic`
type's) from a `QueueDeclaration`, the broker's shared `QueueServices` and its `QueueOwner`,
the virtual host it calls back into to delete itself or dead-letter (core/queue_services.py).
It reaches nothing else: no path from a queue to the broker.

TTL follows RabbitMQ (x-message-ttl and per-message expiration, the lower wins), with one
improvement: an expired message leaves when its time comes even if it is not at the head.

This module is a queue's intake and dispatch: publishes, length limits, consumers, ready
entries given out. What happens to an entry once given out (acked, rejected, requeued,
dead-lettered) is `Queue`'s base class's, `QueueSettlement` in core/queue_settlement.py.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import trio

from herald.core.consumer import (
    Consumer,
    ConsumerSet,
    DeliverySink,
    SharedLimit,
    consumer_priority,
)
from herald.core.errors import ResourceLocked
from herald.core.queue_args import Overflow
from herald.core.queue_clock import QueueClock
from herald.core.queue_entry import DeadLetterReason, QueueEntry, QueueStatistics
from herald.core.queue_settlement import QueueSettlement
from herald.core.queue_swap import QueueSwap
from herald.core.ready_list import GONE, ReadyList
from herald.core.store import QueueTarget
from herald.core.swap import SwappedRange

if TYPE_CHECKING:
    from herald.core.exchange import Exchange
    from herald.core.message import Message
    from herald.core.queue_services import QueueDeclaration, QueueOwner, QueueServices

__all__ = ["DeadLetterReason", "Queue", "QueueEntry", "QueueStatistics"]

log = logging.getLogger(__name__)
_DROP_HEAD = Overflow.DROP_HEAD  # a module global: an Enum class attribute costs 10x more


class Queue(QueueSettlement):
    """One queue of one virtual host: the `classic` queue type (also serves `quorum`).

    `vhost` is the queue's owner, `services` the broker's, `declaration` what was declared
    (its arguments already parsed and checked against the type).
    """

    restores_entries: ClassVar[bool] = True
    """Whether the broker refills it from the store at start; a type whose messages come
    back another way (cluster/shared: through slots) says False."""

    def __init__(
        self, vhost: QueueOwner, services: QueueServices, declaration: QueueDeclaration
    ) -> None:
        self.vhost = vhost
        self.name = declaration.name
        self.durable = declaration.durable
        self.auto_delete = declaration.auto_delete
        self.owner = declaration.owner
        self.arguments: Mapping[str, Any] = dict(declaration.arguments)
        self.args = declaration.args
        self.queue_type = declaration.queue_type  # as declared: "quorum" stays "quorum"
        self.store_id = declaration.store_id
        self._store = services.store
        self.clock = QueueClock(self, services.timers)
        self.swap = QueueSwap(self, services)
        self.ready = self._new_ready_list()
        self.consumers = ConsumerSet(self.args.single_active_consumer)
        self.unacked_count = 0
        self.next_offset = 0
        self.deleted = False
        self._had_consumer = False
        self._dispatching = False
        self._published = self._delivered = self._acked = self._expired = self._dead = 0
        self._interceptors = services.interceptors
        self.clock.touch()

    def __repr__(self) -> str:
        return f"<Queue {self.name!r} in {self.vhost.name!r}>"

    # -- declaration -----------------------------------------------------------------------
    def check_owner(self, owner: Hashable | None) -> None:
        """Exclusive queues belong to the connection that declared them (405 otherwise)."""
        if self.owner is not None and owner != self.owner:
            raise ResourceLocked(
                f"cannot obtain exclusive access to locked queue '{self.name}'"
                f" in vhost '{self.vhost.name}'"
            )

    def binding_changed(
        self, source: Exchange, routing_key: str, arguments: Mapping[str, Any], *, bound: bool
    ) -> None:
        """A binding to this queue was made (`bound`) or removed; nothing for a classic
        queue (a shared queue makes its bindings known cluster-wide)."""

    def touch(self) -> None:
        """The queue was used (redeclared): restart its x-expires period."""
        self.clock.touch()

    # -- publishing ------------------------------------------------------------------------
    @property
    def message_count(self) -> int:
        return self.ready.count

    def accepts(self, message: Message) -> bool:
        """Whether a publish fits (only x-overflow reject-publish ever says no)."""
        args = self.args
        if args.overflow is _DROP_HEAD:
            return True
        if args.max_length is not None and self.ready.count >= args.max_length:
            return False
        limit = args.max_length_bytes
        return limit is None or self.ready.bytes + message.body_size <= limit

    def enqueue(self, message: Message) -> QueueEntry:
        """Append `message` as a ready entry. The caller stores it, then `admit`s it."""
        entry = self.new_entry(message, self.next_offset, 0)
        self.next_offset += 1
        self.ready.push(entry)
        self._published += 1
        return entry

    def admit(self, entry: QueueEntry) -> None:
        """After `enqueue` (and storing): swap the entry out if it joins a backlog (paging it
        first if it is not stored and memory is short), else start its TTL. Then the caller
        dispatches."""
        swap = self.swap
        if swap.enabled and (entry.stored or swap.paging) and swap.swap_out(entry):
            return
        if entry.expires_at is not None:
            self.clock.track(entry)

    def push(self, message: Message) -> int | None:
        """Enqueue and dispatch a message routed to this queue alone: the publish fast path.

        A persistent message in a durable queue is appended to the store first (a refusal
        raises and changes nothing); the store's durability ticket is returned (None if not
        stored). When nothing is waiting and a consumer has credit, the entry goes straight
        to it, without passing through the ready list (consumers keeping up).
        """
        offset = self.next_offset
        stored = self.store_id if message.persistent else None
        ticket = None
        if stored is not None:
            ticket = self._store.append(message, (QueueTarget(stored, offset),))
        self.next_offset = offset + 1
        self._published += 1
        entry = self.new_entry(message, offset, 0)
        if stored is not None:
            entry.stored = stored
        if not self.ready.count and self.consumers and not self._dispatching:
            consumer = self.consumers.next_with_credit()
            if consumer is not None:
                self._delivered += 1
                self._hand_over(consumer, entry)
                return ticket
        self.ready.push(entry)
        self.admit(entry)
        self.dispatch()
        self.enforce_limits()
        return ticket

    @property
    def swaps(self) -> bool:
        """Whether this queue may swap stored messages out of memory."""
        return self.swap.enabled

    def unenqueue(self, entry: QueueEntry) -> None:
        """Take back an entry whose publish failed before it was dispatched."""
        entry.state = GONE
        self.ready.discard(entry)

    def new_entry(
        self,
        message: Message,
        offset: int,
        delivery_count: int,
        enqueued_at: float | None = None,
    ) -> QueueEntry:
        """A new entry; `enqueued_at` (Trio time, default now) is when its TTL started."""
        args = self.args
        ttl = args.message_ttl
        expiration = message.expiration_ms
        if expiration is not None and (ttl is None or expiration < ttl):
            ttl = expiration
        if ttl is None:
            expires_at = None
        else:
            start = trio.current_time() if enqueued_at is None else enqueued_at
            expires_at = start + ttl / 1000
        priority = 0
        if args.max_priority is not None and message.priority:
            priority = min(message.priority, args.max_priority)
        return QueueEntry(self, 0, offset, message, delivery_count, priority, expires_at)

    def load_swapped(self, swapped: SwappedRange) -> None:
        """A range's earliest TTL came due: load it, so its entries can expire."""
        self.ready.load(swapped)

    def _new_ready_list(self) -> ReadyList:
        return ReadyList(
            self.args.max_priority,
            loader=self.swap.read,
            on_load=self.swap.loaded,
            load_batch=self.swap.load_batch,
        )

    def enforce_limits(self) -> None:
        """Drop (dead-letter) ready entries from the head while over x-max-length(-bytes).

        Called after a publish was dispatched and after a requeue (as RabbitMQ's
        `requeue_and_run` does `maybe_drop_head`). First, what is already due leaves at once, as in
        RabbitMQ a TTL-0 message that no consumer could take is gone when the publish returns
        (the expiry timer would only run later, and meanwhile a consumer could still get it).
        """
        self.clock.expire_due_now()
        args = self.args
        max_length, max_bytes = args.max_length, args.max_length_bytes
        if (max_length is None and max_bytes is None) or args.overflow is not Overflow.DROP_HEAD:
            return  # reject-publish queues refuse publishes instead; requeues may go over
        ready = self.ready
        while ready.count and (
            (max_length is not None and ready.count > max_length)
            or (max_bytes is not None and ready.bytes > max_bytes)
        ):
            entry = ready.pop()
            if entry is None:
                return  # the head is a range the store cannot read now (StoreUnreadable)
            self._remove(entry, DeadLetterReason.MAXLEN)

    # -- consumers -------------------------------------------------------------------------
    def add_consumer(
        self,
        tag: str,
        sink: DeliverySink,
        *,
        owner: Hashable | None = None,
        no_ack: bool = False,
        exclusive: bool = False,
        prefetch_count: int = 0,
        prefetch_bytes: int = 0,
        limit: SharedLimit | None = None,
        priority: int = 0,
        arguments: Mapping[str, Any] | None = None,
    ) -> Consumer:
        """Subscribe; the queue starts pushing at once if the consumer has credit."""
        self.check_owner(owner)
        self.consumers.admit(exclusive, f"queue '{self.name}' in vhost '{self.vhost.name}'")
        priority = consumer_priority(arguments, priority)
        consumer = Consumer(
            self,
            tag,
            sink,
            no_ack=no_ack,
            exclusive=exclusive,
            prefetch_count=prefetch_count,
            prefetch_bytes=prefetch_bytes,
            limit=limit,
            priority=priority,
            arguments=arguments,
        )
        self.consumers.add(consumer)
        self._had_consumer = True
        self.clock.cancel_idle()
        self.consumers_changed()
        self.dispatch()
        return consumer

    def remove_consumer(self, consumer: Consumer, *, requeue: bool = True) -> None:
        """Unsubscribe. Its unacked entries go back to the queue (redelivered) unless
        `requeue` is False: then they stay with the consumer object, to be acked or
        `release`d later, as after AMQP basic.cancel the channel still settles them."""
        if not self.consumers.remove(consumer):
            return
        self.consumers_changed()
        if requeue:
            consumer.detach_limit()
            self.release(consumer)
        if not self.consumers:
            if self.auto_delete and self._had_consumer:
                self.vhost.delete_queue(self.name, owner=self.owner)
                return
            self.clock.touch()
        self.dispatch()

    def consumers_changed(self) -> None:
        """A consumer came or went; nothing for a classic queue (a shared queue holds slots
        only while it has consumers)."""

    def idle_expired(self) -> None:
        """x-expires passed without a consumer (called by the queue's clock): the owner
        deletes the queue."""
        log.info("queue %r in vhost %r expired (x-expires)", self.name, self.vhost.name)
        self.vhost.delete_queue(self.name, owner=self.owner)

    def getter(self, sink: DeliverySink) -> Consumer:
        """A consumer object that only holds `get` deliveries (never pushed to)."""
        holder = Consumer(self, "", sink)
        holder.active = False
        return holder

    def get(self, holder: Consumer | None) -> QueueEntry | None:
        """basic.get: take the next ready entry; `holder` None means no-ack."""
        self.clock.touch()
        while True:
            entry = self.ready.pop()
            if entry is None:
                return None
            if entry.expires_at is not None and entry.expires_at < trio.current_time():
                self._remove(entry, DeadLetterReason.EXPIRED)
                continue
            if holder is None:
                self._deliver_no_ack(entry)
            else:
                self._acquire(holder, entry)
            self._delivered += 1
            return entry

    # -- dispatch --------------------------------------------------------------------------
    def dispatch(self) -> None:
        """Push ready entries to consumers while both exist. Re-entrant calls are no-ops."""
        if self._dispatching or not self.ready.count or not self.consumers:
            return
        self._dispatching = True
        try:
            ready = self.ready
            while ready.count:
                consumer = self.consumers.next_with_credit()
                if consumer is None:
                    break
                entry = ready.pop()
                if entry is None:
                    break  # the head is a range the store cannot read now: retried later
                expires_at = entry.expires_at
                if expires_at is not None and expires_at < trio.current_time():
                    self._remove(entry, DeadLetterReason.EXPIRED)
                    continue
                self._delivered += 1
                self._hand_over(consumer, entry)
        finally:
            self._dispatching = False

    def _hand_over(self, consumer: Consumer, entry: QueueEntry) -> None:
        if consumer.no_ack:
            self._deliver_no_ack(entry)
        else:
            self._acquire(consumer, entry)
        on_deliver = self._interceptors.on_deliver
        if on_deliver is not None:
            on_deliver(self.vhost.name, self.name, entry.message)
        consumer.sink.deliver(consumer, entry)

    # -- whole-queue operations --------------------------------------------------------------
    def purge(self) -> int:
        """Drop every ready entry (unacked ones stay); returns how many."""
        entries = list(self.ready)
        for entry in entries:
            entry.state = GONE
            self._settle(entry)
        self.ready = self._new_ready_list()
        self.clock.forget_messages()
        return len(entries)

    def browse(self, limit: int | None = None) -> list[QueueEntry]:
        """Ready entries in delivery order, without consuming them."""
        out: list[QueueEntry] = []
        for entry in self.ready:
            if limit is not None and len(out) >= limit:
                break
            out.append(entry)
        return out

    def close(self) -> int:
        """Called by the vhost when the queue is deleted: cancel consumers, drop messages."""
        self.deleted = True
        self.clock.close()
        count = self.ready.count
        for consumer in self.consumers:
            self.consumers.remove(consumer)
            consumer.detach_limit()
            for entry in list(consumer.unacked.values()):
                self._unacquire(entry)
                entry.state = GONE
            consumer.sink.consumer_cancelled(consumer)
        self.ready = self._new_ready_list()  # the store forgets the queue's messages itself
        return count

    def statistics(self) -> QueueStatistics:
        return QueueStatistics(
            messages_ready=self.ready.count,
            messages_unacknowledged=self.unacked_count,
            message_bytes_ready=self.ready.bytes,
            consumers=len(self.consumers),
            published=self._published,
            delivered=self._delivered,
            acked=self._acked,
            expired=self._expired,
            dead_lettered=self._dead,
            messages_swapped=self.ready.swapped_count,
            message_bytes_swapped=self.ready.swapped_bytes,
        )

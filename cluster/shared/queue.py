"""`SharedQueue`: the `shared` queue type (CLUSTER.md §5), one queue on every master.

A publish on any node is stored in that node's own commit log under the queue's store id and
the next offset, and goes no further: nothing enters the ready list. The runtime's reporter
turns durable offsets into slots in etcd; a node with consumers acquires slots and *feeds*
their messages in (`feed`), from its own log or from the origin over the node link. Fed
entries get offsets of their own (a local sequence: several origins' offsets would collide
in one ready list), and everything the classic queue does with a ready entry (credit,
prefetch, requeue, TTL, dead-lettering) works unchanged. Settling a fed entry goes to
`Feeds.settled`, which acks it at its origin.

Transient messages are stored too (they must travel between nodes). Arguments that cannot
hold cluster-wide are refused by the type (cluster/plugin.py); a shared queue is durable and
not exclusive.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from herald.core.errors import PreconditionFailed
from herald.core.queue import Queue
from herald.core.queue_entry import GONE, READY, QueueEntry
from herald.core.store import QueueTarget

if TYPE_CHECKING:
    from herald.cluster.shared.runtime import SharedRuntime
    from herald.core.consumer import Consumer
    from herald.core.exchange import Exchange
    from herald.core.message import Message
    from herald.core.queue_services import QueueDeclaration, QueueOwner, QueueServices

QUEUE_TYPE = "shared"
REFUSED_ARGUMENTS = frozenset(
    {
        "x-max-length",
        "x-max-length-bytes",
        "x-max-priority",
        "x-single-active-consumer",
        "x-expires",  # idle on one node is not idle everywhere
    }
)
FED = -1
"""`entry.stored` of a fed entry: non-zero, so settling it reaches `_settle`; never a store id."""


def runtime_of(services: QueueServices) -> SharedRuntime | None:
    """The cluster's shared-queue runtime of this broker: its master store carries it."""
    return getattr(services.store, "shared", None)


class SharedQueue(Queue):
    """One shared queue on one master."""

    restores_entries = False  # its stored messages come back through slots

    def __init__(
        self, vhost: QueueOwner, services: QueueServices, declaration: QueueDeclaration
    ) -> None:
        where = f"queue '{declaration.name}' in vhost '{vhost.name}'"
        runtime = runtime_of(services)
        if runtime is None:
            raise PreconditionFailed(
                f"invalid arg 'x-queue-type' for {where}: a shared queue needs a cluster node"
                " (cluster.enabled = true)"
            )
        if not declaration.durable or declaration.owner is not None or declaration.auto_delete:
            raise PreconditionFailed(
                f"invalid arg 'x-queue-type' for {where}: a shared queue is durable, not"
                " exclusive and not auto-delete (one node's last consumer leaving must not"
                " delete it everywhere)"
            )
        super().__init__(vhost, services, declaration)
        self.swap.enabled = self.swap.pages = False  # it holds at most a few slots
        self.ready = self._new_ready_list()
        self.runtime = runtime
        self.fed_seq = 0
        self.wanted_until = 0.0  # a basic.get asked lately: hold slots without consumers
        runtime.adopt(self)

    @property
    def key(self) -> tuple[str, str]:
        return (self.vhost.name, self.name)

    # -- publishing: store here, report, deliver nothing ----------------------------------------
    def accepts(self, message: Message) -> bool:
        return True

    def push(self, message: Message) -> int | None:
        offset = self.next_offset
        assert self.store_id is not None
        ticket = self._store.append(message, (QueueTarget(self.store_id, offset),))
        self.next_offset = offset + 1
        self._published += 1
        self.runtime.reporter.note(self, offset, ticket)
        return ticket

    def enqueue(self, message: Message) -> QueueEntry:
        """A publish routed to several queues: the vhost stores a persistent message for all
        of them and then `admit`s the entry; a transient one is stored here."""
        offset = self.next_offset
        self.next_offset = offset + 1
        self._published += 1
        entry = QueueEntry(self, 0, offset, message)
        entry.state = GONE  # it never waits here: its slot brings it back
        if not message.persistent:
            assert self.store_id is not None
            ticket = self._store.append(message, (QueueTarget(self.store_id, offset),))
            self.runtime.reporter.note(self, offset, ticket)
        return entry

    def admit(self, entry: QueueEntry) -> None:
        if entry.stored:  # stored by the vhost with the message's other queues
            self.runtime.reporter.note(self, entry.offset, self.runtime.appended())

    def unenqueue(self, entry: QueueEntry) -> None:
        pass  # the offset is skipped: offsets are never reused

    def enforce_limits(self) -> None:
        pass  # no length limit is enforced cluster-wide

    # -- fed entries -----------------------------------------------------------------------------
    def feed(self, message: Message, delivery_count: int) -> QueueEntry:
        """A slot's message becomes a ready entry here; the caller maps its offset."""
        self.fed_seq += 1
        entry = self.new_entry(message, self.fed_seq, delivery_count)
        entry.stored = FED
        self.ready.push(entry)
        if entry.expires_at is not None:
            self.clock.track(entry)
        return entry

    def drop_ready(self, entries: list[QueueEntry]) -> None:
        """Take back ready entries of a slot this node gives up (they stay live at origin)."""
        for entry in entries:
            if entry.state == READY:
                entry.state = GONE
                self.ready.discard(entry)

    def _settle(self, entry: QueueEntry) -> None:
        if entry.stored:
            entry.stored = 0
            self.runtime.feeds.settled(self, entry)

    def _requeue(self, entry: QueueEntry) -> None:
        entry.state = READY
        entry.delivery_count += 1
        self.runtime.feeds.requeued(self, entry)
        self.ready.requeue(entry)
        if entry.expires_at is not None:
            self.clock.track(entry)

    def binding_changed(
        self, source: Exchange, routing_key: str, arguments: Mapping[str, Any], *, bound: bool
    ) -> None:
        self.runtime.binding_changed(self, source, routing_key, arguments, bound=bound)

    # -- consumers: the holder acquires slots while there are some ------------------------------
    def consumers_changed(self) -> None:
        self.runtime.feeds.wake(self)

    def get(self, holder: Consumer | None) -> QueueEntry | None:
        self.wanted_until = self.runtime.now() + self.runtime.get_interest_s
        entry = super().get(holder)
        self.runtime.feeds.wake(self)
        return entry

    def wants_slots(self) -> bool:
        """Whether this node should hold slots of the queue: it has consumers, or a basic.get
        asked lately."""
        return bool(self.consumers) or self.runtime.now() < self.wanted_until

    def close(self) -> int:
        count = super().close()
        self.runtime.forget(self)
        return count

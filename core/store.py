"""The store interface: what the kernel needs from a storage backend.

Backends are plugins (hook `herald_storage_backends`); the in-memory store and the commit-log
store implement this same interface and pass one contract suite (tests/store_contract.py).

The shape follows RocketMQ's store adapted to queues with acks:
- a message is appended once, whatever the number of durable queues it was routed to; each
  target is a (queue id, queue offset) pair, like one consume-queue entry per queue;
- `append` is synchronous and never blocks the Trio thread: it hands the record to the backend
  and returns a *ticket*, a number that grows with each append. Durability is asynchronous:
  everything with a ticket at or below `durable_ticket` is safe, and `wait_durable(ticket)`
  returns once it is. Many publishers waiting on nearby tickets share one flush (group commit);
- acks arrive out of order, one (queue id, queue offset) at a time;
- metadata (virtual hosts, exchanges, queues, bindings, users, permissions, and whatever plugins
  keep, e.g. retained MQTT messages) is a small map of JSON-able records by (kind, key).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import attrs

if TYPE_CHECKING:
    from herald.core.message import CodecRegistry, Message

MetadataValue = Mapping[str, Any]
"""A metadata record: JSON-able (str keys; str, int, float, bool, None, lists, dicts)."""


def plain_json(value: Any, where: str, path: str) -> Any:
    """`value` as plain JSON types, or TypeError naming the record and the bad part's path.

    Stricter than `json.dumps`: it would turn int keys into strings and write NaN, which
    neither round-trips nor is JSON other tools read.
    """
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TypeError(f"{where}: {path} = {value!r} is not a JSON number")
        return value
    if isinstance(value, Mapping):
        plain = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{where}: {path} has key {key!r}; JSON keys are str")
            plain[key] = plain_json(item, where, f"{path}[{key!r}]")
        return plain
    if isinstance(value, list | tuple):
        return [plain_json(item, where, f"{path}[{i}]") for i, item in enumerate(value)]
    raise TypeError(f"{where}: {path} is a {type(value).__name__}, which JSON cannot hold")


@attrs.frozen
class QueueTarget:
    """One place a stored message belongs: a durable queue and the message's offset in it."""

    queue_id: int
    queue_offset: int


class StoredEntry:
    """A message recovered for a queue: what it needs to be delivered again.

    A plain slots class, not a frozen attrs class or a NamedTuple: a swapped queue reads one
    per delivery, and this is the cheapest of the three to make (190 ns against 310 and 500).
    """

    __slots__ = ("delivery_count", "message", "queue_offset")

    def __init__(self, queue_offset: int, message: Message, delivery_count: int) -> None:
        self.queue_offset = queue_offset
        self.message = message
        self.delivery_count = delivery_count

    def __repr__(self) -> str:
        return f"<StoredEntry #{self.queue_offset} delivery_count={self.delivery_count}>"


T = TypeVar("T")
EntryFactory = Callable[[int, "Message", int], T]
"""Builds an entry read back from the store: (queue offset, message, delivery count)."""


@attrs.frozen
class QueueRange:
    """Consecutive un-acked entries of a queue, summarised without loading their messages.

    What a swapped range of a queue stands for (Apollo's swapped_range): the queue keeps one of
    these instead of N entries, and reads the entries back from the store when it needs them.
    Offsets between `first_offset` and `last_offset` may have gaps (acked, or transient).
    """

    first_offset: int
    last_offset: int
    count: int
    bytes: int  # the sum of the messages' body sizes


@attrs.frozen
class StoreStatistics:
    """A snapshot of a store's counters, for the management API and benchmarks."""

    messages: int
    bytes: int
    appended_ticket: int
    durable_ticket: int


class Store(Protocol):
    """A storage backend. All methods are called from the broker's Trio thread."""

    async def open(self, codecs: CodecRegistry) -> None:
        """Open (and after a crash, recover) the store. Called once, before any other call."""

    async def close(self) -> None:
        """Flush what is pending and close. Nothing is called after it."""

    # -- metadata --------------------------------------------------------------------------
    def load_metadata(self) -> Mapping[str, Mapping[str, MetadataValue]]:
        """Every metadata record, as {kind: {key: value}}."""

    def put_metadata(self, kind: str, key: str, value: MetadataValue | None) -> int:
        """Insert, replace or (value None) delete one record; returns a durability ticket."""

    # -- messages --------------------------------------------------------------------------
    def append(self, message: Message, targets: Sequence[QueueTarget]) -> int:
        """Store `message` for each target and return its ticket. Never blocks.

        Raises `herald.core.errors.ResourceError` when the store cannot take the message
        (disk full, disk alarm): the publisher must be told, and nothing is half-stored.
        """

    @property
    def durable_ticket(self) -> int:
        """Every append or metadata change with a ticket at or below this is durable."""

    async def wait_durable(self, ticket: int) -> None:
        """Return once `ticket` is durable (at once if it is already).

        Raises `ResourceError` if the write behind the ticket failed.
        """

    def ack(self, queue_id: int, queue_offset: int) -> None:
        """The message at `queue_offset` has left queue `queue_id` (acked, expired, dropped)."""

    def note_delivery(self, queue_id: int, queue_offset: int, delivery_count: int) -> None:
        """Record that a message went back to its queue after `delivery_count` deliveries."""

    def recover_queue(self, queue_id: int) -> Iterable[StoredEntry]:
        """The queue's un-acked messages, in queue-offset order, after `open`."""

    def queue_next_offset(self, queue_id: int) -> int:
        """One past the highest queue offset ever appended for the queue (0 if none).

        A restarted queue continues from here, so a queue's offsets only ever grow, even
        when its newest messages were acked before the restart: a backend may rely on that
        (a consume queue is then sorted by offset).
        """

    def queue_ranges(self, queue_id: int, range_size: int) -> Iterable[QueueRange]:
        """The queue's un-acked entries as ranges of at most `range_size` entries, in order.

        Used at start instead of `recover_queue` for queues too long to load: it must not
        decode messages (a consume queue answers it from its fixed-size entries).
        """

    def read_queue(
        self,
        queue_id: int,
        first_offset: int,
        last_offset: int,
        limit: int,
        make: EntryFactory[Any] = StoredEntry,
    ) -> list[Any]:
        """Un-acked entries with `first_offset <= offset <= last_offset`, in offset order, at
        most `limit` of them: how a queue loads the part of a swapped range it needs next.

        Each is `make(queue offset, message, delivery count)`, a `StoredEntry` by default; a
        queue passes a factory of its own entries, saving an object per message read."""

    def delete_queue(self, queue_id: int) -> None:
        """Forget every message of a deleted queue."""

    def queue_ids(self) -> list[int]:
        """The ids of the queues the store holds entries or offsets for. At start the broker
        deletes those no durable queue owns (a queue's scratch id, core/swap.py)."""

    def statistics(self) -> StoreStatistics:
        """Counters for monitoring."""

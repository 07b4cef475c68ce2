"""Consumers and their credit.

A queue pushes entries to a consumer only while the consumer has credit: its own window
(AMQP per-consumer prefetch, MQTT receive maximum, STOMP ack window; by count and by bytes), an
optional window shared by several consumers (AMQP `basic.qos` with `global`), and the transport
not being full (`suspended`, set by the protocol when its socket's send buffer is full). Acks
give credit back and the queue pushes again.

Deliveries go to a `DeliverySink`: the protocol session, which turns each entry into frames.
Its methods are synchronous and must not block; they run inside the queue's dispatch loop.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Set
from typing import TYPE_CHECKING, Any, Protocol

from herald.core.errors import AccessRefused, PreconditionFailed

if TYPE_CHECKING:
    from herald.core.queue import Queue, QueueEntry


class DeliverySink(Protocol):
    """Where a consumer's deliveries go (implemented by protocol sessions)."""

    protocol: str

    def deliver(self, consumer: Consumer, entry: QueueEntry) -> None:
        """Send `entry` to the client. `entry.delivery_count > 0` means redelivered."""

    def consumer_cancelled(self, consumer: Consumer) -> None:
        """The broker ended the consumer (queue deleted): tell the client if it can hear it."""


_NO_CONSUMERS: frozenset[Consumer] = frozenset()


class SharedLimit:
    """A credit window shared by several consumers (AMQP channel-wide prefetch, an MQTT
    session's Receive Maximum)."""

    __slots__ = ("byte_limit", "bytes", "consumers", "count", "count_limit")

    def __init__(self, count_limit: int = 0, byte_limit: int = 0) -> None:
        self.count_limit = count_limit
        self.byte_limit = byte_limit
        self.count = 0
        self.bytes = 0
        self.consumers: Set[Consumer] = _NO_CONSUMERS
        """Read-only: `add` and `discard` change it (a set of its own from the first one on;
        an idle MQTT connection has a window and no consumer)."""

    def add(self, consumer: Consumer) -> None:
        consumers = self.consumers
        if not isinstance(consumers, set):
            self.consumers = consumers = set(consumers)
        consumers.add(consumer)

    def discard(self, consumer: Consumer) -> None:
        consumers = self.consumers
        if isinstance(consumers, set):
            consumers.discard(consumer)

    def has_credit(self) -> bool:
        limit = self.count_limit
        if limit and self.count >= limit:
            return False
        limit = self.byte_limit
        return not (limit and self.bytes >= limit)

    def release(self, size: int) -> bool:
        """Give back one entry's credit; True if the window was full, so that every queue
        of its consumers has been dispatched again here (callers then need not)."""
        count, held = self.count, self.bytes
        self.count = count - 1
        self.bytes = held - size
        limit = self.count_limit
        if not (limit and count >= limit):
            limit = self.byte_limit
            if not (limit and held >= limit):
                return False
        for consumer in list(self.consumers):
            consumer.queue.dispatch()
        return True


class Consumer:
    """One subscription to one queue."""

    __slots__ = (
        "active",
        "arguments",
        "exclusive",
        "limit",
        "no_ack",
        "prefetch_bytes",
        "prefetch_count",
        "priority",
        "queue",
        "sink",
        "suspended",
        "tag",
        "unacked",
        "unacked_bytes",
    )

    def __init__(
        self,
        queue: Queue,
        tag: str,
        sink: DeliverySink,
        *,
        no_ack: bool = False,
        exclusive: bool = False,
        prefetch_count: int = 0,
        prefetch_bytes: int = 0,
        limit: SharedLimit | None = None,
        priority: int = 0,
        arguments: Mapping[str, Any] | None = None,
    ) -> None:
        self.queue = queue
        self.tag = tag
        self.sink = sink
        self.no_ack = no_ack
        self.exclusive = exclusive
        self.prefetch_count = prefetch_count
        self.prefetch_bytes = prefetch_bytes
        self.limit = limit
        self.priority = priority
        self.arguments = arguments or {}
        self.unacked: dict[int, QueueEntry] = {}
        self.unacked_bytes = 0
        self.suspended = False
        self.active = True
        if limit is not None:
            limit.add(self)

    def __repr__(self) -> str:
        return f"<Consumer {self.tag!r} on {self.queue.name!r}>"

    def has_credit(self) -> bool:
        if self.suspended or not self.active:
            return False
        limit = self.prefetch_count
        if limit and len(self.unacked) >= limit:
            return False
        limit = self.prefetch_bytes
        if limit and self.unacked_bytes >= limit:
            return False
        shared = self.limit
        return shared is None or shared.has_credit()

    def set_prefetch(self, count: int, size: int = 0) -> None:
        """Change the window (basic.qos); a wider window lets the queue push at once."""
        self.prefetch_count = count
        self.prefetch_bytes = size
        self.queue.dispatch()

    def suspend(self) -> None:
        """The transport is full: stop pushing until `resume`."""
        self.suspended = True

    def resume(self) -> None:
        if self.suspended:
            self.suspended = False
            self.queue.dispatch()

    def detach_limit(self) -> None:
        if self.limit is not None:
            self.limit.discard(self)


class ConsumerSet:
    """A queue's consumers, in the order the queue serves them.

    Highest `priority` first and arrival order within a priority; `next_with_credit` picks
    round-robin among the highest priority that has credit (RabbitMQ's consumer priorities).
    With single active consumer only the first consumer is eligible, and when it leaves the
    next one becomes active.
    """

    __slots__ = ("_consumers", "_rr", "single_active")

    def __init__(self, single_active: bool = False) -> None:
        self._consumers: list[Consumer] = []
        self._rr = 0
        self.single_active = single_active

    def __len__(self) -> int:
        return len(self._consumers)

    def __bool__(self) -> bool:
        return bool(self._consumers)

    def __iter__(self) -> Iterator[Consumer]:
        return iter(list(self._consumers))

    def __contains__(self, consumer: object) -> bool:
        return consumer in self._consumers

    def admit(self, exclusive: bool, what: str) -> None:
        """Refuse (403) an exclusive consumer beside others, or any consumer beside one."""
        if exclusive and self._consumers:
            raise AccessRefused(f"{what} has consumers; cannot consume exclusively")
        if any(c.exclusive for c in self._consumers):
            raise AccessRefused(f"{what} in exclusive use")

    def add(self, consumer: Consumer) -> None:
        consumers = self._consumers
        if self.single_active:
            consumer.active = not consumers
            consumers.append(consumer)
            return
        index = len(consumers)
        while index and consumers[index - 1].priority < consumer.priority:
            index -= 1
        consumers.insert(index, consumer)

    def remove(self, consumer: Consumer) -> bool:
        """Take `consumer` out; False if it was not here."""
        if consumer not in self._consumers:
            return False
        self._consumers.remove(consumer)
        consumer.active = False
        if self.single_active and self._consumers:
            self._consumers[0].active = True
        return True

    def next_with_credit(self) -> Consumer | None:
        consumers = self._consumers
        count = len(consumers)
        if count == 1 or (self.single_active and count):
            first = consumers[0]
            return first if first.has_credit() else None
        if not count:
            return None
        # Round-robin from `_rr`, the highest priority with credit winning; the list is in
        # priority order, so one of the first's priority wins at once (the usual case).
        top = consumers[0].priority
        index = self._rr % count
        best: Consumer | None = None
        best_index = 0
        for _ in range(count):
            candidate = consumers[index]
            if (best is None or candidate.priority > best.priority) and candidate.has_credit():
                if candidate.priority == top:
                    self._rr = index + 1
                    return candidate
                best, best_index = candidate, index
            index += 1
            if index == count:
                index = 0
        if best is not None:
            self._rr = best_index + 1
        return best


def consumer_priority(arguments: Mapping[str, Any] | None, default: int) -> int:
    """The `x-priority` consumer argument (RabbitMQ's consumer priorities), or `default`."""
    if not arguments or "x-priority" not in arguments:
        return default
    value = arguments["x-priority"]
    if isinstance(value, bool) or not isinstance(value, int):
        raise PreconditionFailed(f"invalid x-priority {value!r}: not an integer")
    return value

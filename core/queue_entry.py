"""A message's place in a queue, and the queue's reasons and counters.

Kept apart from `queue.py` because stores, protocol sessions and the swapping code (Apollo's
swapped entries) all handle entries without needing the queue's dispatch logic.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from herald.core.consumer import Consumer
    from herald.core.message import Message
    from herald.core.queue import Queue
    from herald.core.store import EntryFactory


READY = 0  # waiting in the ready list
ACQUIRED = 1  # delivered to a consumer, not yet settled
GONE = 2  # left the queue (acked, expired, dropped, swapped out, deleted)


class QueueEntry:
    """A message's place in one queue."""

    __slots__ = (
        "consumer",
        "delivery_count",
        "expires_at",
        "message",
        "offset",
        "priority",
        "queue",
        "size",
        "state",
        "stored",
    )

    def __init__(
        self,
        queue: Queue,
        stored: int,
        offset: int,
        message: Message,
        delivery_count: int = 0,
        priority: int = 0,
        expires_at: float | None = None,
    ) -> None:
        # A swapped queue's entries read back are made by `read_back_factory`, not here:
        # a slot added here must be set there too.
        self.queue = queue
        self.offset = offset
        self.message = message
        self.size = message.body_size
        self.priority = priority
        self.expires_at = expires_at
        self.delivery_count = delivery_count
        self.consumer: Consumer | None = None
        self.state = READY
        # The store queue id it is kept under (0: not in the store); settling it acks it there.
        # The queue's own id for a persistent message, its scratch id for a paged transient one.
        self.stored = stored

    @property
    def redelivered(self) -> bool:
        return self.delivery_count > 0

    def __repr__(self) -> str:
        return f"<QueueEntry {self.queue.name}#{self.offset} state={self.state}>"


_new = object.__new__


def read_back_factory(
    queue: Queue, stored: int, clock_offset: float, expiring: list[bool]
) -> EntryFactory[QueueEntry]:
    """The factory a swapped queue (no priorities) hands to `Store.read_queue`: it makes what
    `QueueEntry(queue, stored, offset, message, delivery_count)` makes, with the TTL of a
    message that has its own expiration counted from its publication (its wall timestamp
    moved to the Trio clock by `clock_offset`), and sets `expiring[0]` if one has.

    It runs once per message read back, so it sets the slots itself (no class call): keep
    it in step with `__init__` (tests/test_restored_objects.py compares the two)."""

    def make(offset: int, message: Message, delivery_count: int) -> QueueEntry:
        entry = _new(QueueEntry)
        entry.queue = queue
        entry.offset = offset
        entry.message = message
        entry.size = message.body_size
        entry.priority = 0
        expiration = message.expiration_ms
        if expiration is None:
            entry.expires_at = None
        else:
            entry.expires_at = message.timestamp + clock_offset + expiration / 1000
            expiring[0] = True
        entry.delivery_count = delivery_count
        entry.consumer = None
        entry.state = READY
        entry.stored = stored
        return entry

    return make


class DeadLetterReason(enum.Enum):
    REJECTED = "rejected"
    EXPIRED = "expired"
    MAXLEN = "maxlen"
    DELIVERY_LIMIT = "delivery_limit"


@attrs.frozen
class QueueStatistics:
    messages_ready: int
    messages_unacknowledged: int
    message_bytes_ready: int
    consumers: int
    published: int
    delivered: int
    acked: int
    expired: int
    dead_lettered: int
    messages_swapped: int = 0  # ready messages only in the store (inside swapped ranges)
    message_bytes_swapped: int = 0

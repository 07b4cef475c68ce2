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
        # `stored` comes second so that `partial(QueueEntry, queue, store_id)` is the entry
        # factory a swapped queue hands to `Store.read_queue` (one call per message read).
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

"""Swapped ranges: how a queue of millions of stored messages costs megabytes (Apollo).

A stored (persistent, durable-queue) message at the tail of a backlog does not need to be in
memory until a consumer comes near it. When the queue's loaded ready bytes pass its
`tail_buffer`, new stored entries are folded into a `SwappedRange` at the tail of the ready
list: one small node standing for up to `swap_range_size` entries (first/last offset, count,
bytes, earliest expiry). When dispatch reaches a range, the queue reads the next batch of
entries from the store (`Store.read_queue`) and puts them in front of what is left of the
range. After a restart a long queue is rebuilt from `Store.queue_ranges` as ranges only, so
recovery does not read message bodies.

A persistent message is swapped out only once it is stored, so swapping it never writes.
Transient messages (and persistent ones in non-durable queues) stay loaded until memory runs
short (`[memory] paging_ratio`); then queues *page* them out, as Apollo and RabbitMQ do: each
is appended to the store, without waiting for disk, under the queue's *scratch* store id, a
second id the queue takes when it first pages. A range holds entries of one store id. Scratch
ids belong to no durable queue, so a restart deletes what they hold: a transient message
never outlives the broker. Queues with priorities keep everything loaded (a range cannot keep
their order).
"""

from __future__ import annotations

import time

import trio

from herald.core.errors import ResourceError
from herald.core.queue_entry import READY


class StoreUnreadable(ResourceError):
    """Reading a swapped range back failed (EIO): the range stays where it is, dispatch
    stops at it, and the queue tries the read again a little later."""


class SwappedRange:
    """Entries of one queue that are in the store only.

    It sits in a `ReadyList` deque like an entry: `state`, `priority` and `offset` (its first
    offset) make it sort and skip like one, and `size` is its total bytes.
    """

    __slots__ = (
        "clock_offset",
        "count",
        "expires_at",
        "last_offset",
        "offset",
        "priority",
        "size",
        "state",
        "store_id",
    )

    def __init__(
        self,
        first_offset: int,
        last_offset: int,
        count: int,
        size: int,
        clock_offset: float,
        store_id: int,
    ) -> None:
        self.offset = first_offset
        self.store_id = store_id  # the store queue id its entries are kept under
        # Trio time minus wall time when the range was made: maps a stored message's wall
        # timestamp to the Trio clock TTLs run on (exact in production, and under MockClock).
        self.clock_offset = clock_offset
        self.last_offset = last_offset
        self.count = count
        self.size = size
        self.priority = 0
        self.state = READY
        self.expires_at: float | None = None  # the earliest expiry among its entries

    def add(self, offset: int, size: int, expires_at: float | None) -> None:
        """Fold one more entry (the newest) into the range."""
        self.last_offset = offset
        self.count += 1
        self.size += size
        if expires_at is not None and (self.expires_at is None or expires_at < self.expires_at):
            self.expires_at = expires_at

    @staticmethod
    def now_offset() -> float:
        """Trio time minus wall time, now."""
        return trio.current_time() - time.time()

    def __repr__(self) -> str:
        return (
            f"<SwappedRange {self.offset}..{self.last_offset} ({self.count}, {self.size} B)"
            f" in store queue {self.store_id}>"
        )

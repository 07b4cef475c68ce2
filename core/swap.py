"""Swapped ranges: how a queue of millions of stored messages costs megabytes (Apollo).

A stored (persistent, durable-queue) message at the tail of a backlog does not need to be in
memory until a consumer comes near it. When the queue's loaded ready bytes pass its
`tail_buffer`, new stored entries are folded into a `SwappedRange` at the tail of the ready
list: one small node standing for up to `swap_range_size` entries (first/last offset, count,
bytes, earliest expiry). When dispatch reaches a range, the queue reads the next batch of
entries from the store (`Store.read_queue`) and puts them in front of what is left of the
range. After a restart a long queue is rebuilt from `Store.queue_ranges` as ranges only, so
recovery does not read message bodies.

Unlike Apollo, an entry is swapped only once it is stored, so swapping never writes: transient
messages (and queues with priorities, whose order ranges cannot keep) stay loaded.
"""

from __future__ import annotations

import time

import attrs
import trio

from herald.core.queue_entry import READY


@attrs.frozen
class SwapPolicy:
    """A queue's swapping parameters (config section `[queues]`)."""

    enabled: bool = True
    tail_buffer: int = 640 * 1024  # loaded ready bytes kept before new entries swap out
    swap_range_size: int = 10_000  # entries one range node stands for at most
    load_batch: int = 1_000  # entries read from the store at once when a range is reached


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
    )

    def __init__(
        self, first_offset: int, last_offset: int, count: int, size: int, clock_offset: float
    ) -> None:
        self.offset = first_offset
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
        return f"<SwappedRange {self.offset}..{self.last_offset} ({self.count}, {self.size} B)>"

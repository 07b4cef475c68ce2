"""A queue's side of swapping: which stored entries leave memory, and reading them back.

The mechanism and its parameters are described in core/swap.py; this is the per-queue part
the Queue delegates to, so that queue.py stays about dispatch and settlement.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from herald.core.queue_entry import GONE
from herald.core.swap import SwappedRange

if TYPE_CHECKING:
    from herald.core.config import QueuesSection
    from herald.core.queue import Queue
    from herald.core.queue_entry import QueueEntry
    from herald.core.store import QueueRange, Store, StoredEntry


class QueueSwap:
    __slots__ = ("_queue", "_range_size", "_store", "_tail_buffer", "enabled", "load_batch")

    def __init__(self, queue: Queue, policy: QueuesSection, store: Store) -> None:
        self._queue = queue
        self._store = store
        # Priority queues keep everything loaded: a range cannot keep their order.
        self.enabled = (
            policy.swap and queue.store_id is not None and queue.args.max_priority is None
        )
        self._tail_buffer = policy.tail_buffer
        self._range_size = policy.swap_range_size
        self.load_batch = policy.load_batch

    def swap_out(self, entry: QueueEntry) -> bool:
        """Fold the newest ready entry into the tail range if the backlog is past the tail
        buffer (or already swapped): from then on only the store keeps it."""
        queue = self._queue
        ready = queue.ready
        if not ready.swapped_count and ready.loaded_bytes <= self._tail_buffer:
            return False  # no backlog to join: the common case, decided without moving it
        if not ready.pop_tail(entry):
            return False
        tail = ready.tail_range()
        if tail is None and ready.loaded_bytes + entry.size <= self._tail_buffer:
            ready.push(entry)  # the backlog is small: keep it loaded
            return False
        if tail is None or tail.count >= self._range_size:
            tail = SwappedRange(entry.offset, entry.offset, 0, 0, SwappedRange.now_offset())
            ready.push_range(tail)
        before = tail.expires_at
        ready.grow_range(tail, entry.offset, entry.size, entry.expires_at)
        if tail.expires_at is not None and tail.expires_at != before:
            queue.clock.track_range(tail)
        entry.state = GONE
        return True

    def restore_range(self, stored: QueueRange) -> None:
        """A range recovered from the store at start. Its TTLs count from the messages'
        publication once loaded; a queue with a TTL loads each such range once, through its
        clock, so they expire on time."""
        queue = self._queue
        swapped = SwappedRange(
            stored.first_offset,
            stored.last_offset,
            stored.count,
            stored.bytes,
            SwappedRange.now_offset(),
        )
        queue.ready.push_range(swapped)
        if queue.args.message_ttl is not None:
            swapped.expires_at = trio.current_time()
            queue.clock.track_range(swapped)

    def stored_entry(self, stored: StoredEntry, clock_offset: float) -> QueueEntry:
        """An entry for a message read back from the store; its TTL counts from its
        publication (its wall timestamp moved to the Trio clock by `clock_offset`)."""
        message = stored.message
        entry = self._queue.new_entry(
            message, stored.queue_offset, stored.delivery_count, message.timestamp + clock_offset
        )
        entry.stored = True
        return entry

    def read(self, swapped: SwappedRange, limit: int) -> list[QueueEntry]:
        """The next `limit` entries of a swapped range, read from the store."""
        queue_id = self._queue.store_id
        assert queue_id is not None
        stored = self._store.read_queue(queue_id, swapped.offset, swapped.last_offset, limit)
        offset = swapped.clock_offset
        return [self.stored_entry(s, offset) for s in stored]

    def loaded(self, entries: list[QueueEntry]) -> None:
        """Entries of a range came into the ready list: start their TTLs."""
        clock = self._queue.clock
        for entry in entries:
            if entry.expires_at is not None:
                clock.track(entry)

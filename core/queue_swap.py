"""A queue's side of swapping: which stored entries leave memory, and reading them back.

The mechanism and its parameters are described in core/swap.py; this is the per-queue part
the Queue delegates to, so that queue.py stays about dispatch and settlement.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from herald.core.queue_entry import GONE, QueueEntry
from herald.core.swap import SwappedRange

if TYPE_CHECKING:
    from herald.core.config import QueuesSection
    from herald.core.queue import Queue
    from herald.core.store import QueueRange, Store, StoredEntry


class QueueSwap:
    __slots__ = (
        "_expiring",
        "_queue",
        "_range_size",
        "_store",
        "_tail_buffer",
        "enabled",
        "load_batch",
    )

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
        self._expiring = True  # whether the entries of the last `read` may have a TTL

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
        """The next `limit` entries of a swapped range, read from the store.

        This runs once per message of a deep queue, so the usual case, a message without a
        TTL, makes its entry directly (`new_entry` would find priority 0, as a queue that
        swaps has no priorities, and no expiry)."""
        queue = self._queue
        queue_id = queue.store_id
        assert queue_id is not None
        stored = self._store.read_queue(queue_id, swapped.offset, swapped.last_offset, limit)
        clock_offset = swapped.clock_offset
        if queue.args.message_ttl is not None:
            self._expiring = True
            return [self.stored_entry(s, clock_offset) for s in stored]
        entries = []
        append = entries.append
        expiring = False
        for item in stored:
            message = item.message
            if message.expiration_ms is None:
                append(
                    QueueEntry(
                        queue, item.queue_offset, message, 0, None, item.delivery_count, True
                    )
                )
            else:
                append(self.stored_entry(item, clock_offset))
                expiring = True
        self._expiring = expiring
        return entries

    def loaded(self, entries: list[QueueEntry]) -> None:
        """Entries of a range came into the ready list (those of the last `read`): start
        their TTLs, if any has one."""
        if not self._expiring:
            return
        clock = self._queue.clock
        for entry in entries:
            if entry.expires_at is not None:
                clock.track(entry)

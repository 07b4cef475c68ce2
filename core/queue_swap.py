"""A queue's side of swapping: which stored entries leave memory, and reading them back.

The mechanism and its parameters are described in core/swap.py; this is the per-queue part
the Queue delegates to, so that queue.py stays about dispatch and settlement.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from herald.core.errors import HeraldError
from herald.core.queue_entry import GONE, QueueEntry, read_back_factory
from herald.core.store import QueueTarget
from herald.core.swap import StoreUnreadable, SwappedRange

if TYPE_CHECKING:
    from collections.abc import Callable

    from herald.core.queue import Queue
    from herald.core.queue_services import QueueServices
    from herald.core.store import QueueRange, StoredEntry
    from herald.core.timers import TimerHandle

log = logging.getLogger(__name__)

_RETRY_SECONDS = 1.0


class QueueSwap:
    __slots__ = (
        "_allocate_store_id",
        "_expiring",
        "_memory",
        "_queue",
        "_range_size",
        "_retry",
        "_scratch_last",
        "_store",
        "_tail_buffer",
        "_timers",
        "enabled",
        "load_batch",
        "pages",
        "scratch_id",
    )

    def __init__(self, queue: Queue, services: QueueServices) -> None:
        policy = services.policy
        self._queue = queue
        self._store = services.store
        self._memory = services.memory
        self._timers = services.timers
        self._allocate_store_id: Callable[[], int] = services.allocate_store_id
        # Priority queues keep everything loaded: a range cannot keep their order.
        self.enabled = policy.swap and queue.args.max_priority is None
        self.pages = self.enabled and policy.page_transient
        self._tail_buffer = policy.tail_buffer
        self._range_size = policy.swap_range_size
        self.load_batch = policy.load_batch
        self._expiring = True  # whether the entries of the last `read` may have a TTL
        self.scratch_id = 0  # the store queue id paged entries are kept under (0: none yet)
        self._scratch_last = -1  # the highest offset paged: a store queue's offsets only grow
        self._retry: TimerHandle | None = None  # a dispatch after a failed read

    @property
    def paging(self) -> bool:
        """Whether entries not in the store are paged out now (memory is short)."""
        return self.pages and self._memory.paging

    def swap_out(self, entry: QueueEntry) -> bool:
        """Fold the newest ready entry into the tail range if the backlog is past the tail
        buffer (or already swapped): from then on only the store keeps it. An entry not in
        the store is paged (appended under the scratch id) first, when memory is short."""
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
        store_id = entry.stored or self._page(entry)
        if not store_id:
            ready.push(entry)
            return False
        self._fold(tail, entry, store_id)
        return True

    def page_out(self) -> int:
        """Memory is short: swap out the loaded backlog past the tail buffer, paging what is
        not in the store yet. Returns how many entries left memory."""
        ready = self._queue.ready
        if not self.paging or ready.loaded_bytes <= self._tail_buffer:
            return 0
        swapped = 0
        tail: SwappedRange | None = None
        for item in ready.take_backlog(self._tail_buffer):
            if item.__class__ is SwappedRange:
                ready.push_range(item)
                tail = item
                continue
            entry: QueueEntry = item  # type: ignore[assignment]  # `__class__ is` narrows its true branch only
            store_id = entry.stored or self._page(entry)
            if store_id:
                tail = self._fold(tail, entry, store_id)
                swapped += 1
            else:
                ready.push(entry)
                tail = None
        return swapped

    def _page(self, entry: QueueEntry) -> int:
        """Append `entry`'s message under the scratch id (not waiting for disk); its store id,
        or 0 if it stays loaded (not paging, an offset below one paged, a store error)."""
        if not self.paging or entry.offset <= self._scratch_last:
            return 0
        scratch = self.scratch_id
        if not scratch:
            scratch = self.scratch_id = self._allocate_store_id()
        try:
            self._store.append(entry.message, (QueueTarget(scratch, entry.offset),))
        except HeraldError as exc:
            log.warning("queue %r: cannot page a message out: %s", self._queue.name, exc)
            return 0
        self._scratch_last = entry.offset
        return scratch

    def _fold(self, tail: SwappedRange | None, entry: QueueEntry, store_id: int) -> SwappedRange:
        """Fold `entry` (in the store under `store_id`) into `tail`, or a new tail range."""
        ready = self._queue.ready
        if tail is None or tail.count >= self._range_size or tail.store_id != store_id:
            now = SwappedRange.now_offset()
            tail = SwappedRange(entry.offset, entry.offset, 0, 0, now, store_id)
            ready.push_range(tail)
        before = tail.expires_at
        ready.grow_range(tail, entry.offset, entry.size, entry.expires_at)
        if tail.expires_at is not None and tail.expires_at != before:
            self._queue.clock.track_range(tail)
        entry.state = GONE
        return tail

    # -- what a restart recovered ----------------------------------------------------------
    def restore(self, stored: StoredEntry) -> QueueEntry:
        """Put back a message recovered from the store at its stored offset, loaded: how a
        queue that does not swap (priorities) gets its messages back at start."""
        queue = self._queue
        assert queue.store_id is not None
        entry = self.stored_entry(stored, SwappedRange.now_offset(), queue.store_id)
        queue.next_offset = stored.queue_offset + 1
        queue.ready.push(entry)
        if entry.expires_at is not None:
            queue.clock.track(entry)
        return entry

    def restore_range(self, stored: QueueRange) -> None:
        """Put back a range recovered from the store without loading it (restart of a long
        queue). Its TTLs count from the messages' publication once loaded; a queue with a
        TTL loads each such range once, through its clock, so they expire on time."""
        queue = self._queue
        queue_id = queue.store_id
        assert queue_id is not None
        swapped = SwappedRange(
            stored.first_offset,
            stored.last_offset,
            stored.count,
            stored.bytes,
            SwappedRange.now_offset(),
            queue_id,
        )
        queue.ready.push_range(swapped)
        queue.next_offset = stored.last_offset + 1
        if queue.args.message_ttl is not None:
            swapped.expires_at = trio.current_time()
            queue.clock.track_range(swapped)

    def stored_entry(self, stored: StoredEntry, clock_offset: float, store_id: int) -> QueueEntry:
        """An entry for a message read back from the store; its TTL counts from its
        publication (its wall timestamp moved to the Trio clock by `clock_offset`)."""
        message = stored.message
        entry = self._queue.new_entry(
            message, stored.queue_offset, stored.delivery_count, message.timestamp + clock_offset
        )
        entry.stored = store_id
        return entry

    def read(self, swapped: SwappedRange, limit: int) -> list[QueueEntry]:
        """The next `limit` entries of a swapped range, read from the store.

        This runs once per message of a deep queue, so the usual case, a queue without a TTL,
        has the store make the queue's entries itself (no `StoredEntry` in between, and their
        own expirations set as they are made); a queue that swaps has no priorities."""
        queue = self._queue
        store_id = swapped.store_id
        first, last, clock_offset = swapped.offset, swapped.last_offset, swapped.clock_offset
        try:
            if queue.args.message_ttl is not None:
                self._expiring = True
                stored = self._store.read_queue(store_id, first, last, limit)
                return [self.stored_entry(s, clock_offset, store_id) for s in stored]
            expiring = [False]
            make = read_back_factory(queue, store_id, clock_offset, expiring)
            entries: list[QueueEntry] = self._store.read_queue(store_id, first, last, limit, make)
        except OSError as exc:
            self._read_failed(exc)
            raise StoreUnreadable(f"queue '{queue.name}': cannot read messages: {exc}") from exc
        self._expiring = expiring[0]
        return entries

    def _read_failed(self, exc: OSError) -> None:
        """Log it and dispatch again in a second: a disk error may be transient, and nothing
        else would wake a queue whose consumers wait for the range."""
        queue = self._queue
        log.error("queue %r: reading swapped messages back failed: %s; retrying", queue.name, exc)
        if self._retry is None:
            self._retry = self._timers.call_later(_RETRY_SECONDS, self._retry_read)

    def _retry_read(self) -> None:
        self._retry = None
        if not self._queue.deleted:
            self._queue.dispatch()

    def loaded(self, entries: list[QueueEntry]) -> None:
        """Entries of a range came into the ready list (those of the last `read`): start
        their TTLs, if any has one."""
        if not self._expiring:
            return
        clock = self._queue.clock
        for entry in entries:
            if entry.expires_at is not None:
                clock.track(entry)

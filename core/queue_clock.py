"""A queue's clocks: message TTL and the queue's own x-expires.

Expiring messages sit in a heap ordered by deadline, served by one timer in the broker's
`Timers` for the earliest; an expired message leaves when its time comes, wherever it is in
the queue (RabbitMQ only removes per-message-TTL messages at the head). Entries that were
acquired meanwhile are skipped: a held message does not expire, and one that is requeued is
tracked again.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

import trio

from herald.core.ready_list import READY
from herald.core.swap import SwappedRange

if TYPE_CHECKING:
    from herald.core.queue import Queue
    from herald.core.queue_entry import QueueEntry
    from herald.core.timers import TimerHandle, Timers


class QueueClock:
    """Deadlines of one queue: its messages' TTLs and its own idle expiry (x-expires)."""

    __slots__ = ("_heap", "_idle_timer", "_queue", "_sequence", "_timer", "_timers")

    def __init__(self, queue: Queue, timers: Timers) -> None:
        self._queue = queue
        self._timers = timers
        # (deadline, offset, sequence, item): the sequence breaks ties between an entry and
        # the range it was paged into (same offset, same deadline) before the items compare.
        self._heap: list[tuple[float, int, int, QueueEntry | SwappedRange]] = []
        self._sequence = 0
        self._timer: TimerHandle | None = None
        self._idle_timer: TimerHandle | None = None

    # -- message TTL -------------------------------------------------------------------------
    def track(self, entry: QueueEntry) -> None:
        """Expire `entry` at its `expires_at` unless it has left or been acquired by then."""
        assert entry.expires_at is not None
        self._push(entry.expires_at, entry.offset, entry)

    def track_range(self, swapped: SwappedRange) -> None:
        """Load `swapped` when its earliest TTL comes due, so its entries expire on time."""
        assert swapped.expires_at is not None
        self._push(swapped.expires_at, swapped.offset, swapped)

    def _push(self, deadline: float, offset: int, item: QueueEntry | SwappedRange) -> None:
        heap = self._heap
        self._sequence += 1
        heapq.heappush(heap, (deadline, offset, self._sequence, item))
        if heap[0][3] is item:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = self._timers.call_at(deadline, self.expire_due)

    def expire_due_now(self) -> None:
        """Expire what is already due without waiting for the timer task (TTL 0)."""
        heap = self._heap
        if heap and heap[0][0] <= trio.current_time():
            if self._timer is not None:
                self._timer.cancel()
            self.expire_due()

    def expire_due(self) -> None:
        self._timer = None
        heap = self._heap
        queue = self._queue
        now = trio.current_time()
        while heap and heap[0][0] <= now:
            item = heapq.heappop(heap)[3]
            if item.state != READY:
                continue
            if item.__class__ is SwappedRange:
                queue.load_swapped(item)  # its entries are tracked (and due) once loaded
            else:
                queue.expire_entry(item)  # type: ignore[arg-type]  # `__class__ is` narrows its true branch only
        if heap and not queue.deleted:
            self._timer = self._timers.call_at(heap[0][0], self.expire_due)

    def forget_messages(self) -> None:
        """The ready entries were purged."""
        self._heap.clear()

    # -- x-expires -----------------------------------------------------------------------------
    def touch(self) -> None:
        """The queue was used (declared, consumed from, got from): restart x-expires."""
        queue = self._queue
        expires = queue.args.expires
        if expires is None or queue.deleted:
            return
        self.cancel_idle()
        if not queue.consumers:
            self._idle_timer = self._timers.call_later(expires / 1000, self._idle_expired)

    def cancel_idle(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None

    def _idle_expired(self) -> None:
        self._idle_timer = None
        queue = self._queue
        if not queue.consumers and not queue.deleted:
            queue.idle_expired()

    def close(self) -> None:
        self.cancel_idle()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._heap.clear()

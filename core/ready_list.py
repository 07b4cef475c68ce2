"""The ordered list of a queue's ready entries (delivered next, in order).

Order is by priority (highest first, for x-max-priority queues) then by queue offset. New
entries arrive in offset order, so each priority level is a deque; entries returned by a nack
or a cancelled consumer go back to their original place, as RabbitMQ does, through a small heap
merged at pop time. Entries that leave from the middle (TTL expiry, drop-head) are marked and
skipped lazily; the deques are compacted when such tombstones outnumber the live entries.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from herald.core.queue import QueueEntry

READY = 0
ACQUIRED = 1
GONE = 2

_COMPACT_MIN = 1024


class ReadyList:
    __slots__ = ("_levels", "_requeued", "_tombstones", "_top", "bytes", "count")

    def __init__(self, max_priority: int | None = None) -> None:
        self._levels: list[deque[QueueEntry]] = [deque() for _ in range((max_priority or 0) + 1)]
        self._top = len(self._levels) - 1
        self._requeued: list[tuple[int, int, QueueEntry]] = []
        self.count = 0
        self.bytes = 0
        self._tombstones = 0

    def __len__(self) -> int:
        return self.count

    def push(self, entry: QueueEntry) -> None:
        """Append a new entry (its offset is the highest so far)."""
        self._levels[entry.priority].append(entry)
        self.count += 1
        self.bytes += entry.size

    def requeue(self, entry: QueueEntry) -> None:
        """Put back an entry that was delivered, at its original position."""
        heapq.heappush(self._requeued, (-entry.priority, entry.offset, entry))
        self.count += 1
        self.bytes += entry.size

    def pop(self) -> QueueEntry | None:
        """Remove and return the next entry to deliver, or None."""
        if not self.count:
            return None
        level_entry = self._peek_levels()
        requeued = self._requeued
        if requeued:
            while requeued and requeued[0][2].state != READY:
                heapq.heappop(requeued)
                self._tombstones -= 1
            if requeued:
                top = requeued[0][2]
                if level_entry is None or (-top.priority, top.offset) < (
                    -level_entry.priority,
                    level_entry.offset,
                ):
                    heapq.heappop(requeued)
                    self.count -= 1
                    self.bytes -= top.size
                    return top
        if level_entry is None:
            return None
        self._levels[level_entry.priority].popleft()
        self.count -= 1
        self.bytes -= level_entry.size
        return level_entry

    def peek(self) -> QueueEntry | None:
        """The entry `pop` would return, without removing it."""
        if not self.count:
            return None
        level_entry = self._peek_levels()
        requeued = self._requeued
        while requeued and requeued[0][2].state != READY:
            heapq.heappop(requeued)
            self._tombstones -= 1
        if requeued:
            top = requeued[0][2]
            if level_entry is None or (-top.priority, top.offset) < (
                -level_entry.priority,
                level_entry.offset,
            ):
                return top
        return level_entry

    def _peek_levels(self) -> QueueEntry | None:
        levels = self._levels
        for priority in range(self._top, -1, -1):
            level = levels[priority]
            while level:
                head = level[0]
                if head.state == READY:
                    return head
                level.popleft()
                self._tombstones -= 1
        return None

    def discard(self, entry: QueueEntry) -> None:
        """Account for an entry that left from the middle; the caller has marked it GONE."""
        self.count -= 1
        self.bytes -= entry.size
        self._tombstones += 1
        if self._tombstones > _COMPACT_MIN and self._tombstones > self.count:
            self._compact()

    def _compact(self) -> None:
        for i, level in enumerate(self._levels):
            self._levels[i] = deque(e for e in level if e.state == READY)
        self._requeued = [item for item in self._requeued if item[2].state == READY]
        heapq.heapify(self._requeued)
        self._tombstones = 0

    def __iter__(self) -> Iterator[QueueEntry]:
        """Live entries in delivery order (for browsing and purging); do not mutate meanwhile."""
        requeued = sorted(item for item in self._requeued if item[2].state == READY)
        streams = [iter([item[2] for item in requeued])]
        streams.extend(iter(level) for level in reversed(self._levels))
        keyed = (
            ((-e.priority, e.offset), e) for stream in streams for e in stream if e.state == READY
        )
        for _, entry in sorted(keyed, key=lambda pair: pair[0]):
            yield entry

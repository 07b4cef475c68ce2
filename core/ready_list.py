"""The ordered list of a queue's ready entries (delivered next, in order).

Order is by priority (highest first, for x-max-priority queues) then by queue offset. New
entries arrive in offset order, so each priority level is a deque; entries returned by a nack
or a cancelled consumer go back to their original place, as RabbitMQ does, through a small heap
merged at pop time. Entries that leave from the middle (TTL expiry, drop-head) are marked and
skipped lazily; the deques are compacted when such tombstones outnumber the live entries.

A deque may also hold `SwappedRange` nodes (core/swap.py) standing for entries that are only
in the store. When a range reaches the head, `loader(range, limit)` reads the next entries and
they take the front of the range's place. `count` and `bytes` include swapped entries.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterator
from operator import attrgetter
from typing import TYPE_CHECKING, Union

from herald.core.queue_entry import ACQUIRED, GONE, READY
from herald.core.swap import StoreUnreadable, SwappedRange

if TYPE_CHECKING:
    from herald.core.queue_entry import QueueEntry

    Item = Union[QueueEntry, SwappedRange]  # noqa: UP007 - a runtime alias under TYPE_CHECKING

__all__ = ["ACQUIRED", "GONE", "READY", "ReadyList"]

_COMPACT_MIN = 1024
_size = attrgetter("size")

Loader = Callable[[SwappedRange, int], "list[QueueEntry]"]


def _no_loader(swapped: SwappedRange, limit: int) -> list[QueueEntry]:
    raise AssertionError("a swapped range in a queue without a store loader")


class ReadyList:
    __slots__ = (
        "_levels",
        "_load_batch",
        "_loader",
        "_on_load",
        "_requeued",
        "_tombstones",
        "_top",
        "bytes",
        "count",
        "swapped_bytes",
        "swapped_count",
    )

    def __init__(
        self,
        max_priority: int | None = None,
        loader: Loader = _no_loader,
        on_load: Callable[[list[QueueEntry]], None] | None = None,
        load_batch: int = 1000,
    ) -> None:
        self._levels: list[deque[Item]] = [deque() for _ in range((max_priority or 0) + 1)]
        self._top = len(self._levels) - 1
        self._requeued: list[tuple[int, int, QueueEntry]] = []
        self._loader = loader
        self._on_load = on_load
        self._load_batch = load_batch
        self.count = 0
        self.bytes = 0
        self.swapped_count = 0
        self.swapped_bytes = 0
        self._tombstones = 0

    def __len__(self) -> int:
        return self.count

    @property
    def loaded_bytes(self) -> int:
        return self.bytes - self.swapped_bytes

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

    # -- swapped ranges -------------------------------------------------------------------------
    def tail_range(self) -> SwappedRange | None:
        """The range at the tail of the (only) level, if the tail is a range."""
        level = self._levels[0]
        if level:
            tail = level[-1]
            if tail.__class__ is SwappedRange:
                return tail
        return None

    def ranges(self) -> list[SwappedRange]:
        """The swapped ranges, in delivery order (read-only; for monitoring)."""
        return [item for item in self._levels[0] if item.__class__ is SwappedRange]

    def pop_tail(self, entry: QueueEntry) -> bool:
        """Take back `entry` if it is the newest item of the (only) level, to swap it out."""
        level = self._levels[0]
        if not level or level[-1] is not entry:
            return False
        level.pop()
        self.count -= 1
        self.bytes -= entry.size
        return True

    def push_range(self, swapped: SwappedRange) -> None:
        """Append a range (a new one at the tail, or one recovered from the store)."""
        self._levels[0].append(swapped)
        self._count_range(swapped, 1)

    def grow_range(
        self, swapped: SwappedRange, offset: int, size: int, expires: float | None
    ) -> None:
        """Fold a new entry, already in the store, into the tail range."""
        swapped.add(offset, size, expires)
        self.count += 1
        self.bytes += size
        self.swapped_count += 1
        self.swapped_bytes += size

    def take_backlog(self, keep_bytes: int) -> list[Item]:
        """Remove and return what follows the first `keep_bytes` loaded bytes of the (only)
        level: its ready entries and ranges, in order (entries that left are dropped). The
        caller pushes each back, swapped or not, so the counters are taken off here."""
        level = self._levels[0]
        kept = 0
        index = 0
        for item in level:
            if item.__class__ is not SwappedRange and item.state == READY:
                kept += item.size
                if kept > keep_bytes:
                    break
            index += 1
        taken: list[Item] = []
        for _ in range(len(level) - index):
            item = level.pop()
            if item.__class__ is SwappedRange:
                self._count_range(item, -1)
                taken.append(item)
            elif item.state == READY:
                self.count -= 1
                self.bytes -= item.size
                taken.append(item)
            else:
                self._tombstones -= 1
        taken.reverse()
        return taken

    def _count_range(self, swapped: SwappedRange, sign: int) -> None:
        self.count += sign * swapped.count
        self.bytes += sign * swapped.size
        self.swapped_count += sign * swapped.count
        self.swapped_bytes += sign * swapped.size

    def _expand_head(self, level: deque[Item], swapped: SwappedRange, limit: int) -> None:
        """Replace the range at the head of `level` by its first `limit` entries + the rest."""
        entries = self._loader(swapped, limit)
        level.popleft()
        self._count_range(swapped, -1)
        if entries:
            loaded = sum(map(_size, entries))
            remaining = swapped.count - len(entries)
            last = entries[-1].offset
            if remaining > 0 and last < swapped.last_offset:
                swapped.offset = last + 1
                swapped.count = remaining
                swapped.size = max(swapped.size - loaded, 0)
                level.appendleft(swapped)
                self._count_range(swapped, 1)
            level.extendleft(reversed(entries))
            self.count += len(entries)
            self.bytes += loaded
            if self._on_load is not None:
                self._on_load(entries)

    def load(self, swapped: SwappedRange) -> None:
        """Load a whole range wherever it is (its earliest TTL came due)."""
        level = self._levels[0]
        try:
            index = level.index(swapped)
        except ValueError:
            return  # already loaded (it reached the head meanwhile)
        level.rotate(-index)
        self._expand_head(level, swapped, swapped.count)
        level.rotate(index)

    # -- taking entries -------------------------------------------------------------------------
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
                    if head.__class__ is SwappedRange:
                        try:
                            self._expand_head(level, head, self._load_batch)
                        except StoreUnreadable:
                            return None  # the range stays; its queue retries the read later
                        continue
                    return head  # type: ignore[return-value]  # `__class__ is` narrows its true branch only
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
        """Live entries in delivery order (for browsing and purging); do not mutate meanwhile.

        Swapped entries are read from the store as fresh, detached entries.
        """
        keyed: list[tuple[tuple[int, int], Item]] = [
            ((p, o), e) for p, o, e in self._requeued if e.state == READY
        ]
        for level in self._levels:
            keyed.extend(((-i.priority, i.offset), i) for i in level if i.state == READY)
        keyed.sort(key=lambda pair: pair[0])
        for _, item in keyed:
            if item.__class__ is SwappedRange:
                yield from self._read_range(item)
            else:
                yield item  # type: ignore[misc]  # `__class__ is` narrows its true branch only

    def _read_range(self, swapped: SwappedRange) -> Iterator[QueueEntry]:
        view = SwappedRange(
            swapped.offset,
            swapped.last_offset,
            swapped.count,
            swapped.size,
            swapped.clock_offset,
            swapped.store_id,
        )
        while view.count > 0:
            entries = self._loader(view, self._load_batch)
            if not entries:
                return
            yield from entries
            view.offset = entries[-1].offset + 1
            view.count -= len(entries)

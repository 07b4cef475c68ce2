"""A durable queue's consume queue: fixed 32-byte entries pointing into the commit log.

Entry (big-endian): commit-log offset u64 | record size u32 | stored-bytes length u32 |
body size u32 | target count u32 | queue offset u64. An entry's index is its place in the
consume queue; the kernel's queue offset is stored in the entry because offsets have gaps
(transient messages take offsets too). A queue's offsets only grow, across restarts too
(`Store.queue_next_offset`), so a consume queue is sorted by queue offset: an offset's entry is
found by binary search (`find`), and nothing in memory maps offsets to entries. The sizes make
the entry enough for the statistics (stored-bytes length), for swapped ranges (body size) and
for reference counting (target count) without reading the record.

Files hold `entries_per_file` entries each, named by their 20-digit starting byte offset, in
data_dir/consumequeue/<queue id>-<generation>/. The generation (the commit-log offset of the
queue's first message) makes a queue id reused after `delete_queue` start a fresh directory,
so the old one can be removed once no checkpoint refers to it. Consume queues are rebuilt
from the commit log after a crash; they are flushed only at checkpoints.

Bulk reads (`entries`) use `os.pread`, and `trim` unmaps the pages appends and lookups
touched: a consume queue of ten million entries (320 MB) stays out of the broker's RSS.
"""

from __future__ import annotations

import shutil
import struct
from bisect import bisect_right
from collections.abc import Iterator
from operator import itemgetter
from pathlib import Path

from herald.storage.mapped_file import PAGE, MappedFile, file_name, parse_name

ENTRY = struct.Struct(">QIIIIQ")
ENTRY_SIZE = ENTRY.size
OFFSET = struct.Struct(">Q")
OFFSET_AT = ENTRY_SIZE - OFFSET.size
CHUNK = 2048
"""Entries read by one `pread` when walking a consume queue."""

Entry = tuple[int, int, int, int, int, int]
"""(log offset, record size, stored-bytes length, body size, target count, queue offset)."""
_QUEUE_OFFSET = itemgetter(5)


def directory_name(queue_id: int, generation: int) -> str:
    return f"{queue_id}-{generation}"


def parse_directory_name(name: str) -> tuple[int, int] | None:
    queue, _, generation = name.partition("-")
    if queue.isdigit() and generation.isdigit():
        return int(queue), int(generation)
    return None


class ConsumeQueue:
    """One durable queue's entries; `length` entries exist, `first` is the oldest kept."""

    def __init__(self, directory: Path, entries_per_file: int) -> None:
        self.directory = directory
        self.per_file = entries_per_file
        self.files: dict[int, MappedFile] = {}  # by file number
        self.length = 0
        self.first = 0
        self.flushed = 0  # entries made durable by the last checkpoint

    @property
    def name(self) -> str:
        return self.directory.name

    @classmethod
    def load(cls, directory: Path, entries_per_file: int, length: int) -> ConsumeQueue:
        """Open a consume queue and cut it to `length` entries (blocking)."""
        cq = cls(directory, entries_per_file)
        size = entries_per_file * ENTRY_SIZE
        numbers = []
        for path in sorted(directory.iterdir()) if directory.is_dir() else []:
            start = parse_name(path.name)
            if start is None or start % size:
                continue
            number = start // size
            if number * entries_per_file >= max(length, 1) and number > 0:
                path.unlink()  # wholly past the checkpointed length
                continue
            cq.files[number] = MappedFile.open(path, start, size)
            numbers.append(number)
        cq.length = cq.flushed = length
        cq.first = min(numbers, default=length // entries_per_file) * entries_per_file
        cq.first = min(cq.first, length)
        last = cq.files.get(length // entries_per_file)
        if last is not None:
            last.zero(length % entries_per_file * ENTRY_SIZE)
        return cq

    def reserve(self) -> None:
        """Make sure the next entry has a file (may create one, blocking; raises OSError)."""
        number = self.length // self.per_file
        if number not in self.files:
            self.directory.mkdir(parents=True, exist_ok=True)
            size = self.per_file * ENTRY_SIZE
            start = number * size
            self.files[number] = MappedFile.create(self.directory / file_name(start), start, size)

    def put(
        self,
        position: int,
        size: int,
        raw_length: int,
        body_size: int,
        targets: int,
        queue_offset: int,
    ) -> int:
        """Append an entry (after `reserve`); returns its index."""
        index = self.length
        per_file = self.per_file
        file = self.files[index // per_file]
        at = index % per_file * ENTRY_SIZE
        ENTRY.pack_into(file.map, at, position, size, raw_length, body_size, targets, queue_offset)
        self.length = index + 1
        return index

    def entry(self, index: int) -> Entry | None:
        """The whole entry `index`, if still kept."""
        if not self.first <= index < self.length:
            return None
        file = self.files.get(index // self.per_file)
        if file is None:
            return None
        return ENTRY.unpack_from(file.map, index % self.per_file * ENTRY_SIZE)

    def get(self, index: int) -> tuple[int, int, int] | None:
        """(commit-log offset, record size, queue offset) of entry `index`, if still kept."""
        entry = self.entry(index)
        return None if entry is None else (entry[0], entry[1], entry[5])

    def offset_at(self, index: int) -> int:
        """The queue offset of entry `index` (which must be kept)."""
        per_file = self.per_file
        file = self.files[index // per_file]
        return OFFSET.unpack_from(file.map, index % per_file * ENTRY_SIZE + OFFSET_AT)[0]

    def find(self, offset: int, low: int, last_offset: int) -> int | None:
        """The index in [low, length) of the entry for queue `offset`, if there is one.

        Offsets grow by at least one per entry, so the entry of `offset` is at most
        `offset - offset_at(low)` entries after `low` and at least `last_offset - offset`
        entries before the end: without gaps that pins it to one entry, and a binary search
        covers what gaps leave open. `last_offset` is the offset of the newest entry.
        """
        low = max(low, self.first)
        high = self.length - 1
        if low > high or offset > last_offset:
            return None
        bottom = high - (last_offset - offset)  # the index if no offset after it was skipped
        if bottom >= low and self.offset_at(bottom) == offset:
            return bottom
        first = self.offset_at(low)
        if offset < first:
            return None
        high = min(high, low + (offset - first))
        low = max(low, bottom)
        while low <= high:
            middle = (low + high) >> 1
            found = self.offset_at(middle)
            if found == offset:
                return middle
            if found < offset:
                low = middle + 1
            else:
                high = middle - 1
        return None

    def find_entry(self, offset: int, low: int, last_offset: int) -> tuple[int, Entry] | None:
        """`find` and `entry` in one: (index, entry) of queue `offset`, if kept. An ack's
        lookup: without gaps the entry where `find` would look first is read only once."""
        bottom = self.length - 1 - (last_offset - offset)
        if offset <= last_offset and bottom >= low and bottom >= self.first:
            per_file = self.per_file
            file = self.files.get(bottom // per_file)
            if file is not None:
                entry: Entry = ENTRY.unpack_from(file.map, bottom % per_file * ENTRY_SIZE)
                if entry[5] == offset:
                    return bottom, entry
        index = self.find(offset, low, last_offset)
        if index is None:
            return None
        kept = self.entry(index)
        return None if kept is None else (index, kept)

    def lower_bound(self, offset: int, low: int) -> int:
        """The first index in [low, length) whose offset is >= `offset` (length if none)."""
        low = max(low, self.first)
        high = self.length
        if low >= high:
            return high
        first = self.offset_at(low)
        if offset <= first:
            return low
        high = min(high, low + (offset - first))  # that entry's offset is >= `offset`
        while low < high:
            middle = (low + high) >> 1
            if self.offset_at(middle) < offset:
                low = middle + 1
            else:
                high = middle
        return low

    def entries(self, begin: int, chunk: int = CHUNK) -> Iterator[tuple[int, Entry]]:
        """(index, entry) for the kept entries from `begin` on, in order, read `chunk`
        entries at a time with `pread` (walking a long queue maps none of its pages)."""
        per_file = self.per_file
        end = self.length
        index = max(begin, self.first)
        while index < end:
            number = index // per_file
            stop = min(end, (number + 1) * per_file, index + chunk)
            file = self.files.get(number)
            if file is None:
                index = stop
                continue
            at = index % per_file * ENTRY_SIZE
            data = file.pread(at, (stop - index) * ENTRY_SIZE)
            yield from enumerate(ENTRY.iter_unpack(data), index)
            index = stop

    def collect(self, begin: int, last_offset: int, limit: int, skip: set[int]) -> list[Entry]:
        """Up to `limit` entries from index `begin` on whose offset is at most `last_offset`,
        leaving out the indexes in `skip`: one `pread` per file touched, in the usual case.
        Without `skip` (a swapped queue read in order) a chunk is taken whole, not an entry
        at a time: this runs once per message read back."""
        found: list[Entry] = []
        append = found.append
        per_file = self.per_file
        end = self.length
        index = max(begin, self.first)
        left = limit
        while index < end and left > 0:
            number = index // per_file
            stop = min(end, (number + 1) * per_file, index + min(left + len(skip), CHUNK))
            file = self.files.get(number)
            if file is not None:
                data = file.pread(index % per_file * ENTRY_SIZE, (stop - index) * ENTRY_SIZE)
                if skip:
                    for at, entry in enumerate(ENTRY.iter_unpack(data), index):
                        if entry[5] > last_offset:
                            return found
                        if at not in skip:
                            append(entry)
                            left -= 1
                            if not left:
                                return found
                else:  # no more entries than `left` were read: keep all up to `last_offset`
                    chunk = list(ENTRY.iter_unpack(data))
                    if chunk and chunk[-1][5] > last_offset:  # offsets only grow
                        found += chunk[: bisect_right(chunk, last_offset, key=_QUEUE_OFFSET)]
                        return found
                    found += chunk
                    left -= len(chunk)
            index = stop
        return found

    def dirty_files(self) -> list[MappedFile]:
        """The files written since the last checkpoint."""
        low = self.flushed // self.per_file
        high = (self.length - 1) // self.per_file if self.length else -1
        return [self.files[n] for n in range(low, high + 1) if n in self.files]

    def trim(self) -> None:
        """Unmap every page except the one the next entry goes to (see mapped_file.py)."""
        tail_number, tail_at = divmod(self.length, self.per_file)
        for number, file in self.files.items():
            if number == tail_number:
                tail = tail_at * ENTRY_SIZE
                file.release(0, tail - tail % PAGE)
                file.release(tail - tail % PAGE + PAGE)
            else:
                file.release()

    def release_below(self, index: int) -> list[MappedFile]:
        """Take out the files whose entries are all below `index` (never the last one)."""
        gone = []
        current = self.length // self.per_file
        for number in sorted(self.files):
            if (number + 1) * self.per_file > index or number >= current:
                break
            gone.append(self.files.pop(number))
        if gone:
            self.first = max(self.first, (gone[-1].start // gone[-1].size + 1) * self.per_file)
        return gone

    def close(self) -> None:
        for file in self.files.values():
            file.close()
        self.files.clear()

    def destroy(self) -> None:
        """Close and remove the directory (blocking)."""
        self.close()
        shutil.rmtree(self.directory, ignore_errors=True)

"""A durable queue's consume queue: fixed 20-byte entries pointing into the commit log.

Entry (big-endian): commit-log offset u64 | record size u32 | queue offset u64. An entry's
index is its place in the consume queue; the kernel's queue offset is stored in the entry
because offsets have gaps (transient messages take offsets too) and restart at the highest
live offset + 1 after a restart, so a queue offset may appear again once the entry that had it
was acked. Entries are in append order; among *live* entries queue offsets only grow.

Files hold `entries_per_file` entries each, named by their 20-digit starting byte offset, in
data_dir/consumequeue/<queue id>-<generation>/. The generation (the commit-log offset of the
queue's first message) makes a queue id reused after `delete_queue` start a fresh directory,
so the old one can be removed once no checkpoint refers to it. Consume queues are rebuilt
from the commit log after a crash; they are flushed only at checkpoints.
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

from herald.storage.mapped_file import MappedFile, file_name, parse_name

ENTRY = struct.Struct(">QIQ")
ENTRY_SIZE = ENTRY.size


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

    def put(self, position: int, size: int, queue_offset: int) -> int:
        """Append an entry (after `reserve`); returns its index."""
        index = self.length
        file = self.files[index // self.per_file]
        ENTRY.pack_into(file.map, index % self.per_file * ENTRY_SIZE, position, size, queue_offset)
        self.length = index + 1
        return index

    def get(self, index: int) -> tuple[int, int, int] | None:
        """(commit-log offset, record size, queue offset) of entry `index`, if still kept."""
        if not self.first <= index < self.length:
            return None
        file = self.files.get(index // self.per_file)
        if file is None:
            return None
        return ENTRY.unpack_from(file.map, index % self.per_file * ENTRY_SIZE)

    def dirty_files(self) -> list[MappedFile]:
        """The files written since the last checkpoint."""
        low = self.flushed // self.per_file
        high = (self.length - 1) // self.per_file if self.length else -1
        return [self.files[n] for n in range(low, high + 1) if n in self.files]

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

"""Hash index files: message id -> commit-log offsets, with store times (RocketMQ's IndexFile).

File layout (big-endian):

    header   40 B: begin store ms i64 | end store ms i64 | begin offset i64 | end offset i64 |
                   slot count i32 | entry count i32 (entry numbers start at 1; 0 = none)
    slots    slot count x i32: the number of the newest entry whose key hashes to the slot
    entries  max entries x 20 B: key hash i32 | commit-log offset i64 |
                   store time in seconds after the header's begin i32 | previous entry i32

A put writes the entry with `previous` = the slot's current value, then points the slot at it:
each slot heads a newest-first chain. A query walks the chain of its key's slot; the hash is
not the key, so callers re-check each candidate against the record it points to. Previous
links must point to lower entry numbers, which bounds every walk even over a damaged file.

An index is a hint: it is flushed at checkpoints, and after a crash the active file is cut to
the checkpointed entry count, its slots rebuilt from those entries, and the records after the
checkpoint indexed again by recovery.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

from herald.storage.mapped_file import MappedFile, file_name, parse_name

HEADER = struct.Struct(">qqqqii")
SLOT = struct.Struct(">i")
ENTRY = struct.Struct(">iqii")


def key_hash(key: str) -> int:
    return zlib.crc32(key.encode("utf-8", "surrogatepass")) & 0x7FFFFFFF


class IndexFile:
    """One index file; `count` entries are used (entry numbers 1..count-1)."""

    def __init__(self, file: MappedFile, slots: int, max_entries: int) -> None:
        self.file = file
        self.slots = slots
        self.max_entries = max_entries
        self.begin_ms, self.end_ms, self.begin_offset, self.end_offset, _, self.count = (
            HEADER.unpack_from(file.map)
        )
        if self.count == 0:
            self.count = 1

    @property
    def number(self) -> int:
        return self.file.start

    @staticmethod
    def file_size(slots: int, max_entries: int) -> int:
        return HEADER.size + slots * SLOT.size + max_entries * ENTRY.size

    @classmethod
    def create(cls, path: Path, number: int, slots: int, max_entries: int) -> IndexFile:
        """A new empty index file (blocking). A zero header reads as empty, so nothing is
        written: a map of the same file opened meanwhile sees a consistent file."""
        size = cls.file_size(slots, max_entries)
        try:
            file = MappedFile.create(path, number, size)
        except FileExistsError:  # made ahead by a flush round at the same moment
            file = MappedFile.open(path, number, size)
        return cls(file, slots, max_entries)

    @classmethod
    def open(cls, path: Path, number: int, slots: int, max_entries: int) -> IndexFile:
        file = MappedFile.open(path, number, cls.file_size(slots, max_entries))
        return cls(file, slots, max_entries)

    @property
    def full(self) -> bool:
        return self.count >= self.max_entries

    def _entry_at(self, number: int) -> int:
        return HEADER.size + self.slots * SLOT.size + number * ENTRY.size

    def put(self, key: str, offset: int, store_ms: int) -> bool:
        """Index `key` at commit-log `offset`; False when the file is full."""
        if self.count >= self.max_entries:
            return False
        if self.count == 1:
            self.begin_ms, self.begin_offset = store_ms, offset
        delta = (store_ms - self.begin_ms) // 1000
        if not 0 <= delta < 2**31:
            return False  # the file spans too long: the caller starts a new one
        mapped = self.file.map
        hashed = key_hash(key)
        slot_at = HEADER.size + hashed % self.slots * SLOT.size
        (previous,) = SLOT.unpack_from(mapped, slot_at)
        number = self.count
        ENTRY.pack_into(mapped, self._entry_at(number), hashed, offset, delta, previous)
        SLOT.pack_into(mapped, slot_at, number)
        self.count = number + 1
        self.end_ms, self.end_offset = store_ms, offset
        return True

    def sync_header(self) -> None:
        """Write the header from memory; done before each flush rather than on every put (a
        crash cuts the file back to the checkpoint's count anyway)."""
        HEADER.pack_into(
            self.file.map, 0, self.begin_ms, self.end_ms, self.begin_offset, self.end_offset,
            self.slots, self.count,
        )  # fmt: skip

    def query(self, key: str, begin_ms: int, end_ms: int, limit: int) -> list[int]:
        """Offsets whose key hash matches and store second overlaps [begin_ms, end_ms]."""
        if self.count <= 1 or self.end_ms < begin_ms or self.begin_ms > end_ms:
            return []
        mapped = self.file.map
        hashed = key_hash(key)
        (number,) = SLOT.unpack_from(mapped, HEADER.size + hashed % self.slots * SLOT.size)
        found: list[int] = []
        while 0 < number < self.count and len(found) < limit:
            entry_hash, offset, delta, previous = ENTRY.unpack_from(mapped, self._entry_at(number))
            stamp = self.begin_ms + delta * 1000
            if stamp + 999 < begin_ms:
                break  # newest first: everything further down the chain is older
            if entry_hash == hashed and stamp <= end_ms:
                found.append(offset)
            if previous >= number:
                break
            number = previous
        return found

    def truncate(self, count: int) -> None:
        """Keep entries below `count` and rebuild the slots from them (after a crash)."""
        mapped = self.file.map
        slots_end = HEADER.size + self.slots * SLOT.size
        mapped[HEADER.size : slots_end] = bytes(self.slots * SLOT.size)
        self.count = max(1, min(count, self.max_entries))
        self.file.zero(self._entry_at(self.count))
        self.end_ms, self.end_offset = self.begin_ms, self.begin_offset
        for number in range(1, self.count):
            at = self._entry_at(number)
            hashed, offset, delta, _ = ENTRY.unpack_from(mapped, at)
            slot_at = HEADER.size + hashed % self.slots * SLOT.size
            (previous,) = SLOT.unpack_from(mapped, slot_at)
            ENTRY.pack_into(mapped, at, hashed, offset, delta, previous)
            SLOT.pack_into(mapped, slot_at, number)
            self.end_ms, self.end_offset = self.begin_ms + delta * 1000, offset
        self.sync_header()


class IndexService:
    """The index files of a store, oldest to newest; puts go to the newest."""

    def __init__(self, directory: Path, slots: int, max_entries: int) -> None:
        self.directory = directory
        self.slots = slots
        self.max_entries = max_entries
        self.files: list[IndexFile] = []
        self.prepared: IndexFile | None = None
        self.flushed_count = 0

    def load(self) -> None:
        """Open every index file (blocking)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        for path in sorted(self.directory.iterdir()):
            number = parse_name(path.name)
            if number is not None:
                self.files.append(IndexFile.open(path, number, self.slots, self.max_entries))

    @property
    def active(self) -> IndexFile | None:
        return self.files[-1] if self.files else None

    def recover(self, number: int | None, count: int) -> list[IndexFile]:
        """Cut the index back to a checkpoint's state; returns files to delete."""
        keep = [f for f in self.files if number is not None and f.number <= number]
        gone = [f for f in self.files if f not in keep]
        self.files = keep
        if keep and keep[-1].number == number:
            keep[-1].truncate(count)
        return gone

    def needs_prepare(self) -> int | None:
        """The number of an index file to create ahead (when the active one is 75% full)."""
        active = self.active
        if self.prepared is not None:
            return None
        if active is None:
            return 0
        if active.count * 4 < active.max_entries * 3:
            return None
        return active.number + 1

    def prepare(self, number: int) -> IndexFile:
        return IndexFile.create(
            self.directory / file_name(number), number, self.slots, self.max_entries
        )

    def put(self, key: str, offset: int, store_ms: int) -> bool:
        """Index `key`; False when no file has room (none prepared): the caller prepares one."""
        active = self.active
        if active is not None and active.put(key, offset, store_ms):
            return True
        prepared, self.prepared = self.prepared, None
        if prepared is None:
            return False
        self.files.append(prepared)
        return prepared.put(key, offset, store_ms)

    def query(self, key: str, begin_ms: int, end_ms: int, limit: int) -> list[int]:
        """Candidate offsets for `key`, newest file first."""
        found: list[int] = []
        for file in reversed(self.files):
            if len(found) >= limit:
                break
            found.extend(file.query(key, begin_ms, end_ms, limit - len(found)))
        return found

    def release_below(self, offset: int) -> list[IndexFile]:
        """Take out files whose every entry points below `offset` (never the active one)."""
        gone = [f for f in self.files[:-1] if f.end_offset < offset]
        self.files = [f for f in self.files if f not in gone]
        return gone

    def close(self) -> None:
        for file in self.files:
            file.sync_header()
            file.file.close()
        if self.prepared is not None:
            self.prepared.file.close()
        self.files.clear()
        self.prepared = None

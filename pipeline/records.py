"""Walking the records of one commit-log segment without a broker: the checks every reader in
the pipeline shares.

The layout, the magics, the header structs and `decode` all come from
`herald.storage.record`; nothing here knows a field that module does not define. What this
module adds is reading a segment that another process may be writing:

- `open_segment` maps a segment read-only (the broker's `MappedFile.open` opens read-write and
  may extend a short file: a reader must never write into a live data dir);
- `valid_size` checks one record the way recovery does (size, magic, its own position, CRC)
  and is the unit of the driver's tail scan: the first record that fails it is where a live
  broker's log ends for us (a record half-copied into the page cache fails its CRC);
- `first_record` finds the first valid record at or after a byte position, by the same
  aligned magic search recovery uses to resynchronise; that is what lets a 1 GiB segment be
  split into byte ranges that each start on a record without a plan-time pass.
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
from collections.abc import Iterator
from pathlib import Path

from herald.storage.record import (
    ALIGN,
    COMMON,
    MAGIC_END,
    MAGIC_PREFIX,
    PREFIX,
    Kind,
    MetadataRecord,
    RecordError,
    aligned,
    decode,
    magic_of,
)

try:  # the CRC-32 zlib computes, from ISA-L (what storage/message_read.py uses)
    from isal.isal_zlib import crc32
except ImportError:  # pragma: no cover - isal is a herald dependency
    from zlib import crc32

log = logging.getLogger(__name__)

MAGIC_METADATA = magic_of(Kind.METADATA)
_PREFIX_INT = int.from_bytes(MAGIC_PREFIX, "big")
_KNOWN = frozenset(magic_of(k) for k in Kind)
_common = COMMON.unpack_from


class Segment:
    """A segment mapped read-only; `close` unmaps it."""

    __slots__ = ("map", "path", "size", "start", "view")

    def __init__(self, path: Path, start: int) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            self.size = os.fstat(fd).st_size
            self.map = mmap.mmap(fd, self.size, prot=mmap.PROT_READ) if self.size else None
        finally:
            os.close(fd)
        if self.map is not None and hasattr(mmap, "MADV_SEQUENTIAL"):
            self.map.madvise(mmap.MADV_SEQUENTIAL)
        self.view = memoryview(self.map) if self.map is not None else memoryview(b"")
        self.path = path
        self.start = start

    @property
    def data(self) -> mmap.mmap:
        """The map, for readers of records: only an empty segment (no records) has none."""
        if self.map is None:
            raise ValueError(f"{self.path}: an empty segment has no records to read")
        return self.map

    def close(self) -> None:
        """Unmap now, or, while Arrow still holds a buffer over the map, when it lets go."""
        try:
            self.view.release()
            if self.map is not None:
                self.map.close()
        except BufferError:
            pass  # exported to a live Arrow buffer: the mmap is closed when it is collected

    def __enter__(self) -> Segment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_segment(path: Path, start: int) -> Segment:
    return Segment(path, start)


def valid_size(segment: Segment, at: int) -> tuple[int, int] | None:
    """(magic, size) of the fully valid record at relative position `at`, else None.

    An end-of-segment filler is valid when it reaches exactly to the end of the file."""
    rest = segment.size - at
    if rest < PREFIX.size:
        return None
    data = segment.data
    size, magic = PREFIX.unpack_from(data, at)
    if magic == MAGIC_END:
        return (magic, size) if size == rest else None
    if magic not in _KNOWN or size < COMMON.size or aligned(size) > rest:
        return None
    _, _, crc, position = _common(data, at)
    if position != segment.start + at:
        return None
    if crc32(segment.view[at + COMMON.size : at + size]) != crc:
        return None
    return magic, size


def metadata_at(segment: Segment, at: int, size: int) -> MetadataRecord | None:
    """The metadata record at `at` (already checked by `valid_size`), decoded by record.py."""
    try:
        record = decode(segment.data[at : at + size], segment.start + at)
    except RecordError:
        return None
    return record if isinstance(record, MetadataRecord) else None


def first_record(segment: Segment, at: int, stop: int) -> int | None:
    """The first aligned position in [at, stop) where a valid record starts, else None."""
    at += -at % ALIGN
    data = segment.map
    if data is None:
        return None
    search = at + 4  # the magic sits 4 bytes into a record
    limit = min(stop + 4 + len(MAGIC_PREFIX), segment.size)
    while True:
        found = data.find(MAGIC_PREFIX, search, limit)
        if found < 0:
            return None
        candidate = found - 4
        if candidate >= stop:
            return None
        if candidate % ALIGN == 0 and _checked(segment, candidate):
            return candidate
        search = found + 1


def _checked(segment: Segment, at: int) -> bool:
    """Whether record.decode accepts the record at `at` (the resynchronisation test)."""
    found = valid_size(segment, at)
    if found is None:
        return False
    magic, size = found
    if magic == MAGIC_END:
        return True
    try:
        decode(segment.data[at : at + size], segment.start + at)
    except RecordError:
        return False
    return True


def hop(segment: Segment, at: int, stop: int) -> Iterator[tuple[int, int, int]]:
    """(position, magic, size) of each record from `at` to `stop`, checking only the header
    (for ranges the tail scan already validated); ends at a filler or an invalid header."""
    data = segment.map
    if data is None:
        return
    unpack = PREFIX.unpack_from
    end = segment.size
    while at < stop and end - at >= PREFIX.size:
        try:
            size, magic = unpack(data, at)
        except struct.error:
            return
        if magic == MAGIC_END or magic >> 8 != _PREFIX_INT or size < COMMON.size:
            return
        yield at, magic, size
        at += (size + ALIGN - 1) & ~(ALIGN - 1)


__all__ = [
    "MAGIC_METADATA",
    "Segment",
    "first_record",
    "hop",
    "metadata_at",
    "open_segment",
    "valid_size",
]

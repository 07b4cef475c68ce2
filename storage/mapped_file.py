"""Fixed-size, preallocated, memory-mapped segment files, and the ordered set of them (a log).

A segment is named by its 20-digit zero-padded start offset (RocketMQ's MappedFile). It is
preallocated with `posix_fallocate`, never grown by writes: writing into an mmap over a hole
would turn a full disk into SIGBUS instead of an error, so space is claimed (and ENOSPC
reported) when the file is created. Records are written by `write_record`: small ones are
copied into the map, larger ones written with `os.pwritev`; they are read back with
`os.pread`. Durability is `os.fdatasync` on the file, which, unlike `mmap.flush`, releases the
GIL while it waits, so it can run in a worker thread while the Trio thread keeps appending.

Why both: a copy into the map costs no system call, but each fsync must write-protect the
mapped pages it cleans, and measured with 64 publishers awaiting each publish, fsync rounds
were much slower with large records written through the map (1 KiB messages: 48-57 µs per
message against 37 with `pwritev`) while small ones were faster that way (100 B: 27 against
32). Pages that are mapped (small records until their flush round, recovery's scan,
consume-queue and index entries) are unmapped by `release` (MADV_DONTNEED) once done with,
so the broker's RSS does not grow with its files; the page cache (which the kernel may evict)
does.

Creating, flushing and deleting files block; callers run them in `trio.to_thread`, except the
rare fallback when a segment is needed before one was prepared ahead.
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from herald.storage.record import encode_end

log = logging.getLogger(__name__)

NAME_DIGITS = 20
PAGE = mmap.PAGESIZE
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
"""The errors of a full disk (or quota): the store keeps running and raises the disk alarm."""


def file_name(start: int) -> str:
    return f"{start:0{NAME_DIGITS}d}"


def parse_name(name: str) -> int | None:
    if len(name) == NAME_DIGITS and name.isdigit():
        return int(name)
    return None


class MappedFile:
    """One segment: `size` bytes starting at global offset `start`, mapped read-write."""

    __slots__ = ("fd", "map", "path", "size", "start", "wrote")

    def __init__(self, path: Path, start: int, size: int, fd: int, mapped: mmap.mmap) -> None:
        self.path = path
        self.start = start
        self.size = size
        self.fd = fd
        self.map = mapped
        self.wrote = 0  # bytes in use from the start of the segment

    def __repr__(self) -> str:
        return f"<MappedFile {self.path.name} wrote={self.wrote}>"

    @property
    def end(self) -> int:
        return self.start + self.size

    @classmethod
    def create(cls, path: Path, start: int, size: int) -> MappedFile:
        """Create and preallocate a new zero-filled segment (blocking). Raises OSError."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.posix_fallocate(fd, 0, size)
            mapped = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise
        return cls(path, start, size, fd, mapped)

    @classmethod
    def open(cls, path: Path, start: int, size: int) -> MappedFile:
        """Map an existing segment; a short file (torn at creation) is extended with zeros,
        and a sparse one (copied or restored by a tool that punched its zeros out) is
        allocated first, so that a full disk refuses it here rather than with SIGBUS later."""
        fd = os.open(path, os.O_RDWR)
        try:
            stat = os.fstat(fd)
            actual = stat.st_size
            if actual > size:
                raise ValueError(f"{path} is {actual} bytes, larger than the segment size {size}")
            if actual < size:
                log.warning("segment %s is %d bytes, not %d: extending it", path, actual, size)
                os.posix_fallocate(fd, 0, size)
            elif stat.st_blocks * 512 < size:
                log.warning("segment %s is sparse: allocating it", path)
                os.posix_fallocate(fd, 0, size)
            mapped = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, start, size, fd, mapped)

    def free(self) -> int:
        return self.size - self.wrote

    def read(self, at: int, length: int) -> bytes:
        """`length` bytes from relative position `at`."""
        return self.map[at : at + length]

    def pread(self, at: int, length: int) -> bytes:
        """`length` bytes from relative position `at`, read without mapping their pages."""
        return os.pread(self.fd, length, at)

    def release(self, begin: int = 0, end: int | None = None) -> None:
        """Unmap the pages of [begin, end) (widened to whole pages) from this process.

        They stay in the page cache, dirty ones are still written back (for a shared file
        mapping the kernel moves a page's dirty bit to the cache), and the next access maps
        them again: all this changes is that they no longer count in the broker's RSS.
        """
        end = self.size if end is None else min(end, self.size)
        begin -= begin % PAGE
        if end > begin:
            self.map.madvise(mmap.MADV_DONTNEED, begin, end - begin)

    def flush(self) -> None:
        """Make every write so far durable (blocking)."""
        os.fdatasync(self.fd)

    def data_regions(self, at: int) -> Iterator[tuple[int, int]]:
        """The [begin, end) ranges from `at` on that may hold data. Space preallocated and
        never written reads as a hole (SEEK_DATA), so scanning the unused tail of a segment
        costs nothing instead of faulting in every zero page. Readahead is turned off while
        the caller reads: pages it would pull in beyond a region would count as data too."""
        random = getattr(mmap, "MADV_RANDOM", None)
        if random is not None:
            self.map.madvise(random)
        try:
            yield from self._regions(at)
        finally:
            if random is not None:
                self.map.madvise(mmap.MADV_NORMAL)

    def _regions(self, at: int) -> Iterator[tuple[int, int]]:
        while at < self.size:
            try:
                begin = os.lseek(self.fd, at, os.SEEK_DATA)
                end = min(os.lseek(self.fd, begin, os.SEEK_HOLE), self.size)
            except OSError as exc:
                if exc.errno == errno.ENXIO:
                    return  # nothing but holes from `at` on
                yield at, self.size  # SEEK_DATA unsupported: assume data everywhere
                return
            if begin >= self.size:
                return
            yield begin, end
            at = end

    def zero(self, at: int, chunk: int = 1 << 20) -> bool:
        """Zero the segment from `at` to its end; True if any byte there was not zero.
        Chunks that are already zero are not written (no needless dirty pages)."""
        zeros = bytes(chunk)
        changed = False
        for begin, end in self.data_regions(at):
            begin = max(begin, at)
            while begin < end:
                stop = min(begin + chunk, end)
                if self.map[begin:stop] != zeros[: stop - begin]:
                    self.map[begin:stop] = zeros[: stop - begin]
                    changed = True
                begin = stop
        return changed

    def close(self) -> None:
        self.map.close()
        os.close(self.fd)

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


Writer = Callable[[MappedFile, int, Sequence[bytes]], None]


def pwrite_write(file: MappedFile, at: int, parts: Sequence[bytes]) -> None:
    """Write `parts` into `file` at relative position `at` with `pwritev` (the default)."""
    written = os.pwritev(file.fd, parts, at)
    total = sum(map(len, parts))
    if written < total:  # a short write: finish it
        rest = memoryview(b"".join(parts))[written:]
        while rest:
            done = os.pwrite(file.fd, rest, at + written)
            written += done
            rest = rest[done:]


def mmap_write(file: MappedFile, at: int, parts: Sequence[bytes]) -> None:
    """Copy `parts` into `file` at relative position `at` through the map."""
    mapped = file.map
    for part in parts:
        end = at + len(part)
        mapped[at:end] = part
        at = end


PWRITE_FROM = 512
"""Records of at least this many bytes are written with `pwritev` (see the module docstring)."""


def write_record(file: MappedFile, at: int, parts: Sequence[bytes]) -> None:
    """The log's writer: a record's parts at relative position `at` of `file`."""
    if len(parts) == 2 and len(parts[0]) + len(parts[1]) < PWRITE_FROM:
        mapped = file.map
        head, body = parts
        middle = at + len(head)
        mapped[at:middle] = head
        mapped[middle : middle + len(body)] = body
    else:
        pwrite_write(file, at, parts)


class MappedFileQueue:
    """The segments of one log by start offset; segments may be missing once reclaimed.

    `write_offset` is where the next record goes. Segments start at multiples of `size`, so
    the segment of an offset is found by arithmetic.
    """

    def __init__(self, directory: Path, size: int) -> None:
        self.directory = directory
        self.size = size
        self.files: dict[int, MappedFile] = {}
        self.write_offset = 0
        self.prepared: MappedFile | None = None  # created ahead of need, in a worker thread

    def load(self) -> None:
        """Map every segment in the directory (blocking)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        for path in sorted(self.directory.iterdir()):
            start = parse_name(path.name)
            if start is None:
                if path.name.endswith(".tmp"):
                    path.unlink()
                continue
            if start % self.size:
                raise ValueError(f"segment {path} does not start at a multiple of {self.size}")
            self.files[start] = MappedFile.open(path, start, self.size)

    def __iter__(self) -> Iterator[MappedFile]:
        return iter([self.files[start] for start in sorted(self.files)])

    def __len__(self) -> int:
        return len(self.files)

    @property
    def min_offset(self) -> int:
        return min(self.files, default=self.write_offset)

    def segment_start(self, offset: int) -> int:
        return offset - offset % self.size

    def segment_for(self, offset: int) -> MappedFile | None:
        return self.files.get(offset - offset % self.size)

    def read(self, offset: int, length: int) -> bytes | None:
        """`length` bytes at global `offset`, or None if its segment is gone or too short.
        Read with `pread`: reading the log back does not map its pages into the process."""
        file = self.files.get(offset - offset % self.size)
        at = offset % self.size
        if file is None or at + length > self.size:
            return None
        return os.pread(file.fd, length, at)

    @property
    def active(self) -> MappedFile | None:
        return self.files.get(self.segment_start(self.write_offset))

    def needs_prepare(self) -> int | None:
        """The start of a segment to create ahead now: the current one if it is missing, or
        the next one once the current is 75% full."""
        start = self.segment_start(self.write_offset)
        if start in self.files:
            if (self.write_offset - start) * 4 < self.size * 3:
                return None
            start += self.size
        if start in self.files or (self.prepared is not None and self.prepared.start == start):
            return None
        return start

    def prepare(self, start: int) -> MappedFile:
        """Create the segment at `start` (blocking; run it in a worker thread)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        return MappedFile.create(self.directory / file_name(start), start, self.size)

    def adopt(self, file: MappedFile) -> MappedFile | None:
        """Take a prepared segment; returns one that is no longer wanted (to delete)."""
        if file.start in self.files or file.end <= self.write_offset:
            return file
        old, self.prepared = self.prepared, file
        return old

    def place(self, space: int, write: Writer, create: Callable[[int], MappedFile]) -> int:
        """Reserve `space` bytes for one record and return its offset; may roll the segment.

        Rolling writes an end-of-segment filler into the rest of the current segment, but only
        after the next segment exists: if creating it fails, nothing has changed.
        """
        if space > self.size:
            raise ValueError(f"a record of {space} bytes cannot fit a {self.size}-byte segment")
        offset = self.write_offset
        start = self.segment_start(offset)
        if offset - start + space <= self.size and start in self.files:
            return offset
        next_start = start + self.size if offset - start + space > self.size else start
        if next_start not in self.files:
            prepared = self.prepared
            if prepared is not None and prepared.start == next_start:
                self.prepared = None
                self.files[next_start] = prepared
            else:
                log.info("creating segment %s on the publishing path", file_name(next_start))
                self.files[next_start] = create(next_start)
        if next_start != start:
            current = self.files.get(start)
            rest = self.size - (offset - start)
            if current is not None and rest:
                write(current, offset - start, [encode_end(rest)])
                current.wrote = self.size
            self.write_offset = next_start
        return self.write_offset

    def advance(self, offset: int, space: int) -> None:
        """Record that `space` bytes were written at `offset` (returned by `place`)."""
        self.write_offset = offset + space
        file = self.files[offset - offset % self.size]
        file.wrote = self.write_offset - file.start

    def files_between(self, begin: int, end: int) -> list[MappedFile]:
        """The segments holding any byte of [begin, end)."""
        return [f for s, f in sorted(self.files.items()) if f.end > begin and s < end]

    def remove(self, start: int) -> MappedFile | None:
        return self.files.pop(start, None)

    def close(self) -> None:
        for file in self.files.values():
            file.close()
        self.files.clear()
        if self.prepared is not None:
            self.prepared.close()
            self.prepared = None

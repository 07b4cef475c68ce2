"""Phase one of reading a byte range: where its valid message records start.

A record is valid where recovery finds it valid: its magic, its own position, a size that
fits the segment, and (message records, with `verify`) its CRC. The range is read in windows
of `WINDOW` bytes, each with two passes:

- fast, column-wise in Arrow: every 8-byte slot whose bytes 4..6 are the magic prefix is a
  candidate; candidates that also hold their own position are records, and the window is
  taken only if those records chain exactly (each one's end, aligned, is the next one's
  start, from the window's first byte), so a record-like byte run inside a body can never be
  taken for a record. The CRCs of the message records are then checked, one call per record
  (the only per-record Python left);
- slow, record by record (`_walk`), from the first spot the fast pass did not vouch for:
  anything irregular (a CRC that does not match, zeros where the data ends, an end-of-segment
  filler, a record too short, a broken chain) is decided there record by record, as recovery
  decides it: logged, and skipped to the next aligned position where a valid record starts
  (`records.first_record`); after `SLOW_RECORDS` records the fast pass takes over again.

Both passes apply the same tests, so the starts are the same whichever pass found them (a
test runs every range both ways, on clean and on damaged segments).
"""

from __future__ import annotations

import array
import logging
import sys
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from herald.pipeline.records import Segment, first_record, valid_size
from herald.storage.record import (
    ALIGN,
    COMMON,
    MAGIC_END,
    MAGIC_MESSAGE,
    MAGIC_PREFIX,
    MESSAGE,
    PREFIX,
)

try:
    from isal.isal_zlib import crc32
except ImportError:  # pragma: no cover - isal is a herald dependency
    from zlib import crc32

log = logging.getLogger(__name__)

WINDOW = 4 << 20
"""Bytes of record starts per fast pass (about 16,000 records of 100-byte messages)."""
SLOW_RECORDS = 2048
"""Records walked one by one after a spot the fast pass did not vouch for."""

_CRC_FROM = COMMON.size
_MESSAGE_MIN = MESSAGE.size
_MAGIC_PREFIX = MAGIC_MESSAGE >> 8
_I64, _U64, _U32 = pa.int64(), pa.uint64(), pa.uint32()
# An 8-byte slot loaded as a native integer: the bytes of the magic prefix, at 4..6 of a
# record (the size is 0..3, the magic's kind byte 7), under a mask
_SLOT_MASK = pa.scalar(int.from_bytes(b"\0\0\0\0\xff\xff\xff\0", sys.byteorder), _U64)
_SLOT_MAGIC = pa.scalar(int.from_bytes(bytes(4) + MAGIC_PREFIX + b"\0", sys.byteorder), _U64)
_BIG = sys.byteorder == "big"
_LOW, _HALF = pa.scalar(0xFFFFFFFF, _U64), pa.scalar(32, _U64)
_NONE = pa.array([], _I64)


class ScanResult:
    """Message record starts (relative positions, in order) and how many invalid spots were
    skipped."""

    __slots__ = ("_parts", "corrupt")

    def __init__(self) -> None:
        self._parts: list[pa.Array] = []
        self.corrupt = 0

    @property
    def starts(self) -> pa.Int64Array:
        if len(self._parts) == 1:
            return self._parts[0]
        return pa.concat_arrays(self._parts) if self._parts else pa.array([], _I64)

    def add(self, starts: pa.Array | list[int]) -> None:
        if len(starts):
            self._parts.append(starts if isinstance(starts, pa.Array) else pa.array(starts, _I64))


def message_starts(segment: Segment, at: int, stop: int, verify: bool = True) -> ScanResult:
    """The message records that start in [at, stop); `at` must be a record start."""
    result = ScanResult()
    for starts in scan(segment, at, stop, verify, result):
        result.add(starts)
    return result


def scan(
    segment: Segment, at: int, stop: int, verify: bool, result: ScanResult
) -> Iterator[pa.Array]:
    """`message_starts` window by window: the starts found in each, as soon as they are known
    (a reader builds its first batch without waiting for the whole range); invalid spots are
    counted in `result`."""
    if segment.map is None:
        return
    buf = pa.py_buffer(segment.map)
    while at < stop:
        at, sure, starts = _fast(segment, buf, at, stop, verify)
        if len(starts):
            yield starts
        if at < stop and not sure:
            at, ended, walked = _walk(segment, at, stop, verify, result, SLOW_RECORDS)
            if walked:
                yield pa.array(walked, _I64)
            if ended:
                break


def _fast(
    segment: Segment, buf: pa.Buffer, at: int, stop: int, verify: bool
) -> tuple[int, bool, pa.Array]:
    """One window from `at`: (where to go on, whether that position is a record start the
    chain vouches for, the message starts taken); where it is not, `_walk` decides."""
    size = segment.size
    slots = min((min(stop, at + WINDOW) - at + 7) // 8, (size - at - 24) // 8 + 1)
    if at % ALIGN or slots <= 0:
        return at, False, _NONE
    wide = pa.Array.from_buffers(_U64, (size - at) // 8, [None, buf.slice(at)])
    found = wide.slice(0, slots)
    slot = pc.indices_nonzero(pc.equal(pc.bit_wise_and(found, _SLOT_MASK), _SLOT_MAGIC))
    # the common header of each candidate, three big-endian 8-byte words from its start:
    # size and magic, CRC and the position's high half, the low half and 4 bytes more
    first, second, third = (_native(wide.take(pc.add(slot, k))) for k in range(3))
    length = pc.shift_right(first, _HALF).cast(_I64)
    magic = pc.bit_wise_and(first, _LOW)
    crc = pc.shift_right(second, _HALF).cast(_U32)
    position = pc.bit_wise_or(
        pc.shift_left(pc.bit_wise_and(second, _LOW), _HALF), pc.shift_right(third, _HALF)
    )
    rel = pc.multiply(slot, 8).cast(_I64)
    own = pc.equal(position, pc.add(rel, segment.start + at).cast(_U64))
    if not pc.all(own).as_py():  # record-like bytes inside a record: dropped here
        keep = pc.indices_nonzero(own)
        rel, length, magic, crc = (a.take(keep) for a in (rel, length, magic, crc))
    n = len(rel)
    if n == 0 or rel[0].as_py() != 0:
        return at, False, _NONE
    ends = pc.add(rel, pc.bit_wise_and(pc.add(length, ALIGN - 1), ~(ALIGN - 1)))
    is_message = pc.equal(magic, MAGIC_MESSAGE)
    ok = pc.and_(
        pc.and_(
            pc.greater_equal(length, pc.if_else(is_message, _MESSAGE_MIN, COMMON.size)),
            pc.less_equal(ends, size - at),
        ),
        pc.not_equal(magic, MAGIC_END),  # a filler ends the data, whatever follows it
    )
    chained = pc.equal(ends.slice(0, n - 1), rel.slice(1))
    ok = pc.and_(ok, pa.concat_arrays([chained, pa.array([True])]))
    bad = pc.index(ok, False).as_py()
    taken = n if bad < 0 else bad
    going = (ends[n - 1].as_py() if bad < 0 else rel[bad].as_py()) + at
    sure = bad < 0 and going >= at + 8 * slots  # else no record chained at `going`: walk it
    picked = pc.indices_nonzero(is_message.slice(0, taken))
    starts = pc.add(rel.take(picked), at)
    if verify and len(starts):
        first_bad = _first_bad_crc(segment, starts, length.take(picked), crc.take(picked))
        if first_bad >= 0:
            starts, going, sure = starts.slice(0, first_bad), starts[first_bad].as_py(), False
    return going, sure, starts


def _native(values: pa.Array) -> pa.Array:
    """Big-endian 8-byte words as their values."""
    if _BIG:  # pragma: no cover - herald runs on little-endian hosts
        return values
    words = array.array("Q")
    words.frombytes(memoryview(values.buffers()[1])[: 8 * len(values)])
    words.byteswap()
    return pa.Array.from_buffers(_U64, len(values), [None, pa.py_buffer(words)])


def _first_bad_crc(segment: Segment, starts: pa.Array, length: pa.Array, crc: pa.Array) -> int:
    """The index of the first record whose CRC does not match, else -1."""
    begin, end = _ints(pc.add(starts, _CRC_FROM)), _ints(pc.add(starts, length))
    data = segment.data  # slices of the mmap (copies) are cheaper than of a memoryview
    found = array.array("I", [crc32(data[b:e]) for b, e in zip(begin, end, strict=True)])
    expected = array.array("I")
    expected.frombytes(memoryview(crc.buffers()[1])[crc.offset * 4 : (crc.offset + len(crc)) * 4])
    if found == expected:
        return -1
    return next(i for i, (a, b) in enumerate(zip(found, expected, strict=True)) if a != b)


def _ints(values: pa.Array) -> array.array:
    out = array.array("q")
    out.frombytes(memoryview(values.buffers()[1])[values.offset * 8 :][: 8 * len(values)])
    return out


def _walk(
    segment: Segment, at: int, stop: int, verify: bool, result: ScanResult, limit: int
) -> tuple[int, bool, list[int]]:
    """Record by record from `at` for at most `limit` records: (where it stopped, whether
    the segment's data ended there, the message starts)."""
    data = segment.data
    view = segment.view
    base = segment.start
    unpack = COMMON.unpack_from
    check = crc32
    starts: list[int] = []
    append = starts.append
    seg_size = segment.size
    last_common = seg_size - COMMON.size
    ended = False
    while at < stop and limit > 0:
        limit -= 1
        if at > last_common:  # room for nothing but a filler
            ended = True
            break
        size, magic, crc, position = unpack(data, at)
        space = (size + ALIGN - 1) & ~(ALIGN - 1)
        if magic == MAGIC_MESSAGE:
            if (
                position != base + at
                or size < _MESSAGE_MIN
                or at + space > seg_size
                or (verify and check(view[at + _CRC_FROM : at + size]) != crc)
            ):
                at = _skip(segment, at, stop, result, "invalid message record")
                continue
            append(at)
        elif magic == MAGIC_END:
            ended = True
            break
        elif magic >> 8 == _MAGIC_PREFIX and position == base + at and size >= COMMON.size:
            if at + space > seg_size:
                at = _skip(segment, at, stop, result, "record runs past its segment")
                continue
        elif size == 0 and magic == 0:  # never written: the data of this segment ends here
            ended = True
            break
        else:
            at = _skip(segment, at, stop, result, "invalid record")
            continue
        at += space
    return at, ended, starts


def walk_all(segment: Segment, at: int, stop: int, verify: bool = True) -> ScanResult:
    """`message_starts` record by record only (the reference the fast pass is tested
    against)."""
    result = ScanResult()
    if segment.map is not None:
        result.add(_walk(segment, at, stop, verify, result, stop)[2])
    return result


def _skip(segment: Segment, at: int, stop: int, result: ScanResult, why: str) -> int:
    """On from invalid bytes to the next valid record (or to `stop`), logging what was lost."""
    if valid_size(segment, at) is not None:  # e.g. a valid record the fast test mistrusted
        return at + ((PREFIX.unpack_from(segment.data, at)[0] + ALIGN - 1) & ~(ALIGN - 1))
    result.corrupt += 1
    found = first_record(segment, at + ALIGN, stop)
    log.error(
        "commit log segment %s: %s at offset %d; %s",
        segment.path.name,
        why,
        at,
        f"skipped {found - at} bytes" if found is not None else "skipped the rest of the range",
    )
    return stop if found is None else found

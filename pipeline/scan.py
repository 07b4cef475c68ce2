"""Phase one of reading a byte range: where its valid message records start.

This is the only per-record Python loop of the batch reader, so it does the least it can:
one `unpack_from` of record.py's common header (size, magic, CRC, position), the position
check, the CRC of each message record (`verify`), and one list append. Everything else about a
record is read column-wise by Arrow afterwards (columns.py). Other records (acks, delivery
counts, metadata, deletions) are stepped over after their magic and position are checked.

Invalid bytes are handled as recovery handles them: logged, then skipped to the next aligned
position where a valid record starts (`records.first_record`); zeros where a record should
be mean the segment's data ends there.
"""

from __future__ import annotations

import logging

from herald.pipeline.records import Segment, first_record, valid_size
from herald.storage.record import ALIGN, COMMON, MAGIC_END, MAGIC_MESSAGE, MESSAGE, PREFIX

try:
    from isal.isal_zlib import crc32
except ImportError:  # pragma: no cover - isal is a herald dependency
    from zlib import crc32

log = logging.getLogger(__name__)

_CRC_FROM = COMMON.size
_MESSAGE_MIN = MESSAGE.size
_MAGIC_PREFIX = MAGIC_MESSAGE >> 8


class ScanResult:
    """Message record starts (relative positions) and how many invalid spots were skipped."""

    __slots__ = ("corrupt", "starts")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.corrupt = 0


def message_starts(
    segment: Segment, at: int, stop: int, verify: bool = True, out: ScanResult | None = None
) -> ScanResult:
    """The message records that start in [at, stop); `at` must be a record start."""
    result = out if out is not None else ScanResult()
    data = segment.map
    if data is None:
        return result
    view = segment.view
    base = segment.start
    unpack = COMMON.unpack_from
    check = crc32
    append = result.starts.append
    seg_size = segment.size
    last_common = seg_size - COMMON.size
    while at < stop:
        if at > last_common:  # room for nothing but a filler
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
            break
        elif magic >> 8 == _MAGIC_PREFIX and position == base + at and size >= COMMON.size:
            if at + space > seg_size:
                at = _skip(segment, at, stop, result, "record runs past its segment")
                continue
        elif size == 0 and magic == 0:
            if data[at : at + PREFIX.size] == bytes(PREFIX.size):
                break  # never written: the data of this segment ends here
        else:
            at = _skip(segment, at, stop, result, "invalid record")
            continue
        at += space
    return result


def _skip(segment: Segment, at: int, stop: int, result: ScanResult, why: str) -> int:
    """On from invalid bytes to the next valid record (or to `stop`), logging what was lost."""
    if valid_size(segment, at) is not None:  # e.g. a valid record the fast test mistrusted
        return at + ((PREFIX.unpack_from(segment.map, at)[0] + ALIGN - 1) & ~(ALIGN - 1))
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

"""Reading message records straight into `Message`s: how a swapped queue's messages come back,
one per delivery.

`record.decode` builds a `MessageRecord` (every field, the targets) and `to_message` a
`Message` from it; `read_run` does the same checks (magic, size, position, CRC, lengths) on
each record of a run read with one `pread` and builds only the `Message` and the queue's
`StoredEntry`. It is the per-delivery path of a deep queue, so it is written out flat: one
loop over the run, module constants instead of attribute lookups, `bytes` sliced directly.
Protocol, exchange and routing key are decoded once per distinct byte string and remembered.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from herald.core.message import Message
from herald.core.store import EntryFactory, StoredEntry
from herald.storage.record import (
    COMMON,
    HAS_ANNOTATIONS,
    HAS_EXPIRATION,
    HAS_HEADERS,
    HAS_MESSAGE_ID,
    MAGIC_MESSAGE,
    MESSAGE,
    PERSISTENT,
    TARGET,
    TEXT_ERRORS,
    RecordError,
    from_json,
)

try:  # the same CRC-32 as zlib's, computed by ISA-L's vector code (3x faster on a record)
    from isal.isal_zlib import crc32
except ImportError:  # pragma: no cover - isal is a dependency; zlib gives the same values
    from zlib import crc32

_NAMES_MAX = 4096

_NAMES: dict[bytes, tuple[str, str, str]] = {}
"""(protocol, exchange, routing key) by their bytes in a record: they repeat, decode them once."""

_FIXED = MESSAGE.size
_CRC_FROM = COMMON.size
_TARGET = TARGET.size
_OPTIONAL = HAS_MESSAGE_ID | HAS_HEADERS | HAS_ANNOTATIONS

Failure = tuple[int, int, RecordError]
"""(log offset, queue offset, why) of a record `read_run` could not read."""


def read_message(data: bytes | memoryview, position: int, start: int = 0) -> Message:
    """The message in the message record at `data[start:]` (written at log offset `position`),
    checked as `decode` checks it. Raises only RecordError."""
    if start < 0:
        raise RecordError(f"record start {start} out of range")
    out: list[StoredEntry] = []
    failed = read_run(bytes(data), position - start, ((position, 0, 0, 0, 0, 0),), None, out)
    if failed:
        raise failed[0][2]
    return out[0].message


def read_run(
    data: bytes,
    base: int,
    wanted: Sequence[tuple[int, int, int, int, int, int]],
    counts: dict[int, int] | None,
    out: list[Any],
    make: EntryFactory[Any] = StoredEntry,
) -> list[Failure]:
    """Append to `out` an entry, `make(queue offset, message, delivery count)`, for each
    consume-queue entry of `wanted` (log offset first, queue offset last) whose record is in
    `data`, bytes read at log offset `base`; `counts` gives delivery counts by queue offset.
    Returns the records that failed a check (they are left out), so one bad record costs
    only itself."""
    failed: list[Failure] = []
    append = out.append
    names_get = _NAMES.get
    unpack = MESSAGE.unpack_from
    check = crc32
    length = len(data)
    for entry in wanted:
        position = entry[0]
        start = position - base
        try:
            try:
                (
                    size,
                    magic,
                    crc,
                    written_at,
                    flags,
                    born,
                    _,
                    expiration,
                    body_size,
                    priority,
                    protocol,
                    exchange,
                    key,
                    mid,
                    headers,
                    annotations,
                    count,
                    raw_length,
                ) = unpack(data, start)
            except struct.error:
                raise RecordError("truncated message record") from None
            stop = start + size
            if magic != MAGIC_MESSAGE:
                raise RecordError(f"not a message record (magic 0x{magic:08x})")
            if stop > length or size < _FIXED:  # (start >= 0: position >= base)
                available = length - start
                raise RecordError(f"record size {size} out of range ({available} bytes available)")
            if written_at != position:
                raise RecordError(f"record written for offset {written_at} found at {position}")
            if check(data[start + _CRC_FROM : stop]) != crc:
                raise RecordError("CRC mismatch")
            names_at = start + _FIXED
            end = names_at + protocol + exchange + key
            at = stop - raw_length
            if end + mid + headers + annotations + count * _TARGET != at:
                raise RecordError("record lengths do not add up to its size")
            names = names_get(data[names_at:end])
            message_id = header_map = annotation_map = None
            if names is None or flags & _OPTIONAL:
                if names is None:
                    names = _decode_names(data[names_at:end], protocol, exchange)
                if flags & HAS_MESSAGE_ID:
                    message_id = _text(data[end : end + mid])
                if flags & HAS_HEADERS:
                    header_map = from_json(data[end + mid : end + mid + headers])
                if flags & HAS_ANNOTATIONS:
                    first = end + mid + headers
                    annotation_map = from_json(data[first : first + annotations])
        except RecordError as exc:
            failed.append((position, entry[5], exc))
            continue
        message = Message(
            names[0],
            data[at:stop],
            names[1],
            names[2],
            body_size,
            header_map,
            flags & PERSISTENT != 0,
            priority,
            expiration if flags & HAS_EXPIRATION else None,
            message_id,
            born / 1000,
            annotation_map,
        )
        offset = entry[5]
        append(make(offset, message, counts.get(offset, 0) if counts else 0))
    return failed


def _text(data: bytes) -> str:
    try:
        return data.decode("utf-8", TEXT_ERRORS)
    except UnicodeDecodeError:
        raise RecordError("record text is not UTF-8") from None


def _decode_names(data: bytes, protocol: int, exchange: int) -> tuple[str, str, str]:
    """(protocol, exchange, routing key) from their bytes, remembered in `_NAMES`."""
    names = (
        _text(data[:protocol]),
        _text(data[protocol : protocol + exchange]),
        _text(data[protocol + exchange :]),
    )
    if len(_NAMES) >= _NAMES_MAX:
        _NAMES.clear()
    _NAMES[data] = names
    return names

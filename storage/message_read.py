"""Reading message records straight into `Message`s: how a swapped queue's messages come back,
one per delivery.

`record.decode` builds a `MessageRecord` (every field, the targets) and `to_message` a
`Message` from it; `read_run` does the same checks (magic, size, position, CRC, lengths) on
each record of a run read with one `pread` and builds only the `Message` and the queue's
`StoredEntry`. It is the per-delivery path of a deep queue, so it is written out flat: one
loop over the run, module constants instead of attribute lookups, `bytes` sliced directly.
Protocol, exchange and routing key are decoded once per distinct byte string and remembered;
a record shaped as the one before it (same lengths, names, expiration, sizes, priority: a
queue's records mostly are) is not unpacked past its first fields.
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

_Names = tuple[str, str, str, int, int]
_NAMES: dict[bytes, _Names] = {}
"""(protocol, exchange, routing key) by their bytes in a record: they repeat, decode them once.
The bytes are the three joined, so the entry keeps the protocol and exchange lengths too:
exchange "a" with key "b" and exchange "ab" with key "" have the same bytes."""
_NO_NAMES: _Names = ("", "", "", 0, 0)

_HEAD = struct.Struct(">IIIQIq")
"""What differs between records of one shape: size, magic, CRC, position, flags, born ms."""
_SHAPE_AT = _HEAD.size + 8
"""Where a record's shape starts: after the born and stored times, at the expiration."""
assert MESSAGE.format.startswith(_HEAD.format + "qq")  # (record.py's layout)
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
    only itself.

    Records of one queue mostly share their shape (see `_shape`): when a record's shape bytes
    equal the previous record's, only its first fields are unpacked."""
    failed: list[Failure] = []
    append = out.append
    head = _HEAD.unpack_from
    check = crc32
    new = object.__new__
    length = len(data)
    shape = b""  # the last shape read, and what it says:
    shape_size = shape_stop = raw_from = expiration = body_size = priority = 0
    mid = headers = annotations = 0
    names: _Names = _NO_NAMES
    for entry in wanted:
        position = entry[0]
        start = position - base
        try:
            if start + _FIXED > length:
                raise RecordError("truncated message record")
            size, magic, crc, written_at, flags, born = head(data, start)
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
            if size != shape_size or not data.startswith(shape, start + _SHAPE_AT):
                (
                    shape,
                    shape_stop,
                    raw_from,
                    expiration,
                    body_size,
                    priority,
                    names,
                    mid,
                    headers,
                    annotations,
                ) = _shape(data, start, size)
                shape_size = size
            message_id = header_map = annotation_map = None
            if flags & _OPTIONAL:
                end = start + shape_stop
                if flags & HAS_MESSAGE_ID:
                    message_id = _text(data[end : end + mid])
                end += mid
                if flags & HAS_HEADERS:
                    header_map = from_json(data[end : end + headers])
                if flags & HAS_ANNOTATIONS:
                    end += headers
                    annotation_map = from_json(data[end : end + annotations])
        except RecordError as exc:
            failed.append((position, entry[5], exc))
            continue
        offset = entry[5]
        # Message(...) without the class call and attrs' defaults (a fifth cheaper): every
        # field its __init__ sets (tests/test_restored_objects.py compares them)
        message = new(Message)
        message.protocol = names[0]
        message.raw = data[start + raw_from : stop]
        message.exchange = names[1]
        message.routing_key = names[2]
        message.body_size = body_size
        message.headers = header_map
        message.persistent = flags & PERSISTENT != 0
        message.priority = priority
        message.expiration_ms = expiration if flags & HAS_EXPIRATION else None
        message.message_id = message_id
        message.timestamp = born / 1000
        message.annotations = annotation_map
        message.content = message._converted = None
        append(make(offset, message, counts.get(offset, 0) if counts else 0))
    return failed


_Shape = tuple[bytes, int, int, int, int, int, _Names, int, int, int]


def _shape(data: bytes, start: int, size: int) -> _Shape:
    """The shape of the record of `size` bytes at `data[start:]`: the bytes of its header from
    the expiration on and of its names, and what they say, the lengths checked against
    `size`. A shape leaves out only what differs between a queue's records (size, magic,
    CRC, position, flags, times): `read_run` reads those from each record.

    Returns (the bytes, where they stop and where the stored bytes start in the record,
    expiration, body size, priority, names, message id, headers and annotations lengths)."""
    (
        *_,
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
    ) = MESSAGE.unpack_from(data, start)
    names_at = start + _FIXED
    end = names_at + protocol + exchange + key
    if end + mid + headers + annotations + count * _TARGET + raw_length != start + size:
        raise RecordError("record lengths do not add up to its size")
    names = _NAMES.get(data[names_at:end])
    if names is None or names[3] != protocol or names[4] != exchange:
        names = _decode_names(data[names_at:end], protocol, exchange)
    shape = data[start + _SHAPE_AT : end]
    return (
        shape,
        end - start,
        size - raw_length,
        expiration,
        body_size,
        priority,
        names,
        mid,
        headers,
        annotations,
    )


def _text(data: bytes) -> str:
    try:
        return data.decode("utf-8", TEXT_ERRORS)
    except UnicodeDecodeError:
        raise RecordError("record text is not UTF-8") from None


def _decode_names(data: bytes, protocol: int, exchange: int) -> _Names:
    """(protocol, exchange, routing key, protocol length, exchange length) from their bytes,
    remembered in `_NAMES`."""
    names = (
        _text(data[:protocol]),
        _text(data[protocol : protocol + exchange]),
        _text(data[protocol + exchange :]),
        protocol,
        exchange,
    )
    if len(_NAMES) >= _NAMES_MAX:
        _NAMES.clear()
    _NAMES[data] = names
    return names

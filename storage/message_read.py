"""Reading a message record straight into a `Message`: how a swapped queue's messages come
back, one per delivery.

`record.decode` builds a `MessageRecord` (every field, the targets) and `to_message` a
`Message` from it; this does the same checks (magic, size, position, CRC, lengths) on a
record in a larger buffer (a run of records read with one `pread`) and builds only the
`Message`, so it is written out flat. Protocol, exchange and routing key are decoded once per
distinct byte string and remembered. Raises only `RecordError`.
"""

from __future__ import annotations

import zlib

from herald.core.message import Message
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

_NAMES_MAX = 4096

_NAMES: dict[bytes, tuple[str, str, str]] = {}
"""(protocol, exchange, routing key) by their bytes in a record: they repeat, decode them once."""


def read_message(data: bytes | memoryview, position: int, start: int = 0) -> Message:
    """The message in the message record at `data[start:]` (written at log offset `position`),
    checked as `decode` checks it, but built without a `MessageRecord` in between: swapped
    queues read their messages back this way, one per delivery, so it is written out flat.
    Raises only RecordError."""
    available = len(data) - start
    if available < MESSAGE.size:
        raise RecordError("truncated message record")
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
    ) = MESSAGE.unpack_from(data, start)
    if magic != MAGIC_MESSAGE:
        raise RecordError(f"not a message record (magic 0x{magic:08x})")
    if size > available or size < MESSAGE.size:
        raise RecordError(f"record size {size} out of range ({available} bytes available)")
    if written_at != position:
        raise RecordError(f"record written for offset {written_at} found at {position}")
    if zlib.crc32(data[start + COMMON.size : start + size]) != crc:
        raise RecordError("CRC mismatch")
    names_at = start + MESSAGE.size
    end = names_at + protocol + exchange + key
    at = end + mid + headers + annotations + count * TARGET.size
    if at + raw_length != start + size:
        raise RecordError("record lengths do not add up to its size")
    names_key = data[names_at:end]
    names = _NAMES.get(names_key)  # a memoryview finds its bytes' key: same hash, equal
    try:
        if names is None:
            names = _decode_names(bytes(names_key), protocol, exchange)
        message_id = None
        if flags & HAS_MESSAGE_ID:
            message_id = str(data[end : end + mid], "utf-8", TEXT_ERRORS)
    except UnicodeDecodeError:
        raise RecordError("record text is not UTF-8") from None
    header_map = annotation_map = None
    if flags & (HAS_HEADERS | HAS_ANNOTATIONS):
        first = end + mid
        if flags & HAS_HEADERS:
            header_map = from_json(bytes(data[first : first + headers]))
        if flags & HAS_ANNOTATIONS:
            first += headers
            annotation_map = from_json(bytes(data[first : first + annotations]))
    return Message(
        names[0],
        bytes(data[at : at + raw_length]),
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


def _decode_names(data: bytes, protocol: int, exchange: int) -> tuple[str, str, str]:
    """(protocol, exchange, routing key) from their bytes, remembered in `_NAMES`."""
    names = (
        data[:protocol].decode("utf-8", TEXT_ERRORS),
        data[protocol : protocol + exchange].decode("utf-8", TEXT_ERRORS),
        data[protocol + exchange :].decode("utf-8", TEXT_ERRORS),
    )
    if len(_NAMES) >= _NAMES_MAX:
        _NAMES.clear()
    _NAMES[data] = names
    return names

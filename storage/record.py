"""The commit log's record format: the only code that writes or reads a record's bytes (with
message_read.py, the delivery path's reader of message records).

Every change the store makes is one record in one append-only log, so one fsync makes a batch
of publishes, acks, delivery counts and metadata changes durable together, in order.

Layout (big-endian; each record starts on an 8-byte boundary and is zero-padded to one):

    0  size      u32  record length without padding
    4  magic     u32  0xB37A9E00 | kind (a 3-byte prefix the recovery scanner searches for)
    8  crc       u32  zlib.crc32 of bytes [20, size)
    12 position  u64  the record's own physical offset (a copy found elsewhere is invalid)
    20 ...           kind-specific fields, then variable-length parts

The CRC covers everything after the position; size, magic and position are each checked on
their own (a wrong size moves the CRC range, a wrong position never matches). The end-of-segment
filler is only size + magic: its size must reach exactly to the end of the segment.

`decode` raises nothing but `RecordError`, whatever the bytes.
"""

from __future__ import annotations

import enum
import json
import struct
import zlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from herald.core.errors import HeraldError
from herald.core.message import Message
from herald.core.native_codec import from_json_safe, to_json_safe

if TYPE_CHECKING:
    from herald.core.store import QueueTarget

ALIGN = 8
MAGIC_PREFIX = b"\xb3\x7a\x9e"
"""The first three bytes of every magic: what the scanner looks for to resynchronise."""


class Kind(enum.IntEnum):
    MESSAGE = 0x01
    ACK = 0x02
    DELIVERY = 0x03
    METADATA = 0x04
    DELETE_QUEUE = 0x05
    ACKS = 0x06
    END = 0xEE


def magic_of(kind: Kind) -> int:
    return 0xB37A9E00 | kind


_KINDS = {magic_of(k): k for k in Kind}
MAGIC_END = magic_of(Kind.END)

PREFIX = struct.Struct(">II")  # size, magic
COMMON = struct.Struct(">IIIQ")  # size, magic, crc, position


def _layouts(fields: str) -> tuple[struct.Struct, struct.Struct]:
    """(the whole fixed header, its fields after the common part)."""
    return struct.Struct(">IIIQ" + fields), struct.Struct(">" + fields)


# flags, born ms, store ms, expiration ms, body size, priority, protocol length,
# exchange, routing key, message id, headers, annotations lengths, target count, raw length
MESSAGE, _MESSAGE = _layouts("Iqqq I iH IIIIIII")
ACK, _ACK = _layouts("qq")  # queue id, queue offset
ACKS, _ACKS = _layouts("qI")  # queue id, count; then `count` queue offsets (q each)
DELIVERY, _DELIVERY = _layouts("qqI")  # queue id, queue offset, count
DELETE_QUEUE, _DELETE_QUEUE = _layouts("q")  # queue id
METADATA, _METADATA = _layouts("IIII")  # flags, kind length, key length, value length
TARGET = struct.Struct(">qq")
_COMMON_SIZE = COMMON.size
RAW_LENGTH_AT = MESSAGE.size - 4
"""Where a message record keeps the stored bytes' length (read for statistics)."""

PERSISTENT = 1
HAS_EXPIRATION = 2
HAS_MESSAGE_ID = 4
HAS_HEADERS = 8
HAS_ANNOTATIONS = 16
TOMBSTONE = 1

_ZEROS = bytes(ALIGN)
_ACK_PAD = bytes(-ACK.size & (ALIGN - 1))
TEXT_ERRORS = "surrogatepass"


class RecordError(HeraldError):
    """Bytes that are not a valid record (torn, corrupt, or not a record at all)."""


def aligned(size: int) -> int:
    """The space a record of `size` bytes takes in the log."""
    return (size + ALIGN - 1) & ~(ALIGN - 1)


class Pending:
    """An encoded record that does not know its position yet: the common header is packed
    when it is placed; `body` is everything after it, padding included."""

    __slots__ = ("body", "crc", "magic", "size", "space")

    def __init__(self, size: int, magic: int, crc: int, body: bytes) -> None:
        self.size = size
        self.space = (size + ALIGN - 1) & ~(ALIGN - 1)
        self.magic = magic
        self.crc = crc
        self.body = body

    def head(self, position: int) -> bytes:
        return COMMON.pack(self.size, self.magic, self.crc, position)

    def to_bytes(self, position: int) -> bytes:
        return self.head(position) + self.body


def _pending(
    layout: struct.Struct, kind: Kind, fields: tuple[Any, ...], parts: list[bytes]
) -> Pending:
    size = COMMON.size + layout.size + sum(map(len, parts))
    pad = aligned(size) - size
    body = b"".join([layout.pack(*fields), *parts, _ZEROS[:pad]])
    crc = zlib.crc32(memoryview(body)[: len(body) - pad] if pad else body)
    return Pending(size, magic_of(kind), crc, body)


def _json(value: Any) -> bytes:
    return json.dumps(to_json_safe(value), separators=(",", ":")).encode()


_ENCODED: dict[str, bytes] = {}
_ENCODED_MAX = 4096
MAGIC_MESSAGE = magic_of(Kind.MESSAGE)
_MAGIC_ACK = magic_of(Kind.ACK)
_MAGIC_ACKS = magic_of(Kind.ACKS)


def _encoded(text: str) -> bytes:
    """`text` in UTF-8, from a small cache: protocol ids, exchanges and routing keys repeat."""
    data = _ENCODED.get(text)
    if data is None:
        data = text.encode("utf-8", TEXT_ERRORS)
        if len(_ENCODED) >= _ENCODED_MAX:
            _ENCODED.clear()
        _ENCODED[text] = data
    return data


def encode_message(
    message: Message, raw: bytes, targets: Sequence[QueueTarget], store_ms: int
) -> Pending:
    """A message record; raises ValueError for values the format cannot hold.

    The publishing path runs this once per message, so it is written out flat: one header
    `pack`, one `join`, one CRC, and no per-call lists besides the join's."""
    flags = PERSISTENT if message.persistent else 0
    expiration = message.expiration_ms
    if expiration is not None:
        flags |= HAS_EXPIRATION
    message_id = b""
    if message.message_id is not None:
        flags |= HAS_MESSAGE_ID
        message_id = message.message_id.encode("utf-8", TEXT_ERRORS)
    headers = b""
    if message.headers is not None:
        flags |= HAS_HEADERS
        headers = _json(message.headers)
    annotations = b""
    if message.annotations is not None:
        flags |= HAS_ANNOTATIONS
        annotations = _json(message.annotations)
    cache = _ENCODED
    protocol = cache.get(message.protocol) or _encoded(message.protocol)
    exchange = cache.get(message.exchange) or _encoded(message.exchange)
    routing_key = cache.get(message.routing_key) or _encoded(message.routing_key)
    count = len(targets)
    try:
        if count == 1:
            target = targets[0]
            target_bytes = TARGET.pack(target.queue_id, target.queue_offset)
        else:
            target_bytes = b"".join([TARGET.pack(t.queue_id, t.queue_offset) for t in targets])
        # Arguments spelled out, not a lengths tuple unpacked: this saves a fifth of the call.
        head = _MESSAGE.pack(
            flags,
            round(message.timestamp * 1000),
            store_ms,
            expiration or 0,
            message.body_size,
            message.priority,
            len(protocol),
            len(exchange),
            len(routing_key),
            len(message_id),
            len(headers),
            len(annotations),
            count,
            len(raw),
        )
    except struct.error as exc:
        raise ValueError(f"message cannot be stored: {exc}") from None
    # One join; the record's size is the join's, and the padding (not under the CRC) is
    # added after: cheaper than summing the parts' lengths and slicing the padding off.
    body = b"".join(
        (head, protocol, exchange, routing_key, message_id, headers, annotations, target_bytes, raw)
    )  # fmt: skip
    crc = zlib.crc32(body)
    size = _COMMON_SIZE + len(body)
    pad = -size & (ALIGN - 1)
    return Pending(size, MAGIC_MESSAGE, crc, body + _ZEROS[:pad] if pad else body)


def encode_ack(queue_id: int, queue_offset: int) -> Pending:
    fields = _ACK.pack(queue_id, queue_offset)
    return Pending(ACK.size, _MAGIC_ACK, zlib.crc32(fields), fields + _ACK_PAD)


def encode_acks(queue_id: int, offsets: Sequence[int]) -> Pending:
    """Acks of several entries of one queue in one record (what the store writes: the
    acks taken since its last record; ACK records are still read)."""
    count = len(offsets)
    fields = _ACKS.pack(queue_id, count) + struct.pack(f">{count}q", *offsets)
    size = ACKS.size + 8 * count
    return Pending(size, _MAGIC_ACKS, zlib.crc32(fields), fields + _ZEROS[: -size & (ALIGN - 1)])


def encode_delivery(queue_id: int, queue_offset: int, count: int) -> Pending:
    return _pending(_DELIVERY, Kind.DELIVERY, (queue_id, queue_offset, count), [])


def encode_delete_queue(queue_id: int) -> Pending:
    return _pending(_DELETE_QUEUE, Kind.DELETE_QUEUE, (queue_id,), [])


def encode_metadata(kind: str, key: str, value_json: str | None) -> Pending:
    """A metadata change; `value_json` None is a deletion (tombstone)."""
    k = kind.encode("utf-8", TEXT_ERRORS)
    key_bytes = key.encode("utf-8", TEXT_ERRORS)
    value = b"" if value_json is None else value_json.encode()
    flags = TOMBSTONE if value_json is None else 0
    fields = (flags, len(k), len(key_bytes), len(value))
    return _pending(_METADATA, Kind.METADATA, fields, [k, key_bytes, value])


def encode_end(space: int) -> bytes:
    """The filler for the last `space` bytes of a segment (space >= 8, a multiple of 8)."""
    return PREFIX.pack(space, MAGIC_END)


# -- decoded records -----------------------------------------------------------------------


@attrs.frozen
class MessageRecord:
    position: int
    size: int
    flags: int
    born_ms: int
    store_ms: int
    expiration_ms: int | None
    body_size: int
    priority: int
    protocol: str
    exchange: str
    routing_key: str
    message_id: str | None
    headers_json: bytes | None
    annotations_json: bytes | None
    targets: tuple[tuple[int, int], ...]
    raw: bytes

    def to_message(self) -> Message:
        """The message as it was appended (raises RecordError for unreadable JSON)."""
        return Message(
            protocol=self.protocol,
            raw=self.raw,
            exchange=self.exchange,
            routing_key=self.routing_key,
            body_size=self.body_size,
            headers=from_json(self.headers_json),
            persistent=bool(self.flags & PERSISTENT),
            priority=self.priority,
            expiration_ms=self.expiration_ms,
            message_id=self.message_id,
            timestamp=self.born_ms / 1000,
            annotations=from_json(self.annotations_json),
        )


@attrs.frozen
class AckRecord:
    position: int
    size: int
    queue_id: int
    queue_offset: int


@attrs.frozen
class AcksRecord:
    position: int
    size: int
    queue_id: int
    queue_offsets: tuple[int, ...]


@attrs.frozen
class DeliveryRecord:
    position: int
    size: int
    queue_id: int
    queue_offset: int
    count: int


@attrs.frozen
class DeleteQueueRecord:
    position: int
    size: int
    queue_id: int


@attrs.frozen
class MetadataRecord:
    position: int
    size: int
    kind: str
    key: str
    value_json: str | None


@attrs.frozen
class EndRecord:
    """The end-of-segment filler: the rest of the segment holds nothing."""

    position: int
    size: int


Record = (
    MessageRecord
    | AckRecord
    | AcksRecord
    | DeliveryRecord
    | DeleteQueueRecord
    | MetadataRecord
    | EndRecord
)


def from_json(data: bytes | None) -> Any:
    """Headers or annotations from a record's JSON (None stays None); RecordError if bad."""
    if data is None:
        return None
    try:
        value = from_json_safe(json.loads(data))
    except (ValueError, TypeError, RecursionError) as exc:
        raise RecordError(f"unreadable JSON in a record: {exc}") from None
    if not isinstance(value, Mapping):
        raise RecordError("record headers/annotations are not a JSON object")
    return value


def _text(data: bytes, what: str) -> str:
    try:
        return data.decode("utf-8", TEXT_ERRORS)
    except UnicodeDecodeError:
        raise RecordError(f"record {what} is not UTF-8") from None


def peek(data: bytes | bytearray | memoryview, at: int = 0) -> tuple[int, int]:
    """(size, magic) of the record starting at `at`; RecordError if fewer than 8 bytes."""
    if len(data) - at < PREFIX.size:
        raise RecordError("truncated record header")
    return PREFIX.unpack_from(data, at)


def decode(data: bytes | memoryview, position: int) -> Record:
    """The record in `data` (exactly its `size` bytes, or more), written at `position`."""
    size, magic = peek(data)
    kind = _KINDS.get(magic)
    if kind is None:
        raise RecordError(f"bad magic 0x{magic:08x}")
    if kind is Kind.END:
        if size < PREFIX.size or size % ALIGN:
            raise RecordError(f"bad end-of-segment filler size {size}")
        return EndRecord(position, size)
    if size < COMMON.size or size > len(data):
        raise RecordError(f"record size {size} out of range ({len(data)} bytes available)")
    _, _, crc, written_at = COMMON.unpack_from(data)
    if written_at != position:
        raise RecordError(f"record written for offset {written_at} found at {position}")
    if zlib.crc32(memoryview(data)[COMMON.size : size]) != crc:
        raise RecordError("CRC mismatch")
    if kind is Kind.MESSAGE:
        return _decode_message(data, position, size)
    if kind is Kind.METADATA:
        return _decode_metadata(data, position, size)
    if kind is Kind.ACKS:
        return _decode_acks(data, position, size)
    layout = {Kind.ACK: ACK, Kind.DELIVERY: DELIVERY, Kind.DELETE_QUEUE: DELETE_QUEUE}[kind]
    if size != layout.size:
        raise RecordError(f"{kind.name} record of {size} bytes, expected {layout.size}")
    fields = layout.unpack_from(data)[4:]
    if kind is Kind.ACK:
        return AckRecord(position, size, *fields)
    if kind is Kind.DELIVERY:
        return DeliveryRecord(position, size, *fields)
    return DeleteQueueRecord(position, size, *fields)


def _decode_acks(data: bytes | memoryview, position: int, size: int) -> AcksRecord:
    if size < ACKS.size:
        raise RecordError("ACKS record shorter than its header")
    queue_id, count = _ACKS.unpack_from(data, COMMON.size)
    if size != ACKS.size + 8 * count:
        raise RecordError(f"ACKS record of {size} bytes for {count} offsets")
    offsets = struct.unpack_from(f">{count}q", data, ACKS.size)
    return AcksRecord(position, size, queue_id, offsets)


def _split(data: bytes, start: int, size: int, lengths: Sequence[int]) -> list[bytes]:
    if start + sum(lengths) != size:
        raise RecordError(f"record lengths add up to {start + sum(lengths)}, not {size}")
    parts = []
    for length in lengths:
        parts.append(data[start : start + length])
        start += length
    return parts


def _decode_message(data: bytes | memoryview, position: int, size: int) -> MessageRecord:
    if size < MESSAGE.size:
        raise RecordError("message record shorter than its header")
    (flags, born, stored, expiration, body_size, priority, *lengths) = MESSAGE.unpack_from(data)[4:]
    count, raw_length = lengths[-2], lengths[-1]
    proto, exchange, key, mid, headers, annotations, targets, raw = _split(
        bytes(data[:size]), MESSAGE.size, size, [*lengths[:-2], count * TARGET.size, raw_length]
    )
    return MessageRecord(
        position=position,
        size=size,
        flags=flags,
        born_ms=born,
        store_ms=stored,
        expiration_ms=expiration if flags & HAS_EXPIRATION else None,
        body_size=body_size,
        priority=priority,
        protocol=_text(proto, "protocol"),
        exchange=_text(exchange, "exchange"),
        routing_key=_text(key, "routing key"),
        message_id=_text(mid, "message id") if flags & HAS_MESSAGE_ID else None,
        headers_json=headers if flags & HAS_HEADERS else None,
        annotations_json=annotations if flags & HAS_ANNOTATIONS else None,
        targets=tuple(TARGET.iter_unpack(targets)),
        raw=raw,
    )


def _decode_metadata(data: bytes | memoryview, position: int, size: int) -> MetadataRecord:
    if size < METADATA.size:
        raise RecordError("metadata record shorter than its header")
    flags, *lengths = METADATA.unpack_from(data)[4:]
    kind, key, value = _split(bytes(data[:size]), METADATA.size, size, lengths)
    value_json = None if flags & TOMBSTONE else _text(value, "metadata value")
    return MetadataRecord(position, size, _text(kind, "kind"), _text(key, "key"), value_json)

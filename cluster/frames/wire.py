"""The cluster port's frames as bytes: `u32 length | u8 type | body`, big-endian (CLUSTER.md §4.1).

`length` counts the type byte and the body; it may not exceed `MAX_FRAME` (1 MiB + 64), which
the reader checks on the four length bytes alone, before it waits for (or keeps) a body. Strings
are `u16 length + UTF-8`; fixed fields are read with one `struct` call per run.

Decoders take the receive buffer and the body's bounds and must use the body exactly: a field
running past its frame, or bytes left over after the last one, is a `LocalProtocolError` that
the connection re-raises as the peer's `RemoteProtocolError` (h11's strategy). Bytes a frame
ships (DATA's payload, snapshot bytes, ENTRIES' records) are one slice of the buffer.

Encoders check every value (integers against their field's width, strings' UTF-8 and length,
the frame against `MAX_FRAME`) and raise `LocalProtocolError` before anything is queued. They
return the frame as pieces, a payload being one piece as given, so the connection joins header
and payload once, in `data_to_send`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, Final

from herald.cluster.frames.events import (
    FRAME_CLASSES,
    VERSION,
    Ack,
    Acked,
    Acks,
    Data,
    Entries,
    Entry,
    Epochs,
    EpochStart,
    Frame,
    Hello,
    HelloFlags,
    LinkError,
    LinkErrorCode,
    LinkHello,
    Read,
    Refuse,
    RefuseCode,
    SnapBegin,
    SnapChunk,
    SnapEnd,
    SnapFile,
    Start,
)
from herald.core.codec_kit import LocalProtocolError

MAX_FRAME: Final = (1 << 20) + 64
"""The largest `length` (type byte + body) a frame may have, either way."""

Buffer = bytes | bytearray

HEADER: Final = struct.Struct(">IB")  # length, type
LENGTH: Final = struct.Struct(">I")
_U16: Final = struct.Struct(">H")
_U32: Final = struct.Struct(">I")
_U64: Final = struct.Struct(">Q")
_HELLO_HEAD: Final = struct.Struct(">HH")  # version, flags
_EPOCHS_HEAD: Final = struct.Struct(">IQI")  # epoch, master_max, n
_EPOCH: Final = struct.Struct(">IQ")  # epoch, start
_DATA_HEAD: Final = struct.Struct(">IQQQ")  # epoch, epoch_start, offset, confirm_offset
_ACK: Final = struct.Struct(">QQ")  # written, flushed
_READ_TAIL: Final = struct.Struct(">QQII")  # first, last, limit, max_bytes
_ENTRIES_HEAD: Final = struct.Struct(">IBI")  # req, more, n
_ENTRY_HEAD: Final = struct.Struct(">QII")  # offset, delivery_count, len
_LINK_ERROR_HEAD: Final = struct.Struct(">IH")  # req, code
_KNOWN_FLAGS: Final = int(HelloFlags.ASYNC_LEARNER)  # an int: ~ on a Flag flips its named bits only


def malformed(text: str) -> LocalProtocolError:
    """The peer's frame does not decode: no REFUSE code says that, so the error has none."""
    return LocalProtocolError(text)


# -- decoding -----------------------------------------------------------------------------------


def _fields(fmt: struct.Struct, buf: Buffer, pos: int, end: int) -> tuple[tuple[Any, ...], int]:
    stop = pos + fmt.size
    if stop > end:
        raise malformed("the frame ends inside its fields")
    return fmt.unpack_from(buf, pos), stop


def _string(buf: Buffer, pos: int, end: int) -> tuple[str, int]:
    start = pos + 2
    if start > end:
        raise malformed("the frame ends inside a string's length")
    stop = start + (buf[pos] << 8 | buf[pos + 1])
    if stop > end:
        raise malformed("a string runs past the end of the frame")
    try:
        return buf[start:stop].decode(), stop
    except UnicodeDecodeError:
        raise malformed("a string is not well-formed UTF-8") from None


def _bytes(buf: Buffer, start: int, stop: int) -> bytes:
    """buf[start:stop] as bytes, copied once (a bytearray's slice would be copied twice)."""
    if type(buf) is bytes:
        return buf[start:stop]
    with memoryview(buf) as view:
        return view[start:stop].tobytes()


def _count(n: int, size: int, pos: int, end: int, items: str) -> None:
    """n fixed-size items fill the rest of the frame exactly."""
    if pos + n * size != end:
        raise malformed(f"{n} {items} take {n * size} bytes, the frame has {end - pos} left")


def _finish(pos: int, end: int) -> None:
    if pos != end:
        raise malformed(f"{end - pos} bytes left in the frame after its last field")


def _version(version: int) -> None:
    if version != VERSION:
        raise LocalProtocolError(
            f"version {version} is not supported (this node speaks {VERSION})", RefuseCode.VERSION
        )


def _hello(buf: Buffer, pos: int, end: int) -> Hello:
    (version, flags), pos = _fields(_HELLO_HEAD, buf, pos, end)
    _version(version)  # before the rest: another version's body may be laid out otherwise
    if flags & ~_KNOWN_FLAGS:
        raise malformed(f"unknown flags {flags:#06x}")
    cluster, pos = _string(buf, pos, end)
    group, pos = _string(buf, pos, end)
    node, pos = _string(buf, pos, end)
    secret, pos = _string(buf, pos, end)
    (max_offset,), pos = _fields(_U64, buf, pos, end)
    _finish(pos, end)
    return Hello(cluster, group, node, secret, max_offset, HelloFlags(flags))


def _epochs(buf: Buffer, pos: int, end: int) -> Epochs:
    (epoch, master_max, n), pos = _fields(_EPOCHS_HEAD, buf, pos, end)
    _count(n, _EPOCH.size, pos, end, "epochs")
    starts = tuple(EpochStart(*_EPOCH.unpack_from(buf, at)) for at in range(pos, end, _EPOCH.size))
    return Epochs(epoch, master_max, starts)


def _start(buf: Buffer, pos: int, end: int) -> Start:
    (offset,), pos = _fields(_U64, buf, pos, end)
    _finish(pos, end)
    return Start(offset)


def _data(buf: Buffer, pos: int, end: int) -> Data:
    (epoch, epoch_start, offset, confirm), pos = _fields(_DATA_HEAD, buf, pos, end)
    return Data(epoch, epoch_start, offset, confirm, _bytes(buf, pos, end))


def _ack(buf: Buffer, pos: int, end: int) -> Ack:
    (written, flushed), pos = _fields(_ACK, buf, pos, end)
    _finish(pos, end)
    return Ack(written, flushed)


def _refuse(buf: Buffer, pos: int, end: int) -> Refuse:
    (code,), pos = _fields(_U16, buf, pos, end)
    text, pos = _string(buf, pos, end)
    _finish(pos, end)
    try:
        return Refuse(RefuseCode(code), text)
    except ValueError:
        raise malformed(f"unknown REFUSE code {code} ({text!r})") from None


def _snap_begin(buf: Buffer, pos: int, end: int) -> SnapBegin:
    return SnapBegin(_bytes(buf, pos, end))


def _snap_file(buf: Buffer, pos: int, end: int) -> SnapFile:
    relpath, pos = _string(buf, pos, end)
    (size,), pos = _fields(_U64, buf, pos, end)
    _finish(pos, end)
    return SnapFile(relpath, size)


def _snap_chunk(buf: Buffer, pos: int, end: int) -> SnapChunk:
    return SnapChunk(_bytes(buf, pos, end))


def _snap_end(buf: Buffer, pos: int, end: int) -> SnapEnd:
    (log_end,), pos = _fields(_U64, buf, pos, end)
    _finish(pos, end)
    return SnapEnd(log_end)


def _link_hello(buf: Buffer, pos: int, end: int) -> LinkHello:
    (version,), pos = _fields(_U16, buf, pos, end)
    _version(version)
    cluster, pos = _string(buf, pos, end)
    node, pos = _string(buf, pos, end)
    secret, pos = _string(buf, pos, end)
    _finish(pos, end)
    return LinkHello(cluster, node, secret)


def _read(buf: Buffer, pos: int, end: int) -> Read:
    (req,), pos = _fields(_U32, buf, pos, end)
    vhost, pos = _string(buf, pos, end)
    queue, pos = _string(buf, pos, end)
    (first, last, limit, max_bytes), pos = _fields(_READ_TAIL, buf, pos, end)
    _finish(pos, end)
    return Read(req, vhost, queue, first, last, limit, max_bytes)


def _entries(buf: Buffer, pos: int, end: int) -> Entries:
    (req, more, n), pos = _fields(_ENTRIES_HEAD, buf, pos, end)
    if more > 1:
        raise malformed(f"ENTRIES' more flag is {more}, not 0 or 1")
    entries = []
    for _ in range(n):  # a bogus n fails at the frame's end, after at most length/16 rounds
        (offset, delivery_count, size), pos = _fields(_ENTRY_HEAD, buf, pos, end)
        stop = pos + size
        if stop > end:
            raise malformed("a record runs past the end of the frame")
        entries.append(Entry(offset, delivery_count, _bytes(buf, pos, stop)))
        pos = stop
    _finish(pos, end)
    return Entries(req, tuple(entries), bool(more))


def _acks(buf: Buffer, pos: int, end: int) -> Acks:
    (req,), pos = _fields(_U32, buf, pos, end)
    vhost, pos = _string(buf, pos, end)
    queue, pos = _string(buf, pos, end)
    (n,), pos = _fields(_U32, buf, pos, end)
    _count(n, _U64.size, pos, end, "offsets")
    return Acks(req, vhost, queue, struct.unpack_from(f">{n}Q", buf, pos))


def _acked(buf: Buffer, pos: int, end: int) -> Acked:
    (req,), pos = _fields(_U32, buf, pos, end)
    _finish(pos, end)
    return Acked(req)


def _link_error(buf: Buffer, pos: int, end: int) -> LinkError:
    (req, code), pos = _fields(_LINK_ERROR_HEAD, buf, pos, end)
    text, pos = _string(buf, pos, end)
    _finish(pos, end)
    try:
        return LinkError(req, LinkErrorCode(code), text)
    except ValueError:
        raise malformed(f"unknown LINK_ERROR code {code} ({text!r})") from None


Decoder = Callable[[Buffer, int, int], Frame]
DECODERS: Final[dict[type[Frame], Decoder]] = {
    Hello: _hello,
    Epochs: _epochs,
    Start: _start,
    Data: _data,
    Ack: _ack,
    Refuse: _refuse,
    SnapBegin: _snap_begin,
    SnapFile: _snap_file,
    SnapChunk: _snap_chunk,
    SnapEnd: _snap_end,
    LinkHello: _link_hello,
    Read: _read,
    Entries: _entries,
    Acks: _acks,
    Acked: _acked,
    LinkError: _link_error,
}
_BY_BYTE: Final = {int(t): cls for t, cls in FRAME_CLASSES.items()}
CLASS_BY_TYPE: Final = tuple(_BY_BYTE.get(t) for t in range(256))
"""The frame class of each type byte, None for a type §4.1 does not have."""


def decode_body(cls: type[Frame], buf: Buffer, start: int, end: int) -> Frame:
    """The frame of type `cls` whose body is buf[start:end]; raises LocalProtocolError naming
    the frame if the body does not decode to exactly that frame."""
    try:
        return DECODERS[cls](buf, start, end)
    except LocalProtocolError as exc:
        raise LocalProtocolError(f"{cls.TYPE.name}: {exc.text}", exc.code) from None


# -- encoding -----------------------------------------------------------------------------------


def _str(text: str) -> bytes:
    try:
        raw = text.encode()
    except UnicodeEncodeError:
        raise LocalProtocolError(f"{text!r} cannot be encoded as UTF-8") from None
    if len(raw) > 0xFFFF:
        raise LocalProtocolError(f"a string of {len(raw)} bytes is longer than 65535")
    return _U16.pack(len(raw)) + raw


def _encode_hello(f: Hello) -> list[bytes]:
    if int(f.flags) & ~_KNOWN_FLAGS:
        raise LocalProtocolError(f"unknown flags {int(f.flags):#06x}")
    strings = b"".join(map(_str, (f.cluster, f.group, f.node, f.secret)))
    return [_HELLO_HEAD.pack(VERSION, f.flags), strings, _U64.pack(f.max_offset)]


def _encode_epochs(f: Epochs) -> list[bytes]:
    head = _EPOCHS_HEAD.pack(f.epoch, f.master_max, len(f.epochs))
    return [head, *(_EPOCH.pack(e.epoch, e.start) for e in f.epochs)]


def _encode_data(f: Data) -> list[bytes]:
    head = _DATA_HEAD.pack(f.epoch, f.epoch_start, f.offset, f.confirm_offset)
    return [head, f.payload] if f.payload else [head]


def _encode_entries(f: Entries) -> list[bytes]:
    pieces = [_ENTRIES_HEAD.pack(f.req, 1 if f.more else 0, len(f.entries))]
    for entry in f.entries:
        pieces += (
            _ENTRY_HEAD.pack(entry.offset, entry.delivery_count, len(entry.record)),
            entry.record,
        )
    return pieces


def _encode_acks(f: Acks) -> list[bytes]:
    head = [_U32.pack(f.req), _str(f.vhost), _str(f.queue), _U32.pack(len(f.offsets))]
    return [*head, struct.pack(f">{len(f.offsets)}Q", *f.offsets)]


Encoder = Callable[[Any], list[bytes]]
ENCODERS: Final[dict[type[Frame], Encoder]] = {
    Hello: _encode_hello,
    Epochs: _encode_epochs,
    Start: lambda f: [_U64.pack(f.from_offset)],
    Data: _encode_data,
    Ack: lambda f: [_ACK.pack(f.written, f.flushed)],
    Refuse: lambda f: [_U16.pack(f.code), _str(f.text)],
    SnapBegin: lambda f: [f.checkpoint],
    SnapFile: lambda f: [_str(f.relpath), _U64.pack(f.size)],
    SnapChunk: lambda f: [f.data],
    SnapEnd: lambda f: [_U64.pack(f.log_end)],
    LinkHello: lambda f: [_U16.pack(VERSION), *map(_str, (f.cluster, f.node, f.secret))],
    Read: lambda f: [
        _U32.pack(f.req),
        _str(f.vhost),
        _str(f.queue),
        _READ_TAIL.pack(f.first, f.last, f.limit, f.max_bytes),
    ],
    Entries: _encode_entries,
    Acks: _encode_acks,
    Acked: lambda f: [_U32.pack(f.req)],
    LinkError: lambda f: [_LINK_ERROR_HEAD.pack(f.req, f.code), _str(f.text)],
}


def frame_pieces(frame: Frame) -> list[bytes]:
    """`frame` on the wire as pieces to join (header first, a payload as it was given);
    raises LocalProtocolError for a value its field cannot hold or a frame over MAX_FRAME."""
    cls = type(frame)
    encoder = ENCODERS.get(cls)
    if encoder is None:
        raise LocalProtocolError(f"{cls.__name__} is not a cluster port frame")
    try:
        body = encoder(frame)
    except struct.error as exc:  # an integer out of its field's range, or not an integer
        raise LocalProtocolError(f"cannot encode {cls.TYPE.name}: {exc}") from None
    except LocalProtocolError as exc:
        raise LocalProtocolError(f"cannot encode {cls.TYPE.name}: {exc.text}") from None
    length = 1 + sum(map(len, body))
    if length > MAX_FRAME:
        raise LocalProtocolError(
            f"{cls.TYPE.name} of {length} bytes is longer than the largest frame ({MAX_FRAME})"
        )
    return [HEADER.pack(length, cls.TYPE), *body]


def encode(frame: Frame) -> bytes:
    """`frame`'s bytes, as one bytes object (FrameConnection.send queues the pieces)."""
    return b"".join(frame_pieces(frame))

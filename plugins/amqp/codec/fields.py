"""AMQP field tables and arrays: every value type RabbitMQ and its clients send.

Decoding (tag -> Python), as RabbitMQ's rabbit_binary_parser reads them:

    t bool            b/B int (signed/unsigned octet)    s/U/u int (signed/signed/unsigned short)
    I/i int (signed/unsigned long)   l/L int (both signed 64-bit, as RabbitMQ reads them)
    f/d float         D decimal.Decimal (scale octet + signed long, as pika and the Java client)
    S str, or bytes when it is not valid UTF-8 (what pika does: clients send text as S)
    x bytes           A list           T Timestamp (an int of seconds)     F dict     V None

Encoding (Python -> tag) is what round-trips through the decoder and what pika sends:
bool -> t; int -> I when it fits 32 bits signed, else l; float -> d; Decimal -> D; str -> S;
bytes / bytearray / memoryview -> x; Timestamp and datetime -> T; Mapping -> F; list / tuple
-> A; None -> V. So every value of those types survives encode -> decode unchanged (a datetime
comes back as a Timestamp). An S holding invalid UTF-8 decodes to bytes and would re-encode as
x; herald never re-encodes what a client sent, it keeps the raw property bytes instead.

Errors: a truncated or overrunning table, bad UTF-8 in a field name, or nesting deeper than
`MAX_DEPTH` is FRAME_ERROR 501 ("could not decode", RabbitMQ's answer to undecodable method
fields); an unknown type tag is SYNTAX_ERROR 502 (an illegal value). Decoders raise
`LocalProtocolError`; the connection re-raises it as `RemoteProtocolError` with the same code.
"""

from __future__ import annotations

import calendar
import datetime
import decimal
import struct
from collections.abc import Mapping
from typing import Any

from herald.core.errors import LocalProtocolError
from herald.plugins.amqp.codec.constants import ReplyCode

FieldTable = dict[str, Any]

MAX_DEPTH = 64
"""Nested tables/arrays deeper than this are refused: it bounds the decoder's recursion."""

_FRAME_ERROR = ReplyCode.FRAME_ERROR
_SYNTAX_ERROR = ReplyCode.SYNTAX_ERROR

_U8 = struct.Struct(">B")
_U32 = struct.Struct(">I")
_DECIMAL = struct.Struct(">Bi")
_TAG_U32 = struct.Struct(">cI")
_TAG_I32 = struct.Struct(">ci")
_TAG_I64 = struct.Struct(">cq")
_TAG_U64 = struct.Struct(">cQ")
_TAG_F64 = struct.Struct(">cd")
_TAG_DECIMAL = struct.Struct(">cBi")

# Fixed-size numbers: tag -> (struct, size).
_FIXED: dict[int, tuple[struct.Struct, int]] = {
    ord("b"): (struct.Struct(">b"), 1),
    ord("B"): (struct.Struct(">B"), 1),
    ord("s"): (struct.Struct(">h"), 2),
    ord("U"): (struct.Struct(">h"), 2),  # old Qpid spelling of a signed short; pika reads it
    ord("u"): (struct.Struct(">H"), 2),
    ord("I"): (struct.Struct(">i"), 4),
    ord("i"): (struct.Struct(">I"), 4),
    ord("l"): (struct.Struct(">q"), 8),
    ord("L"): (struct.Struct(">q"), 8),
    ord("f"): (struct.Struct(">f"), 4),
    ord("d"): (struct.Struct(">d"), 8),
}
_T_BOOL, _T_LONGSTR, _T_BYTES, _T_ARRAY = ord("t"), ord("S"), ord("x"), ord("A")
_T_TIMESTAMP, _T_TABLE, _T_VOID, _T_DECIMAL = ord("T"), ord("F"), ord("V"), ord("D")

_DECIMAL_CONTEXT = decimal.Context(prec=40)  # exact for 32-bit unscaled values, any caller context
_DECODE_ERRORS = (struct.error, IndexError, ValueError)  # ValueError covers UnicodeDecodeError


class Timestamp(int):
    """A field-table timestamp (seconds since the epoch): an int that re-encodes as `T`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Timestamp({int(self)})"


def decode_table(buf: bytes | bytearray, off: int, end: int) -> tuple[FieldTable, int]:
    """Decode the table (4-byte size + entries) at `off`; it must end by `end`.

    Returns the table and the offset after it.
    """
    try:
        return _table(buf, off, end, 0)
    except _DECODE_ERRORS as exc:
        raise LocalProtocolError(f"malformed field table: {exc}", _FRAME_ERROR) from exc


def encode_table(table: Mapping[str, Any] | None) -> bytes:
    """Encode a table with its 4-byte size prefix, as it appears in a method or header."""
    if not table:
        return b"\x00\x00\x00\x00"
    pieces: list[bytes] = [b""]
    try:
        _encode_entries(pieces, table, 0)
    except (struct.error, UnicodeEncodeError, OverflowError) as exc:
        raise LocalProtocolError(f"cannot encode field table: {exc}") from exc
    body = b"".join(pieces)
    return _U32.pack(len(body)) + body


def _table(buf: bytes | bytearray, off: int, end: int, depth: int) -> tuple[FieldTable, int]:
    (size,) = _U32.unpack_from(buf, off)
    off += 4
    stop = off + size
    if stop > end:
        raise LocalProtocolError("field table overruns its frame", _FRAME_ERROR)
    if depth > MAX_DEPTH:
        raise LocalProtocolError("field tables nested too deeply", _FRAME_ERROR)
    table: FieldTable = {}
    while off < stop:
        n = buf[off]
        off += 1
        name = buf[off : off + n].decode()
        off += n
        table[name], off = _value(buf, off, stop, depth)
    if off != stop:
        raise LocalProtocolError("field table entry overruns the table", _FRAME_ERROR)
    return table, off


def _array(buf: bytes | bytearray, off: int, end: int, depth: int) -> tuple[list[Any], int]:
    (size,) = _U32.unpack_from(buf, off)
    off += 4
    stop = off + size
    if stop > end:
        raise LocalProtocolError("field array overruns its frame", _FRAME_ERROR)
    if depth > MAX_DEPTH:
        raise LocalProtocolError("field arrays nested too deeply", _FRAME_ERROR)
    items: list[Any] = []
    append = items.append
    while off < stop:
        value, off = _value(buf, off, stop, depth)
        append(value)
    if off != stop:
        raise LocalProtocolError("field array item overruns the array", _FRAME_ERROR)
    return items, off


def _value(buf: bytes | bytearray, off: int, end: int, depth: int) -> tuple[Any, int]:
    tag = buf[off]
    off += 1
    fixed = _FIXED.get(tag)
    if fixed is not None:
        codec, size = fixed
        if off + size > end:
            raise LocalProtocolError("field value overruns its table", _FRAME_ERROR)
        return codec.unpack_from(buf, off)[0], off + size
    if tag in (_T_LONGSTR, _T_BYTES):
        (n,) = _U32.unpack_from(buf, off)
        off += 4
        if off + n > end:
            raise LocalProtocolError("field string overruns its table", _FRAME_ERROR)
        raw = bytes(buf[off : off + n])
        if tag == _T_LONGSTR:
            try:
                return raw.decode(), off + n
            except UnicodeDecodeError:
                return raw, off + n
        return raw, off + n
    if tag == _T_BOOL:
        if off >= end:
            raise LocalProtocolError("field value overruns its table", _FRAME_ERROR)
        return buf[off] != 0, off + 1
    if tag == _T_TABLE:
        return _table(buf, off, end, depth + 1)
    if tag == _T_ARRAY:
        return _array(buf, off, end, depth + 1)
    if tag == _T_VOID:
        return None, off
    if tag == _T_TIMESTAMP:
        if off + 8 > end:
            raise LocalProtocolError("field value overruns its table", _FRAME_ERROR)
        return Timestamp(int.from_bytes(buf[off : off + 8], "big")), off + 8
    if tag == _T_DECIMAL:
        if off + 5 > end:
            raise LocalProtocolError("field value overruns its table", _FRAME_ERROR)
        scale, unscaled = _DECIMAL.unpack_from(buf, off)
        return decimal.Decimal(unscaled).scaleb(-scale, _DECIMAL_CONTEXT), off + 5
    raise LocalProtocolError(f"unknown field type {chr(tag)!r} in a field table", _SYNTAX_ERROR)


def _encode_entries(pieces: list[bytes], table: Mapping[str, Any], depth: int) -> None:
    for name, value in table.items():
        if not isinstance(name, str):
            raise LocalProtocolError(f"field table keys must be str, not {name!r}")
        key = name.encode()
        if len(key) > 255:
            raise LocalProtocolError(f"field table key longer than 255 bytes: {name[:40]!r}...")
        pieces.append(_U8.pack(len(key)))
        pieces.append(key)
        _encode_value(pieces, value, depth)


def _encode_value(pieces: list[bytes], value: Any, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise LocalProtocolError("field tables nested too deeply to encode")
    if isinstance(value, str):
        raw = value.encode()
        pieces.append(_TAG_U32.pack(b"S", len(raw)))
        pieces.append(raw)
    elif isinstance(value, bool):
        pieces.append(b"t\x01" if value else b"t\x00")
    elif isinstance(value, Timestamp):
        pieces.append(_TAG_U64.pack(b"T", value))
    elif isinstance(value, int):
        if -0x80000000 <= value <= 0x7FFFFFFF:
            pieces.append(_TAG_I32.pack(b"I", value))
        else:
            pieces.append(_TAG_I64.pack(b"l", value))
    elif isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        pieces.append(_TAG_U32.pack(b"x", len(raw)))
        pieces.append(raw)
    elif value is None:
        pieces.append(b"V")
    elif isinstance(value, Mapping):
        index = len(pieces)
        pieces.append(b"")
        _encode_entries(pieces, value, depth + 1)
        pieces[index] = _TAG_U32.pack(b"F", sum(len(p) for p in pieces[index + 1 :]))
    elif isinstance(value, list | tuple):
        index = len(pieces)
        pieces.append(b"")
        for item in value:
            _encode_value(pieces, item, depth + 1)
        pieces[index] = _TAG_U32.pack(b"A", sum(len(p) for p in pieces[index + 1 :]))
    elif isinstance(value, float):
        pieces.append(_TAG_F64.pack(b"d", value))
    elif isinstance(value, decimal.Decimal):
        pieces.append(_encode_decimal(value))
    elif isinstance(value, datetime.datetime):
        pieces.append(_TAG_U64.pack(b"T", calendar.timegm(value.utctimetuple())))
    else:
        raise LocalProtocolError(f"no AMQP field type for {type(value).__name__}: {value!r}")


def _encode_decimal(value: decimal.Decimal) -> bytes:
    sign, digits, exponent = value.as_tuple()
    if not isinstance(exponent, int):
        raise LocalProtocolError(f"AMQP decimals must be finite, not {value}")
    unscaled = int("".join(map(str, digits)) or "0")
    if sign:
        unscaled = -unscaled
    if exponent >= 0:
        scale, unscaled = 0, unscaled * 10**exponent
    else:
        scale = -exponent
    if scale > 255 or not -0x80000000 <= unscaled <= 0x7FFFFFFF:
        raise LocalProtocolError(f"decimal {value} does not fit AMQP's scale octet + 32 bits")
    return _TAG_DECIMAL.pack(b"D", scale, unscaled)

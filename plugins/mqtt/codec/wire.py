"""MQTT's wire primitives: variable byte integers, length-prefixed strings and binary data.

Readers take a buffer, a position and the end they may not pass (the packet's or the property
block's), and return (value, new position). They raise `LocalProtocolError`s with MQTT 5 reason
codes; the codec's inbound entry points re-raise them as `RemoteProtocolError` (h11's strategy).
"""

from __future__ import annotations

import struct
from typing import Final

from herald.core.codec_kit import LocalProtocolError
from herald.plugins.mqtt.codec.reasons import ReasonCode

MAX_VARINT: Final = 268_435_455  # four 7-bit groups
MAX_STRING: Final = 65_535

U16: Final = struct.Struct(">H")
U32: Final = struct.Struct(">I")
_VARINT_1: Final = tuple(bytes((n,)) for n in range(128))


def malformed(text: str) -> LocalProtocolError:
    return LocalProtocolError(text, ReasonCode.MALFORMED_PACKET)


def protocol_error(text: str) -> LocalProtocolError:
    return LocalProtocolError(text, ReasonCode.PROTOCOL_ERROR)


def read_varint(data: bytes | bytearray, pos: int, end: int) -> tuple[int, int]:
    """A Variable Byte Integer: at most 4 bytes, in the fewest bytes (MQTT-1.5.5-1)."""
    value = 0
    shift = 0
    for i in range(4):
        if pos >= end:
            raise malformed("variable byte integer runs past the end of its packet")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            if byte == 0 and i:
                raise malformed("variable byte integer not in its shortest form")
            return value, pos
        shift += 7
    raise malformed("variable byte integer longer than 4 bytes")


def encode_varint(value: int) -> bytes:
    if value < 128:
        if value < 0:
            raise LocalProtocolError(f"variable byte integer {value} is negative")
        return _VARINT_1[value]
    if value < 16384:
        return bytes((value & 0x7F | 0x80, value >> 7))
    if value > MAX_VARINT:
        raise LocalProtocolError(
            f"variable byte integer {value} exceeds {MAX_VARINT}", ReasonCode.PACKET_TOO_LARGE
        )
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def read_u16(data: bytes | bytearray, pos: int, end: int) -> tuple[int, int]:
    if pos + 2 > end:
        raise malformed("two-byte integer runs past the end of its packet")
    return U16.unpack_from(data, pos)[0], pos + 2


def read_binary(data: bytes | bytearray, pos: int, end: int) -> tuple[bytes, int]:
    """Binary Data: a two-byte length, then that many bytes."""
    if pos + 2 > end:
        raise malformed("binary data length runs past the end of its packet")
    stop = pos + 2 + U16.unpack_from(data, pos)[0]
    if stop > end:
        raise malformed("binary data runs past the end of its packet")
    return bytes(data[pos + 2 : stop]), stop


def read_string(data: bytes | bytearray, pos: int, end: int) -> tuple[str, int]:
    """A UTF-8 Encoded String: well-formed UTF-8 (no surrogates), no U+0000 (MQTT-1.5.4)."""
    start = pos + 2
    if start > end:
        raise malformed("string length runs past the end of its packet")
    stop = start + (data[pos] << 8 | data[pos + 1])
    if stop > end:
        raise malformed("string runs past the end of its packet")
    try:
        text = data[start:stop].decode()
    except UnicodeDecodeError:
        raise malformed("string is not well-formed UTF-8") from None
    if "\x00" in text:
        raise malformed("string contains U+0000")
    return text, stop


def decode_utf8(raw: bytes | bytearray) -> str:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise malformed("string is not well-formed UTF-8") from None
    if "\x00" in text:
        raise malformed("string contains U+0000")
    return text


def encode_string(text: str) -> bytes:
    try:
        raw = text.encode("utf-8")
    except UnicodeEncodeError:
        raise LocalProtocolError(f"{text!r} cannot be UTF-8 encoded (surrogates)") from None
    if len(raw) > MAX_STRING:
        raise LocalProtocolError(f"string of {len(raw)} bytes exceeds {MAX_STRING}")
    if "\x00" in text:
        raise LocalProtocolError(f"{text!r} contains U+0000")
    return U16.pack(len(raw)) + raw


def encode_binary(data: bytes) -> bytes:
    if len(data) > MAX_STRING:
        raise LocalProtocolError(f"binary data of {len(data)} bytes exceeds {MAX_STRING}")
    return U16.pack(len(data)) + bytes(data)

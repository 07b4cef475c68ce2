"""The content header frame: class id, weight, body size, property flags and property list.

A header payload is `class-id short, weight short (always 0), body-size longlong`, then one or
more 16-bit property flags words and the properties whose flag bits are set (spec 4.2.6.1).
Bit 0 of a flags word says another flags word follows; basic defines only 14 properties, all
in the first word, so further words must be empty (a set bit there names a property nobody
defined: SYNTAX_ERROR 502). Bit 1 of the first word is unused and ignored, as RabbitMQ does.

`BasicProperties` and its straight-line codec are generated into methods.py from
tools/amqp_spec.py; this module adds the framing around them.
"""

from __future__ import annotations

import struct

from herald.core.errors import LocalProtocolError
from herald.plugins.amqp.codec.constants import ReplyCode
from herald.plugins.amqp.codec.methods import (
    BasicProperties,
    decode_basic_property_list,
    encode_basic_property_list,
)

__all__ = [
    "EMPTY_PROPERTIES",
    "EMPTY_RAW_PROPERTIES",
    "HEADER_PREFIX",
    "BasicProperties",
    "decode_content_header",
    "decode_properties",
    "encode_content_header",
    "encode_properties",
]

HEADER_PREFIX = struct.Struct(">HHQ")
"""class-id, weight, body-size: the 12 bytes before the property flags."""

EMPTY_PROPERTIES = BasicProperties()
EMPTY_RAW_PROPERTIES = b"\x00\x00"

_FLAGS = struct.Struct(">H")
_CONTINUATION = 0x0001
_KNOWN_FLAGS = 0xFFFC  # bits 15..2; bit 1 is unused


def decode_content_header(buf: bytes | bytearray, off: int, end: int) -> tuple[int, int, int]:
    """Read class-id, weight and body-size from a header payload at `off`.

    The properties start at `off + 12`. A payload too short for them is FRAME_ERROR 501.
    """
    if end - off < HEADER_PREFIX.size + _FLAGS.size:
        raise LocalProtocolError("content header frame too short", ReplyCode.FRAME_ERROR)
    return HEADER_PREFIX.unpack_from(buf, off)


def decode_properties(buf: bytes | bytearray, off: int, end: int) -> BasicProperties:
    """Decode flags word(s) and property list occupying exactly `buf[off:end]`."""
    (flags,) = _FLAGS.unpack_from(buf, off)
    off += 2
    if flags == 0 and off == end:
        return EMPTY_PROPERTIES
    more = flags & _CONTINUATION
    while more:
        (extra,) = _FLAGS.unpack_from(buf, off)
        off += 2
        if extra & ~_CONTINUATION:
            raise LocalProtocolError(
                f"unknown basic properties (flags word 0x{extra:04x})", ReplyCode.SYNTAX_ERROR
            )
        more = extra & _CONTINUATION
    return decode_basic_property_list(flags & _KNOWN_FLAGS, buf, off, end)


def encode_properties(properties: BasicProperties) -> bytes:
    """The flags word and property list for `properties` (the header payload minus 12 bytes)."""
    if properties is EMPTY_PROPERTIES:
        return EMPTY_RAW_PROPERTIES
    return encode_basic_property_list(properties)


def encode_content_header(
    class_id: int, body_size: int, properties: BasicProperties | bytes
) -> bytes:
    """A whole header frame payload. `properties` may be raw bytes kept from a client's header
    (flags word onwards), which are sent unchanged."""
    raw = properties if isinstance(properties, bytes) else encode_properties(properties)
    return HEADER_PREFIX.pack(class_id, 0, body_size) + raw

"""MQTT 5 properties: one frozen `Properties` value with a field per identifier of the spec.

The table `SPECS` is the single source of each property's identifier, wire type, the packets
that may carry it and whether it may repeat. Decoding enforces it as the spec says: an
identifier not valid for the packet type is a Malformed Packet (0x81, MQTT 5.0 section
2.2.2.2, "A Control Packet which contains an Identifier which is not valid for its packet type
... is a Malformed Packet"), a repeated non-repeatable property is a Protocol Error (0x82,
stated per property), and so is an out-of-range value (a boolean byte other than 0/1, a zero
Receive Maximum, Maximum Packet Size or Subscription Identifier). Encoding writes properties
in identifier order, as paho does, so equal values give equal bytes.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Final

import attrs

from herald.core.codec_kit import LocalProtocolError
from herald.plugins.mqtt.codec.reasons import PacketType
from herald.plugins.mqtt.codec.wire import (
    U16,
    U32,
    encode_binary,
    encode_string,
    encode_varint,
    malformed,
    protocol_error,
    read_binary,
    read_string,
    read_varint,
)

WILL: Final = 0
"""The property context of a CONNECT's will properties (packet type 0 is otherwise unused)."""


class PropertyType(enum.Enum):
    BYTE = "Byte"
    BOOL = "Byte (0 or 1)"
    U16 = "Two Byte Integer"
    U32 = "Four Byte Integer"
    VARINT = "Variable Byte Integer"
    BINARY = "Binary Data"
    STRING = "UTF-8 Encoded String"
    PAIR = "UTF-8 String Pair"


@attrs.frozen
class PropertySpec:
    identifier: int
    name: str
    type: PropertyType
    packets: frozenset[int]
    repeatable: bool = False
    minimum: int = 0
    maximum: int | None = None
    """Integer values outside minimum..maximum are a Protocol Error (None: the type's range)."""


_T = PropertyType
_P = PacketType
_PUB = (_P.PUBLISH, WILL)
_CONN = (_P.CONNECT, _P.CONNACK)
_ACKS = (_P.PUBACK, _P.PUBREC, _P.PUBREL, _P.PUBCOMP, _P.SUBACK, _P.UNSUBACK)
_ALL = (*(t for t in _P if t not in (_P.PINGREQ, _P.PINGRESP)), WILL)
_ROWS: Final = (
    (0x01, "payload_format_indicator", _T.BYTE, _PUB),
    (0x02, "message_expiry_interval", _T.U32, _PUB),
    (0x03, "content_type", _T.STRING, _PUB),
    (0x08, "response_topic", _T.STRING, _PUB),
    (0x09, "correlation_data", _T.BINARY, _PUB),
    (0x0B, "subscription_identifiers", _T.VARINT, (_P.PUBLISH, _P.SUBSCRIBE)),
    (0x11, "session_expiry_interval", _T.U32, (*_CONN, _P.DISCONNECT)),
    (0x12, "assigned_client_identifier", _T.STRING, (_P.CONNACK,)),
    (0x13, "server_keep_alive", _T.U16, (_P.CONNACK,)),
    (0x15, "authentication_method", _T.STRING, (*_CONN, _P.AUTH)),
    (0x16, "authentication_data", _T.BINARY, (*_CONN, _P.AUTH)),
    (0x17, "request_problem_information", _T.BOOL, (_P.CONNECT,)),
    (0x18, "will_delay_interval", _T.U32, (WILL,)),
    (0x19, "request_response_information", _T.BOOL, (_P.CONNECT,)),
    (0x1A, "response_information", _T.STRING, (_P.CONNACK,)),
    (0x1C, "server_reference", _T.STRING, (_P.CONNACK, _P.DISCONNECT)),
    (0x1F, "reason_string", _T.STRING, (_P.CONNACK, *_ACKS, _P.DISCONNECT, _P.AUTH)),
    (0x21, "receive_maximum", _T.U16, _CONN),
    (0x22, "topic_alias_maximum", _T.U16, _CONN),
    (0x23, "topic_alias", _T.U16, (_P.PUBLISH,)),
    (0x24, "maximum_qos", _T.BYTE, (_P.CONNACK,)),
    (0x25, "retain_available", _T.BOOL, (_P.CONNACK,)),
    (0x26, "user_properties", _T.PAIR, _ALL),
    (0x27, "maximum_packet_size", _T.U32, _CONN),
    (0x28, "wildcard_subscription_available", _T.BOOL, (_P.CONNACK,)),
    (0x29, "subscription_identifier_available", _T.BOOL, (_P.CONNACK,)),
    (0x2A, "shared_subscription_available", _T.BOOL, (_P.CONNACK,)),
)
_NONZERO: Final = frozenset({"subscription_identifiers", "receive_maximum", "maximum_packet_size"})
_ZERO_OR_ONE: Final = frozenset({"payload_format_indicator", "maximum_qos"})
SPECS: Final = tuple(
    PropertySpec(
        ident,
        name,
        ptype,
        frozenset(packets),
        repeatable=ident in (0x0B, 0x26),
        minimum=1 if name in _NONZERO else 0,
        maximum=1 if name in _ZERO_OR_ONE or ptype is _T.BOOL else None,
    )
    for ident, name, ptype, packets in _ROWS
)
BY_ID: Final = {spec.identifier: spec for spec in SPECS}


if TYPE_CHECKING:  # `tuple` typed for mypy's attrs plugin, which cannot solve tuple's own

    def _ints(values: Iterable[int]) -> tuple[int, ...]: ...

else:
    _ints = tuple  # the builtin: no Python call in __init__


def _pairs(pairs: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    if type(pairs) is tuple and all(type(pair) is tuple for pair in pairs):
        return pairs
    return tuple((key, value) for key, value in pairs)


@attrs.frozen(repr=False, slots=False)
class Properties:
    """Every MQTT 5.0 property; None (or an empty tuple for the repeatable two) means absent.

    `user_properties` keeps wire order and repeats, as the spec requires of a forwarder.
    Not slotted: attrs builds frozen dict classes several times faster than slotted ones, and
    most packets share `NO_PROPERTIES` anyway.
    """

    payload_format_indicator: int | None = None
    message_expiry_interval: int | None = None
    content_type: str | None = None
    response_topic: str | None = None
    correlation_data: bytes | None = None
    subscription_identifiers: tuple[int, ...] = attrs.field(default=(), converter=_ints)
    session_expiry_interval: int | None = None
    assigned_client_identifier: str | None = None
    server_keep_alive: int | None = None
    authentication_method: str | None = None
    authentication_data: bytes | None = None
    request_problem_information: bool | None = None
    will_delay_interval: int | None = None
    request_response_information: bool | None = None
    response_information: str | None = None
    server_reference: str | None = None
    reason_string: str | None = None
    receive_maximum: int | None = None
    topic_alias_maximum: int | None = None
    topic_alias: int | None = None
    maximum_qos: int | None = None
    retain_available: bool | None = None
    user_properties: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_pairs)
    maximum_packet_size: int | None = None
    wildcard_subscription_available: bool | None = None
    subscription_identifier_available: bool | None = None
    shared_subscription_available: bool | None = None

    def present(self) -> dict[str, Any]:
        """The properties that are set, by field name, in identifier order."""
        values = ((spec.name, getattr(self, spec.name)) for spec in SPECS)
        return {name: value for name, value in values if value is not None and value != ()}

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={value!r}" for name, value in self.present().items())
        return f"Properties({fields})"


NO_PROPERTIES: Final = Properties()


def _read_byte(data: bytes | bytearray, pos: int, end: int) -> tuple[int, int]:
    if pos >= end:
        raise malformed("property value runs past the end of its properties")
    return data[pos], pos + 1


def _read_u16(data: bytes | bytearray, pos: int, end: int) -> tuple[int, int]:
    if pos + 2 > end:
        raise malformed("property value runs past the end of its properties")
    return U16.unpack_from(data, pos)[0], pos + 2


def _read_u32(data: bytes | bytearray, pos: int, end: int) -> tuple[int, int]:
    if pos + 4 > end:
        raise malformed("property value runs past the end of its properties")
    return U32.unpack_from(data, pos)[0], pos + 4


def _read_pair(data: bytes | bytearray, pos: int, end: int) -> tuple[tuple[str, str], int]:
    key, pos = read_string(data, pos, end)
    value, pos = read_string(data, pos, end)
    return (key, value), pos


_Reader = Callable[[Any, int, int], tuple[Any, int]]
_READERS: Final[dict[PropertyType, _Reader]] = {
    _T.BYTE: _read_byte,
    _T.BOOL: _read_byte,
    _T.U16: _read_u16,
    _T.U32: _read_u32,
    _T.VARINT: read_varint,
    _T.BINARY: read_binary,
    _T.STRING: read_string,
    _T.PAIR: _read_pair,
}
_INTEGERS: Final = frozenset({_T.BYTE, _T.BOOL, _T.U16, _T.U32, _T.VARINT})
_DECODING: Final = {
    spec.identifier: (
        spec,
        _READERS[spec.type],
        spec.type in _INTEGERS and (spec.minimum > 0 or spec.maximum is not None),
    )
    for spec in SPECS
}
_DEFAULTS: Final = {field.name: field.default for field in attrs.fields(Properties)}


def decode_properties(
    data: bytes | bytearray, pos: int, end: int, packet: int
) -> tuple[Properties, int]:
    """Read a property block (length, then properties) for `packet` (a PacketType or WILL)."""
    length, pos = read_varint(data, pos, end)
    if not length:
        return NO_PROPERTIES, pos
    stop = pos + length
    if stop > end:
        raise malformed("property length runs past the end of its packet")
    values: dict[str, Any] = {}
    while pos < stop:
        entry = _DECODING.get(data[pos])
        if entry is None:
            raise malformed(f"unknown property identifier 0x{data[pos]:02X}")
        spec, read, bounded = entry
        if packet not in spec.packets:
            raise malformed(f"property {spec.name} is not allowed in {_context_name(packet)}")
        value, pos = read(data, pos + 1, stop)
        if bounded and not spec.minimum <= value <= (spec.maximum or value):
            raise protocol_error(f"property {spec.name} may not be {value}")
        name = spec.name
        if spec.repeatable:
            values[name] = (*values.get(name, ()), value)
        elif name in values:
            raise protocol_error(f"property {name} appears more than once")
        else:
            values[name] = value == 1 if spec.type is _T.BOOL else value
    return _from_wire(values), pos


def _from_wire(values: dict[str, Any]) -> Properties:
    """A Properties from decoded, already valid values, without running __init__: attrs stores
    a frozen dict class's fields in __dict__, and one merge is far cheaper than 27 stores."""
    props = object.__new__(Properties)
    object.__setattr__(props, "__dict__", {**_DEFAULTS, **values})
    return props


def _context_name(packet: int) -> str:
    return "will properties" if packet == WILL else PacketType(packet).name


def _write(out: bytearray, spec: PropertySpec, value: Any) -> None:
    out.append(spec.identifier)
    kind = spec.type
    if kind is _T.BYTE or kind is _T.BOOL:
        out.append(int(value))
    elif kind is _T.U16:
        out += U16.pack(value)
    elif kind is _T.U32:
        out += U32.pack(value)
    elif kind is _T.VARINT:
        out += encode_varint(value)
    elif kind is _T.BINARY:
        out += encode_binary(value)
    elif kind is _T.STRING:
        out += encode_string(value)
    else:
        out += encode_string(value[0])
        out += encode_string(value[1])


def encode_properties(props: Properties, packet: int) -> bytes:
    """The property block (length included) of `props` in `packet`; raises LocalProtocolError
    for a property the packet may not carry or a value its wire type cannot hold."""
    if props is NO_PROPERTIES:
        return b"\x00"
    out = bytearray()
    for spec in SPECS:
        value = getattr(props, spec.name)
        if value is None or value == ():
            continue
        if packet not in spec.packets:
            raise LocalProtocolError(
                f"property {spec.name} is not allowed in {_context_name(packet)}"
            )
        try:
            for item in value if spec.repeatable else (value,):
                _write(out, spec, item)
        except (struct.error, ValueError, TypeError, IndexError) as exc:
            raise LocalProtocolError(f"property {spec.name}={value!r}: {exc}") from None
    return encode_varint(len(out)) + out

"""Packets to bytes for a protocol level: `encode_packet(packet, version)`.

Pure and role-neutral (it writes CONNECT as readily as CONNACK, for tests and a future client);
`MQTTConnection.send` decides what the server may send when. Anything the wire cannot say is a
`LocalProtocolError`: a QoS outside 0-2, a missing packet identifier, a reason code the packet
type does not allow, a property the packet may not carry. For 3.1/3.1.1 the MQTT 5-only parts
(properties, most reason codes) are dropped, as the `packets` docstring explains.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, Final

from herald.core.codec_kit import LocalProtocolError
from herald.plugins.mqtt.codec.packets import (
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    Packet,
    PingReq,
    PingResp,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    UnsubAck,
    Unsubscribe,
)
from herald.plugins.mqtt.codec.properties import NO_PROPERTIES, WILL, Properties, encode_properties
from herald.plugins.mqtt.codec.reasons import (
    CONNACK_V3_RETURN_CODE,
    SUBACK_V3_FAILURE,
    VALID_REASON_CODES,
    PacketType,
)
from herald.plugins.mqtt.codec.wire import U16, encode_binary, encode_string, encode_varint

_Encoder = Callable[[Any, int], bytes]
_PINGREQ: Final = b"\xc0\x00"
_PINGRESP: Final = b"\xd0\x00"
_FIRST_BYTES: Final = tuple(bytes((n,)) for n in range(256))
_VARINT_1: Final = _FIRST_BYTES[:128]
"""Remaining lengths below 128 as their one-byte varint (no call on the delivery path)."""
_pack_u16 = U16.pack


def encode_packet(packet: Packet, version: int) -> bytes:
    """The wire bytes of `packet` at protocol level `version` (3, 4 or 5)."""
    try:
        encoder = _ENCODERS[type(packet)]
    except KeyError:
        raise LocalProtocolError(f"{packet!r} is not an MQTT packet") from None
    try:
        return encoder(packet, version)
    except (struct.error, ValueError, TypeError) as exc:  # a field out of its wire range
        raise LocalProtocolError(f"cannot encode {packet!r}: {exc}") from None


def _no_properties(props: Properties) -> bool:
    return props is NO_PROPERTIES or props == NO_PROPERTIES


def _frame(first_byte: int, body: bytes | bytearray) -> bytes:
    return bytes((first_byte,)) + encode_varint(len(body)) + body


def _packet_id(packet_id: int | None, what: str) -> bytes:
    if packet_id is None or not 0 < packet_id < 0x10000:
        raise LocalProtocolError(f"{what} needs a packet identifier in 1..65535, not {packet_id}")
    return U16.pack(packet_id)


def _reason(code: int, ptype: PacketType) -> int:
    if code not in VALID_REASON_CODES[ptype]:
        raise LocalProtocolError(f"reason code 0x{code:02X} is not valid in {ptype.name}")
    return code


_TOPIC_FIELDS: dict[str, bytes] = {}
_TOPIC_FIELDS_MAX: Final = 4096


def _topic_field(topic: str) -> bytes:
    """A topic name as a length-prefixed string, checked and encoded once per topic: the
    deliveries of one topic repeat it (bounded: the cache starts over when full)."""
    field = _TOPIC_FIELDS.get(topic)
    if field is None:
        if "+" in topic or "#" in topic:
            raise LocalProtocolError(f"PUBLISH topic name {topic!r} contains a wildcard")
        field = encode_string(topic)
        if len(_TOPIC_FIELDS) >= _TOPIC_FIELDS_MAX:
            _TOPIC_FIELDS.clear()
        _TOPIC_FIELDS[topic] = field
    return field


_last_plain: list[Any] = [None, 0, b""]
"""The last QoS 0 PUBLISH encoded, its protocol level and its bytes: a fan-out sends one
packet object to several connections in a row (outbound.py), encoded once."""


def _publish(p: Publish, version: int) -> bytes:
    """The hot path of deliveries: one join of header, topic, packet id and payload."""
    last = _last_plain
    if p is last[0] and version == last[1]:
        return last[2]
    qos = p.qos
    if qos not in (0, 1, 2):
        raise LocalProtocolError(f"PUBLISH QoS {qos}")
    topic = p.topic
    head = _topic_field(topic)
    first = 0x30 | qos << 1 | p.retain
    if qos:
        if p.dup:
            first |= 0x08
        packet_id = p.packet_id
        if packet_id is None or not 0 < packet_id < 0x10000:
            _packet_id(packet_id, "PUBLISH with QoS > 0")  # raises
        head += _pack_u16(packet_id)
    elif p.dup or p.packet_id is not None:
        raise LocalProtocolError("PUBLISH with QoS 0 has no DUP flag and no packet identifier")
    if version == 5:
        if not topic and p.properties.topic_alias is None:
            raise LocalProtocolError("PUBLISH with an empty topic name needs a topic alias")
        head += encode_properties(p.properties, PacketType.PUBLISH)
    elif not topic:
        raise LocalProtocolError("PUBLISH with an empty topic name")
    payload = p.payload
    length = len(head) + len(payload)
    size = _VARINT_1[length] if length < 128 else encode_varint(length)
    data = b"".join((_FIRST_BYTES[first], size, head, payload))
    if not qos:
        last[0], last[1], last[2] = p, version, data
    return data


def _connack(p: ConnAck, version: int) -> bytes:
    if p.session_present and p.reason_code:
        raise LocalProtocolError("a refusing CONNACK must not set session present")
    flags = 1 if p.session_present and version != 3 else 0
    if version == 5:
        code = _reason(p.reason_code, PacketType.CONNACK)
        props = encode_properties(p.properties, PacketType.CONNACK)
        return _frame(0x20, bytes((flags, code)) + props)
    if p.reason_code not in CONNACK_V3_RETURN_CODE:
        raise LocalProtocolError(f"reason code 0x{p.reason_code:02X} has no MQTT 3 CONNACK code")
    return bytes((0x20, 2, flags, CONNACK_V3_RETURN_CODE[p.reason_code]))


def _make_ack_encoder(ptype: PacketType) -> _Encoder:
    first = ptype << 4 | (0x02 if ptype == PacketType.PUBREL else 0)
    prefix = bytes((first, 2))

    def encode(p: PubAck | PubRec | PubRel | PubComp, version: int) -> bytes:
        value = p.packet_id
        if value is None or not 0 < value < 0x10000:
            _packet_id(value, ptype.name)  # raises
        packet_id = _pack_u16(value)
        if version < 5 or (not p.reason_code and _no_properties(p.properties)):
            return prefix + packet_id
        code = bytes((_reason(p.reason_code, ptype),))
        if _no_properties(p.properties):
            return _frame(first, packet_id + code)
        return _frame(first, packet_id + code + encode_properties(p.properties, ptype))

    return encode


def _properties(props: Properties, ptype: int, version: int) -> bytes:
    return encode_properties(props, ptype) if version == 5 else b""


def _subscribe(p: Subscribe, version: int) -> bytes:
    if not p.subscriptions:
        raise LocalProtocolError("SUBSCRIBE needs at least one topic filter")
    body = bytearray(_packet_id(p.packet_id, "SUBSCRIBE"))
    body += _properties(p.properties, PacketType.SUBSCRIBE, version)
    for sub in p.subscriptions:
        o = sub.options
        if o.qos not in (0, 1, 2) or o.retain_handling not in (0, 1, 2):
            raise LocalProtocolError(f"subscription options {o!r}")
        body += encode_string(sub.topic_filter)
        if version == 5:
            rap = o.retain_as_published
            body.append(o.qos | o.no_local << 2 | rap << 3 | o.retain_handling << 4)
        else:
            body.append(o.qos)
    return _frame(0x82, body)


def _suback(p: SubAck, version: int) -> bytes:
    if not p.reason_codes:
        raise LocalProtocolError("SUBACK needs one reason code per subscription")
    body = _packet_id(p.packet_id, "SUBACK")
    if version == 5:
        codes = bytes(_reason(code, PacketType.SUBACK) for code in p.reason_codes)
        return _frame(0x90, body + encode_properties(p.properties, PacketType.SUBACK) + codes)
    for code in p.reason_codes:
        _reason(code, PacketType.SUBACK)
    return _frame(0x90, body + bytes(c if c < 3 else SUBACK_V3_FAILURE for c in p.reason_codes))


def _unsubscribe(p: Unsubscribe, version: int) -> bytes:
    if not p.topic_filters:
        raise LocalProtocolError("UNSUBSCRIBE needs at least one topic filter")
    body = bytearray(_packet_id(p.packet_id, "UNSUBSCRIBE"))
    body += _properties(p.properties, PacketType.UNSUBSCRIBE, version)
    for topic_filter in p.topic_filters:
        body += encode_string(topic_filter)
    return _frame(0xA2, body)


def _unsuback(p: UnsubAck, version: int) -> bytes:
    body = _packet_id(p.packet_id, "UNSUBACK")
    if version < 5:
        return _frame(0xB0, body)
    if not p.reason_codes:
        raise LocalProtocolError("MQTT 5 UNSUBACK needs one reason code per topic filter")
    codes = bytes(_reason(code, PacketType.UNSUBACK) for code in p.reason_codes)
    return _frame(0xB0, body + encode_properties(p.properties, PacketType.UNSUBACK) + codes)


def _make_reason_encoder(ptype: PacketType) -> _Encoder:
    first = ptype << 4

    def encode(p: Disconnect | Auth, version: int) -> bytes:
        if version < 5:
            if ptype == PacketType.AUTH:
                raise LocalProtocolError("AUTH exists in MQTT 5 only")
            return bytes((first, 0))
        code = _reason(p.reason_code, ptype)
        if _no_properties(p.properties):
            return bytes((first, 1, code)) if code else bytes((first, 0))
        return _frame(first, bytes((code,)) + encode_properties(p.properties, ptype))

    return encode


def _connect(p: Connect, version: int) -> bytes:
    """CONNECT, in the format of its own protocol level (the codec learns the level from it)."""
    level = p.protocol_level
    will = p.will
    flags = p.clean_start << 1
    if will is not None:
        if will.qos not in (0, 1, 2):
            raise LocalProtocolError(f"will QoS {will.qos}")
        flags |= 0x04 | will.qos << 3 | will.retain << 5
    if p.username is not None:
        flags |= 0x80
    if p.password is not None:
        flags |= 0x40
    body = bytearray(encode_string(p.protocol_name))
    body += bytes((level, flags)) + U16.pack(p.keepalive)
    body += _properties(p.properties, PacketType.CONNECT, level)
    body += encode_string(p.client_id)
    if will is not None:
        body += _properties(will.properties, WILL, level)
        body += encode_string(will.topic) + encode_binary(will.payload)
    if p.username is not None:
        body += encode_string(p.username)
    if p.password is not None:
        body += encode_binary(p.password)
    return _frame(0x10, body)


_ENCODERS: Final[dict[type[Packet], _Encoder]] = {
    Connect: _connect,
    ConnAck: _connack,
    Publish: _publish,
    PubAck: _make_ack_encoder(PacketType.PUBACK),
    PubRec: _make_ack_encoder(PacketType.PUBREC),
    PubRel: _make_ack_encoder(PacketType.PUBREL),
    PubComp: _make_ack_encoder(PacketType.PUBCOMP),
    Subscribe: _subscribe,
    SubAck: _suback,
    Unsubscribe: _unsubscribe,
    UnsubAck: _unsuback,
    PingReq: lambda p, version: _PINGREQ,
    PingResp: lambda p, version: _PINGRESP,
    Disconnect: _make_reason_encoder(PacketType.DISCONNECT),
    Auth: _make_reason_encoder(PacketType.AUTH),
}

"""Packet bodies to packets: one pure function per packet type, for every protocol level.

`decode_body(first_byte, data, start, end, version)` is the entry point; `data[start:end]` is
the packet's variable header and payload, read in place from the receive buffer (bytearray
slices of short fields are faster than memoryviews, and nothing pins the buffer). Every
rule a decoder can check without connection state is checked here: reserved flag bits, QoS 3,
zero packet identifiers, UTF-8 strings, wildcards in topic names, topic filters (MQTT 4.7.1,
4.7.3 and 4.8.2: a filter breaking them is Malformed, as in Mosquitto; SUBACK 0x8F is for a
well-formed filter the server refuses), empty SUBSCRIBE/UNSUBSCRIBE, property placement,
reason codes. Failures are `LocalProtocolError`s with an MQTT 5 reason code;
the reader re-raises them as `RemoteProtocolError`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Final

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
    Subscription,
    SubscriptionOptions,
    UnsubAck,
    Unsubscribe,
    Will,
)
from herald.plugins.mqtt.codec.properties import NO_PROPERTIES, WILL, Properties, decode_properties
from herald.plugins.mqtt.codec.reasons import (
    CONNACK_V3_REASON,
    FIXED_FLAGS,
    SUBACK_V3_FAILURE,
    VALID_REASON_CODES,
    PacketType,
    ReasonCode,
    RetainHandling,
)
from herald.plugins.mqtt.codec.topics import TopicError, parse_topic_filter
from herald.plugins.mqtt.codec.wire import (
    U16,
    malformed,
    protocol_error,
    read_binary,
    read_string,
    read_u16,
)

SUPPORTED_PROTOCOLS: Final = frozenset({("MQIsdp", 3), ("MQTT", 4), ("MQTT", 5)})
SHARE_PREFIX: Final = "$share/"
_unpack_u16 = U16.unpack_from
_DUP_FLAG_V31: Final = frozenset({PacketType.PUBREL, PacketType.SUBSCRIBE, PacketType.UNSUBSCRIBE})

_PUBLISH_TYPE: Final = int(PacketType.PUBLISH)  # plain ints and a module global: an Enum
_AUTH_TYPE: Final = int(PacketType.AUTH)  # class attribute costs 10x more, per packet
_SUCCESS: Final = ReasonCode.SUCCESS

_COPY_VIA_VIEW: Final = 4096
"""Payloads this large are copied once through a memoryview rather than sliced twice."""

Buffer = bytes | bytearray
_Decoder = Callable[[int, Buffer, int, int, int], Packet]


def decode_body(first_byte: int, data: Buffer, start: int, end: int, version: int | None) -> Packet:
    """The packet whose fixed header starts with `first_byte` and whose rest is data[start:end].

    `version` is the protocol level CONNECT chose; it may be None only for a CONNECT.
    """
    ptype = first_byte >> 4
    flags = first_byte & 0x0F
    try:
        if ptype == _PUBLISH_TYPE:
            return _publish(flags, data, start, end, version or 4)
        if not ptype or (ptype == _AUTH_TYPE and version != 5):
            raise malformed(f"reserved packet type {ptype}")
        if flags != FIXED_FLAGS[ptype] and not (
            version == 3 and ptype in _DUP_FLAG_V31 and flags == 0b1010  # 3.1 allowed DUP here
        ):
            raise malformed(f"reserved flags 0b{flags:04b} on {PacketType(ptype).name}")
        return _DECODERS[ptype](flags, data, start, end, version or 4)
    except (struct.error, IndexError):  # a safety net: every read checks `end` itself
        raise malformed(f"{PacketType(ptype).name} is truncated") from None


def _publish(flags: int, data: Buffer, pos: int, end: int, version: int) -> Publish:
    """The hot path: one pass, fixed fields by struct, the topic decoded straight from the
    buffer (bytearray slices beat memoryviews for short fields)."""
    qos = (flags >> 1) & 3
    if qos == 3:
        raise malformed("PUBLISH with QoS 3")
    if flags & 8 and not qos:
        raise malformed("PUBLISH with QoS 0 has the DUP flag set")
    start = pos + 2
    if start > end:
        raise malformed("PUBLISH is truncated")
    pos = start + _unpack_u16(data, start - 2)[0]
    if pos > end:
        raise malformed("PUBLISH topic runs past the end of the packet")
    try:
        topic = data[start:pos].decode()
    except UnicodeDecodeError:
        raise malformed("PUBLISH topic name is not well-formed UTF-8") from None
    packet_id = None
    if qos:
        if pos + 2 > end:
            raise malformed("PUBLISH packet identifier is missing")
        packet_id = _unpack_u16(data, pos)[0]
        pos += 2
        if not packet_id:
            raise protocol_error("PUBLISH with QoS > 0 has packet identifier 0")
    props = NO_PROPERTIES
    if version == 5:
        if pos < end and not data[pos]:
            pos += 1
        else:
            props, pos = decode_properties(data, pos, end, PacketType.PUBLISH)
            if props.topic_alias == 0:
                raise LocalProtocolError("topic alias 0", ReasonCode.TOPIC_ALIAS_INVALID)
    if not topic:
        if props.topic_alias is None:
            raise protocol_error("PUBLISH with an empty topic name and no topic alias")
    elif "+" in topic or "#" in topic or "\x00" in topic:
        if "\x00" in topic:
            raise malformed("PUBLISH topic name contains U+0000")
        # Not 0x90, which the spec keeps for a *correctly formed* name the receiver refuses.
        raise protocol_error(f"PUBLISH topic name {topic!r} contains a wildcard")
    if end - pos < _COPY_VIA_VIEW:
        payload = bytes(data[pos:end])  # two small copies beat one through a memoryview
    else:
        with memoryview(data) as view:
            payload = bytes(view[pos:end])
    return Publish(topic, payload, qos, flags & 1 == 1, flags & 8 == 8, packet_id, props)


def _connect(flags: int, data: Buffer, pos: int, end: int, version: int) -> Connect:
    name, pos = read_string(data, pos, end)
    if pos + 2 > end:
        raise malformed("CONNECT is truncated")
    level = data[pos]
    if (name, level) not in SUPPORTED_PROTOCOLS:
        raise LocalProtocolError(
            f"unsupported protocol {name!r} level {level}",
            ReasonCode.UNSUPPORTED_PROTOCOL_VERSION,
        )
    cflags = data[pos + 1]
    if cflags & 0x01:
        raise malformed("CONNECT reserved flag is set")
    keepalive, pos = read_u16(data, pos + 2, end)
    props = NO_PROPERTIES
    if level == 5:
        props, pos = decode_properties(data, pos, end, PacketType.CONNECT)
        if props.authentication_data is not None and props.authentication_method is None:
            raise protocol_error("authentication data without an authentication method")
    client_id, pos = read_string(data, pos, end)
    will = None
    if cflags & 0x04:
        will_props = NO_PROPERTIES
        if level == 5:
            will_props, pos = decode_properties(data, pos, end, WILL)
        will_topic, pos = read_string(data, pos, end)
        will_payload, pos = read_binary(data, pos, end)
        will_qos = (cflags >> 3) & 3
        if will_qos == 3:
            raise malformed("will QoS 3")
        if not will_topic or "+" in will_topic or "#" in will_topic:
            raise protocol_error(f"will topic {will_topic!r} is not a valid topic name")
        will = Will(will_topic, will_payload, will_qos, cflags & 0x20 != 0, will_props)
    elif cflags & 0x38:
        raise malformed("will QoS or will retain set without the will flag")
    username = password = None
    if cflags & 0x80:
        username, pos = read_string(data, pos, end)
    if cflags & 0x40:
        if level < 5 and username is None:
            raise malformed("password flag set without the user name flag")
        password, pos = read_binary(data, pos, end)
    if pos != end:
        raise malformed("bytes after the end of CONNECT")
    clean = cflags & 0x02 != 0
    if not client_id and (level == 3 or (level == 4 and not clean)):
        raise LocalProtocolError(
            "empty client identifier needs MQTT 3.1.1 with clean session, or MQTT 5",
            ReasonCode.CLIENT_IDENTIFIER_NOT_VALID,
        )
    return Connect(client_id, level, name, clean, keepalive, will, username, password, props)


def connect_level(data: Buffer, start: int, end: int) -> int | None:
    """The protocol level byte of a CONNECT body, if it gets that far; used to answer a CONNECT
    that failed to decode in the format its client reads."""
    if end - start < 2:
        return None
    at = start + 2 + U16.unpack_from(data, start)[0]
    return data[at] if at < end else None


def _properties(
    data: Buffer, pos: int, end: int, ptype: int, version: int
) -> tuple[Properties, int]:
    if version < 5:
        return NO_PROPERTIES, pos
    return decode_properties(data, pos, end, ptype)


def _reason(code: int, ptype: PacketType) -> int:
    if code not in VALID_REASON_CODES[ptype]:
        raise protocol_error(f"reason code 0x{code:02X} is not valid in {ptype.name}")
    return ReasonCode(code)


def _packet_id(data: Buffer, pos: int, end: int, ptype: PacketType) -> tuple[int, int]:
    packet_id, pos = read_u16(data, pos, end)
    if not packet_id:
        raise protocol_error(f"{ptype.name} has packet identifier 0")
    return packet_id, pos


def _connack(flags: int, data: Buffer, pos: int, end: int, version: int) -> ConnAck:
    if end - pos < 2:
        raise malformed("CONNACK is truncated")
    ack_flags, code = data[pos], data[pos + 1]
    if ack_flags & 0xFE:
        raise malformed("CONNACK reserved flags are set")
    if version == 5:
        reason = _reason(code, PacketType.CONNACK)
    elif code in CONNACK_V3_REASON:
        reason = CONNACK_V3_REASON[code]
    else:
        raise protocol_error(f"CONNACK return code {code} is reserved")
    props, pos = _properties(data, pos + 2, end, PacketType.CONNACK, version)
    if pos != end:
        raise malformed("bytes after the end of CONNACK")
    return ConnAck(reason, ack_flags == 1, props)


def _make_ack_decoder(cls: type[PubAck | PubRec | PubRel | PubComp]) -> _Decoder:
    ptype = cls.TYPE

    def decode(flags: int, data: Buffer, pos: int, end: int, version: int) -> Packet:
        if end - pos == 2:  # the usual ack: a packet id alone (reason code 0 left out in 5.0)
            packet_id = data[pos] << 8 | data[pos + 1]
            if not packet_id:
                raise protocol_error(f"{ptype.name} has packet identifier 0")
            return cls(packet_id, _SUCCESS, NO_PROPERTIES)
        packet_id, pos = _packet_id(data, pos, end, ptype)
        reason: int = ReasonCode.SUCCESS
        props = NO_PROPERTIES
        if version == 5 and pos < end:
            reason = _reason(data[pos], ptype)
            if pos + 1 < end:
                props, pos = decode_properties(data, pos + 1, end, ptype)
            else:
                pos += 1
        if pos != end:
            raise malformed(f"bytes after the end of {ptype.name}")
        return cls(packet_id, reason, props)

    return decode


def _subscribe(flags: int, data: Buffer, pos: int, end: int, version: int) -> Subscribe:
    packet_id, pos = _packet_id(data, pos, end, PacketType.SUBSCRIBE)
    props, pos = _properties(data, pos, end, PacketType.SUBSCRIBE, version)
    if len(props.subscription_identifiers) > 1:
        raise protocol_error("SUBSCRIBE carries more than one subscription identifier")
    subscriptions = []
    while pos < end:
        topic_filter, pos = _read_filter(data, pos, end)
        if pos >= end:
            raise malformed("SUBSCRIBE options byte is missing")
        options = data[pos]
        pos += 1
        if options & (0xC0 if version == 5 else 0xFC):
            raise malformed(f"SUBSCRIBE options 0b{options:08b} set reserved bits")
        if options & 3 == 3:
            raise malformed("SUBSCRIBE requests QoS 3")
        if options >> 4 == 3:
            raise protocol_error("SUBSCRIBE retain handling 3")
        no_local = options & 0x04 != 0
        if no_local and topic_filter.startswith(SHARE_PREFIX):
            raise protocol_error(f"no local on the shared subscription {topic_filter!r}")
        handling = RetainHandling(options >> 4)
        opts = SubscriptionOptions(options & 3, no_local, options & 0x08 != 0, handling)
        subscriptions.append(Subscription(topic_filter, opts))
    if not subscriptions:
        raise protocol_error("SUBSCRIBE without any topic filter")
    return Subscribe(packet_id, subscriptions, props)


def _unsubscribe(flags: int, data: Buffer, pos: int, end: int, version: int) -> Unsubscribe:
    packet_id, pos = _packet_id(data, pos, end, PacketType.UNSUBSCRIBE)
    props, pos = _properties(data, pos, end, PacketType.UNSUBSCRIBE, version)
    topic_filters = []
    while pos < end:
        topic_filter, pos = _read_filter(data, pos, end)
        topic_filters.append(topic_filter)
    if not topic_filters:
        raise protocol_error("UNSUBSCRIBE without any topic filter")
    return Unsubscribe(packet_id, topic_filters, props)


def _read_filter(data: Buffer, pos: int, end: int) -> tuple[str, int]:
    """A SUBSCRIBE / UNSUBSCRIBE topic filter, valid (shared ones included) or Malformed."""
    topic_filter, pos = read_string(data, pos, end)
    try:
        parse_topic_filter(topic_filter)
    except TopicError as exc:
        raise malformed(str(exc)) from None
    return topic_filter, pos


def _suback(flags: int, data: Buffer, pos: int, end: int, version: int) -> SubAck:
    packet_id, pos = _packet_id(data, pos, end, PacketType.SUBACK)
    props, pos = _properties(data, pos, end, PacketType.SUBACK, version)
    if pos == end:
        raise protocol_error("SUBACK without any reason code")
    if version == 5:
        codes = [_reason(code, PacketType.SUBACK) for code in data[pos:end]]
    else:
        codes = list(data[pos:end])
        if any(code not in (0, 1, 2, SUBACK_V3_FAILURE) for code in codes):
            raise protocol_error(f"SUBACK return codes {codes} include a reserved value")
    return SubAck(packet_id, codes, props)


def _unsuback(flags: int, data: Buffer, pos: int, end: int, version: int) -> UnsubAck:
    packet_id, pos = _packet_id(data, pos, end, PacketType.UNSUBACK)
    if version < 5:
        if pos != end:
            raise malformed("bytes after the end of UNSUBACK")
        return UnsubAck(packet_id)
    props, pos = decode_properties(data, pos, end, PacketType.UNSUBACK)
    if pos == end:
        raise protocol_error("UNSUBACK without any reason code")
    codes = [_reason(code, PacketType.UNSUBACK) for code in data[pos:end]]
    return UnsubAck(packet_id, codes, props)


def _make_empty_decoder(cls: type[PingReq | PingResp]) -> _Decoder:
    instance = cls()

    def decode(flags: int, data: Buffer, pos: int, end: int, version: int) -> Packet:
        if end != pos:
            raise malformed(f"{cls.TYPE.name} has a remaining length of {end - pos}, not 0")
        return instance

    return decode


def _make_reason_decoder(cls: type[Disconnect | Auth]) -> _Decoder:
    """DISCONNECT and AUTH: optional reason code, then optional properties (MQTT 5 only)."""
    ptype = cls.TYPE

    def decode(flags: int, data: Buffer, pos: int, end: int, version: int) -> Packet:
        if version < 5 or pos == end:
            if pos != end:
                raise malformed(f"{ptype.name} has a remaining length of {end - pos}, not 0")
            return cls()
        reason = _reason(data[pos], ptype)
        pos += 1
        props = NO_PROPERTIES
        if pos < end:
            props, pos = decode_properties(data, pos, end, ptype)
        if pos != end:
            raise malformed(f"bytes after the end of {ptype.name}")
        return cls(reason, props)

    return decode


_DECODERS: Final[dict[int, _Decoder]] = {
    PacketType.CONNECT: _connect,
    PacketType.CONNACK: _connack,
    PacketType.PUBACK: _make_ack_decoder(PubAck),
    PacketType.PUBREC: _make_ack_decoder(PubRec),
    PacketType.PUBREL: _make_ack_decoder(PubRel),
    PacketType.PUBCOMP: _make_ack_decoder(PubComp),
    PacketType.SUBSCRIBE: _subscribe,
    PacketType.SUBACK: _suback,
    PacketType.UNSUBSCRIBE: _unsubscribe,
    PacketType.UNSUBACK: _unsuback,
    PacketType.PINGREQ: _make_empty_decoder(PingReq),
    PacketType.PINGRESP: _make_empty_decoder(PingResp),
    PacketType.DISCONNECT: _make_reason_decoder(Disconnect),
    PacketType.AUTH: _make_reason_decoder(Auth),
}

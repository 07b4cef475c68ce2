"""What the MQTT codec reads and writes: one frozen class per control packet.

Packets are version-neutral: the connection encodes them for the protocol level CONNECT chose.
Outcomes are always MQTT 5 reason codes (`ReasonCode`); for 3.1/3.1.1 the encoder maps a
CONNACK's code to its return code and a SUBACK's error codes to 0x80, and drops what that wire
cannot carry (properties, reason codes of PUBACK & co., UNSUBACK's codes, DISCONNECT's code).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar, Final

import attrs

from herald.core.codec_kit import Event
from herald.plugins.mqtt.codec.properties import NO_PROPERTIES, Properties
from herald.plugins.mqtt.codec.reasons import (
    PROTOCOL_NAMES,
    PacketType,
    ProtocolVersion,
    RetainHandling,
)


@attrs.frozen
class Packet(Event):
    """Base of every MQTT control packet: the codec kit's `Event`, under MQTT's name."""

    TYPE: ClassVar[PacketType]  # set by each packet class


@attrs.frozen
class Will:
    """A CONNECT's will message; `properties` are the will properties (MQTT 5)."""

    topic: str
    payload: bytes = b""
    qos: int = 0
    retain: bool = False
    properties: Properties = NO_PROPERTIES


def _default_protocol_name(self: Connect) -> str:
    return PROTOCOL_NAMES.get(self.protocol_level, "MQTT")


@attrs.frozen
class Connect(Packet):
    """CONNECT. `clean_start` is 3.1.1's Clean Session flag under its MQTT 5 name."""

    TYPE: ClassVar[PacketType] = PacketType.CONNECT
    client_id: str = ""
    protocol_level: int = ProtocolVersion.MQTT_3_1_1
    protocol_name: str = attrs.field(default=attrs.Factory(_default_protocol_name, takes_self=True))
    clean_start: bool = True
    keepalive: int = 0
    will: Will | None = None
    username: str | None = None
    password: bytes | None = None
    properties: Properties = NO_PROPERTIES


@attrs.frozen
class ConnAck(Packet):
    """CONNACK; `reason_code` is an MQTT 5 code whatever the version (see module docstring)."""

    TYPE: ClassVar[PacketType] = PacketType.CONNACK
    reason_code: int = 0
    session_present: bool = False
    properties: Properties = NO_PROPERTIES


@attrs.frozen(slots=False)
class Publish(Packet):
    """PUBLISH; `packet_id` is None exactly when `qos` is 0.

    Inbound, the connection resolves MQTT 5 topic aliases: `topic` is always the full topic
    name and `properties.topic_alias` still shows the alias the client used.

    Not slotted, like the acks below: attrs builds frozen dict classes faster (one per message).
    """

    TYPE: ClassVar[PacketType] = PacketType.PUBLISH
    topic: str
    payload: bytes = b""
    qos: int = 0
    retain: bool = False
    dup: bool = False
    packet_id: int | None = None
    properties: Properties = NO_PROPERTIES


@attrs.frozen(slots=False)
class _PublishResponse(Packet):
    packet_id: int
    reason_code: int = 0
    properties: Properties = NO_PROPERTIES


@attrs.frozen(slots=False)
class PubAck(_PublishResponse):
    TYPE: ClassVar[PacketType] = PacketType.PUBACK


@attrs.frozen(slots=False)
class PubRec(_PublishResponse):
    TYPE: ClassVar[PacketType] = PacketType.PUBREC


@attrs.frozen(slots=False)
class PubRel(_PublishResponse):
    TYPE: ClassVar[PacketType] = PacketType.PUBREL


@attrs.frozen(slots=False)
class PubComp(_PublishResponse):
    TYPE: ClassVar[PacketType] = PacketType.PUBCOMP


@attrs.frozen
class SubscriptionOptions:
    """A SUBSCRIBE entry's options byte; 3.1/3.1.1 carry only `qos`."""

    qos: int = 0
    no_local: bool = False
    retain_as_published: bool = False
    retain_handling: int = RetainHandling.SEND_ON_SUBSCRIBE


def _codes(codes: Iterable[int]) -> tuple[int, ...]:
    """`tuple`, typed for the attrs converters of the packets with a list in them."""
    return tuple(codes)


def _filters(topic_filters: Iterable[str]) -> tuple[str, ...]:
    return tuple(topic_filters)


@attrs.frozen
class Subscription:
    topic_filter: str
    options: SubscriptionOptions = SubscriptionOptions()


def _subscriptions(subscriptions: Iterable[Subscription]) -> tuple[Subscription, ...]:
    return tuple(subscriptions)


@attrs.frozen
class Subscribe(Packet):
    TYPE: ClassVar[PacketType] = PacketType.SUBSCRIBE
    packet_id: int
    subscriptions: tuple[Subscription, ...] = attrs.field(converter=_subscriptions)
    properties: Properties = NO_PROPERTIES


@attrs.frozen
class SubAck(Packet):
    """SUBACK; one reason code per subscription (granted QoS 0-2 or an error >= 0x80)."""

    TYPE: ClassVar[PacketType] = PacketType.SUBACK
    packet_id: int
    reason_codes: tuple[int, ...] = attrs.field(converter=_codes)
    properties: Properties = NO_PROPERTIES


@attrs.frozen
class Unsubscribe(Packet):
    TYPE: ClassVar[PacketType] = PacketType.UNSUBSCRIBE
    packet_id: int
    topic_filters: tuple[str, ...] = attrs.field(converter=_filters)
    properties: Properties = NO_PROPERTIES


@attrs.frozen
class UnsubAck(Packet):
    """UNSUBACK; `reason_codes` exist in MQTT 5 only (empty when read from 3.1.1)."""

    TYPE: ClassVar[PacketType] = PacketType.UNSUBACK
    packet_id: int
    reason_codes: tuple[int, ...] = attrs.field(default=(), converter=_codes)
    properties: Properties = NO_PROPERTIES


@attrs.frozen
class PingReq(Packet):
    TYPE: ClassVar[PacketType] = PacketType.PINGREQ


@attrs.frozen
class PingResp(Packet):
    TYPE: ClassVar[PacketType] = PacketType.PINGRESP


@attrs.frozen
class Disconnect(Packet):
    """DISCONNECT; a server may send one only in MQTT 5."""

    TYPE: ClassVar[PacketType] = PacketType.DISCONNECT
    reason_code: int = 0
    properties: Properties = NO_PROPERTIES


@attrs.frozen
class Auth(Packet):
    """AUTH (MQTT 5 enhanced authentication)."""

    TYPE: ClassVar[PacketType] = PacketType.AUTH
    reason_code: int = 0
    properties: Properties = NO_PROPERTIES


PACKET_CLASSES: Final[dict[int, type[Packet]]] = {
    cls.TYPE: cls
    for cls in (
        *(Connect, ConnAck, Publish, PubAck, PubRec, PubRel, PubComp, Subscribe, SubAck),
        *(Unsubscribe, UnsubAck, PingReq, PingResp, Disconnect, Auth),
    )
}

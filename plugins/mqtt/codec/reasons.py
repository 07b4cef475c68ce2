"""MQTT's numbers: protocol levels, packet types, reason codes, and which codes each packet allows.

herald speaks one vocabulary for outcomes, MQTT 5's reason codes, whatever version is on the
wire: a 3.1.1 CONNACK return code is mapped to and from it at the edge (`CONNACK_V3_RETURN_CODE`),
and every decoding failure is a `RemoteProtocolError` whose `.code` is one of these values.
"""

from __future__ import annotations

import enum
from typing import Final


class ProtocolVersion(enum.IntEnum):
    """The protocol level byte of CONNECT."""

    MQTT_3_1 = 3  # protocol name "MQIsdp"
    MQTT_3_1_1 = 4
    MQTT_5 = 5


PROTOCOL_NAMES: Final[dict[int, str]] = {
    ProtocolVersion.MQTT_3_1: "MQIsdp",
    ProtocolVersion.MQTT_3_1_1: "MQTT",
    ProtocolVersion.MQTT_5: "MQTT",
}


class PacketType(enum.IntEnum):
    """The high nibble of a packet's first byte."""

    CONNECT = 1
    CONNACK = 2
    PUBLISH = 3
    PUBACK = 4
    PUBREC = 5
    PUBREL = 6
    PUBCOMP = 7
    SUBSCRIBE = 8
    SUBACK = 9
    UNSUBSCRIBE = 10
    UNSUBACK = 11
    PINGREQ = 12
    PINGRESP = 13
    DISCONNECT = 14
    AUTH = 15  # MQTT 5 only; "reserved" before


FIXED_FLAGS: Final[dict[int, int]] = {
    t: 0b0010 if t in (PacketType.PUBREL, PacketType.SUBSCRIBE, PacketType.UNSUBSCRIBE) else 0
    for t in PacketType
    if t is not PacketType.PUBLISH
}
"""The only legal low nibble of each packet type but PUBLISH (whose nibble is DUP/QoS/RETAIN)."""


class RetainHandling(enum.IntEnum):
    """MQTT 5 subscription option: when retained messages are sent for a new subscription."""

    SEND_ON_SUBSCRIBE = 0
    SEND_IF_NEW_SUBSCRIPTION = 1
    DO_NOT_SEND = 2


class ReasonCode(enum.IntEnum):
    """Every reason code of MQTT 5.0 (section 2.4); 0x00 has three names, as in the spec."""

    SUCCESS = 0x00
    NORMAL_DISCONNECTION = 0x00
    GRANTED_QOS_0 = 0x00
    GRANTED_QOS_1 = 0x01
    GRANTED_QOS_2 = 0x02
    DISCONNECT_WITH_WILL_MESSAGE = 0x04
    NO_MATCHING_SUBSCRIBERS = 0x10
    NO_SUBSCRIPTION_EXISTED = 0x11
    CONTINUE_AUTHENTICATION = 0x18
    RE_AUTHENTICATE = 0x19
    UNSPECIFIED_ERROR = 0x80
    MALFORMED_PACKET = 0x81
    PROTOCOL_ERROR = 0x82
    IMPLEMENTATION_SPECIFIC_ERROR = 0x83
    UNSUPPORTED_PROTOCOL_VERSION = 0x84
    CLIENT_IDENTIFIER_NOT_VALID = 0x85
    BAD_USER_NAME_OR_PASSWORD = 0x86
    NOT_AUTHORIZED = 0x87
    SERVER_UNAVAILABLE = 0x88
    SERVER_BUSY = 0x89
    BANNED = 0x8A
    SERVER_SHUTTING_DOWN = 0x8B
    BAD_AUTHENTICATION_METHOD = 0x8C
    KEEP_ALIVE_TIMEOUT = 0x8D
    SESSION_TAKEN_OVER = 0x8E
    TOPIC_FILTER_INVALID = 0x8F
    TOPIC_NAME_INVALID = 0x90
    PACKET_IDENTIFIER_IN_USE = 0x91
    PACKET_IDENTIFIER_NOT_FOUND = 0x92
    RECEIVE_MAXIMUM_EXCEEDED = 0x93
    TOPIC_ALIAS_INVALID = 0x94
    PACKET_TOO_LARGE = 0x95
    MESSAGE_RATE_TOO_HIGH = 0x96
    QUOTA_EXCEEDED = 0x97
    ADMINISTRATIVE_ACTION = 0x98
    PAYLOAD_FORMAT_INVALID = 0x99
    RETAIN_NOT_SUPPORTED = 0x9A
    QOS_NOT_SUPPORTED = 0x9B
    USE_ANOTHER_SERVER = 0x9C
    SERVER_MOVED = 0x9D
    SHARED_SUBSCRIPTIONS_NOT_SUPPORTED = 0x9E
    CONNECTION_RATE_EXCEEDED = 0x9F
    MAXIMUM_CONNECT_TIME = 0xA0
    SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED = 0xA1
    WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED = 0xA2


RC = ReasonCode
_PUB_ERRORS = (RC.UNSPECIFIED_ERROR, RC.IMPLEMENTATION_SPECIFIC_ERROR, RC.NOT_AUTHORIZED)

VALID_REASON_CODES: Final[dict[PacketType, frozenset[int]]] = {
    PacketType.CONNACK: frozenset(
        {
            RC.SUCCESS,
            *range(RC.UNSPECIFIED_ERROR, RC.BANNED + 1),
            RC.BAD_AUTHENTICATION_METHOD,
            RC.TOPIC_NAME_INVALID,
            RC.PACKET_TOO_LARGE,
            RC.QUOTA_EXCEEDED,
            *range(RC.PAYLOAD_FORMAT_INVALID, RC.SERVER_MOVED + 1),
            RC.CONNECTION_RATE_EXCEEDED,
        }
    ),
    PacketType.PUBACK: frozenset(
        {
            RC.SUCCESS,
            RC.NO_MATCHING_SUBSCRIBERS,
            *_PUB_ERRORS,
            RC.TOPIC_NAME_INVALID,
            RC.PACKET_IDENTIFIER_IN_USE,
            RC.QUOTA_EXCEEDED,
            RC.PAYLOAD_FORMAT_INVALID,
        }
    ),
    PacketType.PUBREL: frozenset({RC.SUCCESS, RC.PACKET_IDENTIFIER_NOT_FOUND}),
    PacketType.SUBACK: frozenset(
        {
            RC.GRANTED_QOS_0,
            RC.GRANTED_QOS_1,
            RC.GRANTED_QOS_2,
            *_PUB_ERRORS,
            RC.TOPIC_FILTER_INVALID,
            RC.PACKET_IDENTIFIER_IN_USE,
            RC.QUOTA_EXCEEDED,
            RC.SHARED_SUBSCRIPTIONS_NOT_SUPPORTED,
            RC.SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED,
            RC.WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED,
        }
    ),
    PacketType.UNSUBACK: frozenset(
        {
            RC.SUCCESS,
            RC.NO_SUBSCRIPTION_EXISTED,
            *_PUB_ERRORS,
            RC.TOPIC_FILTER_INVALID,
            RC.PACKET_IDENTIFIER_IN_USE,
        }
    ),
    PacketType.DISCONNECT: frozenset(
        {
            RC.NORMAL_DISCONNECTION,
            RC.DISCONNECT_WITH_WILL_MESSAGE,
            *range(RC.UNSPECIFIED_ERROR, RC.IMPLEMENTATION_SPECIFIC_ERROR + 1),
            RC.NOT_AUTHORIZED,
            RC.SERVER_BUSY,
            RC.SERVER_SHUTTING_DOWN,
            *range(RC.KEEP_ALIVE_TIMEOUT, RC.TOPIC_NAME_INVALID + 1),
            *range(RC.RECEIVE_MAXIMUM_EXCEEDED, RC.WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED + 1),
        }
    ),
    PacketType.AUTH: frozenset({RC.SUCCESS, RC.CONTINUE_AUTHENTICATION, RC.RE_AUTHENTICATE}),
}
VALID_REASON_CODES[PacketType.PUBREC] = VALID_REASON_CODES[PacketType.PUBACK]
VALID_REASON_CODES[PacketType.PUBCOMP] = VALID_REASON_CODES[PacketType.PUBREL]

CONNACK_V3_RETURN_CODE: Final[dict[int, int]] = {
    RC.SUCCESS: 0x00,
    RC.UNSUPPORTED_PROTOCOL_VERSION: 0x01,  # unacceptable protocol version
    RC.CLIENT_IDENTIFIER_NOT_VALID: 0x02,  # identifier rejected
    RC.SERVER_UNAVAILABLE: 0x03,
    RC.SERVER_BUSY: 0x03,
    RC.BAD_USER_NAME_OR_PASSWORD: 0x04,
    RC.NOT_AUTHORIZED: 0x05,
}
"""The 3.1/3.1.1 CONNACK return code for each MQTT 5 reason code that has one."""

CONNACK_V3_REASON: Final = {
    0x00: RC.SUCCESS,
    0x01: RC.UNSUPPORTED_PROTOCOL_VERSION,
    0x02: RC.CLIENT_IDENTIFIER_NOT_VALID,
    0x03: RC.SERVER_UNAVAILABLE,
    0x04: RC.BAD_USER_NAME_OR_PASSWORD,
    0x05: RC.NOT_AUTHORIZED,
}
"""The MQTT 5 reason code herald reads a 3.1/3.1.1 CONNACK return code as."""

SUBACK_V3_FAILURE: Final = 0x80
"""3.1.1 SUBACK has one failure code; every MQTT 5 error code (>= 0x80) is written as it."""

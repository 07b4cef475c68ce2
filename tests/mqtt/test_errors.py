"""Every way a client can break the protocol ends in one RemoteProtocolError with the right
MQTT 5 reason code: 0x81 Malformed Packet, 0x82 Protocol Error, or a more specific one."""

from __future__ import annotations

import pytest

from herald.core.errors import RemoteProtocolError
from herald.plugins.mqtt.codec import (
    NEED_DATA,
    ConnAck,
    Connect,
    ConnectionState,
    Disconnect,
    MQTTConnection,
    Properties,
    Publish,
    ReasonCode,
    encode_packet,
)
from tests.mqtt.helpers import connect_bytes, connected, frame, string

RC = ReasonCode
MALFORMED = RC.MALFORMED_PACKET
PROTOCOL = RC.PROTOCOL_ERROR


def error_code(conn: MQTTConnection, data: bytes) -> int | None:
    conn.receive_data(data)
    with pytest.raises(RemoteProtocolError) as info:
        while conn.next_event() is not NEED_DATA:
            pass
    return info.value.code


BAD_FILTERS = [
    "",
    "#/x",
    "a/#/b",
    "a#",
    "a+",
    "a/b+/c",
    "+a",
    "$share/g",  # no filter after the share name
    "$share/g/",
    "$share//a",  # no share name
    "$share/g+/a",
    "$share/g/a/#/b",
]

# (version, bytes after a CONNECT that was accepted, expected code)
AFTER_CONNACK = [
    # framing
    (4, b"\x30\xff\xff\xff\xff", MALFORMED),  # 5th length byte announced
    (4, b"\xc0\x80\x00", MALFORMED),  # remaining length 0 in two bytes
    (4, b"\x00\x00", MALFORMED),  # packet type 0
    (4, b"\xf0\x00", MALFORMED),  # AUTH does not exist in 3.1.1
    # reserved flag bits
    (4, b"\x41\x02\x00\x01", MALFORMED),
    (4, frame(0x80, b"\x00\x01" + string("a") + b"\x00"), MALFORMED),
    (4, frame(0xA0, b"\x00\x01" + string("a")), MALFORMED),
    (4, b"\x60\x02\x00\x01", MALFORMED),
    (4, b"\x6a\x02\x00\x01", MALFORMED),  # PUBREL with DUP: only 3.1 allowed that
    (4, b"\xc1\x00", MALFORMED),
    (5, b"\xe2\x00", MALFORMED),
    # PUBLISH header and variable header
    (4, frame(0x36, string("a") + b"\x00\x01"), MALFORMED),  # QoS 3
    (4, frame(0x38, string("a")), MALFORMED),  # DUP on QoS 0
    (4, frame(0x32, string("a") + b"\x00\x00"), PROTOCOL),  # packet id 0
    (4, frame(0x32, string("a")), MALFORMED),  # packet id missing
    (4, frame(0x30, b"\x00"), MALFORMED),
    (4, frame(0x30, b"\x00\x05ab"), MALFORMED),  # topic longer than the packet
    (4, frame(0x30, string("a/+")), PROTOCOL),
    (4, frame(0x30, string("a/#")), PROTOCOL),
    (4, frame(0x30, string("")), PROTOCOL),
    (5, frame(0x30, string("") + b"\x00"), PROTOCOL),  # empty topic, no alias
    # UTF-8 rules (MQTT-1.5.3 / 1.5.4)
    (4, frame(0x30, string(b"\xff")), MALFORMED),
    (4, frame(0x30, string(b"\xed\xa0\x80")), MALFORMED),  # a surrogate, UTF-8 encoded
    (4, frame(0x30, string(b"\xc0\xaf")), MALFORMED),  # overlong "/"
    (4, frame(0x30, string(b"a\x00b")), MALFORMED),
    (4, frame(0x82, b"\x00\x01" + string(b"\xf8\x88\x80\x80\x80") + b"\x00"), MALFORMED),
    # packet identifiers
    (4, b"\x40\x02\x00\x00", PROTOCOL),
    (4, frame(0x82, b"\x00\x00" + string("a") + b"\x00"), PROTOCOL),
    (4, frame(0xA2, b"\x00\x00" + string("a")), PROTOCOL),
    # SUBSCRIBE / UNSUBSCRIBE payloads
    (4, frame(0x82, b"\x00\x01"), PROTOCOL),  # no topic filter
    (5, frame(0x82, b"\x00\x01\x00"), PROTOCOL),
    (4, frame(0xA2, b"\x00\x01"), PROTOCOL),
    (4, frame(0x82, b"\x00\x01" + string("a") + b"\x04"), MALFORMED),  # reserved in 3.1.1
    (5, frame(0x82, b"\x00\x01\x00" + string("a") + b"\x40"), MALFORMED),
    (4, frame(0x82, b"\x00\x01" + string("a") + b"\x03"), MALFORMED),  # QoS 3
    (5, frame(0x82, b"\x00\x01\x00" + string("a") + b"\x30"), PROTOCOL),  # retain handling 3
    (5, frame(0x82, b"\x00\x01\x00" + string("$share/g/a") + b"\x04"), PROTOCOL),  # no local
    (4, frame(0x82, b"\x00\x01" + string("a")) + b"\xc0\x00", MALFORMED),  # options missing
    (4, frame(0x82, b"\x00\x01\x00\x09a"), MALFORMED),
    # topic filters that break MQTT's rules (4.7.1, 4.7.3, 4.8.2): Malformed, in both packets
    *(
        (version, frame(first, b"\x00\x01" + props + string(text) + options), MALFORMED)
        for text in BAD_FILTERS
        for version, props in ((4, b""), (5, b"\x00"))
        for first, options in ((0x82, b"\x01"), (0xA2, b""))
    ),
    # sizes of fixed-size packets
    (4, b"\xc0\x01\x00", MALFORMED),
    (4, b"\xe0\x01\x00", MALFORMED),
    (4, b"\x40\x03\x00\x01\x00", MALFORMED),
    (4, b"\x40\x01\x00", MALFORMED),
    # MQTT 5 properties
    (5, frame(0x30, string("a") + b"\x05\x11\x00\x00\x00\x01"), MALFORMED),  # not in PUBLISH
    (5, frame(0x30, string("a") + b"\x02\x7f\x00"), MALFORMED),  # unknown identifier
    (5, frame(0x30, string("a") + b"\x09"), MALFORMED),  # longer than the packet
    (5, frame(0x30, string("a") + b"\x02\x02\x00"), MALFORMED),  # value runs out
    (5, frame(0x30, string("a") + b"\x04\x01\x01\x01\x00"), PROTOCOL),  # duplicated
    (5, frame(0x30, string("a") + b"\x02\x01\x02"), PROTOCOL),  # payload format 2
    (5, frame(0x30, string("a") + b"\x03\x23\x00\x00"), RC.TOPIC_ALIAS_INVALID),  # alias 0
    (5, frame(0x30, string("a") + b"\x02\x0b\x01"), PROTOCOL),  # client sent a sub id
    (5, frame(0x82, b"\x00\x01\x02\x0b\x00" + string("a") + b"\x00"), PROTOCOL),  # sub id 0
    (5, frame(0x82, b"\x00\x01\x04\x0b\x01\x0b\x02" + string("a") + b"\x00"), PROTOCOL),
    (5, frame(0x82, b"\x00\x01\x03\x0b\x80\x00" + string("a") + b"\x00"), MALFORMED),
    (5, b"\x40\x03\x00\x01\x05", PROTOCOL),  # 0x05 is no PUBACK reason code
    (5, b"\x62\x03\x00\x01\x10", PROTOCOL),  # 0x10 is a PUBACK code, not a PUBREL one
    (5, b"\xe0\x01\x01", PROTOCOL),
    (5, b"\xf0\x01\x04", PROTOCOL),
    (5, b"\xe0\x03\x00\x00\x00", MALFORMED),  # bytes after the properties
    # state
    (4, connect_bytes(4), PROTOCOL),  # a second CONNECT
    (4, b"\x20\x02\x00\x00", PROTOCOL),  # CONNACK comes from servers
    (5, frame(0x90, b"\x00\x01\x00\x00"), PROTOCOL),
    (4, b"\xd0\x00", PROTOCOL),
    (4, b"\xe0\x00\xc0\x00", PROTOCOL),  # anything after DISCONNECT
    # [MQTT-3.14.2-2]: CONNECT had no Session Expiry Interval (0), DISCONNECT sets 10
    (5, frame(0xE0, b"\x00\x05\x11\x00\x00\x00\x0a"), PROTOCOL),
]


@pytest.mark.parametrize(("version", "data", "code"), AFTER_CONNACK)
def test_after_connack(version: int, data: bytes, code: int) -> None:
    assert error_code(connected(version), data) == code


@pytest.mark.parametrize(("version", "data", "code"), AFTER_CONNACK)
def test_after_connack_byte_by_byte(version: int, data: bytes, code: int) -> None:
    conn = connected(version)
    with pytest.raises(RemoteProtocolError) as info:
        for byte in data:
            conn.receive_data(bytes((byte,)))
            while conn.next_event() is not NEED_DATA:
                pass
    assert info.value.code == code


def connect_body(level: int, flags: int, payload: bytes, name: str = "MQTT") -> bytes:
    props = b"\x00" if level == 5 else b""
    return frame(0x10, string(name) + bytes((level, flags)) + b"\x00\x3c" + props + payload)


CONNECTS = [
    (connect_body(4, 0x02, string("c"), name="MQTX"), RC.UNSUPPORTED_PROTOCOL_VERSION),
    (connect_body(3, 0x02, string("c")), RC.UNSUPPORTED_PROTOCOL_VERSION),  # MQTT at level 3
    (connect_body(4, 0x02, string("c"), name="MQIsdp"), RC.UNSUPPORTED_PROTOCOL_VERSION),
    (connect_body(6, 0x02, string("c")), RC.UNSUPPORTED_PROTOCOL_VERSION),
    (connect_body(0x84, 0x02, string("c")), RC.UNSUPPORTED_PROTOCOL_VERSION),  # bridge bit
    (connect_body(4, 0x03, string("c")), MALFORMED),  # reserved flag
    (connect_body(4, 0x1E, string("c") + string("t") + string("p")), MALFORMED),  # will QoS 3
    (connect_body(4, 0x22, string("c")), MALFORMED),  # will retain without will
    (connect_body(4, 0x0A, string("c")), MALFORMED),  # will QoS without will
    (connect_body(4, 0x06, string("c") + string("t/#") + string("p")), PROTOCOL),
    (connect_body(4, 0x06, string("c") + string("") + string("p")), PROTOCOL),
    (connect_body(4, 0x42, string("c") + string("pw")), MALFORMED),  # password, no user
    (connect_body(4, 0x00, string("")), RC.CLIENT_IDENTIFIER_NOT_VALID),
    (connect_body(3, 0x02, string(""), name="MQIsdp"), RC.CLIENT_IDENTIFIER_NOT_VALID),
    (connect_body(4, 0x02, string("c") + b"x"), MALFORMED),  # trailing byte
    (connect_body(4, 0x82, string("c")), MALFORMED),  # user name flag, no user name
    (connect_body(4, 0x02, string(b"\xff")), MALFORMED),
    (frame(0x10, string("MQTT")), MALFORMED),  # cut after the protocol name
    (frame(0x10, string("MQTT")) + b"\x04\x02\x00\x3c", MALFORMED),  # not followed by level
    (frame(0x10, b"\x00\x04MQTT\x05\x02\x00\x3c\x03\x21\x00\x00" + string("c")), PROTOCOL),
    (frame(0x10, b"\x00\x04MQTT\x05\x02\x00\x3c\x03\x16\x00\x00" + string("c")), PROTOCOL),
    (frame(0x10, b"\x00\x04MQTT\x05\x02\x00\x3c\x02\x23\x00" + string("c")), MALFORMED),
    (b"\x30\x03\x00\x01a", PROTOCOL),  # the first packet must be CONNECT
    (b"\xc0\x00", PROTOCOL),
]


@pytest.mark.parametrize(("data", "code"), CONNECTS)
def test_connect(data: bytes, code: int) -> None:
    conn = MQTTConnection()
    assert error_code(conn, data) == code
    assert conn.state is ConnectionState.CONNECT_FAILED


def test_password_without_user_name_is_fine_in_mqtt5() -> None:
    conn = MQTTConnection()
    conn.receive_data(connect_body(5, 0x42, string("c") + string("pw")))
    packet = conn.next_event()
    assert isinstance(packet, Connect)
    assert packet.password == b"pw" and packet.username is None


def test_empty_client_id_is_fine_with_clean_session_or_mqtt5() -> None:
    for data in (connect_body(4, 0x02, string("")), connect_body(5, 0x00, string(""))):
        conn = MQTTConnection()
        conn.receive_data(data)
        packet = conn.next_event()
        assert isinstance(packet, Connect) and packet.client_id == ""


def test_oversized_packet_is_refused_from_its_fixed_header() -> None:
    """Only the 4 header bytes of a PUBLISH announcing 10 MB arrive: that is enough."""
    conn = connected(4, max_packet_size=1 << 20)
    header = b"\x30\x80\xad\xe2\x04"  # 10,000,000 in a variable byte integer
    assert error_code(conn, header) == RC.PACKET_TOO_LARGE


def test_packet_size_limit_counts_the_whole_packet() -> None:
    conn = connected(4, max_packet_size=100)
    fits = encode_packet(Publish("t", bytes(100 - 5)), 4)
    assert len(fits) == 100
    conn.receive_data(fits)
    assert isinstance(conn.next_event(), Publish)
    assert error_code(conn, encode_packet(Publish("t", bytes(96)), 4)) == RC.PACKET_TOO_LARGE


def test_topic_alias_above_the_announced_maximum() -> None:
    conn = connected(5, topic_alias_maximum=10)
    publish = Publish("a", properties=Properties(topic_alias=11))
    assert error_code(conn, encode_packet(publish, 5)) == RC.TOPIC_ALIAS_INVALID


def test_topic_alias_when_none_was_announced() -> None:
    conn = connected(5)
    publish = Publish("a", properties=Properties(topic_alias=1))
    assert error_code(conn, encode_packet(publish, 5)) == RC.TOPIC_ALIAS_INVALID


def test_topic_alias_never_set() -> None:
    conn = connected(5, topic_alias_maximum=10)
    publish = Publish("", properties=Properties(topic_alias=4))
    assert error_code(conn, encode_packet(publish, 5)) == PROTOCOL


def test_data_after_a_refusing_connack() -> None:
    conn = MQTTConnection()
    conn.receive_data(connect_bytes(4))
    conn.next_event()
    conn.send(ConnAck(RC.NOT_AUTHORIZED))
    assert error_code(conn, b"\xc0\x00") == PROTOCOL


def test_disconnect_raising_session_expiry_from_zero_is_answered_with_0x82() -> None:
    conn = connected(5)  # its CONNECT had no Session Expiry Interval: 0
    disconnect = encode_packet(Disconnect(properties=Properties(session_expiry_interval=10)), 5)
    assert error_code(conn, disconnect) == PROTOCOL
    assert conn.error_reply() == Disconnect(PROTOCOL)
    conn.send(Disconnect(PROTOCOL))
    assert conn.data_to_send() == b"\xe0\x01\x82"


@pytest.mark.parametrize(
    ("at_connect", "at_disconnect"), [(None, 0), (0, 0), (10, 20), (10, 0), (None, None)]
)
def test_disconnect_may_change_session_expiry_otherwise(
    at_connect: int | None, at_disconnect: int | None
) -> None:
    conn = MQTTConnection()
    connect = Connect("cid", 5, properties=Properties(session_expiry_interval=at_connect))
    conn.receive_data(encode_packet(connect, 5))
    assert isinstance(conn.next_event(), Connect)
    conn.send(ConnAck())
    disconnect = Disconnect(properties=Properties(session_expiry_interval=at_disconnect))
    conn.receive_data(encode_packet(disconnect, 5))
    assert conn.next_event() == disconnect
    assert conn.state is ConnectionState.CLOSED

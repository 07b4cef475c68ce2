"""The server connection: version learned from CONNECT, the state table, the replies the codec
makes itself (PINGRESP), topic aliases, size limits, and the answer to a broken client."""

from __future__ import annotations

import pytest

from herald.core.errors import LocalProtocolError, RemoteProtocolError
from herald.plugins.mqtt.codec import (
    NEED_DATA,
    Auth,
    ConnAck,
    Connect,
    ConnectionState,
    Disconnect,
    MQTTConnection,
    Packet,
    PingReq,
    PingResp,
    Properties,
    PubAck,
    Publish,
    PubRel,
    ReasonCode,
    SubAck,
    Subscribe,
    Subscription,
    encode_packet,
)
from tests.mqtt.helpers import connect_bytes, connected, drain, frame, string

RC = ReasonCode
S = ConnectionState


@pytest.mark.parametrize("version", [3, 4, 5])
def test_version_is_learned_from_connect(version: int) -> None:
    conn = MQTTConnection()
    assert conn.next_event() is NEED_DATA
    assert conn.version is None
    conn.receive_data(connect_bytes(version))
    packet = conn.next_event()
    assert isinstance(packet, Connect) and packet.protocol_level == version
    assert conn.version == version
    assert conn.state is S.CONNECTING
    conn.send(ConnAck(session_present=True))
    expected = {3: "20020000", 4: "20020100", 5: "2003010000"}[version]
    assert conn.data_to_send().hex() == expected  # 3.1 has no session present flag
    assert conn.state is S.CONNECTED


def test_later_packets_are_decoded_at_the_learned_version() -> None:
    conn = connected(5)
    conn.receive_data(b"\x40\x03\x00\x01\x10")  # a PUBACK with a reason code: 5.0 only
    assert drain(conn) == [PubAck(1, RC.NO_MATCHING_SUBSCRIBERS)]
    conn = connected(4)
    conn.receive_data(b"\x40\x03\x00\x01\x10")
    with pytest.raises(RemoteProtocolError):
        conn.next_event()


def test_client_may_pipeline_packets_before_connack() -> None:
    conn = MQTTConnection()
    sub = Subscribe(1, [Subscription("a/#")])
    conn.receive_data(connect_bytes(4) + encode_packet(sub, 4) + b"\xc0\x00")
    assert drain(conn) == [Connect("cid", 4), sub, PingReq()]
    assert conn.state is S.CONNECTING
    assert conn.data_to_send() == b""  # no PINGRESP before the CONNACK
    conn.send(ConnAck())
    conn.send(SubAck(1, [RC.GRANTED_QOS_0]))
    assert conn.data_to_send().hex() == "20020000" + "d000" + "9003000100"


def test_pingreq_is_answered_by_the_codec() -> None:
    conn = connected(4)
    conn.receive_data(b"\xc0\x00\xc0\x00")
    assert drain(conn) == [PingReq(), PingReq()]
    assert conn.data_to_send() == b"\xd0\x00\xd0\x00"
    with pytest.raises(LocalProtocolError, match="answers PINGREQ itself"):
        conn.send(PingResp())


def test_data_to_send_is_everything_queued_as_one_bytes_object() -> None:
    conn = connected(4)
    conn.send(Publish("a", b"1"))
    conn.send(Publish("b", b"2", qos=1, packet_id=1))
    conn.send(PubRel(7))
    data = conn.data_to_send()
    assert type(data) is bytes
    assert data.hex() == "300400016131" + "3206000162000132" + "62020007"
    assert conn.data_to_send() == b""


@pytest.mark.parametrize(
    "packet",
    [Publish("a"), SubAck(1, [0]), PubAck(1), Disconnect(), Auth()],
    ids=lambda p: type(p).__name__,
)
def test_server_sends_nothing_but_connack_or_auth_before_its_connack(packet: Packet) -> None:
    conn = MQTTConnection()
    conn.receive_data(connect_bytes(5))
    conn.next_event()
    if isinstance(packet, Auth):
        conn.send(packet)  # enhanced authentication happens before the CONNACK
        assert conn.state is S.CONNECTING
        return
    with pytest.raises(LocalProtocolError):
        conn.send(packet)
    assert conn.state is S.CONNECTING and conn.data_to_send() == b""


def test_nothing_may_be_sent_before_connect() -> None:
    with pytest.raises(LocalProtocolError):
        MQTTConnection().send(ConnAck())


def test_server_disconnect_and_auth_are_mqtt5_only() -> None:
    conn = connected(4)
    for packet in (Disconnect(), Auth()):
        with pytest.raises(LocalProtocolError, match="MQTT 5 only"):
            conn.send(packet)
    assert conn.state is S.CONNECTED
    conn = connected(5)
    conn.send(Disconnect(RC.SERVER_SHUTTING_DOWN))
    assert conn.data_to_send() == b"\xe0\x01\x8b"
    assert conn.state is S.CLOSED
    with pytest.raises(LocalProtocolError):
        conn.send(Publish("a"))


def test_client_disconnect_closes() -> None:
    conn = connected(5)
    conn.receive_data(b"\xe0\x01\x04")
    assert drain(conn) == [Disconnect(RC.DISCONNECT_WITH_WILL_MESSAGE)]
    assert conn.state is S.CLOSED


def test_refusing_connack_closes() -> None:
    conn = MQTTConnection()
    conn.receive_data(connect_bytes(5))
    conn.next_event()
    conn.send(ConnAck(RC.BAD_USER_NAME_OR_PASSWORD))
    assert conn.data_to_send().hex() == "2003008600"
    assert conn.state is S.CLOSED


def test_topic_aliases_are_resolved_inbound() -> None:
    conn = connected(5, topic_alias_maximum=2)
    assert conn.topic_alias_maximum == 2
    packets = [
        Publish("a/b", b"1", properties=Properties(topic_alias=1)),
        Publish("", b"2", properties=Properties(topic_alias=1)),
        Publish("c", b"3", properties=Properties(topic_alias=1)),  # alias 1 now means "c"
        Publish("", b"4", qos=1, packet_id=3, properties=Properties(topic_alias=1)),
    ]
    conn.receive_data(b"".join(encode_packet(p, 5) for p in packets))
    publishes = [p for p in drain(conn) if isinstance(p, Publish)]
    topics = [(p.topic, p.payload, p.properties.topic_alias) for p in publishes]
    assert topics == [("a/b", b"1", 1), ("a/b", b"2", 1), ("c", b"3", 1), ("c", b"4", 1)]


def client_allowing_aliases(
    maximum: int | None, maximum_packet_size: int | None = None
) -> MQTTConnection:
    """A connection whose MQTT 5 client's CONNECT said Topic Alias Maximum `maximum`."""
    conn = MQTTConnection()
    properties = Properties(topic_alias_maximum=maximum, maximum_packet_size=maximum_packet_size)
    conn.receive_data(encode_packet(Connect("c", 5, properties=properties), 5))
    conn.next_event()
    conn.send(ConnAck())
    conn.data_to_send()
    return conn


def test_topics_sent_get_aliases_when_the_client_allows_them() -> None:
    conn = client_allowing_aliases(2)
    for topic in ("a/b", "a/b", "c", "a/b", "d", "c", "d"):
        conn.send(Publish(topic, b"x"))
    # 0x30, length, topic, properties (length 3: topic alias 0x23, u16), payload "x"
    assert conn.data_to_send().hex(" ") == (
        "30 0a 00 03 61 2f 62 03 23 00 01 78"  # a/b gets alias 1
        " 30 07 00 00 03 23 00 01 78"  # then the alias alone
        " 30 08 00 01 63 03 23 00 02 78"  # c gets alias 2
        " 30 07 00 00 03 23 00 01 78"  # a/b by alias: c is now the least recently used
        " 30 08 00 01 64 03 23 00 02 78"  # d takes c's alias 2
        " 30 08 00 01 63 03 23 00 01 78"  # c takes a/b's alias 1
        " 30 07 00 00 03 23 00 02 78"  # d by alias
    )


@pytest.mark.parametrize("maximum", [None, 0])
def test_no_aliases_unless_the_client_allows_them(maximum: int | None) -> None:
    conn = client_allowing_aliases(maximum)
    conn.send(Publish("a/b", b"x"))
    conn.send(Publish("a/b", b"x"))
    assert conn.data_to_send().hex(" ") == "30 07 00 03 61 2f 62 00 78 30 07 00 03 61 2f 62 00 78"


def test_a_publish_too_large_for_the_client_assigns_no_alias() -> None:
    conn = client_allowing_aliases(1, maximum_packet_size=12)
    with pytest.raises(LocalProtocolError):
        conn.send(Publish("a/b", b"xx"))  # 13 bytes with its alias: dropped
    conn.send(Publish("c", b"x"))  # alias 1 is still free
    conn.send(Publish("c", b"x"))
    assert (
        conn.data_to_send().hex(" ") == "30 08 00 01 63 03 23 00 01 78 30 07 00 00 03 23 00 01 78"
    )


def test_3_1_1_publishes_never_carry_aliases() -> None:
    conn = connected(4)
    conn.send(Publish("a", b"x"))
    conn.send(Publish("a", b"x"))
    assert conn.data_to_send().hex(" ") == "30 04 00 01 61 78 30 04 00 01 61 78"


def test_client_maximum_packet_size_limits_what_is_sent() -> None:
    conn = MQTTConnection()
    connect = Connect("c", 5, properties=Properties(maximum_packet_size=20))
    conn.receive_data(encode_packet(connect, 5))
    conn.next_event()
    assert conn.peer_max_packet_size == 20
    conn.send(ConnAck())
    conn.data_to_send()
    with pytest.raises(LocalProtocolError) as info:
        conn.send(Publish("t", bytes(15)))
    assert info.value.code == RC.PACKET_TOO_LARGE
    assert conn.data_to_send() == b""
    conn.send(Publish("t", bytes(14)))  # exactly 20 bytes
    assert len(conn.data_to_send()) == 20


def test_max_packet_size_can_be_raised_after_authentication() -> None:
    conn = MQTTConnection(max_packet_size=64)
    conn.receive_data(connect_bytes(4))
    conn.next_event()
    conn.send(ConnAck())
    conn.max_packet_size = 1024
    conn.receive_data(encode_packet(Publish("t", bytes(500)), 4))
    packet = conn.next_event()
    assert isinstance(packet, Publish) and len(packet.payload) == 500


def test_versions_can_be_restricted_per_listener() -> None:
    conn = MQTTConnection(versions=[4, 5])
    conn.receive_data(connect_bytes(3, "c31"))
    with pytest.raises(RemoteProtocolError) as info:
        conn.next_event()
    assert info.value.code == RC.UNSUPPORTED_PROTOCOL_VERSION
    reply = conn.error_reply()
    assert reply == ConnAck(RC.UNSUPPORTED_PROTOCOL_VERSION)
    conn.send(reply)
    assert conn.data_to_send().hex() == "20020001"


def test_mqtt31_allows_dup_on_pubrel() -> None:
    conn = connected(3)
    conn.receive_data(b"\x6a\x02\x00\x07")
    assert drain(conn) == [PubRel(7)]


def error_after(conn: MQTTConnection, data: bytes) -> RemoteProtocolError:
    conn.receive_data(data)
    with pytest.raises(RemoteProtocolError) as info:
        drain(conn)
    return info.value


def test_unsupported_level_is_answered_in_3_1_1_format() -> None:
    conn = MQTTConnection()
    error = error_after(conn, frame(0x10, string("MQTT") + b"\x06\x02\x00\x3c" + string("c")))
    assert error.code == RC.UNSUPPORTED_PROTOCOL_VERSION
    reply = conn.error_reply()
    assert reply is not None
    conn.send(reply)
    assert conn.data_to_send().hex() == "20020001"
    assert conn.state is S.CLOSED


def test_level5_connect_that_fails_is_answered_in_mqtt5_format() -> None:
    conn = MQTTConnection()
    bad = frame(0x10, string("MQTT") + b"\x05\x03\x00\x3c\x00" + string("c"))  # reserved flag
    assert error_after(conn, bad).code == RC.MALFORMED_PACKET
    reply = conn.error_reply()
    assert reply is not None
    conn.send(reply)
    assert conn.data_to_send().hex() == "2003008100"


def test_mqtt311_errors_without_a_return_code_just_close() -> None:
    conn = MQTTConnection()
    error_after(conn, frame(0x10, string("MQTT") + b"\x04\x03\x00\x3c" + string("c")))
    assert conn.error_reply() is None
    conn = connected(4)
    error_after(conn, b"\x00\x00")
    assert conn.state is S.FAILED
    assert conn.error_reply() is None


def test_mqtt311_empty_client_id_is_rejected_with_return_code_2() -> None:
    conn = MQTTConnection()
    bad = frame(0x10, string("MQTT") + b"\x04\x00\x00\x3c" + string(""))
    assert error_after(conn, bad).code == RC.CLIENT_IDENTIFIER_NOT_VALID
    reply = conn.error_reply()
    assert reply is not None
    conn.send(reply)
    assert conn.data_to_send().hex() == "20020002"


def test_mqtt5_error_after_connack_is_answered_with_disconnect() -> None:
    conn = connected(5)
    assert error_after(conn, frame(0x30, string("a/+") + b"\x00")).code == RC.PROTOCOL_ERROR
    reply = conn.error_reply()
    assert (conn.state, reply) == (S.FAILED, Disconnect(RC.PROTOCOL_ERROR))
    assert reply is not None
    conn.send(reply)
    assert conn.data_to_send() == b"\xe0\x01\x82"
    assert conn.state is S.CLOSED


def test_error_before_connack_with_a_code_connack_lacks() -> None:
    """A pipelined PUBLISH with a topic alias before CONNACK: 0x94 is no CONNACK code."""
    conn = MQTTConnection()
    publish = Publish("a", properties=Properties(topic_alias=1))
    error = error_after(conn, connect_bytes(5) + encode_packet(publish, 5))
    assert error.code == RC.TOPIC_ALIAS_INVALID
    assert conn.error_reply() == ConnAck(RC.UNSPECIFIED_ERROR)


def test_a_failed_connection_stays_failed() -> None:
    conn = connected(4)
    error_after(conn, b"\x00\x00")
    conn.receive_data(b"\xc0\x00")  # ignored
    with pytest.raises(RemoteProtocolError, match="already failed") as info:
        conn.next_event()
    assert info.value.code == RC.MALFORMED_PACKET


def test_no_error_no_reply() -> None:
    assert connected(5).error_reply() is None


@pytest.mark.parametrize(
    ("packet", "version"),
    [
        (ConnAck(RC.NOT_AUTHORIZED, session_present=True), 5),
        (ConnAck(RC.MALFORMED_PACKET), 4),  # no 3.1.1 return code for it
        (ConnAck(RC.NO_MATCHING_SUBSCRIBERS), 5),  # not a CONNACK reason code
    ],
)
def test_connack_that_cannot_be_written(packet: ConnAck, version: int) -> None:
    conn = MQTTConnection()
    conn.receive_data(connect_bytes(version))
    conn.next_event()
    with pytest.raises(LocalProtocolError):
        conn.send(packet)
    assert conn.state is S.CONNECTING

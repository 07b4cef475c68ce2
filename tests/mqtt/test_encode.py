"""What the encoder refuses (LocalProtocolError: our side's mistake), what it drops for 3.1.1,
and the inbound buffer's own rules."""

from __future__ import annotations

import pytest

from herald.core.errors import LocalProtocolError, RemoteProtocolError
from herald.plugins.mqtt.codec import (
    MAX_PACKET_SIZE,
    NEED_DATA,
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    Packet,
    PacketReader,
    Properties,
    PubAck,
    Publish,
    ReasonCode,
    SubAck,
    Subscribe,
    UnsubAck,
    Unsubscribe,
    encode_packet,
)

RC = ReasonCode


@pytest.mark.parametrize(
    ("packet", "version"),
    [
        (Publish("a", qos=3, packet_id=1), 4),
        (Publish("a", qos=1), 4),  # no packet id
        (Publish("a", qos=1, packet_id=0), 4),
        (Publish("a", qos=1, packet_id=65536), 4),
        (Publish("a", packet_id=1), 4),  # QoS 0 has none
        (Publish("a", dup=True), 4),
        (Publish("a/+"), 4),
        (Publish(""), 4),
        (Publish(""), 5),  # empty topic needs an alias
        (Publish("a\x00"), 4),
        (Publish("\ud800"), 4),
        (Publish("a" * 65536), 4),
        (Publish("a", properties=Properties(session_expiry_interval=1)), 5),
        (ConnAck(properties=Properties(topic_alias=1)), 5),
        (PubAck(1, RC.GRANTED_QOS_2), 5),
        (SubAck(1, []), 4),
        (SubAck(1, [5]), 4),
        (Subscribe(1, []), 4),
        (Unsubscribe(1, []), 4),
        (UnsubAck(1), 5),  # MQTT 5 needs one reason code per filter
        (Disconnect(RC.NO_MATCHING_SUBSCRIBERS), 5),
        (Auth(), 4),
        (Auth(RC.BANNED), 5),
        (Connect("c", 4, keepalive=70000), 4),
        (Packet(), 4),
    ],
    ids=repr,
)
def test_encoder_refuses(packet: Packet, version: int) -> None:
    with pytest.raises(LocalProtocolError):
        encode_packet(packet, version)


def test_mqtt311_drops_what_it_cannot_carry() -> None:
    props = Properties(reason_string="why", user_properties=[("a", "b")])
    assert encode_packet(PubAck(1, RC.NO_MATCHING_SUBSCRIBERS, props), 4) == b"\x40\x02\x00\x01"
    assert encode_packet(UnsubAck(1, [RC.NO_SUBSCRIPTION_EXISTED]), 4) == b"\xb0\x02\x00\x01"
    assert encode_packet(Publish("a", properties=props), 4) == b"\x30\x03\x00\x01a"
    assert encode_packet(SubAck(1, [RC.QUOTA_EXCEEDED]), 4) == b"\x90\x03\x00\x01\x80"


def test_reader_limits() -> None:
    with pytest.raises(ValueError):
        PacketReader(MAX_PACKET_SIZE + 1)
    reader = PacketReader()
    reader.receive_data(b"\xc0\x00\xc0")
    assert reader.next_packet(4) is not NEED_DATA
    assert reader.buffered == 1
    assert reader.next_packet(4) is NEED_DATA
    reader.receive_data(b"\x00")
    assert reader.next_packet(4) is not NEED_DATA
    assert reader.buffered == 0


def test_reader_raises_remote_errors() -> None:
    reader = PacketReader()
    reader.receive_data(b"\x30\x01\x00")
    with pytest.raises(RemoteProtocolError) as info:
        reader.next_packet(4)
    assert info.value.code == RC.MALFORMED_PACKET


def test_largest_remaining_length_is_read() -> None:
    reader = PacketReader(MAX_PACKET_SIZE)
    reader.receive_data(b"\x30\xff\xff\xff\x7f")  # 268,435,455: needs all 4 length bytes
    assert reader.next_frame() is None  # a valid header, waiting for its body


def test_a_publish_sent_to_several_connections_is_encoded_per_version() -> None:
    """The encoder remembers the last QoS 0 PUBLISH (a fan-out shares one packet object)."""
    packet = Publish("a/b", b"x")
    v4, v5 = encode_packet(packet, 4), encode_packet(packet, 5)
    assert v4 == b"\x30\x06\x00\x03a/bx"
    assert v5 == b"\x30\x07\x00\x03a/b\x00x"
    assert encode_packet(packet, 4) == v4 and encode_packet(packet, 5) == v5
    qos1 = Publish("a/b", b"x", 1, packet_id=7)
    assert encode_packet(qos1, 4) == b"\x32\x08\x00\x03a/b\x00\x07x"
    assert encode_packet(Publish("a/b", b"x", 1, packet_id=8), 4) == b"\x32\x08\x00\x03a/b\x00\x08x"


def test_a_long_publish_has_a_two_byte_remaining_length() -> None:
    data = encode_packet(Publish("t", b"p" * 200), 4)
    assert data[:6] == b"\x30\xcb\x01\x00\x01t" and len(data) == 3 + 203
    reader = PacketReader()
    reader.receive_data(data)
    assert reader.next_packet(4) == Publish("t", b"p" * 200)

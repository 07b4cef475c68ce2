"""One golden table of (version, packet, exact bytes) drives both directions of the codec.

Each case is encoded and compared byte for byte, then decoded whole, byte by byte, and with
the bytes of another packet after it (h11's test_io.py `tr()`). The bytes were written by hand
from the MQTT 3.1.1 and 5.0 specifications, not produced by the encoder.
"""

from __future__ import annotations

import pytest

from herald.plugins.mqtt.codec import (
    NEED_DATA,
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    Packet,
    PacketReader,
    PingReq,
    PingResp,
    Properties,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    ReasonCode,
    RetainHandling,
    SubAck,
    Subscribe,
    Subscription,
    SubscriptionOptions,
    UnsubAck,
    Unsubscribe,
    Will,
    encode_packet,
)

RC = ReasonCode

V311_CASES: list[tuple[str, Packet, str]] = [
    (
        "connect will user pass",
        Connect(
            "cid",
            4,
            clean_start=True,
            keepalive=60,
            will=Will("w/t", b"bye", 1, True),
            username="u",
            password=b"pw",
        ),
        "10 20 0004 4d515454 04 ee 003c 0003 636964 0003 772f74 0003 627965 0001 75 0002 7077",
    ),
    (
        "connect 3.1 MQIsdp",
        Connect("c1", 3, keepalive=10),
        "10 10 0006 4d5149736470 03 02 000a 0002 6331",
    ),
    ("connack session present", ConnAck(RC.SUCCESS, session_present=True), "20 02 01 00"),
    ("connack bad password", ConnAck(RC.BAD_USER_NAME_OR_PASSWORD), "20 02 00 04"),
    ("connack unsupported version", ConnAck(RC.UNSUPPORTED_PROTOCOL_VERSION), "20 02 00 01"),
    ("publish qos0", Publish("a/b", b"hi"), "30 07 0003 612f62 6869"),
    (
        "publish qos1 retain dup",
        Publish("a/b", b"hi", qos=1, retain=True, dup=True, packet_id=10),
        "3b 09 0003 612f62 000a 6869",
    ),
    ("publish qos2", Publish("t", b"", qos=2, packet_id=0xFFFF), "34 05 0001 74 ffff"),
    ("publish 2-byte length", Publish("t", bytes(200)), "30 cb01 0001 74" + " 00" * 200),
    ("puback", PubAck(1), "40 02 0001"),
    ("pubrec", PubRec(2), "50 02 0002"),
    ("pubrel", PubRel(3), "62 02 0003"),
    ("pubcomp", PubComp(4), "70 02 0004"),
    (
        "subscribe",
        Subscribe(
            2,
            [
                Subscription("a/+", SubscriptionOptions(qos=1)),
                Subscription("#", SubscriptionOptions(qos=2)),
            ],
        ),
        "82 0c 0002 0003 612f2b 01 0001 23 02",
    ),
    ("suback", SubAck(2, [RC.GRANTED_QOS_1, RC.UNSPECIFIED_ERROR]), "90 04 0002 01 80"),
    ("unsubscribe", Unsubscribe(3, ["a/+"]), "a2 07 0003 0003 612f2b"),
    ("unsuback", UnsubAck(3), "b0 02 0003"),
    ("pingreq", PingReq(), "c0 00"),
    ("pingresp", PingResp(), "d0 00"),
    ("disconnect", Disconnect(), "e0 00"),
]

V5_CASES: list[tuple[str, Packet, str]] = [
    (
        "connect will user pass properties",
        Connect(
            "cid",
            5,
            clean_start=False,
            keepalive=30,
            will=Will(
                "w/t",
                b"bye",
                2,
                False,
                Properties(will_delay_interval=5, content_type="text/plain"),
            ),
            username="u",
            password=b"pw",
            properties=Properties(
                session_expiry_interval=3600,
                receive_maximum=20,
                maximum_packet_size=1048576,
                topic_alias_maximum=10,
                user_properties=[("k", "v"), ("k", "w")],
            ),
        ),
        "10 52 0004 4d515454 05 d4 001e"
        " 1e 11 00000e10 21 0014 22 000a 26 0001 6b 0001 76 26 0001 6b 0001 77 27 00100000"
        " 0003 636964"
        " 12 03 000a 746578742f706c61696e 18 00000005"
        " 0003 772f74 0003 627965 0001 75 0002 7077",
    ),
    (
        "connack properties",
        ConnAck(
            RC.SUCCESS,
            properties=Properties(
                assigned_client_identifier="auto-1",
                topic_alias_maximum=10,
                maximum_qos=1,
                retain_available=False,
            ),
        ),
        "20 13 00 00 10 12 0006 6175746f2d31 22 000a 24 01 25 00",
    ),
    ("connack refused", ConnAck(RC.UNSUPPORTED_PROTOCOL_VERSION), "20 03 00 84 00"),
    ("publish qos0", Publish("a/b", b"hi"), "30 08 0003 612f62 00 6869"),
    (
        "publish qos1 properties",
        Publish(
            "a/b",
            b"hi",
            qos=1,
            packet_id=7,
            properties=Properties(
                payload_format_indicator=1,
                message_expiry_interval=60,
                response_topic="r",
                correlation_data=b"\x01\x02",
                topic_alias=3,
                user_properties=[("a", "1"), ("b", "2")],
            ),
        ),
        "32 2b 0003 612f62 0007 21 01 01 02 0000003c 08 0001 72 09 0002 0102 23 0003"
        " 26 0001 61 0001 31 26 0001 62 0001 32 6869",
    ),
    (
        "publish qos2 alias only",
        Publish("", b"x", qos=2, packet_id=9, properties=Properties(topic_alias=3)),
        "34 09 0000 0009 03 23 0003 78",
    ),
    (
        "publish subscription identifiers",
        Publish("a", b"", retain=True, properties=Properties(subscription_identifiers=[1, 200])),
        "31 09 0001 61 05 0b 01 0b c801",
    ),
    ("puback success", PubAck(1), "40 02 0001"),
    ("puback reason", PubAck(1, RC.NO_MATCHING_SUBSCRIBERS), "40 03 0001 10"),
    (
        "pubrec reason string",
        PubRec(2, RC.UNSPECIFIED_ERROR, Properties(reason_string="no")),
        "50 09 0002 80 05 1f 0002 6e6f",
    ),
    ("pubrel not found", PubRel(3, RC.PACKET_IDENTIFIER_NOT_FOUND), "62 03 0003 92"),
    ("pubcomp", PubComp(4), "70 02 0004"),
    (
        "subscribe options",
        Subscribe(
            5,
            [
                Subscription(
                    "a/+",
                    SubscriptionOptions(1, True, True, RetainHandling.DO_NOT_SEND),
                ),
                Subscription(
                    "$share/g/x/#",
                    SubscriptionOptions(2, retain_handling=RetainHandling.SEND_IF_NEW_SUBSCRIPTION),
                ),
            ],
            Properties(subscription_identifiers=[42], user_properties=[("u", "v")]),
        ),
        "82 21 0005 09 0b 2a 26 0001 75 0001 76 0003 612f2b 2d 000c 2473686172652f672f782f23 12",
    ),
    (
        "suback",
        SubAck(
            5,
            [RC.GRANTED_QOS_1, RC.TOPIC_FILTER_INVALID, RC.SHARED_SUBSCRIPTIONS_NOT_SUPPORTED],
            Properties(reason_string="x"),
        ),
        "90 0a 0005 04 1f 0001 78 01 8f 9e",
    ),
    (
        "unsubscribe",
        Unsubscribe(6, ["a/+", "b"], Properties(user_properties=[("k", "v")])),
        "a2 12 0006 07 26 0001 6b 0001 76 0003 612f2b 0001 62",
    ),
    ("unsuback", UnsubAck(6, [RC.SUCCESS, RC.NO_SUBSCRIPTION_EXISTED]), "b0 05 0006 00 00 11"),
    ("pingreq", PingReq(), "c0 00"),
    ("pingresp", PingResp(), "d0 00"),
    ("disconnect normal", Disconnect(), "e0 00"),
    ("disconnect reason", Disconnect(RC.SERVER_SHUTTING_DOWN), "e0 01 8b"),
    (
        "disconnect reason properties",
        Disconnect(RC.USE_ANOTHER_SERVER, Properties(server_reference="s2", reason_string="move")),
        "e0 0e 9c 0c 1c 0002 7332 1f 0004 6d6f7665",
    ),
    ("auth success", Auth(), "f0 00"),
    (
        "auth continue",
        Auth(
            RC.CONTINUE_AUTHENTICATION,
            Properties(authentication_method="SCRAM-SHA-1", authentication_data=b"\x00\x01"),
        ),
        "f0 15 18 13 15 000b 5343 5241 4d2d 5348 412d 31 16 0002 0001",
    ),
]

CASES = [pytest.param(4, packet, hex_, id=f"3.1.1 {name}") for name, packet, hex_ in V311_CASES]
CASES += [pytest.param(5, packet, hex_, id=f"5.0 {name}") for name, packet, hex_ in V5_CASES]


def _version_for(packet: Packet, version: int) -> int | None:
    """What the reader knows when this packet arrives: nothing yet, for a CONNECT."""
    return None if isinstance(packet, Connect) else version


def _decode(chunks: list[bytes], version: int | None) -> list[Packet]:
    reader = PacketReader()
    packets = []
    for chunk in chunks:
        reader.receive_data(chunk)
        while (packet := reader.next_packet(version)) is not NEED_DATA:
            assert isinstance(packet, Packet), packet
            packets.append(packet)
    assert reader.buffered == 0
    return packets


@pytest.mark.parametrize(("version", "packet", "hex_"), CASES)
def test_encode_matches_golden_bytes(version: int, packet: Packet, hex_: str) -> None:
    assert encode_packet(packet, version).hex() == bytes.fromhex(hex_).hex()


@pytest.mark.parametrize(("version", "packet", "hex_"), CASES)
def test_decode_whole(version: int, packet: Packet, hex_: str) -> None:
    assert _decode([bytes.fromhex(hex_)], _version_for(packet, version)) == [packet]


@pytest.mark.parametrize(("version", "packet", "hex_"), CASES)
def test_decode_byte_by_byte(version: int, packet: Packet, hex_: str) -> None:
    data = bytes.fromhex(hex_)
    reader = PacketReader()
    for i, byte in enumerate(data):
        assert reader.next_packet(_version_for(packet, version)) is NEED_DATA, i
        reader.receive_data(bytes((byte,)))
    assert reader.next_packet(_version_for(packet, version)) == packet
    assert reader.next_packet(_version_for(packet, version)) is NEED_DATA


@pytest.mark.parametrize(("version", "packet", "hex_"), CASES)
def test_decode_with_trailing_bytes(version: int, packet: Packet, hex_: str) -> None:
    """The packet is cut at its own length: the next packet's bytes stay in the buffer."""
    data = bytes.fromhex(hex_)
    reader = PacketReader()
    reader.receive_data(data + b"\xc0\x00\x30")  # a PINGREQ, then the start of a PUBLISH
    assert reader.next_packet(_version_for(packet, version)) == packet
    assert reader.next_packet(version) == PingReq()
    assert reader.next_packet(version) is NEED_DATA
    assert reader.buffered == 1


def test_all_cases_in_one_stream() -> None:
    """Every 5.0 case after a CONNECT, fed in 7-byte chunks, comes out in order."""
    packets = [packet for _, packet, _ in V5_CASES if not isinstance(packet, Connect)]
    connect = V5_CASES[0][1]
    data = bytes.fromhex(V5_CASES[0][2]) + b"".join(encode_packet(p, 5) for p in packets)
    reader = PacketReader()
    reader.receive_data(data[:7])
    out = [reader.next_packet(None)]
    assert out == [NEED_DATA]
    reader.receive_data(data[7 : len(bytes.fromhex(V5_CASES[0][2]))])
    assert reader.next_packet(None) == connect
    rest = data[len(bytes.fromhex(V5_CASES[0][2])) :]
    assert _decode([rest[i : i + 7] for i in range(0, len(rest), 7)], 5) == packets

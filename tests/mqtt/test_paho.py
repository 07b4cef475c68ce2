"""Cross-checks against paho-mqtt 2.x, without a socket.

Client -> server: paho's own packet builders (`Client._send_*`) fill a capturing queue; our
server codec must decode each packet to the expected value, and re-encoding it must give
paho's bytes back. Server -> client: paho's pure decoders (`paho.mqtt._packet.decode_*`) must
read what our codec writes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from paho.mqtt import _packet as paho_packet
from paho.mqtt.client import Client, MQTTProtocolVersion
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties as PahoProperties
from paho.mqtt.reasoncodes import ReasonCode as PahoReasonCode
from paho.mqtt.subscribeoptions import SubscribeOptions

from herald.plugins.mqtt.codec import (
    ConnAck,
    Connect,
    Disconnect,
    MQTTConnection,
    Packet,
    PingReq,
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
from tests.mqtt.helpers import connected, drain, read_all

VERSIONS = {
    3: MQTTProtocolVersion.MQTTv31,
    4: MQTTProtocolVersion.MQTTv311,
    5: MQTTProtocolVersion.MQTTv5,
}


class _NoSocket:
    """Stands in for the socket `_send_publish` insists on (paho's `SocketLike`); nothing is
    ever read from or written to it."""

    def recv(self, buffer_size: int) -> bytes:
        raise AssertionError("CapturingClient reads nothing")

    def send(self, buffer: bytes | bytearray) -> int:
        raise AssertionError("CapturingClient writes nothing")

    def close(self) -> None:
        pass

    def fileno(self) -> int:
        return -1

    def setblocking(self, flag: bool) -> None:
        pass


class CapturingClient(Client):
    """A paho client whose packets land in `sent` instead of a socket."""

    def __init__(self, version: int, **kwargs: Any) -> None:
        super().__init__(CallbackAPIVersion.VERSION2, protocol=VERSIONS[version], **kwargs)
        self.sent: list[bytes] = []
        self._sock = _NoSocket()

    def _packet_queue(self, command: int, packet: bytes | bytearray, *args: Any, **kw: Any) -> Any:
        self.sent.append(bytes(packet))
        return 0


def paho_props(packet_type: int, **values: Any) -> PahoProperties:
    props = PahoProperties(packet_type)
    for name, value in values.items():
        setattr(props, name, value)
    return props


def client_cases() -> list[tuple[str, int, Callable[[CapturingClient], object], Packet]]:
    """(name, version, a function that makes paho send the packet, the packet we expect)."""

    def connect_v5(c: CapturingClient) -> None:
        c.username_pw_set("user", "secret")
        will_props = paho_props(PacketTypes.WILLMESSAGE, WillDelayInterval=9, ContentType="t")
        c.will_set("will/topic", b"gone", 1, True, will_props)
        c._connect_properties = paho_props(
            PacketTypes.CONNECT,
            SessionExpiryInterval=60,
            ReceiveMaximum=5,
            UserProperty=[("a", "b")],
        )
        c._clean_start = False
        c._send_connect(45)

    def connect_v3(c: CapturingClient) -> None:
        c.username_pw_set("user", "secret")
        c.will_set("will/topic", b"gone", 2, False)
        c._send_connect(30)

    will5 = Will(
        "will/topic", b"gone", 1, True, Properties(will_delay_interval=9, content_type="t")
    )
    connect5 = Connect(
        "paho5",
        5,
        clean_start=False,
        keepalive=45,
        will=will5,
        username="user",
        password=b"secret",
        properties=Properties(
            session_expiry_interval=60, receive_maximum=5, user_properties=[("a", "b")]
        ),
    )
    pub_props = paho_props(
        PacketTypes.PUBLISH,
        PayloadFormatIndicator=1,
        TopicAlias=4,
        CorrelationData=b"\x01",
        UserProperty=[("k", "v"), ("k", "w")],
    )
    publish5 = Publish(
        "a/b",
        b"payload",
        qos=2,
        retain=True,
        dup=True,
        packet_id=17,
        properties=Properties(
            payload_format_indicator=1,
            topic_alias=4,
            correlation_data=b"\x01",
            user_properties=[("k", "v"), ("k", "w")],
        ),
    )
    sub_opts = SubscribeOptions(qos=1, noLocal=True, retainAsPublished=True, retainHandling=2)
    subscribe5 = Subscribe(
        1,
        [
            Subscription("a/+", SubscriptionOptions(1, True, True, RetainHandling.DO_NOT_SEND)),
            Subscription("b/#", SubscriptionOptions()),
        ],
        Properties(subscription_identifiers=[7]),
    )
    return [
        ("connect 5.0", 5, connect_v5, connect5),
        (
            "connect 3.1.1",
            4,
            connect_v3,
            Connect(
                "paho4",
                4,
                keepalive=30,
                will=Will("will/topic", b"gone", 2),
                username="user",
                password=b"secret",
            ),
        ),
        (
            "connect 3.1",
            3,
            connect_v3,
            Connect(
                "paho3",
                3,
                keepalive=30,
                will=Will("will/topic", b"gone", 2),
                username="user",
                password=b"secret",
            ),
        ),
        ("publish 3.1.1 qos0", 4, lambda c: c._send_publish(0, b"t/1", b"x"), Publish("t/1", b"x")),
        (
            "publish 3.1.1 qos1",
            4,
            lambda c: c._send_publish(5, b"t/1", b"x" * 300, 1),
            Publish("t/1", b"x" * 300, 1, packet_id=5),
        ),
        (
            "publish 5.0 properties",
            5,
            lambda c: c._send_publish(17, b"a/b", b"payload", 2, True, True, None, pub_props),
            publish5,
        ),
        (
            "subscribe 3.1.1",
            4,
            lambda c: c._send_subscribe(0, [(b"a/+", 1), (b"#", 2)]),
            Subscribe(
                1,
                [
                    Subscription("a/+", SubscriptionOptions(1)),
                    Subscription("#", SubscriptionOptions(2)),
                ],
            ),
        ),
        (
            "subscribe 5.0",
            5,
            lambda c: c._send_subscribe(
                0,
                [(b"a/+", sub_opts), (b"b/#", SubscribeOptions())],
                paho_props(PacketTypes.SUBSCRIBE, SubscriptionIdentifier=7),
            ),
            subscribe5,
        ),
        (
            "unsubscribe 3.1.1",
            4,
            lambda c: c._send_unsubscribe(0, [b"a/+", b"b"]),
            Unsubscribe(1, ["a/+", "b"]),
        ),
        (
            "unsubscribe 5.0",
            5,
            lambda c: c._send_unsubscribe(
                0, [b"a"], paho_props(PacketTypes.UNSUBSCRIBE, UserProperty=[("x", "y")])
            ),
            Unsubscribe(1, ["a"], Properties(user_properties=[("x", "y")])),
        ),
        ("puback", 4, lambda c: c._send_puback(9), PubAck(9)),
        ("pubrec", 5, lambda c: c._send_pubrec(9), PubRec(9)),
        ("pubrel", 5, lambda c: c._send_pubrel(9), PubRel(9)),
        ("pubcomp", 4, lambda c: c._send_pubcomp(9), PubComp(9)),
        ("pingreq", 5, lambda c: c._send_pingreq(), PingReq()),
        ("disconnect 3.1.1", 4, lambda c: c._send_disconnect(), Disconnect()),
        (
            "disconnect 5.0",
            5,
            lambda c: c._send_disconnect(
                PahoReasonCode(PacketTypes.DISCONNECT, identifier=0x04),
                paho_props(PacketTypes.DISCONNECT, SessionExpiryInterval=0, ReasonString="bye"),
            ),
            Disconnect(
                ReasonCode.DISCONNECT_WITH_WILL_MESSAGE,
                Properties(session_expiry_interval=0, reason_string="bye"),
            ),
        ),
    ]


@pytest.mark.parametrize(
    ("name", "version", "send", "expected"),
    client_cases(),
    ids=lambda x: x if isinstance(x, str) else "",
)
def test_paho_client_packets(
    name: str, version: int, send: Callable[[CapturingClient], object], expected: Packet
) -> None:
    client = CapturingClient(version, client_id=f"paho{version}")
    send(client)
    [wire] = client.sent
    decoded = read_all(wire, None if isinstance(expected, Connect) else version)
    assert decoded == [expected]
    assert encode_packet(expected, version) == wire


def test_paho_session_through_the_server_codec() -> None:
    """A paho CONNECT, SUBSCRIBE and PUBLISH, read by one server connection in one chunk."""
    client = CapturingClient(5, client_id="s")
    client._send_connect(10)
    client._send_subscribe(0, [(b"x/#", SubscribeOptions(qos=1))])
    client._send_publish(1, b"x/y", b"hello", 1)
    conn = MQTTConnection()
    conn.receive_data(b"".join(client.sent))
    connect, subscribe, publish = drain(conn)
    assert isinstance(connect, Connect) and connect.client_id == "s"
    assert subscribe == Subscribe(1, [Subscription("x/#", SubscriptionOptions(qos=1))])
    assert publish == Publish("x/y", b"hello", 1, packet_id=1)


# -- server -> client: paho reads what we write -------------------------------------------


def body(data: bytes) -> tuple[int, bytes]:
    """(first byte, the bytes after the remaining length)."""
    i = 1
    while data[i] & 0x80:
        i += 1
    return data[0], data[i + 1 :]


def server_bytes(version: int, packet: Packet) -> bytes:
    conn = connected(version)
    conn.send(packet)
    return conn.data_to_send()


@pytest.mark.parametrize("version", [4, 5])
def test_paho_reads_our_connack(version: int) -> None:
    conn = MQTTConnection()
    conn.receive_data(encode_packet(Connect("c", version), version))
    conn.next_event()
    props = Properties(
        topic_alias_maximum=5, assigned_client_identifier="id-1", server_keep_alive=20
    )
    conn.send(ConnAck(session_present=True, properties=props))
    first, rest = body(conn.data_to_send())
    result = paho_packet.decode_connack(first, rest, VERSIONS[version])
    assert result.flags == 1 and result.rc == 0
    if version == 5:
        assert result.properties is not None
        assert result.properties.json() == {
            "TopicAliasMaximum": 5,
            "AssignedClientIdentifier": "id-1",
            "ServerKeepAlive": 20,
        }


@pytest.mark.parametrize(("code", "rc"), [(0x84, 1), (0x85, 2), (0x88, 3), (0x86, 4), (0x87, 5)])
def test_paho_reads_our_mqtt311_refusals(code: int, rc: int) -> None:
    conn = MQTTConnection()
    conn.receive_data(encode_packet(Connect("c", 4), 4))
    conn.next_event()
    conn.send(ConnAck(code))
    first, rest = body(conn.data_to_send())
    result = paho_packet.decode_connack(first, rest, MQTTProtocolVersion.MQTTv311)
    assert result.rc == rc and result.reason.value == code


@pytest.mark.parametrize("version", [4, 5])
@pytest.mark.parametrize("qos", [0, 1, 2])
def test_paho_reads_our_publish(version: int, qos: int) -> None:
    props = Properties(
        subscription_identifiers=[3, 400], content_type="json", user_properties=[("a", "b")]
    )
    packet = Publish("s/t", b"\x00data", qos, True, qos > 0, 42 if qos else None, props)
    first, rest = body(server_bytes(version, packet))
    result = paho_packet.decode_publish(first, rest, VERSIONS[version])
    assert (result.topic, bytes(result.payload), result.qos, result.retain) == (
        b"s/t",
        b"\x00data",
        qos,
        True,
    )
    assert result.dup == (qos > 0) and result.mid == (42 if qos else 0)
    if version == 5:
        assert result.properties is not None
        assert result.properties.json() == {
            "SubscriptionIdentifier": [3, 400],
            "ContentType": "json",
            "UserProperty": [("a", "b")],
        }


@pytest.mark.parametrize("version", [4, 5])
def test_paho_reads_our_suback_and_unsuback(version: int) -> None:
    first, rest = body(server_bytes(version, SubAck(3, [0, 2, ReasonCode.NOT_AUTHORIZED])))
    result = paho_packet.decode_suback(first, rest, VERSIONS[version])
    expected = [0, 2, 0x87] if version == 5 else [0, 2, 0x80]  # 3.1.1 has one failure code
    assert result.mid == 3 and [rc.value for rc in result.reason_codes] == expected
    first, rest = body(server_bytes(version, UnsubAck(4, [0, ReasonCode.NO_SUBSCRIPTION_EXISTED])))
    unsuback = paho_packet.decode_unsuback(first, rest, VERSIONS[version])
    assert unsuback.mid == 4
    assert [rc.value for rc in unsuback.reason_codes] == ([0, 0x11] if version == 5 else [])


@pytest.mark.parametrize(
    ("packet", "decoder"),
    [
        (
            PubAck(5, ReasonCode.NO_MATCHING_SUBSCRIBERS, Properties(reason_string="none")),
            paho_packet.decode_puback,
        ),
        (PubRec(5, ReasonCode.QUOTA_EXCEEDED), paho_packet.decode_pubrec),
        (PubRel(5), paho_packet.decode_pubrel),
        (PubComp(5, ReasonCode.PACKET_IDENTIFIER_NOT_FOUND), paho_packet.decode_pubcomp),
    ],
)
def test_paho_reads_our_publish_acknowledgements(packet: Any, decoder: Any) -> None:
    first, rest = body(server_bytes(5, packet))
    result = decoder(first, rest, MQTTProtocolVersion.MQTTv5)
    assert result.mid == 5 and result.reason.value == packet.reason_code
    if packet.properties.reason_string:
        assert result.properties.ReasonString == "none"


def test_paho_reads_our_disconnect() -> None:
    packet = Disconnect(ReasonCode.SERVER_MOVED, Properties(server_reference="elsewhere:1883"))
    first, rest = body(server_bytes(5, packet))
    result = paho_packet.decode_disconnect(first, rest, MQTTProtocolVersion.MQTTv5)
    assert result.reason is not None and result.reason.value == 0x9D
    assert result.properties is not None
    assert result.properties.json() == {"ServerReference": "elsewhere:1883"}

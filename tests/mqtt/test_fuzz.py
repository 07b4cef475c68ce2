"""Hypothesis: whatever a client sends, the server codec yields packets or one
RemoteProtocolError, never another exception (h11's fuzz invariant), and at the end of the
stream ConnectionClosed or that error; what it yields re-encodes to something that decodes the
same; the size limit holds before the payload arrives."""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from herald.core.codec_kit import RemoteProtocolError
from herald.plugins.mqtt.codec import (
    NEED_DATA,
    ConnAck,
    Connect,
    ConnectionClosed,
    MQTTConnection,
    Packet,
    Properties,
    Publish,
    ReasonCode,
    Subscribe,
    Subscription,
    SubscriptionOptions,
    Unsubscribe,
    encode_packet,
)
from tests.mqtt.helpers import connect_bytes, connected, read_all, varint

VERSIONS = st.sampled_from([3, 4, 5])


def feed(
    conn: MQTTConnection, chunks: list[bytes]
) -> tuple[list[Packet], RemoteProtocolError | None]:
    """Feed the chunks (b"": the end of the stream); every outcome is a packet, NEED_DATA,
    ConnectionClosed once the stream ended, or one RemoteProtocolError."""
    packets: list[Packet] = []
    try:
        for chunk in chunks:
            conn.receive_data(chunk)
            while (event := conn.next_event()) is not NEED_DATA:
                if isinstance(event, ConnectionClosed):
                    assert not chunk
                    return packets, None
                assert isinstance(event, Packet)
                packets.append(event)
    except RemoteProtocolError as exc:
        assert isinstance(exc.code, int) and 0x80 <= exc.code <= 0xA2
        reply = conn.error_reply()
        if reply is not None:
            conn.send(reply)  # the suggested reply is always sendable
            assert conn.data_to_send()
        return packets, exc
    return packets, None


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


def assert_reencodes(packets: list[Packet], version: int) -> None:
    for packet in packets:
        level = None if isinstance(packet, Connect) else version
        assert read_all(encode_packet(packet, version), level) == [packet]


@given(VERSIONS, st.booleans(), st.binary(max_size=300), st.lists(st.integers(0, 400)))
def test_garbage_after_connect(version: int, acked: bool, garbage: bytes, cuts: list[int]) -> None:
    conn = connected(version) if acked else MQTTConnection()
    data = garbage if acked else connect_bytes(version) + garbage
    packets, _ = feed(conn, [*chunked(data, cuts), b""])
    assert_reencodes(packets, version)


@given(st.binary(max_size=200))
def test_garbage_as_the_first_packet(garbage: bytes) -> None:
    packets, _ = feed(MQTTConnection(), [garbage, b""])
    assert all(isinstance(p, Connect) for p in packets[:1])


SAMPLE_STREAM = {
    version: b"".join(
        encode_packet(p, version)
        for p in [
            Publish(
                "a/b", b"hello", 1, packet_id=1, properties=Properties(user_properties=[("k", "v")])
            ),
            Subscribe(2, [Subscription("a/+", SubscriptionOptions(1)), Subscription("$share/g/#")]),
            Unsubscribe(3, ["a/+"]),
            Publish(
                "c", b"", 2, packet_id=4, properties=Properties(topic_alias=1, content_type="x")
            ),
        ]
    )
    + b"\x40\x02\x00\x01\xc0\x00\xe0\x00"
    for version in (3, 4, 5)
}


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(
    VERSIONS,
    st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), min_size=1, max_size=4),
    st.lists(st.integers(0, 200)),
)
def test_mutated_valid_stream(version: int, edits: list[tuple[int, int]], cuts: list[int]) -> None:
    """Valid packets with a few bytes changed: the mutations reach deep into the decoders."""
    data = bytearray(SAMPLE_STREAM[version])
    for at, value in edits:
        data[at % len(data)] = value
    packets, _ = feed(connected(version, topic_alias_maximum=5), chunked(bytes(data), cuts))
    assert_reencodes(packets, version)


@given(st.integers(1025, 268_435_455), st.sampled_from([0x30, 0x32, 0x82, 0x10]))
def test_size_limit_is_checked_from_the_fixed_header(length: int, first: int) -> None:
    header = bytes((first,)) + varint(length)
    conn = MQTTConnection(max_packet_size=1024)
    if first != 0x10:
        conn = connected(4, max_packet_size=1024)
    _, error = feed(conn, [header])
    assert error is not None and error.code == ReasonCode.PACKET_TOO_LARGE


PUBLISHES = st.builds(
    Publish,
    topic=st.text(
        st.characters(exclude_categories=["Cs"], exclude_characters="\x00+#"),
        min_size=1,
        max_size=30,
    ),
    payload=st.binary(max_size=300),
    qos=st.just(0),
    retain=st.booleans(),
    properties=st.builds(
        Properties,
        message_expiry_interval=st.none() | st.integers(0, 2**32 - 1),
        content_type=st.none() | st.text(max_size=5).filter(lambda t: "\x00" not in t),
        correlation_data=st.none() | st.binary(max_size=5),
        user_properties=st.lists(
            st.tuples(st.just("k"), st.text(max_size=3).filter(lambda t: "\x00" not in t)),
            max_size=2,
        ),
    ),
)


@given(VERSIONS, st.lists(PUBLISHES, max_size=5), st.integers(0, 2), st.lists(st.integers(0, 2000)))
def test_publish_round_trip_through_the_server(
    version: int, publishes: list[Publish], qos: int, cuts: list[int]
) -> None:
    expected = []
    for i, publish in enumerate(publishes):
        props = publish.properties if version == 5 else Properties()
        packet_id = i + 1 if qos else None
        expected.append(
            Publish(publish.topic, publish.payload, qos, publish.retain, False, packet_id, props)
        )
    data = b"".join(encode_packet(p, version) for p in expected)
    packets, error = feed(connected(version), chunked(data, cuts))
    assert error is None
    assert packets == expected


@given(
    st.integers(1, 4),
    st.lists(st.sampled_from(["a", "b/c", "d", "e/f/g", "h", "i"]), max_size=40),
)
def test_outbound_aliases_resolve_to_the_topics_sent(maximum: int, topics: list[str]) -> None:
    """A client following MQTT 5.0 section 3.3.2.3.4 reads back every topic herald sent."""
    conn = MQTTConnection()
    conn.receive_data(
        encode_packet(Connect("c", 5, properties=Properties(topic_alias_maximum=maximum)), 5)
    )
    conn.next_event()
    conn.send(ConnAck())
    conn.data_to_send()
    for topic in topics:
        conn.send(Publish(topic, b"x"))
    aliases: dict[int, str] = {}
    resolved = []
    for packet in read_all(conn.data_to_send(), 5):
        assert isinstance(packet, Publish)
        alias = packet.properties.topic_alias
        assert alias is not None and 1 <= alias <= maximum
        if packet.topic:
            aliases[alias] = packet.topic
        resolved.append(aliases[alias])
    assert resolved == topics

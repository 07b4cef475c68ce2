"""The server connection's rules: handshake, frame limits, content assembly, reply codes,
closing, and what herald may send."""

from __future__ import annotations

import struct

import pytest

from herald.core.errors import LocalProtocolError, RemoteProtocolError
from herald.plugins.amqp.codec import (
    NEED_DATA,
    AMQPConnection,
    BasicProperties,
    ConnectionState,
    ContentTooLarge,
    Delivery,
    Event,
    Heartbeat,
    Message,
    MethodFrame,
    ProtocolHeader,
)
from herald.plugins.amqp.codec.constants import PROTOCOL_HEADER, FrameType
from herald.plugins.amqp.codec.frames import HEARTBEAT_FRAME, frame
from herald.plugins.amqp.codec.methods import (
    BasicAck,
    BasicDeliver,
    BasicPublish,
    BasicQos,
    ChannelClose,
    ChannelOpen,
    ConnectionClose,
    ConnectionCloseOk,
    ConnectionOpen,
    ConnectionStart,
    ConnectionStartOk,
    ConnectionTune,
    ConnectionTuneOk,
    QueueDeclareOk,
)
from tests.amqp.helpers import body_frame, feed, header_frame, messages, method_frame, server_in

S = ConnectionState
PUBLISH = BasicPublish(exchange="ex", routing_key="rk")
PROPS = BasicProperties(content_type="text/plain")


def publish(channel: int, body: bytes, props: BasicProperties = PROPS) -> bytes:
    return (
        method_frame(channel, PUBLISH)
        + header_frame(channel, len(body), props)
        + (body_frame(channel, body) if body else b"")
    )


def fails(conn: AMQPConnection, data: bytes, code: int | None) -> RemoteProtocolError:
    conn.receive_data(data)
    with pytest.raises(RemoteProtocolError) as info:
        while conn.next_event() is not NEED_DATA:
            pass
    assert info.value.code == code, info.value
    return info.value


# -- handshake -------------------------------------------------------------------------------


def test_the_protocol_header_byte_by_byte_then_a_frame_in_the_same_chunk() -> None:
    conn = AMQPConnection()
    for byte in PROTOCOL_HEADER[:-1]:
        assert feed(conn, bytes([byte])) == []
    start_ok = method_frame(0, ConnectionStartOk(response=b"\0u\0p"))
    events = feed(conn, PROTOCOL_HEADER[-1:] + start_ok)
    assert events == [
        ProtocolHeader(0, 9, 1),
        MethodFrame(0, ConnectionStartOk(response=b"\0u\0p")),
    ]
    assert conn.state is S.HANDSHAKE


@pytest.mark.parametrize("header", [b"AMQP\x01\x01\x00\x09", b"AMQP\x00\x01\x00\x00", b"G"])
def test_a_foreign_header_is_answered_with_ours_and_refused(header: bytes) -> None:
    conn = AMQPConnection()
    error = fails(conn, header, None)
    assert conn.data_to_send() == PROTOCOL_HEADER
    conn.receive_data(PROTOCOL_HEADER)
    with pytest.raises(RemoteProtocolError) as again:
        conn.next_event()
    assert again.value is error  # broken for good


def test_the_handshake_states() -> None:
    conn = server_in(S.HANDSHAKE)
    conn.send(MethodFrame(0, ConnectionStart()))
    assert feed(conn, HEARTBEAT_FRAME) == [Heartbeat()]  # heartbeats are fine any time
    feed(conn, method_frame(0, ConnectionStartOk()))
    conn.send(MethodFrame(0, ConnectionTune(0, 4096, 0)))
    feed(conn, method_frame(0, ConnectionTuneOk(0, 4096, 0)))
    assert (conn.state, conn.frame_max) == (S.TUNED, 4096)
    feed(conn, method_frame(0, ConnectionOpen()))
    assert conn.state is S.OPEN


def test_channel_frames_before_connection_open_are_unexpected() -> None:
    fails(server_in(S.TUNED), method_frame(1, ChannelOpen()), 505)


# -- frame limits ------------------------------------------------------------------------


def test_an_oversized_frame_is_refused_on_its_header_before_its_payload() -> None:
    conn = server_in(S.HANDSHAKE)  # initial frame_max 8192
    assert conn.frame_max == 8192
    fails(conn, struct.pack(">BHI", 1, 0, 8193), 501)


def test_a_payload_of_exactly_frame_max_is_accepted_as_rabbitmq_does() -> None:
    conn = server_in(S.OPEN, frame_max=4096)
    body = b"x" * 4096
    assert messages(conn, publish(1, body))[0].body == body
    fails(conn, struct.pack(">BHI", 3, 1, 4097), 501)


@pytest.mark.parametrize(
    "offered, accepted, code",
    [(131072, 4095, 530), (131072, 131073, 530), (131072, 0, 530), (0, 0, None)],
)
def test_tune_ok_frame_max_is_checked(offered: int, accepted: int, code: int | None) -> None:
    conn = server_in(S.HANDSHAKE)
    conn.send(MethodFrame(0, ConnectionTune(0, offered, 0)))
    tune_ok = method_frame(0, ConnectionTuneOk(0, accepted, 0))
    if code is not None:
        fails(conn, tune_ok, code)
        return
    feed(conn, tune_ok + method_frame(0, ConnectionOpen()) + method_frame(1, ChannelOpen()))
    big = b"x" * 300_000  # no limit negotiated: one huge frame is fine
    assert messages(conn, publish(1, big))[0].body == big


def test_only_the_handshakes_tune_ok_sets_frame_max() -> None:
    conn = server_in(S.OPEN, frame_max=4096)
    assert feed(conn, method_frame(0, ConnectionTuneOk(0, 0, 0)))  # the session's to refuse
    assert conn.frame_max == 4096


def test_initial_frame_max_below_the_spec_minimum_is_refused() -> None:
    with pytest.raises(ValueError):
        AMQPConnection(initial_frame_max=1024)


# -- frame and method errors ----------------------------------------------------------------


def publish_payload(extra: bytes = b"") -> bytes:
    return PUBLISH.encode() + extra


@pytest.mark.parametrize(
    "data, code",
    [
        (frame(FrameType.METHOD, 1, b"\x00\x3c") + HEARTBEAT_FRAME, 501),  # shorter than ids
        (frame(FrameType.METHOD, 1, publish_payload()[:-1]), 501),  # truncated arguments
        (frame(FrameType.METHOD, 1, publish_payload(b"\x00")), 501),  # extra bytes
        (frame(FrameType.METHOD, 1, b"\x00\x3c\x00\x28\x00\x00\x01\xff\x00\x00"), 501),  # UTF-8
        (frame(FrameType.METHOD, 1, publish_payload())[:-1] + b"\x00", 501),  # frame end
        (frame(4, 1, b""), 501),  # unknown frame type
        (frame(FrameType.HEARTBEAT, 0, b"x"), 501),
        (frame(FrameType.HEARTBEAT, 1, b""), 505),
        (frame(FrameType.METHOD, 1, b"\x00\x3c\x03\xe7"), 540),  # unknown method 60.999
        (frame(FrameType.METHOD, 1, b"\x00\x1e\x00\x0a"), 540),  # access.request: not 0-9-1
        (method_frame(1, BasicDeliver("c", 1)), 503),  # servers send it, clients don't
        (method_frame(1, ConnectionOpen()), 503),  # connection method off channel 0
        (method_frame(0, BasicQos()), 504),  # channel method on channel 0
    ],
)
def test_frame_and_method_errors_carry_rabbitmqs_codes(data: bytes, code: int) -> None:
    fails(server_in(S.OPEN), data, code)


# -- content assembly ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        method_frame(1, PUBLISH) + method_frame(1, BasicAck(1)),  # method mid-content
        method_frame(1, PUBLISH) + header_frame(1, 3, PROPS) + method_frame(1, BasicAck(1)),
        header_frame(1, 3, PROPS),  # header without a publish
        method_frame(1, PUBLISH) + body_frame(1, b"abc"),  # body without a header
        publish(1, b"abc") + body_frame(1, b"d"),  # body after the content is complete
        method_frame(1, PUBLISH) + header_frame(1, 3, PROPS) + body_frame(1, b"abcd"),  # long
        header_frame(0, 3, PROPS),
        body_frame(0, b"abc"),
        method_frame(1, PUBLISH) + frame(FrameType.HEADER, 1, struct.pack(">HHQH", 50, 0, 1, 0)),
        method_frame(1, PUBLISH) + frame(FrameType.HEADER, 1, struct.pack(">HHQH", 60, 1, 1, 0)),
    ],
)
def test_content_out_of_order_is_an_unexpected_frame(data: bytes) -> None:
    fails(server_in(S.OPEN), data, 505)


@pytest.mark.parametrize(
    "payload, code",
    [
        (struct.pack(">HHQ", 60, 0, 1), 501),  # no flags word
        (struct.pack(">HHQHB", 60, 0, 1, 0x1000, 2) + b"x", 501),  # list longer than flags say
        (struct.pack(">HHQHH", 60, 0, 1, 0x0001, 0x8000), 502),  # an unknown property
    ],
)
def test_malformed_content_headers(payload: bytes, code: int) -> None:
    fails(server_in(S.OPEN), method_frame(1, PUBLISH) + frame(FrameType.HEADER, 1, payload), code)


def test_an_empty_continuation_flags_word_is_accepted() -> None:
    payload = struct.pack(">HHQHH", 60, 0, 0, 0x0001, 0x0000)
    (message,) = messages(server_in(S.OPEN), method_frame(1, PUBLISH) + frame(2, 1, payload))
    assert message.properties == BasicProperties()
    assert message.raw_properties == b"\x00\x01\x00\x00"


def test_an_empty_body_completes_at_the_header() -> None:
    conn = server_in(S.OPEN)
    assert feed(conn, publish(1, b"")) == [
        Message(1, PUBLISH, PROPS, b"", b"\x80\x00\x0atext/plain")
    ]
    assert messages(conn, publish(1, b"next"))[0].body == b"next"


def test_contents_on_two_channels_interleave() -> None:
    conn = server_in(S.OPEN)
    feed(conn, method_frame(2, ChannelOpen()))
    first = messages(
        conn, method_frame(1, PUBLISH) + header_frame(1, 2, PROPS) + publish(2, b"two")
    )
    assert [(m.channel, m.body) for m in first] == [(2, b"two")]
    second = messages(conn, body_frame(1, b"o") + body_frame(1, b"n"))
    assert [(m.channel, m.body) for m in second] == [(1, b"on")]


def test_consecutive_messages_keep_their_own_properties() -> None:
    conn = server_in(S.OPEN)
    a, b = BasicProperties(message_id="a"), BasicProperties(message_id="b")
    events = messages(conn, publish(1, b"1", a) + publish(1, b"2", b) + publish(1, b"3", a))
    assert [m.properties.message_id for m in events] == ["a", "b", "a"]


def test_a_content_over_max_message_size_is_reported_and_its_body_dropped() -> None:
    conn = AMQPConnection(max_message_size=10)
    conn.receive_data(PROTOCOL_HEADER)
    conn.next_event()
    feed(conn, method_frame(0, ConnectionTuneOk(0, 0, 0)) + method_frame(0, ConnectionOpen()))
    events = feed(conn, method_frame(1, PUBLISH) + header_frame(1, 20, PROPS))
    assert events == [ContentTooLarge(1, PUBLISH, 20)]
    assert feed(conn, body_frame(1, b"x" * 12) + body_frame(1, b"y" * 8)) == []
    assert messages(conn, publish(1, b"small"))[0].body == b"small"


# -- closing ------------------------------------------------------------------------------


def test_after_the_server_closes_only_close_and_close_ok_count() -> None:
    conn = server_in(S.OPEN)
    feed(conn, method_frame(1, PUBLISH) + header_frame(1, 4, PROPS))  # a content in progress
    conn.send(MethodFrame(0, ConnectionClose(320, "shutdown")))
    closing = conn.state
    ignored = body_frame(1, b"abcd") + publish(1, b"late") + method_frame(0, ConnectionOpen())
    assert feed(conn, ignored + HEARTBEAT_FRAME) == [Heartbeat()]
    conn.data_to_send()
    conn.send(Delivery(1, BasicDeliver("c", 1), PROPS, b"dropped"))
    conn.send(MethodFrame(1, ChannelClose()))
    assert conn.data_to_send() == b""
    assert feed(conn, method_frame(0, ConnectionCloseOk())) == [MethodFrame(0, ConnectionCloseOk())]
    assert (closing, conn.state) == (S.CLOSING, S.CLOSED)
    with pytest.raises(LocalProtocolError):
        conn.send(Heartbeat())


def test_a_client_close_is_answered_with_close_ok() -> None:
    conn = server_in(S.OPEN)
    close = ConnectionClose(200, "bye")
    assert feed(conn, method_frame(0, close)) == [MethodFrame(0, close)]
    closing = conn.state
    conn.send(MethodFrame(0, ConnectionCloseOk()))
    assert conn.data_to_send() == method_frame(0, ConnectionCloseOk())
    assert (closing, conn.state) == (S.CLOSING, S.CLOSED)


def test_a_broken_connection_stays_broken() -> None:
    conn = server_in(S.OPEN)
    error = fails(conn, frame(9, 0, b""), 501)
    conn.receive_data(HEARTBEAT_FRAME)
    with pytest.raises(RemoteProtocolError) as again:
        conn.next_event()
    assert again.value is error


# -- sending ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "state, event",
    [
        (S.AWAIT_HEADER, MethodFrame(0, ConnectionStart())),
        (S.OPEN, ProtocolHeader()),
        (S.OPEN, MethodFrame(1, BasicDeliver("c", 1))),  # content needs a Delivery
        (S.OPEN, MethodFrame(0, ConnectionStartOk())),  # a client method
        (S.OPEN, MethodFrame(0, ChannelOpen())),
        (S.OPEN, MethodFrame(1, ConnectionClose())),
        (S.TUNED, Delivery(1, BasicDeliver("c", 1), PROPS, b"")),  # before open
        (S.OPEN, Delivery(1, BasicAck(1), PROPS, b"")),  # no content
        (S.OPEN, Delivery(0, BasicDeliver("c", 1), PROPS, b"")),
        (S.OPEN, MethodFrame(1, QueueDeclareOk("q" * 256))),  # shortstr too long
        (S.OPEN, Delivery(1, BasicDeliver("c", -1), PROPS, b"")),  # longlong out of range
        (S.OPEN, Delivery(1, BasicDeliver("c", 1), BasicProperties(priority=256), b"")),
        (S.HANDSHAKE, MethodFrame(0, ConnectionStart(server_properties={"k": "v" * 9000}))),
    ],
)
def test_what_a_server_may_not_send(state: ConnectionState, event: Event) -> None:
    conn = server_in(state)
    with pytest.raises(LocalProtocolError):
        conn.send(event)
    assert conn.data_to_send() == b""


@pytest.mark.parametrize(
    "size, frames", [(0, 0), (1, 1), (4088, 1), (4089, 2), (3 * 4088, 3), (3 * 4088 + 1, 4)]
)
def test_delivery_bodies_are_cut_at_frame_max_minus_8(size: int, frames: int) -> None:
    conn = server_in(S.OPEN, frame_max=4096)
    body = bytes(range(256)) * (size // 256) + bytes(size % 256)
    conn.send(Delivery(1, BasicDeliver("c", 1), PROPS, body))
    data = conn.data_to_send()
    sizes, pos = [], 0
    while pos < len(data):
        frame_type, _, length = struct.unpack_from(">BHI", data, pos)
        if frame_type == FrameType.BODY:
            sizes.append(length)
        pos += 8 + length
    assert len(sizes) == frames and all(s <= 4088 for s in sizes) and sum(sizes) == size


def test_everything_queued_goes_out_as_one_write() -> None:
    conn = server_in(S.OPEN)
    assert conn.data_to_send() == b""
    conn.send(MethodFrame(1, BasicAck(1)))
    conn.send(Heartbeat())
    conn.send(Delivery(1, BasicDeliver("c", 2), b"\x00\x00", b"x"))
    assert conn.data_to_send() == (
        method_frame(1, BasicAck(1))
        + HEARTBEAT_FRAME
        + method_frame(1, BasicDeliver("c", 2))
        + header_frame(1, 1, b"\x00\x00")
        + body_frame(1, b"x")
    )

"""The end of the client's stream (`receive_data(b"")`) and `error_reply()`, byte for byte:
between frames the stream ends cleanly, inside a frame, the protocol header or a message it is
a 501, and the connection.close to answer with is the codec's."""

from __future__ import annotations

import struct

import pytest

from herald.core.errors import LocalProtocolError, RemoteProtocolError
from herald.plugins.amqp.codec import (
    NEED_DATA,
    AMQPConnection,
    ConnectionClosed,
    ConnectionState,
    ContentTooLarge,
    Heartbeat,
    MethodFrame,
)
from herald.plugins.amqp.codec.constants import PROTOCOL_HEADER, FrameType
from herald.plugins.amqp.codec.frames import HEARTBEAT_FRAME, frame
from herald.plugins.amqp.codec.methods import (
    BasicPublish,
    BasicQos,
    ConnectionClose,
    ConnectionCloseOk,
    ConnectionOpen,
    ConnectionStartOk,
    ConnectionTuneOk,
)
from tests.amqp.helpers import body_frame, feed, header_frame, method_frame, server_in

S = ConnectionState
PUBLISH_METHOD = BasicPublish(exchange="ex", routing_key="rk")
PUBLISH = method_frame(1, PUBLISH_METHOD)


def close_frame(code: int, text: str) -> bytes:
    """connection.close on channel 0, class and method ids 0, packed by hand (not by the codec's
    encoder): frame header, 10.50, reply code, shortstr text, 0 0, frame end."""
    reply = text.encode()
    payload = struct.pack(">HHHB", 10, 50, code, len(reply)) + reply + struct.pack(">HH", 0, 0)
    return struct.pack(">BHI", 1, 0, len(payload)) + payload + b"\xce"


def ended(conn: AMQPConnection, data: bytes) -> RemoteProtocolError:
    """Feed `data`, end the stream, and return the error next_event raised for it."""
    conn.receive_data(data)
    conn.receive_data(b"")
    with pytest.raises(RemoteProtocolError) as info:
        while conn.next_event() is not NEED_DATA:
            pass
    return info.value


def goodbye(conn: AMQPConnection) -> bytes:
    """What the codec writes for its error_reply()."""
    reply = conn.error_reply()
    assert reply is not None
    conn.send(reply)
    return conn.data_to_send()


# -- between frames: a clean end -------------------------------------------------------------


@pytest.mark.parametrize("state", [S.AWAIT_HEADER, S.HANDSHAKE, S.TUNED, S.OPEN])
def test_the_end_at_a_frame_boundary_is_connection_closed(state: ConnectionState) -> None:
    conn = server_in(state)
    assert feed(conn, b"") == [ConnectionClosed()]
    assert conn.next_event() == ConnectionClosed()  # and again: it stays ended
    assert conn.error_reply() is None


def test_events_before_the_end_come_first() -> None:
    conn = server_in(S.OPEN)
    conn.receive_data(HEARTBEAT_FRAME + method_frame(1, BasicQos()))
    conn.receive_data(b"")
    assert feed(conn, b"") == [Heartbeat(), MethodFrame(1, BasicQos()), ConnectionClosed()]


def test_the_end_after_the_server_closed_is_connection_closed() -> None:
    conn = server_in(S.OPEN)
    conn.send(MethodFrame(0, ConnectionClose(320, "shutdown")))
    assert feed(conn, method_frame(1, BasicQos())) == []  # dropped while closing
    assert feed(conn, b"") == [ConnectionClosed()]


def test_data_after_the_end_is_our_mistake() -> None:
    conn = server_in(S.OPEN)
    conn.receive_data(b"")
    conn.receive_data(b"")  # saying it twice is fine
    with pytest.raises(LocalProtocolError, match="after the end of the stream"):
        conn.receive_data(HEARTBEAT_FRAME)
    assert feed(conn, b"") == [ConnectionClosed()]


# -- inside a frame, the header or a message: 501 ----------------------------------------------


def test_the_end_inside_a_frame_is_a_501_answered_with_connection_close() -> None:
    conn = server_in(S.OPEN)
    error = ended(conn, HEARTBEAT_FRAME + method_frame(1, BasicQos())[:-3])
    text = "the peer closed the connection in the middle of a frame (16 bytes)"  # 19 - 3
    assert (error.code, error.text) == (501, text)
    assert goodbye(conn) == close_frame(501, "FRAME_ERROR - " + text)
    assert conn.state is S.CLOSING


def test_the_end_inside_a_handshake_frame_is_answered_too() -> None:
    conn = server_in(S.HANDSHAKE)
    error = ended(conn, method_frame(0, ConnectionStartOk(response=b"\0u\0p"))[:5])
    assert error.code == 501
    assert goodbye(conn) == close_frame(
        501, "FRAME_ERROR - the peer closed the connection in the middle of a frame (5 bytes)"
    )


@pytest.mark.parametrize("cut", [1, 4, 7])
def test_the_end_inside_the_protocol_header_is_a_501_with_nothing_to_say(cut: int) -> None:
    conn = AMQPConnection()
    error = ended(conn, PROTOCOL_HEADER[:cut])
    assert (error.code, error.text) == (
        501,
        f"the peer closed the connection in the middle of a frame ({cut} bytes)",
    )
    assert conn.error_reply() is None  # no connection.start yet: no close either
    assert conn.data_to_send() == b""


@pytest.mark.parametrize(
    "data",
    [
        PUBLISH,  # no content header
        PUBLISH + header_frame(1, 3, b"\x00\x00"),  # no body
        PUBLISH + header_frame(1, 3, b"\x00\x00") + body_frame(1, b"ab"),  # a body too short
    ],
    ids=["method", "method+header", "method+header+part"],
)
def test_the_end_inside_a_message_is_a_501(data: bytes) -> None:
    conn = server_in(S.OPEN)
    error = ended(conn, data)
    text = "the peer closed the connection in the middle of a message on channel 1"
    assert (error.code, error.text) == (501, text)
    assert goodbye(conn) == close_frame(501, "FRAME_ERROR - " + text)


def test_the_end_inside_a_message_over_max_message_size_is_a_501() -> None:
    conn = AMQPConnection(max_message_size=10)
    conn.receive_data(PROTOCOL_HEADER)
    conn.next_event()
    feed(conn, method_frame(0, ConnectionTuneOk(0, 0, 0)) + method_frame(0, ConnectionOpen()))
    dropping = PUBLISH + header_frame(1, 20, b"\x00\x00") + body_frame(1, b"x" * 12)
    assert feed(conn, dropping) == [ContentTooLarge(1, PUBLISH_METHOD, 20)]
    error = ended(conn, b"")
    assert (error.code, error.text) == (
        501,
        "the peer closed the connection in the middle of a message on channel 1",
    )


# -- error_reply for the codec's other errors --------------------------------------------------


def fails(conn: AMQPConnection, data: bytes) -> RemoteProtocolError:
    conn.receive_data(data)
    with pytest.raises(RemoteProtocolError) as info:
        while conn.next_event() is not NEED_DATA:
            pass
    return info.value


@pytest.mark.parametrize(
    "state, data, code, reply",
    [
        (
            S.HANDSHAKE,
            struct.pack(">BHI", 1, 0, 8193),
            501,
            "FRAME_ERROR - frame of 8193 bytes exceeds frame_max 8192",
        ),
        (
            S.OPEN,
            frame(FrameType.METHOD, 1, b"\x00\x3c\x03\xe7"),
            540,
            "NOT_IMPLEMENTED - unknown method 60.999",
        ),
        (S.OPEN, method_frame(0, BasicQos()), 504, "CHANNEL_ERROR - basic.qos on channel 0"),
        (
            S.TUNED,
            method_frame(1, BasicQos()),
            505,
            "UNEXPECTED_FRAME - frame on channel 1 before connection.open",
        ),
    ],
    ids=["frame-too-large", "unknown-method", "channel-0", "before-open"],
)
def test_error_reply_is_the_sessions_connection_close(
    state: ConnectionState, data: bytes, code: int, reply: str
) -> None:
    conn = server_in(state)
    assert fails(conn, data).code == code
    assert goodbye(conn) == close_frame(code, reply)


def test_error_reply_says_nothing_without_an_error_a_code_or_a_state_to_say_it_in() -> None:
    assert server_in(S.OPEN).error_reply() is None  # not broken
    foreign = AMQPConnection()
    assert fails(foreign, b"AMQP\x01\x01\x00\x09").code is None
    assert foreign.data_to_send() == PROTOCOL_HEADER  # the answer, queued already
    assert foreign.error_reply() is None
    closing = server_in(S.OPEN)
    closing.send(MethodFrame(0, ConnectionClose(320, "shutdown")))
    closing.data_to_send()
    assert fails(closing, frame(9, 0, b"")).code == 501
    assert closing.error_reply() is None  # connection.close was said already
    closed = server_in(S.OPEN)
    feed(closed, method_frame(0, ConnectionClose(200, "bye")))
    closed.send(MethodFrame(0, ConnectionCloseOk()))
    assert closed.state is S.CLOSED
    assert fails(closed, frame(9, 0, b"")).code == 501
    assert closed.error_reply() is None

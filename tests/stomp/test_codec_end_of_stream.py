"""The end of the stream through the codec (`receive_data(b"")`), and the state table's
refusals: a clean close between frames, a protocol error and its exact ERROR inside one."""

from __future__ import annotations

import itertools

import pytest

from herald.core.codec_kit import (
    CodecConnection,
    ConnectionClosed,
    Direction,
    LocalProtocolError,
    RemoteProtocolError,
)
from herald.plugins.stomp.codec import (
    CLIENT_COMMANDS,
    HEARTBEAT,
    NEED_DATA,
    SERVER_COMMANDS,
    Frame,
    State,
    StompConnection,
    error_frame,
)
from herald.plugins.stomp.codec.state import TABLE, TRANSITIONS
from tests.stomp.codec_helpers import drain, opened

SEND = b"SEND\ndestination:/queue/a\n\nhi\x00"


def ended(conn: StompConnection, data: bytes, byte_by_byte: bool = False) -> StompConnection:
    """`conn` after `data` (in one piece or a byte at a time), then the end of the stream."""
    for chunk in [data[i : i + 1] for i in range(len(data))] if byte_by_byte else [data]:
        conn.receive_data(chunk)
    conn.receive_data(b"")
    return conn


# -- between frames: a clean close ---------------------------------------------------------


@pytest.mark.parametrize("byte_by_byte", [False, True])
@pytest.mark.parametrize(
    ("data", "before"),
    [
        (b"", []),
        (SEND, [Frame("SEND", (("destination", "/queue/a"),), b"hi")]),
        (b"\n\r\n", [HEARTBEAT, HEARTBEAT]),  # heart-beat EOLs are whole events
        (SEND + b"\n", [Frame("SEND", (("destination", "/queue/a"),), b"hi"), HEARTBEAT]),
    ],
)
def test_the_end_between_frames_is_connection_closed(
    data: bytes, before: list[object], byte_by_byte: bool
) -> None:
    conn = ended(opened(), data, byte_by_byte)
    assert drain(conn) == [*before, ConnectionClosed()]
    assert conn.next_event() == ConnectionClosed()  # and again, as h11 does
    assert conn.error_reply() is None  # nothing went wrong


def test_the_end_before_connect_is_connection_closed() -> None:
    conn = ended(StompConnection(), b"\n")
    assert drain(conn) == [HEARTBEAT, ConnectionClosed()]
    assert conn.state is State.AWAIT_CONNECT


def test_the_end_after_an_error_frame_is_connection_closed() -> None:
    """The server sent ERROR: what the client sent after it is not read, cut or not."""
    conn = opened()
    conn.send(error_frame("bye"))
    conn.receive_data(b"SEND\ndestin")
    assert conn.next_event() is NEED_DATA
    conn.receive_data(b"")
    assert conn.next_event() == ConnectionClosed()


def test_a_frame_completed_by_the_last_bytes_is_read_before_the_close() -> None:
    conn = opened()
    conn.receive_data(SEND[:-1])
    assert conn.next_event() is NEED_DATA
    ended(conn, SEND[-1:])
    assert drain(conn) == [Frame("SEND", (("destination", "/queue/a"),), b"hi"), ConnectionClosed()]


def test_data_after_the_end_is_the_callers_error() -> None:
    conn = ended(opened(), b"")
    conn.receive_data(b"")  # the end, said twice, is still the end
    with pytest.raises(LocalProtocolError, match="data received after the end of the stream"):
        conn.receive_data(SEND)
    assert conn.next_event() == ConnectionClosed()


# -- inside a frame: a protocol error, answered with an ERROR ----------------------------------

CUT = [
    pytest.param(b"SEN", id="command line, cut in the command"),
    pytest.param(b"SEND", id="command line, no EOL"),
    pytest.param(b"SEND\r", id="command line, CR without LF"),
    pytest.param(b"SEND\ndestination:/queue/a", id="header line"),
    pytest.param(b"SEND\ndestination:/queue/a\n", id="headers, no empty line"),
    pytest.param(b"SEND\ndestination:/queue/a\n\n", id="body, empty so far"),
    pytest.param(b"SEND\ndestination:/queue/a\n\nhello", id="body without its NUL"),
    pytest.param(b"SEND\ncontent-length:5\n\nhel", id="content-length body short"),
    pytest.param(b"SEND\ncontent-length:5\n\nhello", id="content-length body, no NUL"),
    pytest.param(b"\r", id="a CR between frames"),
]


def cut_error(buffered: int) -> tuple[str, bytes]:
    """The error text for a stream that ended `buffered` bytes into a frame, and the ERROR
    frame that says it (STOMP 1.2, as `opened` agreed)."""
    text = f"the peer closed the connection in the middle of a frame ({buffered} bytes)"
    wire = b"ERROR\nmessage:%s\ncontent-type:text/plain\ncontent-length:%d\n\n%s\x00" % (
        text.encode(),
        len(text),
        text.encode(),
    )
    return text, wire


@pytest.mark.parametrize("byte_by_byte", [False, True])
@pytest.mark.parametrize("cut", CUT)
def test_the_end_inside_a_frame_is_a_protocol_error(cut: bytes, byte_by_byte: bool) -> None:
    conn = ended(opened(), SEND + b"\n" + cut, byte_by_byte)
    assert conn.next_event() == Frame("SEND", (("destination", "/queue/a"),), b"hi")
    assert conn.next_event() is HEARTBEAT
    text, wire = cut_error(len(cut))
    with pytest.raises(RemoteProtocolError) as raised:
        conn.next_event()
    assert (raised.value.text, raised.value.code) == (text, None)
    assert isinstance(raised.value.__cause__, LocalProtocolError)
    with pytest.raises(RemoteProtocolError):  # sticky
        conn.next_event()
    reply = conn.error_reply()
    assert reply is not None
    conn.send(reply)
    assert conn.data_to_send() == wire
    assert conn.state is State.CLOSED
    assert conn.error_reply() is None  # the ERROR is out: nothing more can be sent


def test_the_end_inside_connect_is_answered_in_1_0() -> None:
    conn = ended(StompConnection(), b"CONNECT\naccept-version:1.2\n")
    with pytest.raises(RemoteProtocolError, match=r"middle of a frame \(27 bytes\)"):
        conn.next_event()
    reply = conn.error_reply()
    assert reply is not None
    conn.send(reply)
    assert conn.data_to_send() == cut_error(27)[1]  # no escapes in it either way


def test_error_reply_says_the_callers_fuller_text() -> None:
    """The session adds the config key that raises a limit: its words go out, as they did."""
    conn = opened()
    conn.receive_data(b"garbage\n")
    with pytest.raises(RemoteProtocolError) as raised:
        conn.next_event()
    assert conn.error_reply() == error_frame(raised.value.text, raised.value.text.encode())
    assert conn.error_reply("too big (stomp.max_frame_size)") == Frame(
        "ERROR",
        (("message", "too big (stomp.max_frame_size)"), ("content-type", "text/plain")),
        b"too big (stomp.max_frame_size)",
    )


def test_the_connection_has_the_codec_kits_api() -> None:
    conn: CodecConnection = StompConnection()  # checked by mypy: the shared protocol
    conn.receive_data(b"")
    assert conn.next_event() == ConnectionClosed()


def test_no_error_reply_without_an_error() -> None:
    conn = opened()
    assert conn.error_reply() is None
    assert conn.error_reply("anything") is None


# -- the state table ---------------------------------------------------------------------------


@pytest.mark.parametrize(("state", "direction"), list(itertools.product(State, Direction)))
def test_a_move_not_in_the_table_is_refused(state: State, direction: Direction) -> None:
    commands = CLIENT_COMMANDS if direction is Direction.RECEIVE else SERVER_COMMANDS
    for command in sorted(CLIENT_COMMANDS | SERVER_COMMANDS):
        after = TRANSITIONS.get((state, direction, command))
        assert TABLE.allows(state, direction, command) is (after is not None)
        if after is not None:
            assert command in commands
            assert TABLE.next_state(state, direction, command) is after
            continue
        with pytest.raises(LocalProtocolError) as raised:
            TABLE.next_state(state, direction, command)
        assert command in raised.value.text and raised.value.code is None


def test_the_connection_refuses_what_the_table_refuses() -> None:
    """A frame the table has no move for, either way, with the refusal's words."""
    conn = opened()
    with pytest.raises(LocalProtocolError, match="cannot send CONNECTED in state open"):
        conn.send_encoded("CONNECTED", b"CONNECTED\n\n\x00")
    assert conn.data_to_send() == b""
    conn.receive_data(b"CONNECT\n\n\x00")
    with pytest.raises(RemoteProtocolError, match="CONNECT frame received on a connection"):
        conn.next_event()
    assert conn.state is State.OPEN

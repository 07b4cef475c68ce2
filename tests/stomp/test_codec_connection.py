"""StompConnection: the state table, version switching and the output queue."""

from __future__ import annotations

import pytest

from herald.core.codec_kit import Direction, LocalProtocolError, RemoteProtocolError
from herald.plugins.stomp.codec import (
    HEARTBEAT,
    NEED_DATA,
    Frame,
    State,
    StompConnection,
    error_frame,
)
from herald.plugins.stomp.codec.state import TRANSITIONS
from tests.stomp.codec_helpers import drain, opened

CONNECT = b"CONNECT\naccept-version:1.0,1.1,1.2\nhost:/\n\n\x00"


def test_handshake_and_session() -> None:
    conn = StompConnection()
    assert (conn.state, conn.version) == (State.AWAIT_CONNECT, "1.0")
    conn.receive_data(b"\n" + CONNECT)
    assert drain(conn) == [
        HEARTBEAT,
        Frame("CONNECT", (("accept-version", "1.0,1.1,1.2"), ("host", "/"))),
    ]
    # Tuples: mypy would narrow `conn.state is ...` and call the next check unreachable.
    assert (conn.state, conn.version) == (State.CONNECTING, "1.0")
    conn.version = "1.2"
    conn.send(Frame("CONNECTED", (("version", "1.2"), ("heart-beat", "0,0"))))
    assert (conn.state, conn.version) == (State.OPEN, "1.2")
    conn.receive_data(b"SUBSCRIBE\nid:0\ndestination:/queue/a\n\n\x00")
    assert drain(conn) == [Frame("SUBSCRIBE", (("id", "0"), ("destination", "/queue/a")))]
    conn.send(Frame("MESSAGE", (("subscription", "0"), ("destination", "/queue/a")), b"x"))
    conn.send_heartbeat()
    assert conn.data_to_send() == (
        b"CONNECTED\nversion:1.2\nheart-beat:0,0\n\n\x00"
        b"MESSAGE\nsubscription:0\ndestination:/queue/a\ncontent-length:1\n\nx\x00\n"
    )
    assert conn.data_to_send() == b""
    conn.receive_data(b"DISCONNECT\nreceipt:77\n\n\x00")
    assert drain(conn) == [Frame("DISCONNECT", (("receipt", "77"),))]
    assert conn.state is State.DISCONNECTING
    conn.send(Frame("RECEIPT", (("receipt-id", "77"),)))
    assert conn.data_to_send() == b"RECEIPT\nreceipt-id:77\n\n\x00"


def test_frames_pipelined_behind_connect_are_read_in_the_agreed_version() -> None:
    """Parsing is lazy: the SEND is read after the session set the version to 1.2."""
    conn = StompConnection()
    conn.receive_data(CONNECT + b"SEND\ndestination:/queue/a\\cb\ncr:x\\ry\n\n\x00")
    assert isinstance(conn.next_event(), Frame)
    conn.version = "1.2"
    conn.send(Frame("CONNECTED", (("version", "1.2"),)))
    assert conn.next_event() == Frame("SEND", (("destination", "/queue/a:b"), ("cr", "x\ry")))


def test_stomp_command_connects() -> None:
    conn = StompConnection()
    conn.receive_data(b"STOMP\naccept-version:1.2\nhost:/\n\n\x00")
    assert conn.next_event() == Frame("STOMP", (("accept-version", "1.2"), ("host", "/")))
    assert conn.state is State.CONNECTING


def test_version_is_validated() -> None:
    conn = StompConnection()
    with pytest.raises(ValueError, match="version"):
        conn.version = "2.0"
    with pytest.raises(ValueError, match="version"):
        StompConnection(version="1.3")


@pytest.mark.parametrize(
    ("prefix", "wire", "fragment"),
    [
        (b"", b"SEND\ndestination:/q\n\n\x00", "expected a CONNECT or STOMP frame first, got SEND"),
        (CONNECT, b"SEND\n\n\x00", "SEND frame received before the CONNECT frame was answered"),
        (CONNECT, CONNECT, "CONNECT frame received before the CONNECT frame was answered"),
    ],
)
def test_client_frames_refused_before_open(prefix: bytes, wire: bytes, fragment: str) -> None:
    conn = StompConnection()
    conn.receive_data(prefix + wire)
    with pytest.raises(RemoteProtocolError, match=fragment):
        drain(conn)


@pytest.mark.parametrize(
    ("wire", "fragment"),
    [
        (CONNECT, "already connected"),
        (b"STOMP\n\n\x00", "already connected"),
        (b"DISCONNECT\n\n\x00SEND\n\n\x00", "SEND frame received after DISCONNECT"),
        (b"DISCONNECT\n\n\x00DISCONNECT\n\n\x00", "DISCONNECT frame received after DISCONNECT"),
    ],
)
def test_client_frames_refused_when_open(wire: bytes, fragment: str) -> None:
    conn = opened()
    conn.receive_data(wire)
    with pytest.raises(RemoteProtocolError, match=fragment):
        drain(conn)


@pytest.mark.parametrize("command", ["MESSAGE", "RECEIPT", "CONNECTED"])
def test_server_frames_refused_before_connect_is_answered(command: str) -> None:
    conn = StompConnection()
    with pytest.raises(LocalProtocolError, match=f"cannot send {command} in state await-connect"):
        conn.send(Frame(command))
    assert conn.data_to_send() == b""
    assert conn.state is State.AWAIT_CONNECT


def test_connected_only_once() -> None:
    conn = opened()
    with pytest.raises(LocalProtocolError, match="cannot send CONNECTED in state open"):
        conn.send(Frame("CONNECTED"))


def test_server_cannot_send_client_frames() -> None:
    conn = opened()
    with pytest.raises(LocalProtocolError, match="cannot send SEND"):
        conn.send(Frame("SEND"))


@pytest.mark.parametrize("setup", ["fresh", "connecting", "open", "disconnecting", "broken"])
def test_error_closes_from_every_live_state(setup: str) -> None:
    conn = StompConnection() if setup in ("fresh", "connecting", "broken") else opened()
    if setup == "connecting":
        conn.receive_data(CONNECT)
        conn.next_event()
    elif setup == "disconnecting":
        conn.receive_data(b"DISCONNECT\n\n\x00")
        conn.next_event()
    elif setup == "broken":
        conn.receive_data(b"garbage\n")
        with pytest.raises(RemoteProtocolError):
            conn.next_event()
    conn.send(error_frame("bye"))
    assert conn.state is State.CLOSED
    assert conn.data_to_send() == b"ERROR\nmessage:bye\n\n\x00"


def test_after_error_nothing_more_is_sent_or_read() -> None:
    conn = opened()
    conn.send(error_frame("bye"))
    conn.data_to_send()
    with pytest.raises(LocalProtocolError, match="closed by an ERROR frame"):
        conn.send(Frame("RECEIPT", (("receipt-id", "1"),)))
    with pytest.raises(LocalProtocolError, match="heart-beat"):
        conn.send_heartbeat()
    conn.receive_data(b"SEND\n\n\x00")
    assert conn.next_event() is NEED_DATA
    assert conn.buffered == 0
    assert conn.data_to_send() == b""


def test_buffered_counts_unread_bytes() -> None:
    conn = opened()
    conn.receive_data(b"SEND\n\nabc")
    assert conn.next_event() is NEED_DATA
    assert conn.buffered == 9
    conn.receive_data(b"\x00\n")
    assert drain(conn) == [Frame("SEND", (), b"abc"), HEARTBEAT]
    assert conn.buffered == 0


def test_heartbeats_are_accepted_in_every_open_state() -> None:
    conn = StompConnection()
    conn.receive_data(b"\r\n")
    assert conn.next_event() is HEARTBEAT
    conn.receive_data(CONNECT + b"\n")
    conn.next_event()
    assert conn.next_event() == HEARTBEAT
    assert conn.state is State.CONNECTING


def test_transition_table_covers_only_real_senders() -> None:
    """Clients only send client commands and servers only server commands, in the table."""
    from herald.plugins.stomp.codec import CLIENT_COMMANDS, SERVER_COMMANDS

    for _state, direction, command in TRANSITIONS:
        assert command in (CLIENT_COMMANDS if direction is Direction.RECEIVE else SERVER_COMMANDS)
    assert not any(state is State.CLOSED for state, _, _ in TRANSITIONS)

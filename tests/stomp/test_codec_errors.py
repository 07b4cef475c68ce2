"""Malformed frames and broken limits: each is one RemoteProtocolError with a clear text.

Every case is fed whole and byte by byte; the limit cases also check that the error comes
while the frame is still incomplete, i.e. before the reader buffers what the limit forbids.
"""

from __future__ import annotations

import pytest

from herald.core.errors import LocalProtocolError, RemoteProtocolError
from herald.plugins.stomp.codec import (
    NEED_DATA,
    Frame,
    LimitExceeded,
    StompConnection,
    StompLimits,
    encode_frame,
)
from tests.stomp.codec_helpers import ALL_COMMANDS, drain, opened

SMALL = StompLimits(max_frame_size=200, max_headers=3, max_header_line=40, max_body_size=50)

# (version, bytes, error text fragment): frames a client sends on an open connection.
MALFORMED = {
    "unknown command": ("1.2", b"FOO\n\n\x00", "unknown command 'FOO'"),
    "lowercase command": ("1.2", b"send\n\n\x00", "unknown command 'send'"),
    "server command from a client": ("1.2", b"MESSAGE\n\n\x00", "may not send a MESSAGE"),
    "CR LF command line in 1.1": ("1.1", b"SEND\r\n\r\n\x00", "unknown command 'SEND\\r'"),
    "header without colon": ("1.2", b"SEND\nnocolon\n\n\x00", "malformed header line"),
    "header with empty name": ("1.2", b"SEND\n:v\n\n\x00", "malformed header line"),
    "1.0 blank header name": ("1.0", b"SEND\n  :v\n\n\x00", "malformed header line"),
    "1.1 CR line is not an empty line": ("1.1", b"SEND\na:1\n\r\n\n\x00", "malformed header"),
    "content-length letters": ("1.2", b"SEND\ncontent-length:abc\n\n\x00", "invalid content-len"),
    "content-length negative": ("1.2", b"SEND\ncontent-length:-1\n\n\x00", "invalid content-len"),
    "content-length plus sign": ("1.2", b"SEND\ncontent-length:+1\n\n\x00", "invalid content-len"),
    "content-length padded in 1.2": ("1.2", b"SEND\ncontent-length:1 \n\n\x00", "invalid content"),
    "content-length empty": ("1.2", b"SEND\ncontent-length:\n\n\x00", "invalid content-length"),
    "content-length underscore": ("1.2", b"SEND\ncontent-length:1_0\n\n\x00", "invalid content"),
    "content-length hex": ("1.2", b"SEND\ncontent-length:0x1\n\n\x00", "invalid content-length"),
    "content-length non-ASCII digit": (
        "1.2",
        "SEND\ncontent-length:\u0661\n\n\x00".encode(),
        "invalid content-length",
    ),
    "body longer than content-length": (
        "1.2",
        b"SEND\ncontent-length:2\n\nabc\x00",
        "not followed by a NUL after content-length 2",
    ),
    "undefined escape in 1.2": ("1.2", b"SEND\na:x\\ty\n\n\x00", "undefined escape sequence \\t"),
    "undefined escape in a name": ("1.2", b"SEND\na\\x:y\n\n\x00", "undefined escape sequence"),
    "CR escape is 1.2 only": ("1.1", b"SEND\na:x\\ry\n\n\x00", "undefined escape sequence \\r"),
    "lone backslash at the end": ("1.2", b"SEND\na:x\\\n\n\x00", "lone backslash"),
    "headers not UTF-8": ("1.2", b"SEND\na:\xff\n\n\x00", "not valid UTF-8"),
    "bare CR in a 1.2 header": ("1.2", b"SEND\na:x\ry\n\n\x00", "bare CR"),
    "CR between frames without LF": ("1.2", b"\rSEND\n\n\x00", "CR between frames"),
    "NUL in the headers": ("1.2", b"SEND\na:b\n\x00", "NUL in the frame headers"),
}

# (limits, bytes, error text fragment, complete): `complete` False means the bytes are only
# the start of a frame whose last byte crosses the limit: the error must come at that byte.
LIMITS = {
    "too many headers": (
        SMALL,
        b"SEND\na:1\nb:2\nc:3\nd:4\n\n\x00",
        "frame exceeds the limit of 3 header lines",
        True,
    ),
    "too many headers, incomplete": (SMALL, b"SEND\na:1\nb:2\nc:3\nd:4\n", "3 header lines", False),
    "header line too long": (
        SMALL,
        b"SEND\na:" + b"x" * 39 + b"\n\n\x00",
        "header line exceeds the limit of 40 bytes",
        True,
    ),
    "header line too long, incomplete": (SMALL, b"SEND\na:" + b"x" * 39, "header line", False),
    "content-length above max body": (
        SMALL,
        b"SEND\ncontent-length:51\n\n",
        "frame body of 51 bytes exceeds the limit of 50 bytes",
        False,
    ),
    "content-length with 20 digits": (
        SMALL,
        b"SEND\ncontent-length:" + b"9" * 20 + b"\n\n",
        f"frame body of {'9' * 20} bytes exceeds the limit of 50 bytes",
        False,
    ),
    "content-length beyond the frame size": (
        StompLimits(max_frame_size=60),
        b"SEND\ndestination:/queue/a\ncontent-length:40\n\n",
        "frame of 85 bytes exceeds the limit of 60 bytes",
        False,
    ),
    "NUL-terminated body too large": (
        SMALL,
        b"SEND\n\n" + b"x" * 51,
        "frame body exceeds the limit of 50 bytes",
        False,
    ),
    "NUL-terminated frame too large": (
        StompLimits(max_frame_size=60, max_body_size=100),
        b"SEND\ndestination:/queue/a\n\n" + b"x" * 34,
        "frame exceeds the limit of 60 bytes",
        False,
    ),
    "headers beyond the frame size": (
        StompLimits(max_frame_size=60),
        b"SEND\nh:" + b"x" * 54,
        "frame exceeds the limit of 60 bytes",
        False,
    ),
    "complete headers beyond the frame size": (
        StompLimits(max_frame_size=60),
        b"SEND\n" + b"h:12345678\n" * 6 + b"\n\x00",
        "frame exceeds the limit of 60 bytes",
        True,
    ),
}


def expect_error(conn: StompConnection, chunks: list[bytes], fragment: str) -> int:
    """Feed chunks until the error; returns how many chunks it took."""
    for count, chunk in enumerate(chunks, 1):
        conn.receive_data(chunk)
        try:
            while conn.next_event() is not NEED_DATA:
                pass
        except RemoteProtocolError as exc:
            assert fragment in exc.text
            assert exc.code is None
            return count
    pytest.fail(f"no error after {len(chunks)} chunks")


@pytest.mark.parametrize(("version", "wire", "fragment"), MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed(version: str, wire: bytes, fragment: str) -> None:
    expect_error(opened(version), [wire], fragment)
    if fragment.startswith("unknown command"):  # refused at its first byte: 'F...'
        fragment = "unknown command"
    expect_error(opened(version), [wire[i : i + 1] for i in range(len(wire))], fragment)


@pytest.mark.parametrize(
    ("limits", "wire", "fragment", "complete"), LIMITS.values(), ids=LIMITS.keys()
)
@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_limits(
    version: str, limits: StompLimits, wire: bytes, fragment: str, complete: bool
) -> None:
    expect_error(opened(version, limits), [wire], fragment)
    byte_by_byte = [wire[i : i + 1] for i in range(len(wire))]
    expect_error(opened(version, limits), byte_by_byte, fragment)
    if not complete:
        conn = opened(version, limits)
        conn.receive_data(wire[:-1])
        assert conn.next_event() is NEED_DATA
        expect_error(conn, [wire[-1:]], fragment)


LIMIT_NAMES = {
    "too many headers": "max_headers",
    "too many headers, incomplete": "max_headers",
    "header line too long": "max_header_line",
    "header line too long, incomplete": "max_header_line",
    "content-length above max body": "max_body_size",
    "content-length with 20 digits": "max_body_size",
    "content-length beyond the frame size": "max_frame_size",
    "NUL-terminated body too large": "max_body_size",
    "NUL-terminated frame too large": "max_frame_size",
    "headers beyond the frame size": "max_frame_size",
    "complete headers beyond the frame size": "max_frame_size",
}


@pytest.mark.parametrize("case", LIMITS)
def test_a_limit_error_is_caused_by_limit_exceeded_naming_the_limit(case: str) -> None:
    """The session names the setting behind a limit from the error's cause."""
    limits, wire, _, _ = LIMITS[case]
    conn = opened("1.2", limits)
    conn.receive_data(wire)
    with pytest.raises(RemoteProtocolError) as caught:
        drain(conn)
    cause = caught.value.__cause__
    assert isinstance(cause, LimitExceeded)
    assert cause.limit == LIMIT_NAMES[case]
    assert cause.text == caught.value.text


@pytest.mark.parametrize(
    ("chunks", "at"),
    [
        ([b"X"] * 100, 1),  # no command starts with X
        ([b"S", b"E", b"N", b"X"], 4),
        ([b"\x16", b"\x03", b"\x01"], 1),  # a TLS ClientHello at the plain port
        ([b"\x00"] * 5, 1),
        ([b"UNSUBSCRIBE\r", b"X", b"X"], 2),  # a whole command and CR, then no LF
        ([b"SEND\r", b"\r"], 2),
    ],
)
def test_unknown_command_fails_at_its_first_impossible_byte(chunks: list[bytes], at: int) -> None:
    """Garbage is refused before a line end, and before the connection is even open."""
    assert expect_error(opened(), chunks, "unknown command") == at
    assert expect_error(StompConnection(), chunks, "unknown command") == at


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_every_command_prefix_waits_for_more(version: str) -> None:
    for command in ALL_COMMANDS:
        conn = opened(version)
        for end in range(1, len(command) + 1):
            conn.receive_data(command[end - 1 : end].encode())
            assert conn.next_event() is NEED_DATA, command[:end]


def test_limit_error_comes_before_the_body() -> None:
    """content-length above the maximum: refused on the headers alone."""
    conn = opened(limits=SMALL)
    conn.receive_data(b"SEND\ncontent-length:1000000\n\n")
    with pytest.raises(RemoteProtocolError, match="frame body of 1000000 bytes exceeds"):
        conn.next_event()


def test_frames_within_the_limits_pass() -> None:
    conn = opened(limits=SMALL)
    conn.receive_data(b"SEND\na:1\nb:2\nc:" + b"x" * 38 + b"\n\n" + b"y" * 50 + b"\x00")
    [event] = [conn.next_event()]
    assert isinstance(event, Frame)
    assert event.body == b"y" * 50
    conn.receive_data(b"SEND\ncontent-length:50\n\n" + b"\x00" * 51)
    assert conn.next_event() == Frame("SEND", (("content-length", "50"),), b"\x00" * 50)


def test_errors_are_sticky_and_leave_error_sending_possible() -> None:
    conn = opened()
    conn.receive_data(b"FOO\n\n\x00SEND\n\n\x00")
    with pytest.raises(RemoteProtocolError) as first:
        conn.next_event()
    with pytest.raises(RemoteProtocolError) as again:
        conn.next_event()
    assert again.value is first.value
    assert isinstance(first.value.__cause__, LocalProtocolError)
    conn.send(Frame("ERROR", (("message", first.value.text),)))
    assert conn.data_to_send() == b"ERROR\nmessage:unknown command 'FOO'\n\n\x00"


@pytest.mark.parametrize(
    ("version", "bad", "fragment"),
    [
        ("1.0", Frame("MESSAGE", (("a", "x\ny"),)), "cannot be sent unescaped"),
        ("1.0", Frame("MESSAGE", (("a:b", "x"),)), "cannot be sent unescaped"),
        ("1.0", Frame("MESSAGE", (("a", "x\ry"),)), "cannot be sent unescaped"),
        ("1.2", Frame("CONNECTED", (("a", "x\ny"),)), "cannot be sent unescaped"),
        ("1.2", Frame("MESSAGE", (("", "x"),)), "empty name"),
        ("1.2", Frame("MESSAGE", (("a", "x\x00y"),)), "contains a NUL"),
        ("1.2", Frame("MESSAGE", (("a", "\udcff"),)), "not encodable as UTF-8"),
    ],
)
def test_writer_refuses_unwritable_headers(version: str, bad: Frame, fragment: str) -> None:
    with pytest.raises(LocalProtocolError, match=fragment):
        encode_frame(bad, version)
    conn = opened(version)
    if bad.command == "CONNECTED":
        conn = StompConnection(version=version)
        conn.receive_data(b"CONNECT\n\n\x00")
        conn.next_event()
    with pytest.raises(LocalProtocolError, match=fragment):
        conn.send(bad)
    assert conn.data_to_send() == b""


def test_limits_are_validated() -> None:
    with pytest.raises(ValueError, match="max_headers"):
        StompLimits(max_headers=0)
    with pytest.raises(TypeError):
        StompLimits(max_frame_size="big")  # type: ignore[arg-type]  # the point: refused at run time
    assert StompLimits(max_frame_size=123).max_body_size == 123

"""Cross-check with stomp.py 8.x's own (pure) frame functions.

Client frames are built the way stomp.py's protocol classes build them: values escaped per
version (its `_escape_headers`), then `stomp.utils.convert_frame`. Our server frames must come
out of `stomp.utils.parse_frame` (which is given a frame without its NUL, as stomp.py's
transport does) with the same command, headers and body.
"""

from __future__ import annotations

import pytest
from stomp.protocol import Protocol11, Protocol12
from stomp.utils import Frame as StompFrame
from stomp.utils import convert_frame, parse_frame

from herald.plugins.stomp.codec import Frame, StompConnection, encode_frame
from tests.stomp.codec_helpers import drain

_ESCAPERS = {"1.1": Protocol11._escape_headers, "1.2": Protocol12._escape_headers}


def stomppy_bytes(command: str, headers: dict[str, str], body: bytes, version: str) -> bytes:
    """What a stomp.py client speaking `version` writes for this frame."""
    headers = dict(headers)
    if body:
        headers["content-length"] = ""  # convert_frame fills in the length, as auto_content_length
    if command not in ("CONNECT", "STOMP") and version in _ESCAPERS:
        _ESCAPERS[version](None, headers)
    return b"".join(convert_frame(StompFrame(command, headers, body)))


CLIENT_FRAMES = [
    ("SEND", {"destination": "/queue/a", "x-note": "a:b\\c\nd"}, b"binary\x00body"),
    ("SEND", {"destination": "/queue/a", "receipt": "r-1", "content-type": "text/plain"}, b"hi"),
    ("SUBSCRIBE", {"id": "0", "destination": "/topic/t.*", "ack": "client-individual"}, b""),
    ("ACK", {"id": "m-1:2", "transaction": "tx1"}, b""),
    ("NACK", {"id": "m-1:3"}, b""),
    ("BEGIN", {"transaction": "tx1"}, b""),
    ("COMMIT", {"transaction": "tx1"}, b""),
    ("ABORT", {"transaction": "tx2"}, b""),
    ("UNSUBSCRIBE", {"id": "0"}, b""),
    ("DISCONNECT", {"receipt": "bye"}, b""),
]


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_we_read_what_stomppy_writes(version: str) -> None:
    conn = StompConnection()
    connect = {"accept-version": version, "host": "/", "login": "guest", "passcode": "p:w\\d"}
    conn.receive_data(stomppy_bytes("CONNECT", connect, b"", version))
    assert conn.next_event() == Frame("CONNECT", sorted(connect.items()))
    conn.version = version
    conn.send(Frame("CONNECTED", (("version", version),)))
    frames = [f for f in CLIENT_FRAMES if version != "1.0" or "\n" not in f[1].get("x-note", "")]
    conn.receive_data(b"".join(stomppy_bytes(c, h, b, version) for c, h, b in frames))
    events = drain(conn)
    assert len(events) == len(frames)
    for event, (command, headers, body) in zip(events, frames, strict=True):
        assert isinstance(event, Frame)
        assert (event.command, event.body) == (command, body)
        expected = dict(headers, **({"content-length": str(len(body))} if body else {}))
        assert dict(event.headers) == expected


SERVER_FRAMES = [
    Frame("CONNECTED", (("version", "1.2"), ("heart-beat", "0,10000"), ("server", "herald"))),
    Frame(
        "MESSAGE",
        (
            ("subscription", "0"),
            ("message-id", "m-1:7"),
            ("destination", "/queue/a:b"),
            ("x-multi", "l1\nl2\\end"),
            ("x-repeat", "first"),
            ("x-repeat", "second"),
        ),
        b"payload\x00with NUL",
    ),
    Frame("RECEIPT", (("receipt-id", "r-1"),)),
    Frame("ERROR", (("message", "no such queue"), ("content-type", "text/plain")), b"details"),
]


@pytest.mark.parametrize("version", ["1.1", "1.2"])
@pytest.mark.parametrize("sent", SERVER_FRAMES, ids=lambda f: f.command)
def test_stomppy_reads_what_we_write(version: str, sent: Frame) -> None:
    wire = encode_frame(sent, version)
    assert wire.endswith(b"\x00")
    parsed = parse_frame(wire[:-1])
    assert parsed.cmd == sent.command
    assert parsed.body == sent.body
    expected: dict[str, str] = {}
    for name, value in sent.headers:
        expected.setdefault(name, value)  # first wins, as in stomp.py
    if sent.body:
        expected["content-length"] = str(len(sent.body))
    assert parsed.headers == expected


def test_stomppy_reads_our_crlf_free_1_0_frames() -> None:
    sent = Frame("MESSAGE", (("destination", "/queue/a:b"), ("subscription", "0")), b"x")
    parsed = parse_frame(encode_frame(sent, "1.0")[:-1])
    assert parsed.headers == {
        "destination": "/queue/a:b",
        "subscription": "0",
        "content-length": "1",
    }

"""Golden bytes: one table drives the STOMP writer and reader for every version."""

from __future__ import annotations

import pytest

from herald.plugins.stomp.codec import HEARTBEAT, Frame, encode_frame, error_frame
from tests.stomp.codec_helpers import frame, read_all, tr

# (version, frame, exact bytes): encode(frame) == bytes and decode(bytes) == [frame].
GOLDEN = {
    "1.0 CONNECTED": (
        "1.0",
        frame("CONNECTED", ("version", "1.0"), ("session", "s-1")),
        b"CONNECTED\nversion:1.0\nsession:s-1\n\n\x00",
    ),
    "1.0 MESSAGE, colons and backslashes are literal": (
        "1.0",
        frame("MESSAGE", ("destination", "/queue/a:b"), ("path", "c:\\temp\\n"), body=b"hello"),
        b"MESSAGE\ndestination:/queue/a:b\npath:c:\\temp\\n\ncontent-length:5\n\nhello\x00",
    ),
    "1.0 SEND without body": (
        "1.0",
        frame("SEND", ("destination", "/queue/a")),
        b"SEND\ndestination:/queue/a\n\n\x00",
    ),
    "1.0 frame without headers": ("1.0", frame("DISCONNECT"), b"DISCONNECT\n\n\x00"),
    "1.1 MESSAGE, escaped names and values, raw CR": (
        "1.1",
        frame(
            "MESSAGE",
            ("destination", "/queue/a:b"),
            ("multi", "l1\nl2"),
            ("back", "c\\d"),
            ("a:b", "v"),
            ("cr", "x\ry"),
            body=b"hi",
        ),
        b"MESSAGE\ndestination:/queue/a\\cb\nmulti:l1\\nl2\nback:c\\\\d\na\\cb:v\ncr:x\ry\n"
        b"content-length:2\n\nhi\x00",
    ),
    "1.1 CONNECT is never escaped": (
        "1.1",
        frame("CONNECT", ("accept-version", "1.0,1.1"), ("host", "/"), ("passcode", "a\\b:c")),
        b"CONNECT\naccept-version:1.0,1.1\nhost:/\npasscode:a\\b:c\n\n\x00",
    ),
    "1.1 CONNECTED is never escaped": (
        "1.1",
        frame("CONNECTED", ("version", "1.1"), ("server", "herald/0.1 (a:b)")),
        b"CONNECTED\nversion:1.1\nserver:herald/0.1 (a:b)\n\n\x00",
    ),
    "1.2 MESSAGE, CR escape, padding and empty values kept": (
        "1.2",
        frame("MESSAGE", ("subscription", "0"), ("cr", "a\rb"), ("pad", " x "), ("empty", "")),
        b"MESSAGE\nsubscription:0\ncr:a\\rb\npad: x \nempty:\n\n\x00",
    ),
    "1.2 SEND, binary body with NUL": (
        "1.2",
        frame("SEND", ("destination", "/q"), body=b"a\x00b\nc"),
        b"SEND\ndestination:/q\ncontent-length:5\n\na\x00b\nc\x00",
    ),
    "1.2 repeated headers kept in order": (
        "1.2",
        frame("MESSAGE", ("foo", "first"), ("foo", "second")),
        b"MESSAGE\nfoo:first\nfoo:second\n\n\x00",
    ),
    "1.2 ERROR": (
        "1.2",
        frame(
            "ERROR",
            ("message", "bad frame"),
            ("receipt-id", "r-7"),
            ("content-type", "text/plain"),
            body=b"details",
        ),
        b"ERROR\nmessage:bad frame\nreceipt-id:r-7\ncontent-type:text/plain\n"
        b"content-length:7\n\ndetails\x00",
    ),
    "1.2 UTF-8 headers": (
        "1.2",
        frame("SEND", ("destination", "/q/\u00e9\u2603")),
        "SEND\ndestination:/q/\u00e9\u2603\n\n\x00".encode(),
    ),
}

# (version, bytes, frame): inputs that only decode, because the writer never produces them.
DECODE_ONLY = {
    "1.0 trims padded names and values": (
        "1.0",
        b"SEND\ndestination: /queue/a \n receipt :r1\n\nhi\x00",
        Frame("SEND", (("destination", "/queue/a"), ("receipt", "r1")), b"hi"),
    ),
    "1.0 reads a 1.2 client's CR LF CONNECT": (
        "1.0",
        b"CONNECT\r\naccept-version:1.2\r\nhost:/\r\n\r\n\x00",
        Frame("CONNECT", (("accept-version", "1.2"), ("host", "/"))),
    ),
    "1.1 keeps padding": (
        "1.1",
        b"SEND\ndestination: /q \n\n\x00",
        Frame("SEND", (("destination", " /q "),)),
    ),
    "1.1 does not unescape CONNECT": (
        "1.1",
        b"CONNECT\nlogin:a\\tb\n\n\x00",
        Frame("CONNECT", (("login", "a\\tb"),)),
    ),
    "1.2 CR LF lines and content-length": (
        "1.2",
        b"SEND\r\ndestination:/q\r\ncontent-length:2\r\n\r\nhi\x00",
        Frame("SEND", (("destination", "/q"), ("content-length", "2")), b"hi"),
    ),
    "1.2 mixed line endings": (
        "1.2",
        b"SEND\ndestination:/q\r\nreceipt:1\n\r\nhi\x00",
        Frame("SEND", (("destination", "/q"), ("receipt", "1")), b"hi"),
    ),
    "1.2 CR LF frame without headers": ("1.2", b"BEGIN\r\n\r\n\x00", Frame("BEGIN")),
    "1.2 CR LF headers, binary body with LF LF": (
        "1.2",
        b"SEND\r\ncontent-length:4\r\n\r\n\xff\n\n\xfe\x00",
        Frame("SEND", (("content-length", "4"),), b"\xff\n\n\xfe"),
    ),
    "1.2 headers longer than one search window": (
        "1.2",
        b"SEND\r\n" + b"".join(b"h%d:" % n + b"v" * 300 + b"\r\n" for n in range(4)) + b"\r\n\x00",
        Frame("SEND", tuple((f"h{n}", "v" * 300) for n in range(4))),
    ),
    "1.2 body up to the first NUL": (
        "1.2",
        b"SEND\ndestination:/q\n\nline 1\nline 2\r\n\x00",
        Frame("SEND", (("destination", "/q"),), b"line 1\nline 2\r\n"),
    ),
    "1.2 content-length 0": (
        "1.2",
        b"SEND\ncontent-length:0\n\n\x00",
        Frame("SEND", (("content-length", "0"),)),
    ),
    "1.2 content-length with leading zeros": (
        "1.2",
        b"SEND\ncontent-length:003\n\na\x00b\x00",
        Frame("SEND", (("content-length", "003"),), b"a\x00b"),
    ),
    "1.2 first content-length wins": (
        "1.2",
        b"SEND\ncontent-length:1\ncontent-length:5\n\na\x00",
        Frame("SEND", (("content-length", "1"), ("content-length", "5")), b"a"),
    ),
}


@pytest.mark.parametrize(("version", "expected", "wire"), GOLDEN.values(), ids=GOLDEN.keys())
def test_golden_encode(version: str, expected: Frame, wire: bytes) -> None:
    assert encode_frame(expected, version) == wire


@pytest.mark.parametrize(("version", "expected", "wire"), GOLDEN.values(), ids=GOLDEN.keys())
def test_golden_decode(version: str, expected: Frame, wire: bytes) -> None:
    tr(wire, version, [expected])


@pytest.mark.parametrize(
    ("version", "wire", "expected"), DECODE_ONLY.values(), ids=DECODE_ONLY.keys()
)
def test_decode_only(version: str, wire: bytes, expected: Frame) -> None:
    tr(wire, version, [expected])


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_golden_stream_decodes_as_one(version: str) -> None:
    """All of a version's golden frames back to back, with heart-beats between them."""
    cases = [(f, w) for v, f, w in GOLDEN.values() if v == version]
    wire = b"\n".join(w for _, w in cases)
    expected: list = []
    for index, (parsed, _) in enumerate(cases):
        expected += [HEARTBEAT, parsed] if index else [parsed]
    tr(wire, version, expected)


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_heartbeats(version: str) -> None:
    tr(b"\n", version, [HEARTBEAT])
    tr(b"\r\n", version, [HEARTBEAT])
    tr(b"\r\n\n\n", version, [HEARTBEAT] * 3)
    tr(
        b"\n\nBEGIN\n\n\x00\n\r\n",
        version,
        [HEARTBEAT, HEARTBEAT, Frame("BEGIN"), *[HEARTBEAT] * 2],
    )


def test_repeated_headers_first_wins() -> None:
    _, _, wire = GOLDEN["1.2 repeated headers kept in order"]
    [parsed], _ = read_all([wire], "1.2")
    assert isinstance(parsed, Frame)
    assert parsed.get("foo") == "first"
    assert parsed.get_all("foo") == ["first", "second"]
    assert parsed.get("missing") is None
    assert parsed.get("missing", "x") == "x"


def test_frame_headers_accept_mappings_and_lists() -> None:
    assert Frame("SEND", {"a": "1", "b": "2"}).headers == (("a", "1"), ("b", "2"))
    assert Frame("SEND", [("a", "1")]).headers == (("a", "1"),)


def test_writer_replaces_a_stale_content_length() -> None:
    stale = Frame("MESSAGE", (("content-length", "999"), ("destination", "/q")), b"abc")
    assert encode_frame(stale, "1.2") == b"MESSAGE\ndestination:/q\ncontent-length:3\n\nabc\x00"
    empty = Frame("MESSAGE", (("content-length", "3"),))
    assert encode_frame(empty, "1.2") == b"MESSAGE\n\n\x00"


def test_error_frame_factory() -> None:
    _, _, wire = GOLDEN["1.2 ERROR"]
    assert encode_frame(error_frame("bad frame", b"details", receipt_id="r-7"), "1.2") == wire
    assert error_frame("bad") == Frame("ERROR", (("message", "bad"),))

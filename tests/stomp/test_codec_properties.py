"""Properties of the STOMP codec (hypothesis).

- Garbage, fed in any chunking, yields only frames and heart-beats, or RemoteProtocolError.
- escape/unescape round-trip any text in 1.1 and 1.2 (1.0 has no escapes).
- Any frame the writer accepts reads back equal, whatever the chunking.
"""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from herald.core.errors import RemoteProtocolError
from herald.plugins.stomp.codec import (
    NEED_DATA,
    VERSIONS,
    ConnectionClosed,
    Frame,
    Heartbeat,
    StompConnection,
    StompLimits,
    encode_frame,
    escape,
    unescape,
)
from tests.stomp.codec_helpers import frame, opened, read_all

TOKENS = [
    b"CONNECT\n",
    b"SEND",
    b"SEND\n",
    b"MESSAGE\n",
    b"DISCONNECT\n",
    b"\n",
    b"\r\n",
    b"\r",
    b":",
    b"\\",
    b"\\c",
    b"\\n",
    b"\\r",
    b"\\t",
    b"\x00",
    b"content-length:",
    b"3",
    b"-1",
    b"99999",
    b"destination:/q",
    b"\xff",
    b"\xc3\xa9",
    b"x" * 50,
]
LIMITS = StompLimits(max_frame_size=300, max_headers=4, max_header_line=60, max_body_size=100)

frame_ish = st.lists(st.sampled_from(TOKENS) | st.binary(max_size=6), max_size=40).map(b"".join)
garbage = st.one_of(st.binary(max_size=300), frame_ish)


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({cut % (len(data) + 1) for cut in cuts} | {0, len(data)})
    return [data[a:b] for a, b in pairwise(points)]


def feed_garbage(conn: StompConnection, chunks: list[bytes]) -> None:
    """Garbage gives frames and heart-beats, then at the end of the stream ConnectionClosed
    (nothing left buffered), unless it raises RemoteProtocolError on the way."""
    try:
        for chunk in chunks:
            conn.receive_data(chunk)
            while (event := conn.next_event()) is not NEED_DATA:
                assert type(event) in (Frame, Heartbeat)
        conn.receive_data(b"")
        while type(event := conn.next_event()) is not ConnectionClosed:
            assert type(event) in (Frame, Heartbeat)
        assert conn.buffered == 0
    except RemoteProtocolError as exc:
        assert exc.text
        assert exc.code is None


@given(
    data=garbage, cuts=st.lists(st.integers(0, 400), max_size=8), version=st.sampled_from(VERSIONS)
)
def test_garbage_on_an_open_connection(data: bytes, cuts: list[int], version: str) -> None:
    feed_garbage(opened(version, LIMITS), chunked(data, cuts))


@given(data=garbage, cuts=st.lists(st.integers(0, 400), max_size=8))
def test_garbage_on_a_new_connection(data: bytes, cuts: list[int]) -> None:
    feed_garbage(StompConnection(limits=LIMITS), chunked(b"CONNECT\n" + data, cuts))


@given(text=st.text())
def test_escape_round_trip(text: str) -> None:
    assert unescape(escape(text, "1.1"), "1.1") == text
    assert unescape(escape(text, "1.2"), "1.2") == text
    assert escape(text, "1.0") == unescape(text, "1.0") == text
    assert "\n" not in escape(text, "1.1")
    assert ":" not in escape(text, "1.2")
    assert "\r" not in escape(text, "1.2")


any_text = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"))
escaped_headers = st.lists(
    st.tuples(any_text.filter(lambda n: n and n != "content-length"), any_text), max_size=6
)
# 1.0 is unescaped and trims: no CR / LF anywhere, no colon in names, no padding.
plain = st.characters(exclude_categories=["Cs"], exclude_characters="\x00\r\n")
unpadded = st.text(plain).map(lambda s: s.strip(" \t"))
plain_headers = st.lists(
    st.tuples(unpadded.filter(lambda n: n and ":" not in n and n != "content-length"), unpadded),
    max_size=6,
)


@given(
    version=st.sampled_from(["1.1", "1.2"]),
    headers=escaped_headers,
    body=st.binary(max_size=64),
    cuts=st.lists(st.integers(0, 400), max_size=6),
)
def test_frame_round_trip_escaped(
    version: str, headers: list[tuple[str, str]], body: bytes, cuts: list[int]
) -> None:
    sent = frame("MESSAGE", *headers, body=body)
    wire = encode_frame(sent, version)
    assert read_all(chunked(wire, cuts), version)[0] == [sent]


@given(headers=plain_headers, body=st.binary(max_size=64), cuts=st.lists(st.integers(0, 400)))
def test_frame_round_trip_1_0(headers: list[tuple[str, str]], body: bytes, cuts: list[int]) -> None:
    sent = frame("MESSAGE", *headers, body=body)
    wire = encode_frame(sent, "1.0")
    assert read_all(chunked(wire, cuts), "1.0")[0] == [sent]

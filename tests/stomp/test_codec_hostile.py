"""Hostile input against the STOMP codec, each property checked against a model of the spec.

- The connection's frames follow the state table: CONNECT or STOMP first, no second CONNECT,
  nothing after DISCONNECT, no server or unknown commands; the first offence is the error.
- Header escapes: 1.1 and 1.2 accept exactly their escape sequences and refuse any other
  (1.2 adds \\r), 1.0 takes a backslash literally.
- Limits: a frame is refused exactly when it has too many headers, a header line too long, a
  body or a frame too large.
- Chunking never changes the outcome: the same frames, then the same error or none, whether
  the bytes arrive whole or in pieces (the incremental checks agree with the complete ones).
"""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from herald.core.errors import RemoteProtocolError
from herald.plugins.stomp.codec import (
    CLIENT_COMMANDS,
    NEED_DATA,
    VERSIONS,
    Frame,
    Heartbeat,
    StompConnection,
    StompLimits,
)
from tests.stomp.codec_helpers import ALL_COMMANDS, opened
from tests.stomp.test_codec_properties import TOKENS, chunked

SESSION_COMMANDS = CLIENT_COMMANDS - {"CONNECT", "STOMP", "DISCONNECT"}


def outcome(conn: StompConnection, chunks: list[bytes]) -> tuple[list[object], bool]:
    """The events the chunks produce, and whether they end in a protocol error (the stream
    does not end: an empty chunk is skipped, as b"" would end it)."""
    events: list[object] = []
    for chunk in filter(None, chunks):
        conn.receive_data(chunk)
        try:
            while (event := conn.next_event()) is not NEED_DATA:
                events.append(event)
                if isinstance(event, Frame) and event.command in ("CONNECT", "STOMP"):
                    conn.send(Frame("CONNECTED", (("version", "1.0"),)))
        except RemoteProtocolError:
            return events, True
    return events, False


def allowed_prefix(commands: list[str]) -> tuple[int, bool]:
    """The spec's answer: how many frames are accepted, and whether the next is an error."""
    state = "await-connect"
    for count, command in enumerate(commands):
        if state == "await-connect" and command in ("CONNECT", "STOMP"):
            state = "open"
        elif state == "open" and command in SESSION_COMMANDS:
            pass
        elif state == "open" and command == "DISCONNECT":
            state = "disconnecting"
        else:
            return count, True
    return len(commands), False


@given(
    st.lists(
        st.sampled_from(sorted(ALL_COMMANDS | {"FLY", "send", "Connect"})), min_size=1, max_size=6
    )
)
@example(["SEND"])
@example(["CONNECT", "CONNECT"])
@example(["CONNECT", "DISCONNECT", "SEND"])
@example(["CONNECT", "MESSAGE"])
def test_frames_follow_the_state_table(commands: list[str]) -> None:
    data = b"".join(f"{command}\n\n\x00".encode() for command in commands)
    events, failed = outcome(StompConnection(), [data])
    accepted, error = allowed_prefix(commands)
    read = [event.command if isinstance(event, Frame) else event for event in events]
    assert read == commands[:accepted]
    assert failed == error


ESCAPES = {
    "1.1": {"\\": "\\", "n": "\n", "c": ":"},
    "1.2": {"\\": "\\", "n": "\n", "c": ":", "r": "\r"},
}


def model_unescape(text: str, version: str) -> str | None:
    """The value a header's wire text stands for; None when the version refuses it."""
    if version == "1.0":
        return text
    out, chars = [], iter(text)
    for char in chars:
        if char != "\\":
            out.append(char)
            continue
        escaped = next(chars, "")
        if escaped not in ESCAPES[version]:
            return None
        out.append(ESCAPES[version][escaped])
    return "".join(out)


@given(value=st.text(alphabet="ab\\cnrt:", max_size=12), version=st.sampled_from(VERSIONS))
@example(value="a\\tb", version="1.2")
@example(value="a\\rb", version="1.1")
@example(value="a\\", version="1.2")
def test_escapes_are_accepted_exactly_as_the_version_defines_them(value: str, version: str) -> None:
    wire = f"SEND\nx:{value}\n\n\x00".encode()
    events, failed = outcome(opened(version), [wire])
    expected = model_unescape(value, version)
    if expected is None:
        assert failed and events == []
    else:
        assert not failed
        assert events == [Frame("SEND", (("x", expected),))]


LIMITS = StompLimits(max_frame_size=200, max_headers=5, max_header_line=40, max_body_size=100)


@given(
    headers=st.lists(st.integers(1, 50), max_size=8),
    body=st.integers(0, 130),
    with_length=st.booleans(),
    version=st.sampled_from(VERSIONS),
    crlf=st.booleans(),
)
@example(headers=[40], body=0, with_length=False, version="1.2", crlf=True)  # CR not counted
@example(headers=[41], body=0, with_length=False, version="1.0", crlf=True)
@example(headers=[40] * 5, body=0, with_length=True, version="1.2", crlf=False)  # 6 headers
def test_limits_refuse_exactly_what_exceeds_them(
    headers: list[int], body: int, with_length: bool, version: str, crlf: bool
) -> None:
    lines = [f"h{i}:" + "x" * max(0, size - len(f"h{i}:")) for i, size in enumerate(headers)]
    if with_length:
        lines.append(f"content-length:{body}")
    eol = "\r\n" if crlf and version != "1.1" else "\n"  # 1.1 has no CR LF
    head = eol.join(["SEND", *lines]) + eol + eol
    wire = head.encode() + b"y" * body + b"\x00"
    too_big = (
        len(lines) > LIMITS.max_headers
        or any(len(line) > LIMITS.max_header_line for line in lines)  # EOL not counted
        or body > LIMITS.max_body_size
        or len(wire) - 1 > LIMITS.max_frame_size  # everything before the NUL
    )
    for chunks in ([wire], [wire[i : i + 1] for i in range(len(wire))]):
        events, failed = outcome(opened(version, LIMITS), chunks)
        assert failed == too_big, (len(lines), body, len(wire))
        assert len(events) == (0 if too_big else 1)


hostile = st.lists(st.sampled_from(TOKENS) | st.binary(max_size=8), max_size=40).map(b"".join)


@given(
    data=hostile,
    cuts=st.lists(st.integers(0, 500), max_size=10),
    version=st.sampled_from(VERSIONS),
    connect=st.booleans(),
)
@example(  # a too-long header line completed within one read was not measured until the end
    data=b"CONNECT\nCONNECT\nSENDcontent-length:destination:/qDISCONNECT\n",
    cuts=[57],
    version="1.0",
    connect=False,
)
def test_chunking_never_changes_the_outcome(
    data: bytes, cuts: list[int], version: str, connect: bool
) -> None:
    def fresh() -> StompConnection:
        return opened(version, LIMITS) if connect else StompConnection(limits=LIMITS)

    whole = outcome(fresh(), [data])
    assert outcome(fresh(), chunked(data, cuts)) == whole
    assert all(isinstance(event, Frame | Heartbeat) for event in whole[0])

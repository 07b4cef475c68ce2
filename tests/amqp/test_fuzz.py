"""Garbage in, events or RemoteProtocolError out: never struct.error, IndexError,
UnicodeDecodeError or anything else (h11's fuzz/afl-server.py invariant). The stream then
ends: ConnectionClosed or a RemoteProtocolError, never NEED_DATA again."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from herald.core.errors import RemoteProtocolError
from herald.plugins.amqp.codec import (
    NEED_DATA,
    AMQPConnection,
    ConnectionClosed,
    ConnectionState,
    Event,
)
from herald.plugins.amqp.codec.methods import DECODERS
from tests.amqp.helpers import server_in
from tests.amqp.test_golden import CLIENT_CASES, Case

REPLY_CODES = {None, 501, 502, 503, 504, 505, 530, 540}
STATES = [ConnectionState.AWAIT_HEADER, ConnectionState.HANDSHAKE, ConnectionState.OPEN]


def only_events_or_remote_errors(conn: AMQPConnection, chunks: list[bytes]) -> None:
    try:
        for chunk in [*chunks, b""]:  # b"": the end of the stream
            conn.receive_data(chunk)
            while (event := conn.next_event()) is not NEED_DATA:
                assert isinstance(event, Event)
                if type(event) is ConnectionClosed:
                    return
    except RemoteProtocolError as exc:
        assert exc.code in REPLY_CODES, exc
        return
    raise AssertionError("NEED_DATA after the end of the stream")


@given(st.sampled_from(STATES), st.lists(st.binary(min_size=1, max_size=64), max_size=8))
def test_random_bytes(state: ConnectionState, chunks: list[bytes]) -> None:
    only_events_or_remote_errors(server_in(state), chunks)


frame_types = st.sampled_from([1, 2, 3, 8]) | st.integers(0, 255)
method_payloads = st.builds(
    lambda key, rest: struct.pack(">I", key) + rest,
    st.sampled_from(sorted(DECODERS)),
    st.binary(max_size=40),
)
header_payloads = st.builds(
    lambda size, flags, rest: struct.pack(">HHQH", 60, 0, size, flags) + rest,
    st.integers(0, 64),
    st.integers(0, 0xFFFF),
    st.binary(max_size=40),
)
frames = st.builds(
    lambda frame_type, channel, payload: (
        struct.pack(">BHI", frame_type, channel, len(payload)) + payload + b"\xce"
    ),
    frame_types,
    st.integers(0, 2),
    method_payloads | header_payloads | st.binary(max_size=40),
)


@given(st.lists(frames, max_size=10))
def test_well_framed_garbage(stream: list[bytes]) -> None:
    """Valid frame envelopes around random payloads reach the method and header decoders."""
    only_events_or_remote_errors(server_in(ConnectionState.OPEN), stream)


@given(
    st.sampled_from(CLIENT_CASES),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=4),
)
def test_corrupted_golden_frames(case: Case, flips: list[tuple[int, int]]) -> None:
    wire = bytearray(case.wire)
    for position, value in flips:
        wire[position % len(wire)] = value
    conn = server_in(case.state)
    only_events_or_remote_errors(conn, [bytes(wire)])

"""The cluster port's frame codec against what a peer gets wrong, the end of the stream, what
the encoder refuses, and fuzzing (the golden frames and the roles: test_frames.py)."""

from __future__ import annotations

import itertools
import struct
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from herald.cluster.frames import (
    MAX_FRAME,
    NEED_DATA,
    Ack,
    Acked,
    Acks,
    ConnectionClosed,
    Data,
    Entries,
    Entry,
    Epochs,
    EpochStart,
    Frame,
    FrameConnection,
    FrameReader,
    Hello,
    HelloFlags,
    LinkError,
    LinkErrorCode,
    LinkHello,
    Read,
    Refuse,
    RefuseCode,
    Role,
    SnapBegin,
    SnapChunk,
    SnapEnd,
    SnapFile,
    Start,
    State,
    encode,
)
from herald.core.codec_kit import LocalProtocolError, RemoteProtocolError
from tests.cluster.test_frames import (
    HELLO,
    LINK_HELLO,
    U64_MAX,
    fresh,
    ha_pair,
    link_pair,
    read_all,
)
from tests.codec_fuzz import run_fuzz
from tests.test_codec_fuzz import feed_then_end, fuzz_seed

# -- the peer's errors --------------------------------------------------------------------------

MALFORMED = [
    pytest.param("00000001 0b", "unknown frame type 0x0b", id="unknown type"),
    pytest.param("00000001 00", "unknown frame type 0x00", id="type 0"),
    pytest.param("00000000", "length 0", id="no type"),
    pytest.param(
        "00000010 05 0000000000002003 00000000000020", "ends inside its fields", id="ack truncated"
    ),
    pytest.param(
        "00000012 05 0000000000002003 0000000000002000 00", "1 bytes left", id="ack too long"
    ),
    pytest.param("00000008 03 00000000000010", "ends inside its fields", id="start truncated"),
    pytest.param("0000000d 24 00000009 0000000000000000", "8 bytes left", id="acked too long"),
    pytest.param("00000007 06 0001 0009 6d61", "runs past the end", id="string past the end"),
    pytest.param("00000004 06 0001 00", "inside a string's length", id="string length cut"),
    pytest.param("00000007 06 0001 0002 c328", "not well-formed UTF-8", id="bad utf-8"),
    pytest.param("00000008 06 0001 0003 eda080", "not well-formed UTF-8", id="utf-8 surrogate"),
    pytest.param("00000007 06 0001 0002 c080", "not well-formed UTF-8", id="overlong utf-8"),
    pytest.param("00000005 06 0007 0000", "unknown REFUSE code 7", id="refuse code"),
    pytest.param(
        "00000009 25 00000001 0003 0000", "unknown LINK_ERROR code 3", id="link error code"
    ),
    pytest.param(
        "00000011 02 00000001 0000000000000000 00000001", "1 epochs take 12", id="epochs n"
    ),
    pytest.param("0000000d 23 00000000 0000 0000 00000002", "2 offsets take 16", id="acks n"),
    pytest.param("0000000a 22 00000008 02 00000000", "more flag is 2", id="entries more"),
    pytest.param(
        "00000019 22 00000008 00 00000001 0000000000000000 00000000 000000",
        "ends inside its fields",
        id="entries header cut",
    ),
    pytest.param(
        "0000001c 22 00000008 00 00000001 0000000000000000 00000000 00000005 6162",
        "record runs past",
        id="entries record cut",
    ),
    pytest.param(
        "0000001a 22 00000008 00 00000000 0000000000000000 00000000 00000000",
        "16 bytes left",
        id="entries extra",
    ),
    pytest.param(
        "0000000b 04 00000001 000000000000", "ends inside its fields", id="data header cut"
    ),
]


@pytest.mark.parametrize(("hex_", "message"), MALFORMED)
def test_a_frame_that_does_not_decode_exactly_is_refused(hex_: str, message: str) -> None:
    reader = FrameReader()
    reader.receive_data(bytes.fromhex(hex_))
    with pytest.raises(RemoteProtocolError, match=message) as failed:
        reader.next_frame()
    assert failed.value.code is None


def test_garbage_as_the_first_frame_fails_the_connection_with_no_reply() -> None:
    conn = FrameConnection(Role.ACCEPTOR)
    conn.receive_data(b"GET / HTTP/1.1\r\n\r\n")
    with pytest.raises(RemoteProtocolError, match="longer than the largest frame"):
        conn.next_event()
    assert conn.error_reply() is None
    conn.receive_data(encode(HELLO))  # ignored once failed
    with pytest.raises(RemoteProtocolError, match="already failed"):
        conn.next_event()


def test_a_length_over_the_max_is_refused_from_the_prefix_alone() -> None:
    conn = FrameConnection(Role.ACCEPTOR)
    conn.receive_data(struct.pack(">I", MAX_FRAME + 1))  # no type byte, no body
    with pytest.raises(RemoteProtocolError, match=f"1048641 bytes is longer than .*{MAX_FRAME}"):
        conn.next_event()
    assert MAX_FRAME == (1 << 20) + 64


def test_a_frame_of_the_max_length_is_accepted() -> None:
    _, slave = ha_pair()
    slave.receive_data(encode(SnapBegin(b"")))
    slave.next_event()
    slave.receive_data(encode(SnapFile("seg", MAX_FRAME - 1)))
    slave.next_event()
    wire = struct.pack(">IB", MAX_FRAME, 0x09) + bytes(MAX_FRAME - 1)
    for at in range(0, len(wire), 65536):
        slave.receive_data(wire[at : at + 65536])
    assert slave.next_event() == SnapChunk(bytes(MAX_FRAME - 1))


@pytest.mark.parametrize(
    ("role", "hex_"),
    [
        pytest.param(
            Role.ACCEPTOR, "00000015 01 0002 0000 0000 0000 0000 0000 0000000000000000", id="hello"
        ),
        pytest.param(Role.LINK_ORIGIN, "00000009 20 0000 0000 0000 0000", id="link hello"),
    ],
)
def test_another_version_is_refused_with_refuse_version(role: Role, hex_: str) -> None:
    conn = FrameConnection(role)
    conn.receive_data(bytes.fromhex(hex_))
    with pytest.raises(RemoteProtocolError, match="is not supported") as failed:
        conn.next_event()
    assert failed.value.code == RefuseCode.VERSION
    reply = conn.error_reply()
    assert reply == Refuse(RefuseCode.VERSION, failed.value.text)
    conn.send(reply)
    text = failed.value.text.encode()
    assert conn.data_to_send() == struct.pack(">IBHH", 5 + len(text), 0x06, 5, len(text)) + text
    assert conn.state is State.REFUSED


def test_unknown_hello_flags_are_refused() -> None:
    reader = FrameReader()
    reader.receive_data(bytes.fromhex("00000015 01 0001 0002 0000 0000 0000 0000 0000000000000000"))
    with pytest.raises(RemoteProtocolError, match="unknown flags 0x0002"):
        reader.next_frame()


# -- the end of the stream ----------------------------------------------------------------------


@pytest.mark.parametrize("cut", [1, 4, 5, 20], ids=lambda n: f"after {n} bytes")
def test_the_stream_ending_inside_a_frame_is_an_error(cut: int) -> None:
    conn = FrameConnection(Role.ACCEPTOR)
    conn.receive_data(encode(HELLO)[:cut])
    assert conn.next_event() is NEED_DATA
    conn.receive_data(b"")
    with pytest.raises(RemoteProtocolError, match="in the middle of a frame"):
        conn.next_event()
    assert conn.error_reply() is None


def test_the_stream_ending_between_frames_is_connection_closed() -> None:
    conn = FrameConnection(Role.ACCEPTOR)
    conn.receive_data(b"")
    assert conn.next_event() == ConnectionClosed()
    master, _ = ha_pair()
    master.receive_data(encode(Ack(1, 1)))
    master.receive_data(b"")
    assert master.next_event() == Ack(1, 1)
    assert master.next_event() == ConnectionClosed()
    assert master.next_event() == ConnectionClosed()
    with pytest.raises(LocalProtocolError, match="after the end of the stream"):
        master.receive_data(b"x")


# -- what the encoder checks --------------------------------------------------------------------

BAD_VALUES = [
    pytest.param(Start(-1), id="negative"),
    pytest.param(Start(2**64), id="u64 overflow"),
    pytest.param(Hello("c", "g", "n", "s", 2**64), id="hello max_offset"),
    pytest.param(Epochs(2**32, 0, ()), id="u32 overflow"),
    pytest.param(Epochs(1, 0, (EpochStart(1, 2**64),)), id="epoch start"),
    pytest.param(Data(1, 0, 0, -5), id="data confirm"),
    pytest.param(Acked(2**32), id="acked req"),
    pytest.param(Read(1, "/", "q", 0, 0, 2**32, 0), id="read limit"),
    pytest.param(Entries(1, (Entry(0, 2**32, b""),)), id="delivery count"),
    pytest.param(Acks(1, "/", "q", (2**64,)), id="ack offset"),
    pytest.param(LinkError(2**32, LinkErrorCode.NOT_MASTER), id="link error req"),
    pytest.param(Hello("c", "g", "n", "s", 0, HelloFlags(2)), id="unknown flag"),
    pytest.param(Refuse(RefuseCode.NOT_MASTER, "x" * 65536), id="string too long"),
    pytest.param(SnapFile("\ud800", 0), id="surrogate"),
    pytest.param(SnapChunk(bytes(MAX_FRAME)), id="frame too large"),
    pytest.param(Data(1, 0, 0, 0, bytes(MAX_FRAME - 28)), id="data too large"),
]


@pytest.mark.parametrize("frame", BAD_VALUES)
def test_a_value_its_field_cannot_hold_is_the_callers_error(frame: Frame) -> None:
    with pytest.raises(LocalProtocolError, match=r"cannot encode|longer than the largest"):
        encode(frame)


def test_a_frame_that_fails_to_encode_queues_nothing() -> None:
    master, _ = ha_pair()
    with pytest.raises(LocalProtocolError):
        master.send(Data(1, 0, 2**64, 0, b"x"))
    assert master.state is State.HA_STARTED and master.data_to_send() == b""
    assert len(encode(Data(1, 0, 0, 0, bytes(MAX_FRAME - 29)))) == 4 + MAX_FRAME  # the largest
    assert encode(Refuse(RefuseCode.NOT_MASTER, "x" * 65535))  # the longest string


# -- fuzzing: only frames or the peer's error, whatever the bytes -------------------------------


def holder_open() -> FrameConnection:
    return link_pair()[1]


def origin_open() -> FrameConnection:
    return link_pair()[0]


def slave_started() -> FrameConnection:
    return ha_pair()[1]


def master_started() -> FrameConnection:
    return ha_pair()[0]


SNAPSHOT = [
    SnapBegin(b"ck"),
    SnapFile("s/0", 4),
    SnapChunk(b"abcd"),
    SnapEnd(4),
    Data(1, 0, 4, 0, b"x"),
]
FUZZ_TARGETS: dict[str, tuple[Callable[[], FrameConnection], list[list[Frame]]]] = {
    "acceptor": (
        fresh(Role.ACCEPTOR),
        [
            [HELLO],
            [Hello("", "", "", "", U64_MAX, HelloFlags.ASYNC_LEARNER)],
            [LINK_HELLO, Read(1, "/", "q", 0, 5, 5, 99), Acks(2, "/", "q", (1, 2))],
        ],
    ),
    "ha-master": (master_started, [[Ack(1, 0), Ack(2, 2)], [Refuse(RefuseCode.STALE_EPOCH, "e")]]),
    "ha-slave": (slave_started, [[Data(1, 0, 0, 0, b"abc"), Data(1, 0, 3, 3)], SNAPSHOT]),
    "link-origin": (origin_open, [[Read(1, "/", "q", 0, 5, 5, 99), Acks(2, "/", "q", (1, 2, 3))]]),
    "link-holder": (
        holder_open,
        [
            [Entries(1, (Entry(1, 0, b"rec"), Entry(2, 1, b""))), Acked(2)],
            [LinkError(3, LinkErrorCode.NO_SUCH_QUEUE, "q")],
        ],
    ),
}


def protocol_error(exc: BaseException) -> bool:
    return isinstance(exc, RemoteProtocolError) and exc.code in (None, RefuseCode.VERSION)


@pytest.mark.parametrize("name", sorted(FUZZ_TARGETS))
def test_mutated_inputs_yield_frames_or_protocol_errors(name: str) -> None:
    make, streams = FUZZ_TARGETS[name]
    corpus = [b"".join(map(encode, stream)) for stream in streams]
    corpus += [encode(stream[0]) for stream in streams]

    def check(pieces: list[bytes]) -> None:
        feed_then_end(make(), pieces, Frame)

    for seed_input in corpus:  # the seeds themselves are accepted
        check([seed_input])
    seed = fuzz_seed()
    report = run_fuzz(corpus, check, 3_000, seed, protocol_error)
    print(f"{name}: seed {seed}, {report.inputs} inputs, {report.protocol_errors} protocol errors")


@given(st.binary(max_size=200), st.lists(st.integers(0, 200), max_size=6))
def test_random_bytes_yield_frames_or_protocol_errors(garbage: bytes, cuts: list[int]) -> None:
    points = sorted({0, len(garbage), *(c % (len(garbage) + 1) for c in cuts)})
    pieces = [garbage[a:b] for a, b in itertools.pairwise(points)]
    for make in (fresh(Role.ACCEPTOR), slave_started, holder_open):
        try:
            feed_then_end(make(), pieces, Frame)
        except RemoteProtocolError as exc:
            assert protocol_error(exc)


U8, U16, U32, U64 = (st.integers(0, 2**bits - 1) for bits in (8, 16, 32, 64))
TEXT = st.text(max_size=8)
BLOB = st.binary(max_size=40)
FRAMES: st.SearchStrategy[Frame] = st.one_of(
    st.builds(Hello, TEXT, TEXT, TEXT, TEXT, U64, st.sampled_from([*HelloFlags, HelloFlags(0)])),
    st.builds(Epochs, U32, U64, st.lists(st.builds(EpochStart, U32, U64), max_size=4).map(tuple)),
    st.builds(Start, U64),
    st.builds(Data, U32, U64, U64, U64, BLOB),
    st.builds(Ack, U64, U64),
    st.builds(Refuse, st.sampled_from(RefuseCode), TEXT),
    st.builds(SnapBegin, BLOB),
    st.builds(SnapFile, TEXT, U64),
    st.builds(SnapChunk, BLOB),
    st.builds(SnapEnd, U64),
    st.builds(LinkHello, TEXT, TEXT, TEXT),
    st.builds(Read, U32, TEXT, TEXT, U64, U64, U32, U32),
    st.builds(
        Entries,
        U32,
        st.lists(st.builds(Entry, U64, U32, BLOB), max_size=4).map(tuple),
        st.booleans(),
    ),
    st.builds(Acks, U32, TEXT, TEXT, st.lists(U64, max_size=6).map(tuple)),
    st.builds(Acked, U32),
    st.builds(LinkError, U32, st.sampled_from(LinkErrorCode), TEXT),
)


@given(st.lists(FRAMES, max_size=4), st.integers(1, 7))
def test_any_frames_round_trip(frames: list[Frame], step: int) -> None:
    wire = b"".join(map(encode, frames))
    assert read_all([wire]) == frames
    assert read_all([wire[i : i + step] for i in range(0, len(wire), step)]) == frames

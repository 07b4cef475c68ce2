"""The cluster port's frames (cluster/frames/, CLUSTER.md §4.1), without sockets.

One golden table of (frame, exact bytes), the bytes written by hand from §4.1, drives both
directions: each case is encoded and compared byte for byte, then decoded whole, byte by byte,
and with the bytes of a next frame after it (h11's test_io.py `tr()`). Then the roles' tables
(who may send and receive what, when), the peer's errors, the end of the stream, the encoder's
checks, mutation fuzzing through tests/codec_fuzz.py, hypothesis round trips, and the import
check that the codec loads neither trio nor pluggy.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from herald.cluster.frames import (
    NEED_DATA,
    SNAPSHOT_OFFSET,
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
from herald.cluster.frames.state import HA_STEPS, LINK_STEPS, TRANSITIONS
from herald.cluster.frames.wire import frame_pieces
from herald.core.codec_kit import Direction, LocalProtocolError, RemoteProtocolError

U64_MAX = 2**64 - 1

# (name, frame, hex): `u32 length (type + body) | u8 type | body`, big-endian.
GOLDEN: list[tuple[str, Frame, str]] = [
    (
        "hello",
        Hello("c1", "g1", "n2", "s", 4096),
        "0000001c 01 0001 0000 0002 6331 0002 6731 0002 6e32 0001 73 0000000000001000",
    ),
    (
        "hello async learner, empty strings, max u64",
        Hello("", "", "", "", U64_MAX, HelloFlags.ASYNC_LEARNER),
        "00000015 01 0001 0001 0000 0000 0000 0000 ffffffffffffffff",
    ),
    (
        "epochs",
        Epochs(3, 0x2000, (EpochStart(1, 0), EpochStart(3, 0x1800))),
        "00000029 02 00000003 0000000000002000 00000002"
        " 00000001 0000000000000000 00000003 0000000000001800",
    ),
    ("epochs none", Epochs(1, 0, ()), "00000011 02 00000001 0000000000000000 00000000"),
    ("start", Start(4096), "00000009 03 0000000000001000"),
    ("start asking for a snapshot", Start(SNAPSHOT_OFFSET), "00000009 03 ffffffffffffffff"),
    (
        "data",
        Data(3, 0x1800, 0x2000, 0x1F00, b"abc"),
        "00000020 04 00000003 0000000000001800 0000000000002000 0000000000001f00 616263",
    ),
    (
        "data heartbeat",
        Data(3, 0x1800, 0x2000, 0x2000),
        "0000001d 04 00000003 0000000000001800 0000000000002000 0000000000002000",
    ),
    (
        "data max fields",
        Data(0xFFFFFFFF, U64_MAX, U64_MAX, U64_MAX, b"\x00"),
        "0000001e 04 ffffffff ffffffffffffffff ffffffffffffffff ffffffffffffffff 00",
    ),
    ("ack", Ack(0x2003, 0x2000), "00000011 05 0000000000002003 0000000000002000"),
    (
        "refuse not master",
        Refuse(RefuseCode.NOT_MASTER, "master n1"),
        "0000000e 06 0001 0009 6d6173746572206e31",
    ),
    ("refuse version, no text", Refuse(RefuseCode.VERSION), "00000005 06 0005 0000"),
    ("snap begin", SnapBegin(b"\x01\x02"), "00000003 07 0102"),
    ("snap begin empty", SnapBegin(b""), "00000001 07"),
    ("snap file", SnapFile("cq/q1", 10), "00000010 08 0005 63712f7131 000000000000000a"),
    ("snap file empty", SnapFile("", 0), "0000000b 08 0000 0000000000000000"),
    ("snap chunk", SnapChunk(b"hello"), "00000006 09 68656c6c6f"),
    ("snap end", SnapEnd(0x10000), "00000009 0a 0000000000010000"),
    (
        "link hello utf-8",
        LinkHello("c1", "n\u00e9", "s"),
        "0000000f 20 0001 0002 6331 0003 6ec3a9 0001 73",
    ),
    ("link hello empty", LinkHello("", "", ""), "00000009 20 0001 0000 0000 0000"),
    (
        "read",
        Read(7, "/", "orders", 100, 1099, 256, 65536),
        "00000028 21 00000007 0001 2f 0006 6f7264657273"
        " 0000000000000064 000000000000044b 00000100 00010000",
    ),
    (
        "entries",
        Entries(7, (Entry(100, 0, b"rec1"), Entry(101, 2, b"")), more=True),
        "0000002e 22 00000007 01 00000002"
        " 0000000000000064 00000000 00000004 72656331"
        " 0000000000000065 00000002 00000000",
    ),
    ("entries none", Entries(8, ()), "0000000a 22 00000008 00 00000000"),
    (
        "acks",
        Acks(9, "/", "orders", (100, U64_MAX)),
        "00000024 23 00000009 0001 2f 0006 6f7264657273 00000002 0000000000000064 ffffffffffffffff",
    ),
    ("acks none", Acks(0, "", "", ()), "0000000d 23 00000000 0000 0000 00000000"),
    ("acked", Acked(9), "00000005 24 00000009"),
    (
        "link error",
        LinkError(7, LinkErrorCode.NO_SUCH_QUEUE, "orders"),
        "0000000f 25 00000007 0002 0006 6f7264657273",
    ),
    (
        "link error max req",
        LinkError(0xFFFFFFFF, LinkErrorCode.NOT_MASTER),
        "00000009 25 ffffffff 0001 0000",
    ),
]
CASES = [pytest.param(frame, bytes.fromhex(hex_), id=name) for name, frame, hex_ in GOLDEN]
NEXT = bytes.fromhex("00000005 24 00000009")  # ACKED 9, after each case


def read_all(chunks: list[bytes]) -> list[Frame]:
    reader = FrameReader()
    frames = []
    for chunk in chunks:
        reader.receive_data(chunk)
        while (frame := reader.next_frame()) is not NEED_DATA:
            assert isinstance(frame, Frame)
            frames.append(frame)
    assert reader.buffered == 0
    return frames


@pytest.mark.parametrize(("frame", "wire"), CASES)
def test_encode_matches_golden_bytes(frame: Frame, wire: bytes) -> None:
    assert encode(frame).hex(" ") == wire.hex(" ")


@pytest.mark.parametrize(("frame", "wire"), CASES)
def test_decode_whole(frame: Frame, wire: bytes) -> None:
    assert read_all([wire]) == [frame]


@pytest.mark.parametrize(("frame", "wire"), CASES)
def test_decode_byte_by_byte(frame: Frame, wire: bytes) -> None:
    assert read_all([wire[i : i + 1] for i in range(len(wire))]) == [frame]


@pytest.mark.parametrize(("frame", "wire"), CASES)
def test_decode_with_the_next_frame_after_it(frame: Frame, wire: bytes) -> None:
    assert read_all([wire + NEXT]) == [frame, Acked(9)]
    reader = FrameReader()
    reader.receive_data(wire + NEXT[:3])  # a next frame's first bytes wait for the rest
    assert reader.next_frame() == frame
    assert reader.next_frame() is NEED_DATA
    assert reader.buffered == 3


def test_shipped_bytes_are_bytes_sliced_once() -> None:
    payload = bytes(range(256)) * 1024  # 256 KiB, DATA's largest
    data = Data(1, 0, 0, 0, payload)
    pieces = frame_pieces(data)
    assert pieces[-1] is payload  # encoding keeps the payload as given: joined once, later
    wire = encode(data)
    for chunks in ([wire], [wire[:10], wire[10:1000], wire[1000:]]):  # kept / gathered
        (decoded,) = read_all(chunks)
        assert isinstance(decoded, Data)
        assert type(decoded.payload) is bytes and decoded.payload == payload


# -- the roles' tables --------------------------------------------------------------------------

HELLO, EPOCHS, START = Hello("c", "g", "n2", "s", 0), Epochs(1, 0, (EpochStart(1, 0),)), Start(0)
LINK_HELLO = LinkHello("c", "n1", "s")


def passes(sender: FrameConnection, receiver: FrameConnection, frame: Frame) -> None:
    sender.send(frame)
    receiver.receive_data(sender.data_to_send())
    assert receiver.next_event() == frame
    assert receiver.next_event() is NEED_DATA


def ha_pair() -> tuple[FrameConnection, FrameConnection]:
    """(master, slave) past HELLO, EPOCHS and START."""
    master, slave = FrameConnection(Role.ACCEPTOR), FrameConnection(Role.HA_SLAVE)
    passes(slave, master, HELLO)
    passes(master, slave, EPOCHS)
    passes(slave, master, START)
    return master, slave


def link_pair() -> tuple[FrameConnection, FrameConnection]:
    """(origin, holder) past both LINK_HELLOs."""
    origin, holder = FrameConnection(Role.ACCEPTOR), FrameConnection(Role.LINK_HOLDER)
    passes(holder, origin, LINK_HELLO)
    passes(origin, holder, LinkHello("c", "n2", "s"))
    return origin, holder


def test_start_asks_for_a_snapshot_with_the_largest_offset() -> None:
    assert SNAPSHOT_OFFSET == U64_MAX
    assert Start(SNAPSHOT_OFFSET).wants_snapshot
    assert not Start(0).wants_snapshot and not Start(U64_MAX - 1).wants_snapshot


def test_an_ha_stream_with_a_snapshot_then_data() -> None:
    master, slave = ha_pair()
    assert (master.state, slave.state) == (State.HA_STARTED, State.HA_STARTED)
    snapshot: list[Frame] = [
        SnapBegin(b"ckpt"),
        SnapFile("a", 3),
        SnapChunk(b"ab"),
        SnapChunk(b"c"),
    ]
    for frame in snapshot:
        passes(master, slave, frame)
        passes(slave, master, Ack(0, 0))
    for frame in (SnapFile("b", 0), SnapEnd(64), Data(1, 0, 64, 0, b"x"), Data(1, 0, 65, 65)):
        passes(master, slave, frame)
    passes(slave, master, Ack(65, 65))
    assert (master.state, slave.state) == (State.HA_STREAMING, State.HA_STREAMING)
    passes(slave, master, Refuse(RefuseCode.STALE_EPOCH, "epoch 2 is newer"))
    assert (master.state, slave.state) == (State.CLOSED, State.REFUSED)


def test_a_node_link_with_pipelined_requests() -> None:
    origin, holder = FrameConnection(Role.LINK_ORIGIN), FrameConnection(Role.LINK_HOLDER)
    passes(holder, origin, LINK_HELLO)
    passes(holder, origin, Read(1, "/", "q", 0, 9, 10, 1 << 20))  # before the origin's answer
    passes(origin, holder, LinkHello("c", "n2", "s"))
    passes(origin, holder, Entries(1, (Entry(0, 0, b"r"),)))
    passes(holder, origin, Acks(2, "/", "q", (0,)))
    passes(origin, holder, Acked(2))
    passes(origin, holder, LinkError(3, LinkErrorCode.NOT_MASTER, "n3 is master"))
    assert origin.state is holder.state is State.LINK_OPEN


def test_each_stream_is_one_set_of_steps_seen_from_both_ends() -> None:
    for steps, ends in (
        (HA_STEPS, (Role.HA_MASTER, Role.HA_SLAVE)),
        (LINK_STEPS, (Role.LINK_ORIGIN, Role.LINK_HOLDER)),
    ):
        for state, sender, frame, after in steps:
            for role in ends:
                way = Direction.SEND if role is sender else Direction.RECEIVE
                assert TRANSITIONS[role][(state, way, frame)] is after
    master = TRANSITIONS[Role.HA_MASTER]
    assert not [key for key in master if key[1] is Direction.RECEIVE and key[2] is Data]
    acceptor = TRANSITIONS[Role.ACCEPTOR]
    assert acceptor == {**master, **TRANSITIONS[Role.LINK_ORIGIN]}


def fresh(role: Role) -> Callable[[], FrameConnection]:
    return lambda: FrameConnection(role)


def streaming_master() -> FrameConnection:
    master, slave = ha_pair()
    passes(master, slave, Data(1, 0, 0, 0))
    return master


def holder_awaiting_hello() -> FrameConnection:
    holder = FrameConnection(Role.LINK_HOLDER)
    holder.send(LINK_HELLO)
    holder.data_to_send()
    return holder


NOT_RECEIVABLE = [
    pytest.param(fresh(Role.ACCEPTOR), Data(1, 0, 0, 0), id="acceptor DATA"),
    pytest.param(fresh(Role.ACCEPTOR), START, id="acceptor START before HELLO"),
    pytest.param(fresh(Role.ACCEPTOR), Refuse(RefuseCode.VERSION), id="acceptor REFUSE first"),
    pytest.param(fresh(Role.HA_MASTER), LINK_HELLO, id="master LINK_HELLO"),
    pytest.param(fresh(Role.LINK_ORIGIN), HELLO, id="origin HELLO"),
    pytest.param(fresh(Role.HA_SLAVE), EPOCHS, id="slave EPOCHS before its HELLO"),
    pytest.param(streaming_master, Data(1, 0, 0, 0), id="master DATA"),
    pytest.param(streaming_master, HELLO, id="master a second HELLO"),
    pytest.param(lambda: ha_pair()[1], SnapChunk(b"x"), id="slave SNAP_CHUNK before SNAP_FILE"),
    pytest.param(lambda: ha_pair()[1], START, id="slave START"),
    pytest.param(holder_awaiting_hello, Entries(1, ()), id="holder ENTRIES before LINK_HELLO"),
    pytest.param(lambda: link_pair()[0], Entries(1, ()), id="origin ENTRIES"),
    pytest.param(lambda: link_pair()[1], Read(1, "/", "q", 0, 0, 0, 0), id="holder READ"),
]


@pytest.mark.parametrize(("make", "frame"), NOT_RECEIVABLE)
def test_a_frame_the_role_may_not_receive_is_refused_from_its_type_byte(
    make: Callable[[], FrameConnection], frame: Frame
) -> None:
    conn = make()
    conn.receive_data(encode(frame)[:5])  # length and type: the body is not waited for
    with pytest.raises(RemoteProtocolError, match="cannot receive") as failed:
        conn.next_event()
    assert failed.value.code is None and conn.error_reply() is None
    assert conn.state is State.FAILED
    with pytest.raises(RemoteProtocolError, match="already failed"):  # sticky
        conn.next_event()


NOT_SENDABLE = [
    pytest.param(fresh(Role.HA_MASTER), EPOCHS, id="master EPOCHS before HELLO"),
    pytest.param(fresh(Role.HA_SLAVE), START, id="slave START before HELLO"),
    pytest.param(fresh(Role.HA_SLAVE), LINK_HELLO, id="slave LINK_HELLO"),
    pytest.param(fresh(Role.ACCEPTOR), HELLO, id="acceptor HELLO"),
    pytest.param(lambda: ha_pair()[1], Data(1, 0, 0, 0), id="slave DATA"),
    pytest.param(lambda: ha_pair()[0], Ack(0, 0), id="master ACK"),
    pytest.param(lambda: ha_pair()[0], SnapChunk(b""), id="master SNAP_CHUNK before SNAP_FILE"),
    pytest.param(streaming_master, SnapBegin(b""), id="master SNAP_BEGIN while streaming"),
    pytest.param(holder_awaiting_hello, LINK_HELLO, id="holder a second LINK_HELLO"),
    pytest.param(lambda: link_pair()[0], Read(1, "/", "q", 0, 0, 0, 0), id="origin READ"),
]


@pytest.mark.parametrize(("make", "frame"), NOT_SENDABLE)
def test_a_frame_the_role_may_not_send_is_the_callers_error(
    make: Callable[[], FrameConnection], frame: Frame
) -> None:
    conn = make()
    state = conn.state
    with pytest.raises(LocalProtocolError, match="cannot send"):
        conn.send(frame)
    assert conn.state is state and conn.data_to_send() == b""


def test_after_sending_refuse_nothing_is_read_or_sent() -> None:
    master, _ = ha_pair()
    master.send(Refuse(RefuseCode.OFFSET_UNAVAILABLE))
    assert master.data_to_send() == bytes.fromhex("00000005 06 0003 0000")
    master.receive_data(encode(Ack(1, 1)) + b"\xff\xff")  # in flight, then garbage: ignored
    assert master.next_event() is NEED_DATA
    with pytest.raises(LocalProtocolError):
        master.send(Data(1, 0, 0, 0))
    master.receive_data(b"")
    assert master.next_event() == ConnectionClosed()


def test_after_receiving_refuse_nothing_more_may_pass() -> None:
    origin, holder = link_pair()
    passes(origin, holder, Refuse(RefuseCode.NOT_MASTER, "n3"))
    with pytest.raises(LocalProtocolError):
        holder.send(Acks(1, "/", "q", ()))
    holder.receive_data(encode(Acked(1)))
    with pytest.raises(RemoteProtocolError):
        holder.next_event()
    assert holder.error_reply() is None  # the peer hung up already

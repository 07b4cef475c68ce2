"""The epoch history: `truncation_point` on hand-made and generated histories, `EpochFile`."""

from __future__ import annotations

import os
import re
from pathlib import Path

import attrs
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from herald.cluster.ha.epochs import (
    EpochEntry,
    EpochError,
    EpochFile,
    EpochFileError,
    appended,
    epoch_at,
    epochs_path,
    truncated,
    truncation_point,
)


def h(*pairs: tuple[int, int]) -> tuple[EpochEntry, ...]:
    return tuple(EpochEntry(e, s) for e, s in pairs)


# --- truncation_point, by hand ------------------------------------------------------------


def test_identical_histories_keep_everything() -> None:
    both = h((1, 0), (2, 100))
    assert truncation_point(both, 300, both, 300) == 300


def test_slave_behind_in_the_same_epoch_keeps_its_end() -> None:
    both = h((1, 0), (2, 100))
    assert truncation_point(both, 250, both, 300) == 250


def test_old_master_cuts_its_unreplicated_tail_where_the_new_epoch_starts() -> None:
    # The old master wrote 150..180 in epoch 2 that nobody got; the slave that had 0..150
    # was elected in epoch 3 at 150 and wrote on.
    old = h((1, 0), (2, 100))
    new = h((1, 0), (2, 100), (3, 150))
    assert truncation_point(old, 180, new, 400) == 150


def test_diverged_at_an_older_epoch() -> None:
    # Local was master of epoch 4 (unknown to the master) after having epoch 2 only to 200;
    # the master's epoch 2 ended at 150.
    local = h((1, 0), (2, 100), (4, 200))
    master = h((1, 0), (2, 100), (3, 150), (5, 300))
    assert truncation_point(local, 260, master, 400) == 150


def test_same_number_with_another_start_is_not_shared() -> None:
    local = h((1, 0), (3, 120))
    master = h((1, 0), (3, 150))
    assert truncation_point(local, 200, master, 400) == 120


def test_no_common_epoch_means_snapshot() -> None:
    assert truncation_point(h((2, 0)), 50, h((1, 0), (3, 50)), 90) is None


def test_empty_local_history_means_snapshot() -> None:
    # §3.3 sends a new slave to snapshot resync: nothing proves a byte of it is shared, and
    # streaming from 0 would need every segment the master may already have reclaimed.
    master = h((1, 0), (2, 100))
    assert truncation_point((), 0, master, 300) is None
    assert truncation_point((), 70, master, 300) is None
    assert truncation_point(master, 300, (), 0) is None


def test_an_epoch_recorded_past_a_crash_cut_log_end_is_clamped() -> None:
    local = h((1, 0), (2, 100))  # recorded epoch 2, then a crash cut the log to 90
    assert truncation_point(local, 90, h((1, 0), (3, 95)), 300) == 90
    assert truncation_point(local, 90, h((1, 0), (2, 100)), 300) == 90


def test_out_of_order_or_negative_input_is_refused() -> None:
    good = h((1, 0))
    with pytest.raises(EpochError, match="entry 1"):
        truncation_point((EpochEntry(2, 0), EpochEntry(1, 5)), 10, good, 10)
    with pytest.raises(EpochError, match="below the previous start"):
        truncation_point(good, 10, (EpochEntry(1, 50), EpochEntry(2, 5)), 10)
    with pytest.raises(ValueError, match="negative"):
        truncation_point(good, -1, good, 10)
    with pytest.raises(ValueError):
        EpochEntry(2**32, 0)
    with pytest.raises(ValueError):
        EpochEntry(1, -1)


def test_epoch_at_and_truncated() -> None:
    entries = h((1, 0), (2, 100), (3, 100), (4, 250))
    assert [epoch_at(entries, x) for x in (0, 99, 100, 249, 250, 10**9)] == [1, 1, 3, 3, 4, 4]
    assert epoch_at(h((3, 50)), 49) is None
    assert truncated(entries, 251) == entries
    assert truncated(entries, 250) == entries[:3]  # epoch 4 owns no byte below 250
    assert truncated(entries, 101) == entries[:3]
    assert truncated(entries, 100) == entries[:1]
    assert truncated(entries, 0) == ()


def test_a_stale_empty_epoch_at_the_cut_does_not_block_the_masters_epoch() -> None:
    # Slave S had epoch 4 to 100, was elected in epoch 5 at 100, lost it; M (epoch 4 to 150)
    # won epoch 6. S cuts to 100 and must then record epoch 4 again for bytes 100..150.
    s, m = h((4, 80), (5, 100)), h((4, 80), (6, 150))
    t = truncation_point(s, 130, m, 300)
    assert t == 100
    kept = truncated(s, t)
    assert kept == h((4, 80))
    assert appended(kept, 6, 150) == m


# --- truncation_point, generated --------------------------------------------------------

Token = tuple[str, int, int]  # (writer, epoch, serial): equal only if it is the same byte


def lcp(a: list[Token], b: list[Token]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@st.composite
def slave_of(
    draw: st.DrawFn,
) -> tuple[tuple[EpochEntry, ...], list[Token], tuple[EpochEntry, ...], list[Token]]:
    """A master's history and log; a slave that copied a prefix of it, then maybe wrote a
    tail of its own in a stale epoch, then maybe lost some of its end in a crash (keeping
    the epochs it had recorded)."""
    master: list[EpochEntry] = []
    mlog: list[Token] = []
    epoch = 0
    for _ in range(draw(st.integers(1, 6))):
        epoch += draw(st.integers(1, 3))
        master.append(EpochEntry(epoch, len(mlog)))
        mlog += [("m", epoch, len(mlog) + i) for i in range(draw(st.integers(0, 12)))]
    p = draw(st.integers(0, len(mlog)))
    # The slave recorded each epoch of which it received a byte, and maybe the next one.
    slave = [e for e in master if any(epoch_at(master, x) == e.epoch for x in range(p))]
    following = epoch_at(master, p) if p < len(mlog) else None
    if following is not None and draw(st.booleans()):
        entry = next(e for e in master if e.epoch == following)
        if not slave or slave[-1] != entry:
            slave.append(entry)
    slog = mlog[:p]
    if draw(st.booleans()):
        # Stale: above its own last epoch and never the master's (epoch, start); the same
        # number at another start may occur (it exercises the start check).
        last = slave[-1].epoch if slave else 0
        pairs = {(e.epoch, e.start_offset) for e in master}
        stale = draw(
            st.sampled_from([e for e in range(last + 1, epoch + 4) if (e, p) not in pairs])
        )
        slave.append(EpochEntry(stale, p))
        slog += [("s", stale, p + i) for i in range(draw(st.integers(0, 12)))]
    slog = slog[: draw(st.integers(0, len(slog)))]
    return tuple(slave), slog, tuple(master), mlog


@given(slave_of())
@settings(max_examples=400)
def test_truncation_point_is_exactly_what_both_logs_share(
    case: tuple[tuple[EpochEntry, ...], list[Token], tuple[EpochEntry, ...], list[Token]],
) -> None:
    slave, slog, master, mlog = case
    t = truncation_point(slave, len(slog), master, len(mlog))
    shared = lcp(slog, mlog)
    if t is None:
        assert not set(slave) & set(master)
        assert shared == 0
    else:
        assert t <= shared, "T keeps a byte the master does not have"
        assert t >= shared, "T cuts bytes both logs share"


# --- a group over many elections (the pure rules EpochFile applies) ----------------------


@attrs.define
class Node:
    log: list[Token] = attrs.Factory(list)
    entries: tuple[EpochEntry, ...] = ()
    following: bool = False


Step = tuple[str, int, int]


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["write", "sync", "sync", "elect", "crash"]),
            st.integers(0, 2),
            st.integers(0, 8),
        ),
        max_size=60,
    )
)
# A slave elected in epoch 2 without writing, then left behind by a node with more of epoch
# 1: its cut must drop the empty epoch 2 or it cannot record epoch 1 for the bytes it gets.
@example(
    [
        ("elect", 0, 0),
        ("write", 0, 5),
        ("sync", 1, 2),
        ("elect", 1, 0),
        ("elect", 0, 0),
        ("sync", 1, 8),
    ]
)
@settings(max_examples=500)
def test_a_group_stays_consistent_through_elections_and_crashes(steps: list[Step]) -> None:
    """Elect any node (even a stale one), write, stream, crash and rejoin: each handshake's
    T is exactly the shared prefix, appends are never refused, and every history describes
    its own log byte for byte."""
    nodes = [Node() for _ in range(3)]
    master: int | None = None
    top = 0
    serial = 0
    for kind, who, amount in steps:
        node = nodes[who]
        if kind == "elect":
            top += 1
            node.entries = appended(node.entries, top, len(node.log))
            master = who
            for other in nodes:
                other.following = False
        elif kind == "crash":
            del node.log[max(0, len(node.log) - amount) :]
            node.entries = truncated(node.entries, len(node.log))  # at restart, before all else
            node.following = False
            if master == who:
                master = None
        elif master is None:
            continue
        elif kind == "write":
            m = nodes[master]
            for _ in range(amount):
                serial += 1
                m.log.append((f"n{master}", top, serial))
        elif who != master:
            m = nodes[master]
            if not node.following:
                t = truncation_point(node.entries, len(node.log), m.entries, len(m.log))
                if t is None:  # snapshot resync
                    assert lcp(node.log, m.log) == 0
                    node.log, node.entries = list(m.log), m.entries
                else:
                    assert t == lcp(node.log, m.log)
                    del node.log[t:]
                    node.entries = truncated(node.entries, t)
                node.following = True
            for x in range(len(node.log), min(len(node.log) + amount, len(m.log))):
                owner = next(e for e in reversed(m.entries) if e.start_offset <= x)
                if not node.entries or node.entries[-1] != owner:
                    node.entries = appended(node.entries, owner.epoch, owner.start_offset)
                node.log.append(m.log[x])
        for n in nodes:
            assert [epoch_at(n.entries, x) for x in range(len(n.log))] == [e for _, e, _ in n.log]


# --- EpochFile --------------------------------------------------------------------------


def test_missing_file_is_an_empty_history(tmp_path: Path) -> None:
    f = EpochFile.load(tmp_path / "epochs")
    assert (f.entries, f.last, f.epoch_at(0)) == ((), None, None)
    assert epochs_path(tmp_path) == tmp_path / "store" / "epochs"


def test_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "epochs"
    f = EpochFile.load(path)
    f.append(1, 0)
    f.append(2, 100)
    f.append(3, 100)
    assert path.read_bytes() == b"1 0\n2 100\n3 100\n"
    again = EpochFile.load(path)
    assert again.entries == f.entries == h((1, 0), (2, 100), (3, 100))
    assert again.last == EpochEntry(3, 100)
    assert (again.epoch_at(99), again.epoch_at(100)) == (1, 3)
    assert isinstance(again.entries, tuple)
    assert not (tmp_path / "epochs.tmp").exists()


def test_a_torn_last_line_is_dropped(tmp_path: Path) -> None:
    path = tmp_path / "epochs"
    path.write_bytes(b"1 0\n2 100\n3 15")
    f = EpochFile.load(path)
    assert f.entries == h((1, 0), (2, 100))
    f.append(3, 150)
    assert path.read_bytes() == b"1 0\n2 100\n3 150\n"


@pytest.mark.parametrize(
    ("content", "line", "why"),
    [
        (b"1 0\nx y\n", 2, "not '<epoch> <start_offset>': b'x y'"),
        (b"1 0\n\n2 5\n", 2, "not"),
        (b"1  0\n", 1, "not"),
        (b"-1 0\n", 1, "not"),
        (b"1 0\r\n", 1, "not"),
        (b"4294967296 0\n", 1, "out of range"),
        (b"1 0\n2 100\n2 200\n", 3, "not above the previous epoch 2"),
        (b"1 100\n2 50\n", 2, "below the previous start 100"),
    ],
)
def test_a_malformed_line_is_refused_with_file_and_line(
    tmp_path: Path, content: bytes, line: int, why: str
) -> None:
    path = tmp_path / "epochs"
    path.write_bytes(content)
    with pytest.raises(EpochFileError, match=f"^{re.escape(f'{path}:{line}: ')}.*{why}") as info:
        EpochFile.load(path)
    assert (info.value.path, info.value.line) == (path, line)


def test_appends_out_of_order_are_refused_and_change_nothing(tmp_path: Path) -> None:
    path = tmp_path / "epochs"
    f = EpochFile.load(path)
    f.append(3, 100)
    for epoch, start in [(3, 200), (2, 200), (4, 99)]:
        with pytest.raises(EpochError, match=str(path)):
            f.append(epoch, start)
    assert f.entries == h((3, 100))
    assert path.read_bytes() == b"3 100\n"
    f.append(4, 100)  # an equal start: epoch 3 wrote nothing
    assert EpochFile.load(path).entries == h((3, 100), (4, 100))


def test_truncate_after(tmp_path: Path) -> None:
    path = tmp_path / "epochs"
    f = EpochFile.load(path)
    for epoch, start in [(1, 0), (2, 100), (3, 100), (4, 250)]:
        f.append(epoch, start)
    f.truncate_after(250)
    assert f.entries == EpochFile.load(path).entries == h((1, 0), (2, 100), (3, 100))
    f.truncate_after(100)
    assert path.read_bytes() == b"1 0\n"
    f.truncate_after(0)
    assert path.read_bytes() == b"" and EpochFile.load(path).entries == ()


def test_truncating_nothing_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = EpochFile.load(tmp_path / "epochs")
    f.append(1, 0)
    monkeypatch.setattr(os, "replace", lambda *a: pytest.fail("rewrote an unchanged history"))
    f.truncate_after(10)


def _fd_path(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


def test_append_is_durable_before_it_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The complete new file is fsynced, then renamed over the old, then the directory is
    fsynced, all before `append` returns."""
    path = tmp_path / "epochs"
    f = EpochFile.load(path)
    f.append(1, 0)
    events: list[tuple[str, str, bytes]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        name = _fd_path(fd)
        events.append(("fsync", name, Path(name).read_bytes() if Path(name).is_file() else b""))
        real_fsync(fd)

    def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        events.append(("replace", str(src), Path(src).read_bytes()))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    f.append(2, 100)
    tmp = str(tmp_path / "epochs.tmp")
    assert events == [
        ("fsync", tmp, b"1 0\n2 100\n"),
        ("replace", tmp, b"1 0\n2 100\n"),
        ("fsync", str(tmp_path), b""),
    ]


def test_a_failed_write_leaves_the_old_history(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "epochs"
    f = EpochFile.load(path)
    f.append(1, 0)

    def broken(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken)
    with pytest.raises(OSError, match="No space"):
        f.append(2, 100)
    assert f.entries == h((1, 0))
    assert path.read_bytes() == b"1 0\n"
    assert not (tmp_path / "epochs.tmp").exists()


def test_the_directory_must_exist(tmp_path: Path) -> None:
    f = EpochFile.load(tmp_path / "store" / "epochs")
    with pytest.raises(FileNotFoundError):
        f.append(1, 0)

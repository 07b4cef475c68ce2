"""storage/snapshot.py and storage/resync.py: a snapshot of a store, taken while the store
keeps writing, acking and reclaiming, opens in another directory to the state the store had
at the snapshot, streams on from there to the store's final state, and replaces the replica's
old store atomically: a process killed at any point of the receive or the swap leaves the old
store or the new one, each opening whole."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from herald.core.errors import ConfigError
from herald.core.store import QueueTarget
from herald.storage.checkpoint import ABORT
from herald.storage.commitlog import CommitLogStore
from herald.storage.commitlog_config import CommitLogConfig
from herald.storage.replica import ReplicaWriter
from herald.storage.resync import (
    COMPLETE,
    SnapshotError,
    SnapshotWriter,
    finish_swap,
    old_dir,
    staging_dir,
    swap_steps,
)
from herald.storage.snapshot import CHECKPOINT_FILE, Snapshot
from tests.storage.snapshot_helper import killed_at, write_files
from tests.storage.test_replica import CONFIG, OPERATIONS, index_of, opened, run, state_of, stream
from tests.store_model import message

CONFIG_FIELDS = {"segment_size": 64 * 1024, "cq_entries_per_file": 64, "index_slots": 64,
                 "index_entries": 256}  # fmt: skip
assert CONFIG.segment_size == CONFIG_FIELDS["segment_size"]
FIRST = "commitlog/" + "0" * 20


def take_in(snapshot: Snapshot, root: Path, *, inline: bool = True) -> None:
    """Write `snapshot` into the staging directory of the store at `root`, as a slave does
    (the checkpoint in SNAP_BEGIN, or `inline=False`: as a file of its own)."""
    writer = SnapshotWriter(root, CONFIG)
    if inline:
        write_files(snapshot, writer, len(snapshot.files))
    else:
        writer.begin(b"")
        writer.open_file(CHECKPOINT_FILE, len(snapshot.checkpoint_bytes))
        writer.write(snapshot.checkpoint_bytes)
        for index, file in enumerate(snapshot.files):
            writer.open_file(file.relpath, file.size)
            for at, length in snapshot.chunks(index):
                writer.write(snapshot.read(index, at, length))
    writer.finish(snapshot.log_end)


async def fill(store: CommitLogStore, count: int, size: int = 3000) -> None:
    for n in range(count):
        store.append(message(n, bytes([n % 251]) * size), [QueueTarget(1, n)])
    store.put_metadata("queue", "/|q", {"durable": True})
    await store.wait_durable(store.log.write_offset)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    before=st.lists(OPERATIONS, min_size=1, max_size=60),
    after=st.lists(OPERATIONS, max_size=30),
    bulk=st.integers(0, 16),
    acked=st.sets(st.integers(0, 15)),
    reclaimed=st.booleans(),
    inline=st.booleans(),
)
async def test_a_snapshot_opens_as_the_store_was_and_streams_on(
    tmp_path: Path,
    before: list[tuple[Any, ...]],
    after: list[tuple[Any, ...]],
    bulk: int,
    acked: set[int],
    reclaimed: bool,
    inline: bool,
) -> None:
    root = Path(tempfile.mkdtemp(dir=tmp_path))
    ids = (len(before) + len(after)) * 10
    async with opened(root / "master") as master:
        for n in range(bulk):  # 16 KiB records to queue 4: a log of several segments
            master.append(message(9000 + n, b"b" * 16_000), [QueueTarget(4, n)])
        for n in acked & set(range(bulk)):
            master.ack(4, n)
        for n, op in enumerate(before):
            for _ in run(master, op, n):
                pass
        if reclaimed:  # early segments gone, as on a master that ran a while
            await master.checkpoint()
            await master.checkpoint()
        snapshot = await master.snapshot()
        try:
            assert snapshot.log_end == master.log.write_offset
            segments = [f for f in snapshot.files if f.relpath.startswith("commitlog/")]
            event(f"segments shipped: {min(len(segments), 4)}+")
            event(f"log end: {min(snapshot.log_end // CONFIG.segment_size, 4)}+ segments")
            event(f"segment 0 reclaimed: {all(f.relpath != FIRST for f in segments)}")
            then, index_then = state_of(master), index_of(master, ids)
            master.retain_floor = snapshot.log_end  # what a slave streams on from stays
            for n, op in enumerate(after, len(before)):
                for _ in run(master, op, n):
                    pass
            await master.checkpoint()  # reclaim may delete shipped files meanwhile
            await master.checkpoint()
            take_in(snapshot, root / "replica", inline=inline)
        finally:
            snapshot.close()
        async with opened(root / "replica") as replica:
            assert not staging_dir(root / "replica").exists()
            assert replica.recovery is not None and replica.recovery.crashed
            assert replica.recovery.records == 0  # cut back to the checkpoint, nothing replayed
            assert replica.log.write_offset == snapshot.log_end
            assert state_of(replica) == then
            assert index_of(replica, ids) == index_then
            writer = ReplicaWriter(replica)
            stream(master, writer, master.log.write_offset, [70_000], [0])
            final = state_of(master)
            assert state_of(replica) == final
            # Acked messages may be gone from one log and not the other (each store reclaims
            # on its own checkpoints); live ones are in both.
            live = {mid for _next, entries in final["queues"].values() for _o, mid, *_ in entries}
            on_master, on_replica = index_of(master, ids), index_of(replica, ids)
            kept = [n for n, found in enumerate(on_master) if set(found) & live]
            assert [on_replica[n] for n in kept] == [on_master[n] for n in kept]
        async with opened(root / "replica") as again:  # a clean reopen
            assert again.recovery is not None and not again.recovery.crashed
            assert state_of(again) == state_of(master)


async def test_files_reclaimed_while_they_ship_stay_readable(tmp_path: Path) -> None:
    async with opened(tmp_path / "master") as master:
        await fill(master, 140)  # 3 consume-queue files, 7 segments
        snapshot = await master.snapshot()
        try:
            then = state_of(master)
            shipped = [tmp_path / "master" / f.relpath for f in snapshot.files]
            for offset in range(140):
                master.ack(1, offset)
            await master.checkpoint()
            await master.checkpoint()
            gone = [path for path in shipped if not path.exists()]
            assert any("commitlog" in path.parts for path in gone)
            assert any("consumequeue" in path.parts for path in gone)
            take_in(snapshot, tmp_path / "replica")
        finally:
            snapshot.close()
    async with opened(tmp_path / "replica") as replica:
        assert state_of(replica) == then
        assert len(then["queues"][1][1]) == 140


async def test_a_process_killed_while_it_receives_keeps_its_old_store(tmp_path: Path) -> None:
    async with opened(tmp_path / "master") as master:
        await fill(master, 40)
    async with opened(tmp_path / "replica") as old:
        old.put_metadata("exchange", "/|old", {"kept": True})
        before = state_of(old)
    killed_at(mode="receive", master=str(tmp_path / "master"), replica=str(tmp_path / "replica"),
              config=CONFIG_FIELDS, files=3)  # fmt: skip
    staging = staging_dir(tmp_path / "replica")
    assert staging.exists() and not (staging / COMPLETE).exists()
    async with opened(tmp_path / "replica") as replica:
        assert state_of(replica) == before
    assert not staging.exists()


@pytest.mark.parametrize("steps", range(len(swap_steps(Path("x"))) + 1))
@pytest.mark.parametrize("remade", [False, True], ids=["", "store-dir-remade"])
async def test_a_process_killed_while_it_swaps_leaves_the_new_store(
    tmp_path: Path, steps: int, remade: bool
) -> None:
    """Killed after any step of the swap (or before the first), the next open finishes the
    swap: the new store opens whole. `remade`: a restarted node made an empty store directory
    first (the cluster node does, before it reads its epoch history)."""
    replica = tmp_path / "replica"
    async with opened(tmp_path / "master") as master:
        await fill(master, 40)
        snapshot = await master.snapshot()
        try:
            then = state_of(master)
            async with opened(replica) as old:
                old.put_metadata("exchange", "/|old", {"kept": True})
            take_in(snapshot, replica)
        finally:
            snapshot.close()
    killed_at(mode="swap", replica=str(replica), config=CONFIG_FIELDS, steps=steps)
    if remade:
        replica.mkdir(exist_ok=True)
    async with opened(replica) as new:
        assert state_of(new) == then
    assert not staging_dir(replica).exists() and not old_dir(replica).exists()
    assert not (replica / COMPLETE).exists()


async def test_a_swap_never_runs_under_an_open_store(tmp_path: Path) -> None:
    async with opened(tmp_path / "master") as master:
        await fill(master, 5)
        snapshot = await master.snapshot()
        try:
            async with opened(tmp_path / "replica"):
                take_in(snapshot, tmp_path / "replica")
                with pytest.raises(ConfigError, match="in use"):
                    finish_swap(tmp_path / "replica")
                assert (staging_dir(tmp_path / "replica") / COMPLETE).exists()
        finally:
            snapshot.close()
        async with opened(tmp_path / "replica") as replica:  # closed: now it swaps
            assert state_of(replica) == state_of(master)


async def test_what_this_node_cannot_open_is_refused(tmp_path: Path) -> None:
    async with opened(tmp_path / "master") as master:
        await fill(master, 5)
        snapshot = await master.snapshot()
    snapshot.close()
    root = tmp_path / "replica"
    writer = SnapshotWriter(root, CONFIG)
    other = SnapshotWriter(root, CommitLogConfig())  # 256 MiB segments
    with pytest.raises(SnapshotError, match="segment_size"):
        other.begin(snapshot.checkpoint_bytes)
    with pytest.raises(SnapshotError, match="checkpoint"):
        writer.begin(b"not a checkpoint")
    writer.begin(snapshot.checkpoint_bytes)
    for bad in ("../x", "/etc/passwd", "commitlog/1", "commitlog/../../00000000000000000000",
                "consumequeue/1/00000000000000000000", "checkpoint", "epochs"):  # fmt: skip
        with pytest.raises(SnapshotError, match="not a file of a commit-log store"):
            writer.open_file(bad, 10)
    with pytest.raises(SnapshotError, match="settings"):
        writer.open_file("commitlog/00000000000000000000", 1 << 20)
    with pytest.raises(SnapshotError, match="before any file"):
        writer.write(b"x")
    writer.open_file("consumequeue/1-0/00000000000000000000", 64 * 32)
    with pytest.raises(SnapshotError, match="more than"):
        writer.write(bytes(64 * 32 + 1))
    with pytest.raises(SnapshotError, match="SNAP_END"):
        writer.finish(snapshot.log_end + 8)
    assert not (staging_dir(root) / COMPLETE).exists()
    writer.abandon()
    assert not staging_dir(root).exists()
    extra = SnapshotWriter(root, CONFIG, extra=("epochs",))
    extra.begin(snapshot.checkpoint_bytes)
    extra.open_file("epochs", 4)
    extra.write(b"1 0\n")
    with pytest.raises(SnapshotError, match="too large"):
        extra.open_file("epochs", 1 << 30)
    extra.abandon()
    assert not (root / ABORT).exists()


def test_nothing_to_finish_touches_nothing(tmp_path: Path) -> None:
    assert finish_swap(tmp_path / "none") is False
    assert not (tmp_path / "none").exists()

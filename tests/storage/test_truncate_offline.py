"""storage/replica.py truncate_offline: a closed store cut back to an offset reopens holding
exactly the state it had at that offset (a diverged ex-master dropping its unreplicated tail),
or, when reclaimed segments make that impossible, refuses and changes nothing."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from herald.core.errors import ConfigError
from herald.core.store import QueueTarget
from herald.storage.checkpoint import ABORT, LOCK, read_checkpoints
from herald.storage.commitlog import CommitLogStore
from herald.storage.replica import truncate_offline
from tests.storage.test_replica import CONFIG, OPERATIONS, SEGMENT, State, opened, run, state_of
from tests.store_model import message


def files_of(root: Path) -> dict[str, bytes]:
    """Every file of a data dir but the lock, with its bytes."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != LOCK
    }


def crash_copy(store: CommitLogStore, to: Path) -> Path:
    """The data dir of an open store as a kill -9 would leave it (the abort marker set)."""
    shutil.copytree(store.root, to, ignore=shutil.ignore_patterns(LOCK))
    return to


def fill(store: CommitLogStore, first: int, count: int, size: int = 3000, queue: int = 1) -> None:
    for n in range(first, first + count):
        store.append(message(n, b"x" * size), [QueueTarget(queue, store.queue_next_offset(queue))])


async def rest_of_history(store: CommitLogStore) -> None:
    """Records of every kind after the cut."""
    fill(store, 100, 30)
    fill(store, 200, 3, queue=2)
    store.ack(1, 0)
    store.ack(1, 105)
    store.note_delivery(1, 1, 3)
    store.put_metadata("queue", "/|q", None)
    store.put_metadata("exchange", "/|x", {"later": True})
    store.delete_queue(2)
    store.flush_acks()


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    ops=st.lists(st.one_of(OPERATIONS, st.just(("checkpoint",))), min_size=1, max_size=60),
    crashed=st.booleans(),
    data=st.data(),
)
async def test_reopened_store_holds_the_state_at_the_cut(
    tmp_path: Path, ops: list[tuple[Any, ...]], crashed: bool, data: Any
) -> None:
    root = Path(tempfile.mkdtemp(dir=tmp_path))
    async with opened(root / "s") as store:
        states: dict[int, State] = {0: state_of(store)}
        for n, op in enumerate(ops):
            if op[0] == "checkpoint":
                await store.checkpoint()
                continue
            for _ in run(store, op, n):
                states[store.log.write_offset] = state_of(store)
        final, end = state_of(store), store.log.write_offset
        target = crash_copy(store, root / "c") if crashed else store.root
    offset = data.draw(st.sampled_from(sorted(states)), label="cut at")
    done = truncate_offline(target, CONFIG, offset)
    event(f"truncated: {done}, crashed: {crashed}")
    async with opened(target) as reopened:
        if done:
            assert reopened.log.write_offset == offset
            assert state_of(reopened) == states[offset]
        else:  # refused: the store is what it was
            assert reopened.log.write_offset == end
            assert state_of(reopened) == final


async def test_checkpoints_past_the_cut_are_dropped(tmp_path: Path) -> None:
    async with opened(tmp_path) as store:
        fill(store, 0, 30)
        store.put_metadata("queue", "/|q", {"a": 1})
        await store.checkpoint()
        kept = store.log.write_offset
        fill(store, 30, 5)
        store.ack(1, 2)
        store.flush_acks()
        cut_at, before = store.log.write_offset, state_of(store)
        await rest_of_history(store)
        assert state_of(store) != before  # and the checkpoint at close is past the cut
    assert truncate_offline(tmp_path, CONFIG, cut_at)
    found = read_checkpoints(tmp_path)
    assert found.newest is not None and found.newest.log_end == kept
    assert found.previous is None and (tmp_path / ABORT).exists()
    assert truncate_offline(tmp_path, CONFIG, cut_at)  # again, as after a crash midway
    async with opened(tmp_path) as store:
        report = store.recovery
        assert report is not None and report.crashed and report.start == kept
        assert store.log.write_offset == cut_at
        assert state_of(store) == before
        fill(store, 300, 30)  # the log goes on from the cut
        after = state_of(store)
    async with opened(tmp_path) as store:
        assert state_of(store) == after


async def test_a_crashed_store_without_a_checkpoint_below_replays_from_the_start(
    tmp_path: Path,
) -> None:
    async with opened(tmp_path / "s") as store:
        fill(store, 0, 10)
        cut_at, before = store.log.write_offset, state_of(store)
        await rest_of_history(store)
        await store.checkpoint()
        await store.checkpoint()  # the checkpoint of the empty store at open is gone
        fill(store, 400, 3)
        copy = crash_copy(store, tmp_path / "c")
    assert truncate_offline(copy, CONFIG, cut_at)
    assert read_checkpoints(copy).newest is None
    async with opened(copy) as store:
        assert store.recovery is not None and store.recovery.start == 0
        assert store.log.write_offset == cut_at
        assert state_of(store) == before


async def test_cut_at_a_segment_end(tmp_path: Path) -> None:
    async with opened(tmp_path) as store:
        ends = {0: state_of(store)}
        while store.log.write_offset < SEGMENT:
            fill(store, len(ends), 1, size=5000)
            ends[store.log.write_offset] = state_of(store)
        last = max(e for e in ends if e < SEGMENT)  # a filler follows the last record
        await rest_of_history(store)
    assert truncate_offline(tmp_path, CONFIG, SEGMENT)
    async with opened(tmp_path) as store:
        assert store.log.write_offset == SEGMENT
        assert state_of(store) == ends[last]
        assert sorted(store.log.files) == [0, SEGMENT]
        fill(store, 500, 3)  # appends go on in the next segment
        assert store.log.write_offset > SEGMENT


async def test_cut_to_zero_empties_the_store(tmp_path: Path) -> None:
    async with opened(tmp_path) as store:
        empty = state_of(store)
        await rest_of_history(store)
    assert truncate_offline(tmp_path, CONFIG, 0)
    async with opened(tmp_path) as store:
        assert store.log.write_offset == 0
        assert state_of(store) == empty and store.queue_ids() == []
        assert list(store.log.files) == [0]


async def test_an_offset_past_the_end_changes_nothing(tmp_path: Path) -> None:
    async with opened(tmp_path / "s") as store:
        await rest_of_history(store)
        final, end = state_of(store), store.log.write_offset
        copy = crash_copy(store, tmp_path / "c")
    clean = files_of(tmp_path / "s")
    for offset in (end, end + 100, 10 * SEGMENT):
        assert truncate_offline(tmp_path / "s", CONFIG, offset)
        assert files_of(tmp_path / "s") == clean
        assert truncate_offline(copy, CONFIG, offset)  # crashed: no valid record is cut either
    assert truncate_offline(tmp_path / "none", CONFIG, 0)  # no store at all
    async with opened(tmp_path / "s") as store:
        assert store.recovery is not None and not store.recovery.crashed
        assert store.log.write_offset == end and state_of(store) == final
    async with opened(copy) as store:
        assert store.log.write_offset == end and state_of(store) == final


async def test_refused_when_reclaimed_segments_are_needed(tmp_path: Path) -> None:
    async with opened(tmp_path) as store:
        fill(store, 0, 5)
        cut_at = store.log.write_offset  # no checkpoint at or below it will remain
        fill(store, 5, 100)
        for n in range(100):
            store.ack(1, n)
        await store.checkpoint()
        await store.checkpoint()
        assert store.log.min_offset > 0  # acked segments were reclaimed
        final, end = state_of(store), store.log.write_offset
    files = files_of(tmp_path)
    assert not truncate_offline(tmp_path, CONFIG, cut_at)
    assert files_of(tmp_path) == files
    async with opened(tmp_path) as store:
        assert store.log.write_offset == end and state_of(store) == final


async def test_refused_when_a_message_live_at_the_checkpoint_lost_its_segment(
    tmp_path: Path,
) -> None:
    async with opened(tmp_path / "s") as store:
        fill(store, 0, 50)  # segments 0 and 1 and a part of 2
        await store.checkpoint()
        cut_at = store.log.write_offset  # the checkpoint at the cut will remain
        for n in range(45):  # acked past the cut: segments 0 and 1 hold no live message
            store.ack(1, n)
        await store.checkpoint()  # reclaims them (both are below the older checkpoint)
        assert store.log.min_offset == 2 * SEGMENT
        final, end = state_of(store), store.log.write_offset
        copy = crash_copy(store, tmp_path / "c")  # no checkpoint at close
    previous = read_checkpoints(copy).previous
    assert previous is not None and previous.log_end == cut_at
    files = files_of(copy)
    assert not truncate_offline(copy, CONFIG, cut_at)  # at the cut they are live
    assert files_of(copy) == files
    async with opened(copy) as store:
        assert store.log.write_offset == end and state_of(store) == final


async def test_an_open_store_is_refused(tmp_path: Path) -> None:
    async with opened(tmp_path) as store:
        fill(store, 0, 3)
        with pytest.raises(ConfigError, match="in use"):
            truncate_offline(tmp_path, CONFIG, 0)
        assert store.log.write_offset > 0
    with pytest.raises(ValueError, match="negative"):
        truncate_offline(tmp_path, CONFIG, -1)

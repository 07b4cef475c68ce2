"""Recovery on real files: crashes (a child process that exits without closing the store),
torn tails, garbage, bit flips, lost checkpoints, the lock."""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from herald.core.errors import ConfigError
from herald.core.message import CodecRegistry
from herald.core.store import QueueTarget
from herald.storage.checkpoint import ABORT, CHECKPOINT, PREVIOUS
from herald.storage.commitlog import CommitLogConfig, CommitLogStore
from herald.storage.mapped_file import file_name
from tests.storage.crash_helper import crash, log_position, message

SMALL: dict[str, Any] = {"segment_size": 64 * 1024, "cq_entries_per_file": 64, "index_entries": 256}
CONFIG = CommitLogConfig(**SMALL)


@asynccontextmanager
async def opened(path: Path, config: CommitLogConfig = CONFIG) -> AsyncIterator[CommitLogStore]:
    store = CommitLogStore(path, config)
    await store.open(CodecRegistry())
    try:
        yield store
    finally:
        await store.close()


def ids(store: CommitLogStore, queue_id: int = 1) -> list[str | None]:
    return [entry.message.message_id for entry in store.recover_queue(queue_id)]


def segment_of(path: Path, position: int) -> tuple[Path, int]:
    """The segment file holding `position` and the offset in it."""
    size = CONFIG.segment_size
    return path / "commitlog" / file_name(position - position % size), position % size


def flip(path: Path, position: int) -> None:
    file, at = segment_of(path, position)
    with open(file, "r+b") as out:
        out.seek(at)
        byte = out.read(1)[0]
        out.seek(at)
        out.write(bytes([byte ^ 0x10]))


async def test_crash_replays_everything_after_the_checkpoint(tmp_path: Path) -> None:
    crash(tmp_path, config=SMALL, count=60, acks=[3, 7, 41], metadata={"queue": {"/|q": {"a": 1}}})
    assert (tmp_path / ABORT).exists()
    async with opened(tmp_path) as store:
        report = store.recovery
        # 60 messages, the metadata record, the three acks in one ACKS record
        assert report is not None and report.crashed and report.records == 60 + 1 + 1
        assert ids(store) == [f"m{n}" for n in range(60) if n not in (3, 7, 41)]
        assert store.load_metadata() == {"queue": {"/|q": {"a": 1}}}
        [entry] = [e for e in store.recover_queue(1) if e.queue_offset == 10]
        assert entry.message.headers == {"n": 10}
        assert entry.message.raw == message(10).raw
        assert store.statistics().messages == 57
    assert not (tmp_path / ABORT).exists()
    async with opened(tmp_path) as store:
        assert store.recovery is not None and not store.recovery.crashed
        assert store.recovery.records == 0
        assert len(ids(store)) == 57


async def test_crash_after_a_checkpoint_replays_only_the_rest(tmp_path: Path) -> None:
    written = crash(tmp_path, config=SMALL, count=40, checkpoint_after=25, acks=[1, 30])
    async with opened(tmp_path) as store:
        report = store.recovery
        assert report is not None and report.crashed
        assert report.start == written["records"][24][1]  # the checkpoint's offset
        assert report.records == 15 + 1  # the two acks in one ACKS record
        assert ids(store) == [f"m{n}" for n in range(40) if n not in (1, 30)]
        assert [m.message_id for m in store.find_by_key("m33")] == ["m33"]
        assert [m.message_id for m in store.find_by_key("m2")] == ["m2"]


async def test_crash_across_many_segments(tmp_path: Path) -> None:
    written = crash(tmp_path, config=SMALL, count=300, body=1000)
    segments = sorted(os.listdir(tmp_path / "commitlog"))
    assert len(segments) >= 5
    assert all(os.path.getsize(tmp_path / "commitlog" / s) == CONFIG.segment_size for s in segments)
    for position, ticket in written["records"]:  # records never span two segments
        assert position // CONFIG.segment_size == (ticket - 1) // CONFIG.segment_size
    async with opened(tmp_path) as store:
        assert ids(store) == [f"m{n}" for n in range(300)]


async def test_torn_tail_is_cut(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    written = crash(tmp_path, config=SMALL, count=30)
    last, _ = written["records"][-1]
    file, at = segment_of(tmp_path, last)
    os.truncate(file, at + 40)  # the last record lost its tail: a torn write
    async with opened(tmp_path) as store:
        assert store.recovery is not None and store.recovery.cut
        assert store.recovery.end == last
        assert ids(store) == [f"m{n}" for n in range(29)]
        ticket = store.append(message(29, 100), [QueueTarget(1, 29)])
        await store.wait_durable(ticket)
    assert "cut a torn or corrupt tail" in caplog.text
    assert os.path.getsize(file) == CONFIG.segment_size
    async with opened(tmp_path) as store:
        entries = list(store.recover_queue(1))
        assert [e.message.message_id for e in entries] == [f"m{n}" for n in range(30)]
        assert entries[-1].message.raw == message(29, 100).raw


async def test_garbage_after_the_tail_is_zeroed(tmp_path: Path) -> None:
    written = crash(tmp_path, config=SMALL, count=10)
    file, at = segment_of(tmp_path, written["end"])
    garbage = bytes(range(256)) * 8
    with open(file, "r+b") as out:
        out.seek(at)
        out.write(garbage)
    async with opened(tmp_path) as store:
        assert store.recovery is not None and store.recovery.cut
        assert store.recovery.end == written["end"]
        assert ids(store) == [f"m{n}" for n in range(10)]
        assert store.statistics().appended_ticket == written["end"]
    with open(file, "rb") as data:
        data.seek(at)
        assert data.read(len(garbage)) != garbage


async def test_bit_flip_in_the_middle_skips_only_that_record(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    written = crash(tmp_path, config=SMALL, count=20)
    bad, _ = written["records"][5]
    flip(tmp_path, bad + 60)
    with caplog.at_level(logging.ERROR):
        async with opened(tmp_path) as store:
            report = store.recovery
            assert report is not None
            assert ids(store) == [f"m{n}" for n in range(20) if n != 5]
            assert report.end == written["end"]
            assert report.skipped == ((file_name(0), bad, written["records"][6][0] - bad),)
            assert not report.cut
            assert store.statistics().messages == 19
    assert f"segment {file_name(0)}" in caplog.text and f"at offset {bad}" in caplog.text


async def test_bit_flip_found_on_the_clean_path_is_never_delivered(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with opened(tmp_path) as store:
        for n in range(5):
            store.append(message(n), [QueueTarget(1, n), QueueTarget(2, n)])
        position = log_position(store, 1, 2)
    flip(tmp_path, position + 90)
    async with opened(tmp_path) as store:
        assert store.recovery is not None and not store.recovery.crashed
        assert ids(store, 1) == ["m0", "m1", "m3", "m4"]
        assert ids(store, 2) == ["m0", "m1", "m3", "m4"]
        assert store.statistics().messages == 4
    assert "dropping unreadable message at offset 2" in caplog.text


async def test_lost_checkpoints_rebuild_from_the_log(tmp_path: Path) -> None:
    crash(tmp_path, config=SMALL, count=12, acks=[0], metadata={"vhost": {"/": {"n": 1}}})
    (tmp_path / CHECKPOINT).unlink()
    (tmp_path / PREVIOUS).unlink(missing_ok=True)
    async with opened(tmp_path) as store:
        assert store.recovery is not None and store.recovery.crashed
        assert ids(store) == [f"m{n}" for n in range(1, 12)]
        assert store.load_metadata() == {"vhost": {"/": {"n": 1}}}


async def test_damaged_checkpoint_falls_back_to_the_previous_and_replays(tmp_path: Path) -> None:
    async with opened(tmp_path) as store:
        for n in range(8):
            store.append(message(n), [QueueTarget(1, n)])
        store.ack(1, 4)
    data = (tmp_path / CHECKPOINT).read_bytes()
    (tmp_path / CHECKPOINT).write_bytes(data.replace(b'"log_end"', b'"log_End"'))
    async with opened(tmp_path) as store:
        assert store.recovery is not None and store.recovery.crashed
        assert ids(store) == [f"m{n}" for n in range(8) if n != 4]


async def test_clean_stop_scans_nothing(tmp_path: Path) -> None:
    async with opened(tmp_path) as store:
        store.append(message(1), [QueueTarget(1, 0)])
        assert (tmp_path / ABORT).exists()
    assert not (tmp_path / ABORT).exists()
    async with opened(tmp_path) as store:
        report = store.recovery
        assert report is not None and not report.crashed and report.records == 0
        assert ids(store) == ["m1"]


async def test_lock_prevents_a_second_open(tmp_path: Path) -> None:
    async with opened(tmp_path):
        second = CommitLogStore(tmp_path, CONFIG)
        with pytest.raises(ConfigError, match=f"in use by another herald store.*pid {os.getpid()}"):
            await second.open(CodecRegistry())
    async with opened(tmp_path) as store:  # released by the clean close
        assert store.recovery is not None


async def test_segment_size_cannot_change(tmp_path: Path) -> None:
    async with opened(tmp_path):
        pass
    other = CommitLogStore(tmp_path, CommitLogConfig(segment_size=128 * 1024))
    with pytest.raises(ConfigError, match="segment_size"):
        await other.open(CodecRegistry())
    async with opened(tmp_path):  # the failed open released the lock
        pass

"""What the commit-log store keeps in memory for live messages, and how it finds them on disk:
memory that does not grow with the live messages, acks found by binary search in the consume
queue (after restarts and crashes, out of order), ranges answered without reading records,
reference counts only for fan-out messages, and the format check of old data dirs."""

from __future__ import annotations

import gc
import itertools
import json
import tempfile
import tracemalloc
import zlib
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from herald.core.errors import ConfigError
from herald.core.message import CodecRegistry, Message
from herald.core.store import QueueRange, QueueTarget
from herald.storage.checkpoint import CHECKPOINT
from herald.storage.commitlog import CommitLogConfig, CommitLogStore
from herald.storage.consume_queue import ConsumeQueue
from herald.storage.mapped_file import MappedFile, file_name
from tests.storage.crash_helper import crash, log_position, message
from tests.storage.test_recovery import flip, opened

SMALL_FILES = CommitLogConfig(segment_size=64 * 1024, cq_entries_per_file=16, index_entries=256)
"""Consume-queue files of 16 entries: searches and walks cross file boundaries."""

BIG_FILES = CommitLogConfig(segment_size=64 * 1024 * 1024, index=False)
"""Few files, so that what is measured per message is not the files' own objects."""


def recount(store: CommitLogStore) -> tuple[int, int, dict[int, int], dict[int, int]]:
    """(messages, bytes, live messages per segment, fan-out live targets) from a walk of every
    consume queue: what the ledger's running totals must equal."""
    sizes: dict[int, int] = {}
    live_targets: Counter[int] = Counter()
    fan_out = set()
    for state in store.state.queues.values():
        for _, (position, _, raw_length, _, targets, _) in state.live_entries():
            sizes[position] = raw_length
            live_targets[position] += 1
            if targets > 1:
                fan_out.add(position)
    segments = Counter(p - p % store.config.segment_size for p in sizes)
    refs = {p: live_targets[p] for p in fan_out}
    return len(sizes), sum(sizes.values()), dict(segments), refs


def assert_totals_exact(store: CommitLogStore) -> None:
    ledger = store.state.ledger
    assert (ledger.messages, ledger.bytes, ledger.segments, ledger.refs) == recount(store)


def plain(n: int, size: int = 100) -> Message:
    return Message(
        protocol="test",
        raw=b"x" * size,
        exchange="ex",
        routing_key="k",
        body_size=size,
        persistent=True,
    )


@contextmanager
def traced() -> Iterator[list[int]]:
    """Measures the bytes of Python objects still allocated at the end of the block (after a
    full collection): `[growth]` once the block is left."""
    gc.collect()
    tracemalloc.start()
    result: list[int] = []
    try:
        before = tracemalloc.get_traced_memory()[0]
        yield result
        gc.collect()
        result.append(tracemalloc.get_traced_memory()[0] - before)
    finally:
        tracemalloc.stop()


async def test_memory_does_not_grow_with_live_messages(tmp_path: Path) -> None:
    """The store keeps no Python object per live message: 100,000 appended and un-acked
    messages cost less than 16 bytes each, both as they are appended and after a restart."""
    count = 100_000
    async with opened(tmp_path, BIG_FILES) as store:
        for n in range(1000):  # files made, caches warm
            store.append(plain(n), [QueueTarget(1, n)])
        held = plain(0)
        with traced() as appended:
            for n in range(1000, 1000 + count):
                store.append(held, [QueueTarget(1, n)])
        assert appended[0] / count < 16, f"{appended[0] / count:.1f} B per live message"
    store = CommitLogStore(tmp_path, BIG_FILES)
    with traced() as reopened:
        await store.open(CodecRegistry())
    try:
        assert reopened[0] / count < 16, f"{reopened[0] / count:.1f} B per live message"
        assert store.statistics().messages == count + 1000
        assert len(list(store.queue_ranges(1, 10_000))) == 11
    finally:
        await store.close()


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(gaps=st.lists(st.integers(1, 4), min_size=1, max_size=90), data=st.data())
async def test_acks_find_their_entries_after_restarts(
    tmp_path: Path, gaps: list[int], data: st.DataObject
) -> None:
    """Offsets with gaps (transient messages take offsets too), acks out of order before and
    after a restart, and acks of offsets the queue never had."""
    offsets = list(itertools.accumulate(gaps))
    path = Path(tempfile.mkdtemp(dir=tmp_path))
    async with opened(path, SMALL_FILES) as store:
        for n, offset in enumerate(offsets):
            store.append(message(n), [QueueTarget(1, offset)])
        early = data.draw(st.lists(st.sampled_from(offsets), unique=True), label="acked early")
        for offset in early:
            store.ack(1, offset)
    live = [o for o in offsets if o not in early]
    async with opened(path, SMALL_FILES) as store:
        assert [e.queue_offset for e in store.recover_queue(1)] == live
        assert_totals_exact(store)
        missing = sorted(set(range(offsets[-1] + 3)) - set(live))
        for offset in data.draw(st.permutations(live), label="acked after the restart"):
            store.ack(1, data.draw(st.sampled_from(missing), label="unknown"))
            store.ack(1, offset)
            live.remove(offset)
            store.ack(1, offset)  # twice: a no-op
            if len(live) % 7 == 0:
                assert [e.queue_offset for e in store.read_queue(1, 0, 2**40, 1000)] == live
                assert_totals_exact(store)
        state = store.state.queues[1]
        assert (state.low, state.acked) == (state.cq.length, set())
        assert store.statistics().messages == 0
        assert store.queue_next_offset(1) == offsets[-1] + 1


async def test_queue_ranges_read_no_record(tmp_path: Path) -> None:
    async with opened(tmp_path, SMALL_FILES) as store:
        for n in range(300):
            store.append(message(n, 1 + n % 50), [QueueTarget(1, 2 * n)])
        for n in range(0, 300, 4):
            store.ack(1, 2 * n)
    async with opened(tmp_path, SMALL_FILES) as store:
        before = store.record_reads
        ranges = list(store.queue_ranges(1, 100))
        assert store.record_reads == before
        live = [n for n in range(300) if n % 4]
        chunks = [live[i : i + 100] for i in range(0, len(live), 100)]
        assert ranges == [
            QueueRange(2 * c[0], 2 * c[-1], len(c), sum(1 + n % 50 for n in c)) for c in chunks
        ]
        got = store.read_queue(1, 2 * live[10], 2 * live[60], 20)
        assert store.record_reads == before + 20  # only the records returned are read
        assert [e.queue_offset for e in got] == [2 * n for n in live[10:30]]
        assert [e.message.message_id for e in got] == [f"m{n}" for n in live[10:30]]


async def test_read_queue_drops_an_unreadable_record(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with opened(tmp_path, SMALL_FILES) as store:
        for n in range(10):
            store.append(message(n), [QueueTarget(1, n)])
        position = log_position(store, 1, 4)
    flip(tmp_path, position + 60)  # found by the CRC when read, never delivered
    async with opened(tmp_path, SMALL_FILES) as store:
        got = store.read_queue(1, 0, 100, 100)
        assert [e.queue_offset for e in got] == [0, 1, 2, 3, 5, 6, 7, 8, 9]
        assert "dropping unreadable message at offset 4" in caplog.text
        assert store.statistics().messages == 9
        assert_totals_exact(store)
        assert [e.queue_offset for e in store.read_queue(1, 3, 5, 10)] == [3, 5]


async def test_reference_counts_only_for_fan_out_messages(tmp_path: Path) -> None:
    async with opened(tmp_path) as store:
        store.append(message(0), [QueueTarget(1, 0)])
        store.append(message(1), [QueueTarget(1, 1), QueueTarget(2, 0), QueueTarget(3, 0)])
        store.append(message(2), [QueueTarget(2, 1), QueueTarget(3, 1)])
        first = log_position(store, 2, 0)
        second = log_position(store, 2, 1)
        assert store.state.ledger.refs == {first: 3, second: 2}
        store.ack(2, 0)
        store.ack(3, 1)
        store.ack(1, 0)  # single target: released by its one ack, never counted
        assert store.state.ledger.refs == {first: 2, second: 1}
        assert store.statistics().messages == 2
        assert_totals_exact(store)
    async with opened(tmp_path) as store:
        assert store.state.ledger.refs == {first: 2, second: 1}
        assert_totals_exact(store)
        store.ack(2, 1)
        store.ack(1, 1)
        store.ack(3, 0)
        assert store.state.ledger.refs == {}
        assert (store.statistics().messages, store.statistics().bytes) == (0, 0)


async def test_crash_replay_rebuilds_exact_totals(tmp_path: Path) -> None:
    acks = {"1": list(range(0, 40, 2)), "2": list(range(0, 40, 3)), "3": [39, 5, 17]}
    crash(tmp_path, config=attrs.asdict(SMALL_FILES), count=40, queues=[1, 2, 3],
          checkpoint_after=25, acks_by_queue=acks)  # fmt: skip
    async with opened(tmp_path, SMALL_FILES) as store:
        assert store.recovery is not None and store.recovery.crashed
        assert_totals_exact(store)
        every = {n for n in range(40) if any(n not in acked for acked in acks.values())}
        assert store.statistics().messages == len(every)
        for queue, acked in acks.items():
            expected = [n for n in range(40) if n not in acked]
            assert [e.queue_offset for e in store.recover_queue(int(queue))] == expected
            for offset in expected:
                store.ack(int(queue), offset)
        assert store.state.ledger.refs == {} and store.statistics().messages == 0


async def test_a_pre_release_data_dir_is_refused(tmp_path: Path) -> None:
    async with opened(tmp_path) as store:
        store.append(message(0), [QueueTarget(1, 0)])
    path = tmp_path / CHECKPOINT
    body = json.loads(path.read_bytes().splitlines()[0])
    body["format"] = 1
    text = json.dumps(body).encode()
    path.write_bytes(text + f"\n{zlib.crc32(text):08x}\n".encode())
    with pytest.raises(ConfigError, match="pre-release herald"):
        async with opened(tmp_path):
            pass


def test_released_pages_keep_their_data(tmp_path: Path) -> None:
    size = 64 * 1024
    file = MappedFile.create(tmp_path / file_name(0), 0, size)
    data = bytes(range(256)) * (size // 256)
    file.map[:] = data
    file.release(100, size - 5000)
    assert file.map[:] == data and file.pread(0, size) == data
    file.release()
    file.close()
    again = MappedFile.open(tmp_path / file_name(0), 0, size)
    assert again.pread(0, size) == data
    again.close()

    cq = ConsumeQueue(tmp_path / "1-0", 1000)
    for n in range(600):
        cq.reserve()
        cq.put(n * 100, 90, 80, 70, 1, 3 * n)
        if n % 150 == 0:
            cq.trim()
    cq.trim()
    expected = [(n * 100, 90, 80, 70, 1, 3 * n) for n in range(595, 600)]
    assert [entry for _, entry in cq.entries(595)] == expected
    assert cq.find(3 * 333, 0, 3 * 599) == 333
    cq.close()


@settings(max_examples=200)
@given(
    gaps=st.lists(st.integers(1, 5), min_size=1, max_size=80),
    low=st.integers(0, 80),
    per_file=st.integers(16, 40),
)
def test_find_and_lower_bound_over_offsets_with_gaps(
    tmp_path_factory: pytest.TempPathFactory, gaps: list[int], low: int, per_file: int
) -> None:
    offsets = list(itertools.accumulate(gaps))
    low = min(low, len(offsets))
    cq = ConsumeQueue(tmp_path_factory.mktemp("cq") / "1-0", per_file)
    try:
        for index, offset in enumerate(offsets):
            cq.reserve()
            cq.put(index, 1, 1, 1, 1, offset)
        for offset in range(offsets[-1] + 3):
            expected = offsets.index(offset) if offset in offsets[low:] else None
            assert cq.find(offset, low, offsets[-1]) == expected
            after = [i for i in range(low, len(offsets)) if offsets[i] >= offset]
            assert cq.lower_bound(offset, low) == (after[0] if after else len(offsets))
    finally:
        cq.destroy()

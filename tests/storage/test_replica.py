"""storage/replica.py: a follower fed the master's raw log bytes in chunks of any size ends
up with the master's state, also after it is killed mid-stream and reopened."""

from __future__ import annotations

import bisect
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from herald.core.message import CodecRegistry
from herald.core.store import QueueTarget
from herald.storage.checkpoint import LOCK
from herald.storage.commitlog import CommitLogConfig, CommitLogStore
from herald.storage.replica import ReplicaError, ReplicaWriter
from tests.store_model import message

CONFIG = CommitLogConfig(
    segment_size=64 * 1024, cq_entries_per_file=64, index_slots=64, index_entries=256
)
SEGMENT = CONFIG.segment_size

OPERATIONS = st.one_of(
    st.tuples(
        st.just("append"),
        st.sets(st.integers(1, 3), min_size=1),
        st.sampled_from([0, 10, 500, 4000, 15_000, 30_000]),
        st.integers(1, 6),  # messages, so that examples fill several segments
    ),
    st.tuples(st.just("ack"), st.integers(1, 3), st.integers(0, 12)),
    st.tuples(st.just("deliver"), st.integers(1, 3), st.integers(0, 12), st.integers(0, 5)),
    st.tuples(st.just("delete"), st.integers(1, 3)),
    st.tuples(
        st.just("meta"),
        st.sampled_from(["queue", "exchange"]),
        st.sampled_from(["/|a", "/|b"]),
        st.one_of(st.none(), st.dictionaries(st.sampled_from("xyz"), st.integers(0, 9))),
    ),
)


@asynccontextmanager
async def opened(path: Path) -> AsyncIterator[CommitLogStore]:
    store = CommitLogStore(path, CONFIG)
    await store.open(CodecRegistry())
    try:
        yield store
    finally:
        await store.close()


State = dict[str, Any]


def state_of(store: CommitLogStore) -> State:
    """Everything a store holds that replication must reproduce."""
    queues = {
        q: (
            store.queue_next_offset(q),
            [
                (e.queue_offset, e.message.message_id, e.delivery_count, e.message.raw)
                for e in store.recover_queue(q)
            ],
        )
        for q in store.queue_ids()
    }
    metadata = {kind: dict(values) for kind, values in store.load_metadata().items()}
    stats = store.statistics()
    ledger = store.state.ledger
    return {
        "queues": queues,
        "metadata": metadata,
        "totals": (stats.messages, stats.bytes),
        "segments": {start: live for start, live in ledger.segments.items() if live},
        "refs": {position: live for position, live in ledger.refs.items() if live},
    }


def index_of(store: CommitLogStore, count: int) -> list[list[str | None]]:
    return [[m.message_id for m in store.find_by_key(f"m{n}")] for n in range(count)]


def same_bytes(follower: CommitLogStore, master: CommitLogStore, end: int) -> bool:
    """The follower's log holds the master's bytes up to `end`."""
    for start in range(0, end, SEGMENT):
        size = min(SEGMENT, end - start)
        if follower.log.read(start, size) != master.log.read(start, size):
            return False
    return True


def run(store: CommitLogStore, op: tuple[Any, ...], n: int) -> Iterator[None]:
    """One operation on the master; yields after each record it writes (besides a segment
    filler), so that the caller can capture the state as of every record end."""
    kind, *args = op
    if kind == "append":
        queues, size, count = args
        for k in range(count):
            where = [QueueTarget(q, store.queue_next_offset(q)) for q in sorted(queues)]
            store.append(message(n * 10 + k, bytes([n % 251]) * size), where)
            yield
        return
    if kind == "meta":
        store.put_metadata(*args)
    elif kind == "delete":
        store.delete_queue(args[0])
    else:
        q, index = args[0], args[1]
        offsets = [e.queue_offset for e in store.recover_queue(q)]
        offset = offsets[index] if index < len(offsets) else 1000 + index
        if kind == "ack":
            store.ack(q, offset)
        else:
            store.note_delivery(q, offset, args[2])
    store.flush_acks()
    yield


def stream(
    master: CommitLogStore, writer: ReplicaWriter, stop: int, sizes: list[int], back: list[int]
) -> None:
    """Send the master's log from the writer's end to `stop` in chunks of `sizes` (cycled),
    none across a segment end; before each chunk, re-send the `back` bytes before it."""
    at, step = writer.written, 0
    while at < stop:
        size = sizes[step % len(sizes)]
        again = min(back[step % len(back)], at % SEGMENT)  # within the chunk's segment
        step += 1
        if again:
            old = master.log.read(at - again, again)
            assert old is not None
            assert writer.write(at - again, old) == at
        end = min(at + size, stop, at - at % SEGMENT + SEGMENT)
        data = master.log.read(at, end - at)
        assert data is not None
        assert writer.write(at, data) == end
        at = end


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    ops=st.lists(OPERATIONS, min_size=1, max_size=80),
    sizes=st.lists(st.integers(1, 9000), min_size=1, max_size=8),
    back=st.lists(st.integers(0, 40), min_size=1, max_size=4),
    data=st.data(),
)
async def test_follower_matches_master_also_after_a_kill(
    tmp_path: Path, ops: list[tuple[Any, ...]], sizes: list[int], back: list[int], data: Any
) -> None:
    root = Path(tempfile.mkdtemp(dir=tmp_path))
    async with opened(root / "master") as master:
        states: dict[int, State] = {0: state_of(master)}
        for n, op in enumerate(ops):
            for _ in run(master, op, n):
                states[master.log.write_offset] = state_of(master)
        final, end = state_of(master), master.log.write_offset
        event(f"segments written: {min(end // SEGMENT + 1, 4)}+")
        keys = sorted(states)
        kill = data.draw(st.integers(0, end), label="kill at")
        async with opened(root / "a") as follower:
            writer = ReplicaWriter(follower)
            stream(master, writer, kill, sizes, back)
            shutil.copytree(root / "a", root / "b", ignore=shutil.ignore_patterns(LOCK))
            stream(master, writer, end, sizes, back)
            assert writer.applied == end == writer.written
            assert state_of(follower) == final
            assert same_bytes(follower, master, end)
            assert await writer.flush() == end
        async with opened(root / "a") as reopened:  # a clean reopen
            assert reopened.recovery is not None and not reopened.recovery.crashed
            assert state_of(reopened) == final
            assert index_of(reopened, len(ops) * 10) == index_of(master, len(ops) * 10)
        async with opened(root / "b") as killed:  # the copy of a killed follower
            assert killed.recovery is not None and killed.recovery.crashed
            # A record whose last bytes (padding) are zeros is whole before they arrive.
            recovered = killed.log.write_offset
            assert same_bytes(killed, master, recovered)
            assert state_of(killed) == states[keys[bisect.bisect_right(keys, recovered) - 1]]
            writer = ReplicaWriter(killed)
            stream(master, writer, end, sizes, back)
            assert state_of(killed) == final
            assert index_of(killed, len(ops) * 10) == index_of(master, len(ops) * 10)


async def test_a_cut_record_waits_and_refusals_change_nothing(tmp_path: Path) -> None:
    async with opened(tmp_path / "master") as master:
        async with opened(tmp_path / "f") as follower:
            for n in range(60):
                master.append(message(n, b"x" * 3000), [QueueTarget(1, n)])
            master.put_metadata("queue", "/|q", {"a": 1})
            end = master.log.write_offset
            assert end > 2 * SEGMENT
            writer = ReplicaWriter(follower)
            first = master.log.read(0, 100)
            assert first is not None
            assert writer.write(0, first) == 100
            assert writer.applied == 0 and follower.queue_ids() == []  # the record is cut
            with pytest.raises(ReplicaError, match="gap"):
                writer.write(101, b"x")
            with pytest.raises(ReplicaError, match="differ"):
                writer.write(50, first[50:99] + b"?" + b"more")
            with pytest.raises(ReplicaError, match="segment end"):
                writer.write(100, bytes(SEGMENT))
            assert writer.written == 100
            assert writer.write(0, first[:60]) == 100  # an exact re-send of a prefix
            rest = master.log.read(100, SEGMENT - 100)
            assert rest is not None
            assert writer.write(100, rest) == SEGMENT
            assert writer.applied == SEGMENT  # the end-of-segment filler moved it on
            applied = writer.records
            assert 0 < applied < 60
            assert [e.queue_offset for e in follower.recover_queue(1)] == list(range(applied))
            tail = master.log.read(SEGMENT, 10)
            assert tail is not None
            writer.write(SEGMENT, tail)
            writer.discard_tail()
            assert writer.written == writer.applied == SEGMENT
        async with opened(tmp_path / "f") as follower:  # clean: no scan, the cut bytes are gone
            assert follower.log.write_offset == SEGMENT
            writer = ReplicaWriter(follower)
            at = SEGMENT
            while at < end:
                stop = min(at - at % SEGMENT + SEGMENT, end)
                chunk = master.log.read(at, stop - at)
                assert chunk is not None
                writer.write(at, chunk)
                at = stop
            assert writer.applied == end
            assert state_of(follower) == state_of(master)


async def test_corrupt_bytes_are_skipped_as_recovery_skips_them(tmp_path: Path) -> None:
    async with opened(tmp_path / "master") as master, opened(tmp_path / "f") as follower:
        ends = [master.append(message(n, b"y" * 200), [QueueTarget(1, n)]) for n in range(6)]
        file = master.log.files[0]
        file.map[ends[2] + 100] ^= 0x10  # a bit flip inside the body of message 3
        writer = ReplicaWriter(follower)
        for at in range(0, ends[-1], 50):  # small chunks: the skip waits for the next record
            chunk = master.log.read(at, min(50, ends[-1] - at))
            assert chunk is not None
            writer.write(at, chunk)
        assert writer.applied == ends[-1]
        assert [e.queue_offset for e in follower.recover_queue(1)] == [0, 1, 2, 4, 5]

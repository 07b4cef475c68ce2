"""What the commit-log store promises beyond the store contract: group commit, retention,
disk-full handling, async flushing, the index, its plugin hooks."""

from __future__ import annotations

import errno
import itertools
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import cast

import attrs
import pytest
import trio

from herald.core.broker import Broker
from herald.core.config import InvalidValue
from herald.core.errors import InternalError, ResourceError
from herald.core.message import CodecRegistry
from herald.core.plugin_types import Service
from herald.core.store import QueueTarget
from herald.storage import commitlog, commitlog_plugin
from herald.storage import record as rec
from herald.storage.commitlog import CommitLogConfig, CommitLogStore
from herald.storage.mapped_file import MappedFile, Writer
from tests.storage.crash_helper import log_position, message
from tests.storage.test_recovery import CONFIG, ids, opened


async def test_concurrent_publishers_share_fsyncs(tmp_path: Path) -> None:
    async with opened(tmp_path) as store:
        before = store.commitlog_statistics().flushes
        offsets = itertools.count()  # given at append time, as the kernel does: they grow

        async def publish(n: int) -> None:
            ticket = store.append(message(n), [QueueTarget(1, next(offsets))])
            await store.wait_durable(ticket)
            assert store.durable_ticket >= ticket

        async with trio.open_nursery() as nursery:
            for n in range(64):
                nursery.start_soon(publish, n)
        flushes = store.commitlog_statistics().flushes - before
        assert 1 <= flushes < 64
        assert store.durable_ticket == store.statistics().appended_ticket


async def test_reclaim_deletes_dead_segments_but_not_the_active_one(tmp_path: Path) -> None:
    segments = tmp_path / "commitlog"
    async with opened(tmp_path) as store:
        for n in range(300):
            store.append(message(n, 1000), [QueueTarget(1, n)])
        created = sorted(os.listdir(segments))
        assert len(created) >= 5
        for n in range(300):
            if n != 150:  # one old message stays un-acked
                store.ack(1, n)
        await store.checkpoint()
        await store.checkpoint()  # both kept checkpoints now start after the old segments
        assert await store.reclaim() == 0  # the checkpoints already reclaimed everything
        left = sorted(os.listdir(segments))
        kept_for_150 = store.log.segment_start(log_position(store, 1, 150))
        active = store.log.segment_start(store.log.write_offset)
        assert {int(name) for name in left} >= {kept_for_150, active}
        assert len(left) <= 3  # the one holding m150, the active one, maybe one made ahead
        assert ids(store) == ["m150"]
        ticket = store.append(message(300), [QueueTarget(1, 300)])
        await store.wait_durable(ticket)
    async with opened(tmp_path) as store:
        assert ids(store) == ["m150", "m300"]
        store.ack(1, 150)
        await store.checkpoint()
        await store.checkpoint()
        assert kept_for_150 not in {int(name) for name in os.listdir(segments)}
    async with opened(tmp_path) as store:
        assert ids(store) == ["m300"]
        assert store.statistics().messages == 1


async def test_offsets_only_grow_across_restarts(tmp_path: Path) -> None:
    """A queue continues at `queue_next_offset` after a restart, even past offsets acked
    before it; an append below that is a kernel bug, refused before anything is written."""
    async with opened(tmp_path) as store:
        for n in range(5):
            store.append(message(n), [QueueTarget(1, n)])
        store.ack(1, 3)
        store.ack(1, 4)
    async with opened(tmp_path) as store:
        assert store.queue_next_offset(1) == 5
        before = store.statistics()
        with pytest.raises(InternalError, match="offset 3 is below the next offset 5"):
            store.append(message(10), [QueueTarget(1, 3)])
        with pytest.raises(InternalError, match="offset 5 is below the next offset 6"):
            store.append(message(10), [QueueTarget(1, 5), QueueTarget(1, 5)])
        assert store.statistics() == before
        store.append(message(10), [QueueTarget(1, 5)])
        store.append(message(11), [QueueTarget(1, 6)])
        store.ack(1, 6)
        assert [(e.queue_offset, e.message.message_id) for e in store.recover_queue(1)] == [
            (0, "m0"),
            (1, "m1"),
            (2, "m2"),
            (5, "m10"),
        ]
    async with opened(tmp_path) as store:
        assert ids(store) == ["m0", "m1", "m2", "m10"]
        assert store.queue_next_offset(1) == 7


def fail_with(code: int) -> Writer:
    def write(file: MappedFile, at: int, parts: Sequence[bytes]) -> None:
        file.map[at : at + 8] = b"partial!"
        raise OSError(code, os.strerror(code))

    return write


async def test_disk_full_refuses_the_message_and_stores_nothing(tmp_path: Path) -> None:
    async with opened(tmp_path) as store:
        good = store.append(message(0), [QueueTarget(1, 0)])
        before = store.statistics()
        store._write = fail_with(errno.ENOSPC)
        with pytest.raises(ResourceError, match="disk full"):
            store.append(message(1), [QueueTarget(1, 1)])
        with pytest.raises(ResourceError, match="disk full"):
            store.put_metadata("queue", "q", {"a": 1})
        assert store.statistics() == before
        assert store.commitlog_statistics().disk_alarm
        assert ids(store) == ["m0"]
        store.ack(1, 0)  # acks never fail the caller; kept in memory until the checkpoint
        store._write = commitlog.write_record
        ticket = store.append(message(2), [QueueTarget(1, 1)])
        assert ticket > good
        await store.wait_durable(ticket)
    async with opened(tmp_path) as store:
        assert ids(store) == ["m2"]
        assert store.load_metadata() == {}


async def test_free_space_floor_refuses_a_new_segment(tmp_path: Path) -> None:
    config = attrs.evolve(CONFIG, min_free_bytes=2**62)
    async with opened(tmp_path, config) as store:
        with pytest.raises(ResourceError, match="disk full"):
            for n in range(200):
                store.append(message(n, 1000), [QueueTarget(1, n)])
        stored = store.statistics().messages
        assert 0 < stored < 200
        assert store.commitlog_statistics().disk_alarm
    async with opened(tmp_path, CONFIG) as store:
        assert ids(store) == [f"m{n}" for n in range(stored)]


async def test_message_larger_than_a_segment_is_refused(tmp_path: Path) -> None:
    async with opened(tmp_path) as store:
        with pytest.raises(ResourceError, match="too large"):
            store.append(message(0, CONFIG.segment_size), [QueueTarget(1, 0)])
        assert store.statistics().messages == 0


async def test_async_flush_waits_for_the_flusher(tmp_path: Path) -> None:
    config = attrs.evolve(CONFIG, flush="async", flush_interval_ms=5)
    async with opened(tmp_path, config) as store:
        async with trio.open_nursery() as nursery:
            await nursery.start(store.run_flusher)
            tickets = [store.append(message(n), [QueueTarget(1, n)]) for n in range(10)]
            async with trio.open_nursery() as waiters:
                for ticket in tickets:
                    waiters.start_soon(store.wait_durable, ticket)
            assert store.durable_ticket >= tickets[-1]
            assert store.commitlog_statistics().flushes >= 1
            nursery.cancel_scope.cancel()
        # With no flusher running, waiters flush for themselves instead of hanging.
        ticket = store.append(message(10), [QueueTarget(1, 10)])
        with trio.fail_after(10):
            await store.wait_durable(ticket)


async def test_flusher_prepares_segments_ahead(tmp_path: Path) -> None:
    async with opened(tmp_path) as store:
        async with trio.open_nursery() as nursery:
            await nursery.start(store.run_flusher)
            offsets = itertools.count()
            while store.log.needs_prepare() is None:
                offset = next(offsets)
                store.append(message(0, 1000), [QueueTarget(1, offset)])
                store.ack(1, offset)
            with trio.fail_after(10):
                while store.log.prepared is None:
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
        start = store.log.prepared.start
        while store.log.segment_start(store.log.write_offset) != start:
            offset = next(offsets)
            store.append(message(0, 1000), [QueueTarget(1, offset)])
            store.ack(1, offset)
        assert store.log.files[start].path.name == f"{start:020d}"


async def test_find_by_key_with_time_ranges(tmp_path: Path) -> None:
    async with opened(tmp_path) as store:
        before = int(time.time() * 1000) - 1
        for n in range(20):
            store.append(message(n % 5), [QueueTarget(1, n)])
        after = int(time.time() * 1000) + 1
        found = store.find_by_key("m3")
        assert len(found) == 4 and {m.message_id for m in found} == {"m3"}
        assert [m.routing_key for m in found] == ["key.3"] * 4
        assert len(store.find_by_key("m3", before, after, limit=2)) == 2
        assert store.find_by_key("m3", after + 2000, after + 5000) == []
        assert store.find_by_key("m3", 0, before - 2000) == []
        assert store.find_by_key("nope") == []
    async with opened(tmp_path) as store:
        assert len(store.find_by_key("m3", before, after)) == 4


async def test_index_disabled(tmp_path: Path) -> None:
    async with opened(tmp_path, attrs.evolve(CONFIG, index=False)) as store:
        store.append(message(1), [QueueTarget(1, 0)])
        assert store.find_by_key("m1") == []
    assert not (tmp_path / "index").exists()


async def test_closed_store_refuses_work(tmp_path: Path) -> None:
    store = CommitLogStore(tmp_path, CONFIG)
    await store.open(CodecRegistry())
    await store.close()
    with pytest.raises(Exception, match="not open"):
        store.append(message(1), [QueueTarget(1, 0)])


def test_config_rules() -> None:
    with pytest.raises(InvalidValue, match="segment_size"):
        CommitLogConfig(segment_size=1000)
    with pytest.raises(InvalidValue, match="flush"):
        CommitLogConfig(flush="sometimes")
    assert CommitLogConfig().segment_size == 256 << 20


def test_hooks(tmp_path: Path) -> None:
    [section] = commitlog_plugin.herald_config_sections()
    assert (section.name, section.config_class) == ("commitlog", CommitLogConfig)
    [backend] = commitlog_plugin.herald_storage_backends()
    assert backend.name == "commitlog"
    store = backend.factory(CONFIG, tmp_path)
    assert isinstance(store, CommitLogStore)
    assert store.root == tmp_path / "store" and store.config == CONFIG
    default = backend.factory(None, tmp_path)
    assert isinstance(default, CommitLogStore) and default.config == CommitLogConfig()

    @attrs.define
    class BrokerWith:
        store: object

    # A stand-in for the broker: the hook reads only its `store`.
    services = commitlog_plugin.herald_services(cast(Broker, BrokerWith(store)))
    assert all(isinstance(service, Service) for service in services)
    assert [s.name for s in services] == ["commitlog-flusher", "commitlog-disk-monitor"]
    assert commitlog_plugin.herald_services(cast(Broker, BrokerWith(object()))) == []


def records_between(store: CommitLogStore, begin: int, end: int) -> list[rec.Record]:
    found, at = [], begin
    while at < end:
        head = store.log.read(at, rec.PREFIX.size)
        assert head is not None
        size, _ = rec.peek(head)
        data = store.log.read(at, size)
        assert data is not None
        found.append(rec.decode(data, at))
        at += rec.aligned(size)
    return found


async def test_acks_are_logged_together_before_the_next_record(tmp_path: Path) -> None:
    async with opened(tmp_path) as store:
        for n in range(6):
            store.append(message(n), [QueueTarget(1, n), QueueTarget(2, n)])
        end = store.statistics().appended_ticket
        for n in (0, 1, 3):
            store.ack(1, n)
        store.ack(2, 0)
        assert store.statistics().appended_ticket == end  # nothing written yet
        assert [e.queue_offset for e in store.recover_queue(1)] == [2, 4, 5]  # but gone
        store.append(message(6), [QueueTarget(1, 6)])  # the next record takes them first
        after = records_between(store, end, store.statistics().appended_ticket)
        assert after[:2] == [
            rec.AcksRecord(after[0].position, after[0].size, 1, (0, 1, 3)),
            rec.AcksRecord(after[1].position, after[1].size, 2, (0,)),
        ]
        assert isinstance(after[2], rec.MessageRecord) and len(after) == 3

        store.ack(1, 2)
        end = store.statistics().appended_ticket
        await store.checkpoint()  # a checkpoint writes them before its snapshot
        [acks] = records_between(store, end, store.statistics().appended_ticket)
        assert isinstance(acks, rec.AcksRecord) and acks.queue_offsets == (2,)


async def test_many_acks_are_split_across_records(tmp_path: Path) -> None:
    config = attrs.evolve(CONFIG, segment_size=4 << 20)  # the records in one segment
    async with opened(tmp_path, config) as store:
        count = commitlog.ACKS_PER_RECORD + 10
        for n in range(count):
            store.append(message(n, 1), [QueueTarget(1, n)])
        end = store.statistics().appended_ticket
        for n in range(count):
            store.ack(1, n)  # the batch is written once it holds ACKS_PER_RECORD acks
        [full] = records_between(store, end, store.statistics().appended_ticket)
        assert isinstance(full, rec.AcksRecord) and len(full.queue_offsets) == count - 10
        await store.wait_durable(store.statistics().appended_ticket)  # and the rest now
        records = records_between(store, end, store.statistics().appended_ticket)
        acks = [r for r in records if isinstance(r, rec.AcksRecord)]
        assert acks == records and [len(r.queue_offsets) for r in acks] == [count - 10, 10]
    async with opened(tmp_path, config) as store:
        assert store.statistics().messages == 0

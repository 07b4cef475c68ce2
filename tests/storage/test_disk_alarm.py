"""The `disk` resource alarm through the kernel: low free space or a refused write blocks
publishers (as the memory alarm does), consumers keep draining, and space coming back releases
them. Free space and write failures are injected through the store's seams (`free_space`,
`_write`); the store, the monitor and the kernel are real."""

from __future__ import annotations

import errno
import os
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
from trio.testing import MockClock

from herald.core.broker import Broker
from herald.core.embedding import embedded
from herald.core.errors import ResourceError
from herald.storage.commitlog import CommitLogStore
from herald.storage.mapped_file import MappedFile, Writer, mmap_write
from tests.sinks import RecordingSink, body, msg

MB = 1_000_000
PLENTY = 10**12
SETTINGS = [
    'store.backend="commitlog"',
    "commitlog.segment_size=65536",
    "commitlog.disk_check_interval_ms=1000",
]


@pytest.fixture
def clock() -> MockClock:
    """Autojump (pytest-trio runs the test on this clock), but only after every task has been
    idle for a few real milliseconds: the store fsyncs in worker threads, and virtual time must
    not race through the monitor's samples while a publisher waits for one."""
    return MockClock(autojump_threshold=0.005)


class FreeSpace:
    """The store's free-space seam, answering whatever the test says the disk has."""

    def __init__(self, free: int) -> None:
        self.free = free

    def __call__(self, path: Path) -> int:
        return self.free


@asynccontextmanager
async def broker_on_disk(
    data_dir: Path, free: FreeSpace | None = None, *settings: str
) -> AsyncIterator[Broker]:
    async with embedded(data_dir=data_dir, plugins=[], settings=[*SETTINGS, *settings]) as broker:
        if free is not None:
            store(broker).free_space = free
        yield broker


def store(broker: Broker) -> CommitLogStore:
    assert isinstance(broker.store, CommitLogStore)
    return broker.store


async def next_alarms(broker: Broker) -> frozenset[str]:
    with trio.fail_after(3600):
        return await broker.alarms.wait_changed()


def fail_with(code: int) -> Writer:
    def write(file: MappedFile, at: int, parts: Sequence[bytes]) -> None:
        file.map[at : at + 8] = b"partial!"
        raise OSError(code, os.strerror(code))

    return write


async def test_low_free_space_blocks_publishers_until_space_returns(
    tmp_path: Path, clock: MockClock
) -> None:
    free = FreeSpace(PLENTY)
    async with broker_on_disk(tmp_path, free, "commitlog.disk_free_limit=50000000") as broker:
        vhost = broker.default_vhost
        queue = vhost.declare_queue("jobs", durable=True)
        for n in range(3):
            vhost.publish(msg(f"m{n}", "jobs", delivery_mode=2))
        assert not broker.alarms.blocked

        free.free = 50 * MB  # at the limit is not below it
        await trio.sleep(5)
        assert not broker.alarms.blocked
        free.free = 50 * MB - 1
        assert await next_alarms(broker) == {"disk"}

        confirmed: list[str] = []

        async def publisher() -> None:
            await broker.alarms.wait_publish_allowed()
            result = vhost.publish(msg("late", "jobs", delivery_mode=2))
            assert result.ticket is not None
            await broker.store.wait_durable(result.ticket)
            confirmed.append("late")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(publisher)
            await trio.sleep(10)  # many samples later, still low: still blocked
            assert confirmed == []
            assert broker.alarms.active == {"disk"}
            sink = RecordingSink(auto_ack=True)  # consumers keep draining meanwhile
            queue.add_consumer("worker", sink)
            assert sink.bodies == [b"m0", b"m1", b"m2"]

            free.free = 60 * MB
            assert await next_alarms(broker) == frozenset()
        assert confirmed == ["late"]
        assert sink.bodies == [b"m0", b"m1", b"m2", b"late"]
        assert broker.alarms.statistics().times_raised == 1


async def test_disk_full_on_append_fails_the_publish_and_raises_the_alarm(
    tmp_path: Path, clock: MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    free = FreeSpace(PLENTY)
    async with broker_on_disk(tmp_path, free) as broker:
        vhost = broker.default_vhost
        jobs = vhost.declare_queue("jobs", durable=True)
        audit = vhost.declare_queue("audit", durable=True)
        vhost.declare_exchange("fan", "fanout", durable=True)
        vhost.bind_queue("jobs", "fan")
        vhost.bind_queue("audit", "fan")
        for n in range(2):
            vhost.publish(msg(f"m{n}", "", "fan", delivery_mode=2))
        before = store(broker).statistics()

        store(broker)._write = fail_with(errno.ENOSPC)
        with pytest.raises(ResourceError, match="disk full"):
            vhost.publish(msg("refused", "", "fan", delivery_mode=2))
        assert [body(e) for e in jobs.browse()] == [b"m0", b"m1"]
        assert audit.message_count == 2  # both enqueues were taken back
        assert store(broker).statistics() == before
        assert vhost.publish(msg("transient", "jobs")).queues == 1  # not stored: still flows

        sink = RecordingSink(auto_ack=True)  # acks cannot be written either: kept in memory
        jobs.add_consumer("worker", sink)
        assert sink.bodies == [b"m0", b"m1", b"transient"]

        assert await next_alarms(broker) == {"disk"}  # at once: a refusal wakes the monitor
        await trio.sleep(1)  # the store's next tick tries to log the acks
        assert "ack kept in memory only" in caplog.text
        assert store(broker).commitlog_statistics().disk_alarm

        store(broker)._write = mmap_write  # consumers drained, space came back
        free.free += 10 * MB
        assert await next_alarms(broker) == frozenset()
        assert not store(broker).commitlog_statistics().disk_alarm
        result = vhost.publish(msg("after", "", "fan", delivery_mode=2))
        assert result.ticket is not None
        await broker.store.wait_durable(result.ticket)
        assert sink.bodies[-1] == b"after"

    async with broker_on_disk(tmp_path) as broker:  # what the disk holds after a clean stop
        audit = broker.default_vhost.queues["audit"]
        assert [e.message.decoded(broker.codecs).body for e in audit.browse()] == [
            b"m0",
            b"m1",
            b"after",
        ]
        assert broker.default_vhost.queues["jobs"].message_count == 0


async def test_refused_segment_holds_the_alarm_until_one_can_be_made(
    tmp_path: Path, clock: MockClock
) -> None:
    # Far above disk_free_limit, but a 64 KiB segment would leave less than min_free_bytes.
    free = FreeSpace(1 * MB + 32 * 1024)
    async with broker_on_disk(
        tmp_path, free, "commitlog.disk_free_limit=100000", "commitlog.min_free_bytes=1000000"
    ) as broker:
        vhost = broker.default_vhost
        vhost.declare_queue("jobs", durable=True)
        published = 0
        with pytest.raises(ResourceError, match="disk full"):
            for n in range(200):  # about 60 fit in the first segment
                vhost.publish(msg(b"x" * 1000, "jobs", delivery_mode=2, message_id=str(n)))
                published += 1
        assert 0 < published < 200
        assert await next_alarms(broker) == {"disk"}
        await trio.sleep(10)
        assert broker.alarms.active == {"disk"}  # space above the limit is not enough

        free.free = 2 * MB  # the housekeeper's next try makes the segment; the alarm clears
        assert await next_alarms(broker) == frozenset()
        result = vhost.publish(msg(b"x" * 1000, "jobs", delivery_mode=2))
        assert result.ticket is not None
        await broker.store.wait_durable(result.ticket)
        assert vhost.queues["jobs"].message_count == published + 1


async def test_publishers_stop_before_the_next_segment_would_be_refused(
    tmp_path: Path, clock: MockClock
) -> None:
    free = FreeSpace(1 * MB + 32 * 1024)
    async with broker_on_disk(
        tmp_path, free, "commitlog.disk_free_limit=100000", "commitlog.min_free_bytes=1000000"
    ) as broker:
        vhost = broker.default_vhost
        vhost.declare_queue("jobs", durable=True)
        published = 0
        resumed = trio.Event()

        async def publisher() -> None:  # a well-behaved session: it waits while blocked
            nonlocal published
            while published < 100:
                await broker.alarms.wait_publish_allowed()
                result = vhost.publish(msg(b"x" * 1000, "jobs", delivery_mode=2))
                published += 1
                assert result.ticket is not None
                await broker.store.wait_durable(result.ticket)
                await trio.sleep(0.2)
            resumed.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(publisher)
            assert await next_alarms(broker) == {"disk"}  # the next segment is due, cannot fit
            stopped_at = published
            assert 40 < stopped_at < 64  # past 75 % of the first segment, before its end
            await trio.sleep(10)
            assert published == stopped_at
            free.free = 2 * MB
            assert await next_alarms(broker) == frozenset()
            await resumed.wait()
        assert vhost.queues["jobs"].message_count == 100

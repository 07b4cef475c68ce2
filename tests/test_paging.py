"""Paging (Apollo, RabbitMQ): when memory is short, transient messages leave memory too.

Memory is made "short" through the memory monitor's sampler (it reports a process size at the
paging watermark), so the monitor, the queues and the store are the real ones. The tail
buffer is tiny (100 bytes = 20 five-byte messages) so that a few hundred messages show each
case; the restart and store-id cases run on the commit-log store as well as the memory one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
import trio
from trio.testing import MockClock

from herald.core.broker import Broker
from herald.core.embedding import embedded
from herald.core.flow import MemoryMonitor
from herald.core.queue import Queue, QueueEntry
from herald.core.vhost import VirtualHost
from herald.storage.memory import MemoryStore, MemoryStoreData
from tests.sinks import RecordingSink, msg
from tests.test_durability import RefusingStore

SMALL = ["queues.tail_buffer=100", "queues.swap_range_size=50", "queues.load_batch=20"]
ON_DISK = ['store.backend="commitlog"', "commitlog.segment_size=65536"]


def on_disk(data_dir: Path, *extra: str) -> AbstractAsyncContextManager[Broker]:
    return embedded(data_dir=data_dir, settings=[*SMALL, *ON_DISK, *extra], plugins=[])


def in_memory(data_dir: Path, data: MemoryStoreData) -> AbstractAsyncContextManager[Broker]:
    return embedded(data_dir=data_dir, store=MemoryStore(data), settings=SMALL, plugins=[])


@pytest.fixture(params=["memory", "commitlog"])
async def broker(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Broker]:
    if request.param == "memory":
        async with in_memory(tmp_path, MemoryStoreData()) as broker:
            yield broker
    else:
        async with on_disk(tmp_path) as broker:
            yield broker


def memory_short(broker: Broker, short: bool = True) -> None:
    """Make the monitor sample a process at (or well below) the paging watermark."""
    monitor: MemoryMonitor = broker.memory
    level = monitor.paging_watermark if short else 0
    monitor.sampler = lambda: level
    monitor.check()


def publish(vhost: VirtualHost, queue: str, names: list[str], **properties: Any) -> None:
    for name in names:
        vhost.publish(msg(name, queue, **properties))


def names(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i:04}" for i in range(n)]


def bodies(queue: Queue, entries: list[QueueEntry]) -> list[bytes]:
    """Bodies as the consumer would see them (read-back messages are decoded on demand)."""
    assert isinstance(queue.vhost, VirtualHost)  # a queue sees only its QueueOwner
    codecs = queue.vhost.broker.codecs
    return [entry.message.decoded(codecs).body for entry in entries]


def drain(queue: Queue) -> list[bytes]:
    sink = RecordingSink(auto_ack=True)
    consumer = queue.add_consumer("drain", sink, prefetch_count=7)
    queue.remove_consumer(consumer)
    return bodies(queue, sink.entries)


async def test_a_transient_backlog_pages_out_and_drains_in_order(broker: Broker) -> None:
    vhost = broker.default_vhost
    queue = vhost.declare_queue("q", durable=True)
    publish(vhost, "q", names("t", 300))
    assert queue.statistics().messages_swapped == 0  # memory is not short: all loaded
    memory_short(broker)
    stats = queue.statistics()
    assert stats.messages_ready == 300
    assert stats.messages_swapped == 300 - 20  # all but the tail buffer left memory
    assert broker.store.statistics().messages == 280
    assert drain(queue) == [n.encode() for n in names("t", 300)]
    assert broker.store.statistics().messages == 0  # every paged copy was acked


async def test_new_messages_page_out_at_the_tail_while_memory_is_short(broker: Broker) -> None:
    vhost = broker.default_vhost
    queue = vhost.declare_queue("q")  # a non-durable queue pages too
    memory_short(broker)
    publish(vhost, "q", names("a", 200))
    assert queue.statistics().messages_swapped == 180
    memory_short(broker, False)
    assert not broker.memory.paging
    publish(vhost, "q", names("b", 50))  # no longer paged: loaded behind the range
    assert queue.statistics().messages_swapped == 180
    assert drain(queue) == [n.encode() for n in names("a", 200) + names("b", 50)]


async def test_persistent_and_transient_messages_keep_their_order(broker: Broker) -> None:
    vhost = broker.default_vhost
    queue = vhost.declare_queue("q", durable=True)
    expected = []
    for i in range(150):
        persistent = i % 3 == 0
        name = f"{'p' if persistent else 't'}{i:04}"
        vhost.publish(msg(name, "q", delivery_mode=2 if persistent else 1))
        expected.append(name.encode())
    memory_short(broker)
    publish(vhost, "q", names("x", 30), delivery_mode=2)
    publish(vhost, "q", names("y", 30))
    expected += [n.encode() for n in names("x", 30) + names("y", 30)]
    assert queue.statistics().messages_swapped == 210 - 20
    assert drain(queue) == expected
    assert broker.store.statistics().messages == 0


async def test_requeued_paged_messages_come_back_redelivered(broker: Broker) -> None:
    vhost = broker.default_vhost
    queue = vhost.declare_queue("q", durable=True)
    publish(vhost, "q", names("t", 100))
    memory_short(broker)
    sink = RecordingSink()
    consumer = queue.add_consumer("c", sink, prefetch_count=100)
    first = sink.take()
    assert len(first) == 100
    for entry in reversed(first):
        queue.reject(entry, requeue=True)
    queue.remove_consumer(consumer)
    again = RecordingSink(auto_ack=True)
    queue.add_consumer("d", again, prefetch_count=10)
    assert bodies(queue, again.entries) == [n.encode() for n in names("t", 100)]
    assert all(entry.redelivered for entry in again.entries)
    assert broker.store.statistics().messages == 0


async def test_deleting_a_queue_forgets_what_it_paged(broker: Broker) -> None:
    vhost = broker.default_vhost
    vhost.declare_queue("gone")
    kept = vhost.declare_queue("kept", durable=True)
    publish(vhost, "gone", names("g", 100))
    publish(vhost, "kept", names("k", 100), delivery_mode=2)
    memory_short(broker)
    assert broker.store.statistics().messages == 80 + 100  # 80 paged, 100 persistent
    vhost.delete_queue("gone")
    assert broker.store.statistics().messages == 100
    assert drain(kept) == [n.encode() for n in names("k", 100)]


async def test_a_store_that_refuses_leaves_the_messages_loaded(tmp_path: Path) -> None:
    store = RefusingStore()
    async with embedded(data_dir=tmp_path, store=store, settings=SMALL, plugins=[]) as broker:
        vhost = broker.default_vhost
        queue = vhost.declare_queue("q")
        publish(vhost, "q", names("t", 60))
        store.full = True
        memory_short(broker)  # logs a warning per refused message, swaps nothing
        assert queue.statistics().messages_swapped == 0
        publish(vhost, "q", names("u", 10))
        assert queue.statistics().messages_swapped == 0
        store.full = False
        memory_short(broker)
        assert queue.statistics().messages_swapped == 70 - 20
        assert drain(queue) == [n.encode() for n in names("t", 60) + names("u", 10)]


async def test_a_restart_drops_paged_transient_messages(tmp_path: Path) -> None:
    async with on_disk(tmp_path) as broker:
        vhost = broker.default_vhost
        vhost.declare_queue("q", durable=True)
        vhost.declare_queue("temp")
        for i in range(120):
            vhost.publish(msg(f"m{i:04}", "q", delivery_mode=2 if i % 2 else 1))
        publish(vhost, "temp", names("x", 50), delivery_mode=2)
        memory_short(broker)
        ids = broker.store.queue_ids()
        assert len(ids) == 3  # q, and the scratch ids of q and temp
    async with on_disk(tmp_path) as broker:
        queue = broker.default_vhost.queues["q"]
        assert "temp" not in broker.default_vhost.queues
        assert broker.store.queue_ids() == [queue.store_id]
        assert queue.message_count == 60
        assert drain(queue) == [f"m{i:04}".encode() for i in range(1, 120, 2)]
        assert broker.store.statistics().messages == 0


async def test_paged_messages_still_expire_on_time(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    async with in_memory(tmp_path, MemoryStoreData()) as broker:
        vhost = broker.default_vhost
        queue = vhost.declare_queue("q", arguments={"x-message-ttl": 5_000})
        publish(vhost, "q", names("t", 100))
        memory_short(broker)
        assert queue.statistics().messages_swapped == 80
        await trio.sleep(4)
        assert queue.message_count == 100
        await trio.sleep(2)
        assert queue.message_count == 0
        assert broker.store.statistics().messages == 0


async def test_priority_queues_and_disabled_paging_keep_messages_loaded(tmp_path: Path) -> None:
    settings = [*SMALL, "queues.page_transient=false"]
    async with embedded(
        data_dir=tmp_path, store=MemoryStore(MemoryStoreData()), settings=settings, plugins=[]
    ) as broker:
        vhost = broker.default_vhost
        plain = vhost.declare_queue("plain", durable=True)
        publish(vhost, "plain", names("t", 100))
        memory_short(broker)
        assert plain.statistics().messages_swapped == 0
    async with in_memory(tmp_path, MemoryStoreData()) as broker:
        vhost = broker.default_vhost
        ranked = vhost.declare_queue("ranked", arguments={"x-max-priority": 3})
        publish(vhost, "ranked", names("t", 100))
        memory_short(broker)
        assert ranked.statistics().messages_swapped == 0


def test_the_monitor_pages_while_above_the_paging_watermark() -> None:
    from herald.core.flow import Alarms

    calls = []
    used = [0]
    monitor = MemoryMonitor(
        Alarms(), 1000, sampler=lambda: used[0], paging_ratio=0.5, on_paging=lambda: calls.append(1)
    )
    assert monitor.paging_watermark == 500
    assert not monitor.check() and not monitor.paging and not calls
    used[0] = 500
    assert not monitor.check() and monitor.paging and len(calls) == 1
    assert not monitor.check() and len(calls) == 2  # every sample while short
    used[0] = 1000
    assert monitor.check() and len(calls) == 3  # above the high watermark: alarm, still paging
    used[0] = 499
    assert not monitor.check() and not monitor.paging and len(calls) == 3

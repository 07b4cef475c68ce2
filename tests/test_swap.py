"""Swapping (Apollo): stored messages in a backlog leave memory and come back in order.

The broker runs with a tiny tail buffer and small ranges so that a few hundred messages show
every case; the memory store plays the store (the commit-log store passes the same contract).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
import trio

from herald.core.broker import Broker
from herald.core.embedding import embedded
from herald.core.vhost import VirtualHost
from herald.storage.memory import MemoryStore, MemoryStoreData
from tests.sinks import RecordingSink, body, msg

SWAPPY = ["queues.tail_buffer=100", "queues.swap_range_size=50", "queues.load_batch=20"]


def swappy(
    tmp_path: Path, data: MemoryStoreData, *extra: str
) -> AbstractAsyncContextManager[Broker]:
    return embedded(
        data_dir=tmp_path, store=MemoryStore(data), settings=[*SWAPPY, *extra], plugins=[]
    )


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    async with swappy(tmp_path, MemoryStoreData()) as broker:
        yield broker


def fill(vhost: VirtualHost, queue: str, n: int, **properties: Any) -> None:
    for i in range(n):
        vhost.publish(msg(f"m{i:04}", queue, delivery_mode=2, **properties))


async def test_backlog_swaps_out_and_drains_in_order(broker: Broker) -> None:
    vhost = broker.default_vhost
    queue = vhost.declare_queue("q", durable=True)
    fill(vhost, "q", 400)
    stats = queue.statistics()
    assert stats.messages_ready == 400
    # 100 bytes of loaded backlog is 20 five-byte messages; the rest are only in the store.
    assert stats.messages_swapped == 400 - 20
    assert stats.message_bytes_swapped == 5 * (400 - 20)
    sink = RecordingSink(auto_ack=True)
    queue.add_consumer("c", sink, prefetch_count=10)
    assert sink.bodies == [f"m{i:04}".encode() for i in range(400)]
    assert queue.statistics().messages_swapped == 0
    assert broker.store.statistics().messages == 0


async def test_transient_messages_and_transient_queues_stay_loaded(broker: Broker) -> None:
    vhost = broker.default_vhost
    durable = vhost.declare_queue("durable", durable=True)
    transient = vhost.declare_queue("transient")
    for i in range(100):
        vhost.publish(msg(f"t{i}", "durable"))  # transient message
        vhost.publish(msg(f"p{i}", "transient", delivery_mode=2))  # persistent, queue is not
    assert durable.statistics().messages_swapped == 0
    assert transient.statistics().messages_swapped == 0


async def test_priority_queues_do_not_swap(broker: Broker) -> None:
    vhost = broker.default_vhost
    queue = vhost.declare_queue("p", durable=True, arguments={"x-max-priority": 5})
    fill(vhost, "p", 100)
    assert queue.statistics().messages_swapped == 0


async def test_new_messages_join_the_tail_range_behind_the_backlog(broker: Broker) -> None:
    vhost = broker.default_vhost
    queue = vhost.declare_queue("q", durable=True)
    fill(vhost, "q", 200)
    sink = RecordingSink()
    queue.add_consumer("c", sink, prefetch_count=30)
    received = [body(e) for e in sink.entries]
    vhost.publish(msg("late", "q", delivery_mode=2))  # stored: joins the tail range
    vhost.publish(msg("transient", "q"))  # cannot swap: stays loaded, behind the range
    while sink.entries:
        pending = sink.take()
        for entry in pending:
            queue.ack(entry)
        received.extend(body(e) for e in sink.entries)
    expected = [f"m{i:04}".encode() for i in range(200)] + [b"late", b"transient"]
    assert received == expected
    assert queue.statistics().messages_ready == 0


async def test_order_is_kept_with_requeues_across_ranges(broker: Broker) -> None:
    vhost = broker.default_vhost
    queue = vhost.declare_queue("q", durable=True)
    fill(vhost, "q", 120)
    sink = RecordingSink()
    consumer = queue.add_consumer("c", sink, prefetch_count=25)
    first = sink.take()
    queue.remove_consumer(consumer)  # 25 unacked go back to their places
    assert [body(e) for e in first] == [f"m{i:04}".encode() for i in range(25)]
    again = RecordingSink(auto_ack=True)
    queue.add_consumer("c2", again, prefetch_count=7)
    assert again.bodies == [f"m{i:04}".encode() for i in range(120)]
    assert [e.redelivered for e in again.entries[:26]] == [True] * 25 + [False]


async def test_browse_and_purge_see_swapped_messages(broker: Broker) -> None:
    vhost = broker.default_vhost
    queue = vhost.declare_queue("q", durable=True)
    fill(vhost, "q", 150)
    assert [body(e) for e in queue.browse(limit=3)] == [b"m0000", b"m0001", b"m0002"]
    assert [body(e) for e in queue.browse()] == [f"m{i:04}".encode() for i in range(150)]
    assert queue.statistics().messages_swapped > 0  # browsing did not load the ranges
    assert vhost.purge_queue("q") == 150
    assert broker.store.statistics().messages == 0
    assert queue.statistics().messages_ready == 0


async def test_drop_head_reaches_into_ranges(broker: Broker) -> None:
    vhost = broker.default_vhost
    queue = vhost.declare_queue("q", durable=True, arguments={"x-max-length": 10})
    fill(vhost, "q", 300)
    assert [body(e) for e in queue.browse()] == [f"m{i:04}".encode() for i in range(290, 300)]
    assert broker.store.statistics().messages == 10


async def test_ttl_inside_ranges_expires_on_time(
    broker: Broker, autojump_clock: trio.abc.Clock
) -> None:
    vhost = broker.default_vhost
    queue = vhost.declare_queue("q", durable=True, arguments={"x-message-ttl": 1000})
    fill(vhost, "q", 200)
    assert queue.statistics().messages_swapped > 0
    await trio.sleep(0.5)
    assert queue.statistics().messages_ready == 200
    await trio.sleep(1)
    stats = queue.statistics()
    assert (stats.messages_ready, stats.expired) == (0, 200)
    assert broker.store.statistics().messages == 0


async def test_per_message_ttl_inside_ranges_expires_on_time(
    broker: Broker, autojump_clock: trio.abc.Clock
) -> None:
    """Messages read back from a range take the fast path unless they have an expiration;
    in a mixed backlog only those expire, wherever their batch is."""
    vhost = broker.default_vhost
    queue = vhost.declare_queue("q", durable=True)
    for i in range(200):
        expiration = "1000" if i % 3 == 0 else None
        vhost.publish(msg(f"m{i:04}", "q", delivery_mode=2, expiration=expiration))
    assert queue.statistics().messages_swapped > 0
    sink = RecordingSink()
    consumer = queue.add_consumer("c", sink, prefetch_count=30)  # loads the first batches
    await trio.sleep(1.5)
    assert queue.statistics().expired == len([i for i in range(30, 200) if i % 3 == 0])
    queue.remove_consumer(consumer, requeue=False)
    for entry in sink.take():
        queue.ack(entry)
    rest = RecordingSink(auto_ack=True)
    queue.add_consumer("c2", rest, prefetch_count=7)
    assert rest.bodies == [f"m{i:04}".encode() for i in range(30, 200) if i % 3]
    assert broker.store.statistics().messages == 0


async def test_restart_restores_long_queues_as_ranges(tmp_path: Path) -> None:
    data = MemoryStoreData()
    async with swappy(tmp_path, data) as broker:
        vhost = broker.default_vhost
        queue = vhost.declare_queue("q", durable=True)
        fill(vhost, "q", 500)
        sink = RecordingSink()
        queue.add_consumer("c", sink, prefetch_count=3)
        queue.reject(sink.entries[0], requeue=True)  # m0000 delivered once
    async with swappy(tmp_path, data) as broker:
        queue = broker.default_vhost.queues["q"]
        stats = queue.statistics()
        assert (stats.messages_ready, stats.messages_swapped) == (500, 500)
        sink = RecordingSink(auto_ack=True)
        queue.add_consumer("c", sink, prefetch_count=50)
        assert sink.bodies == [f"m{i:04}".encode() for i in range(500)]
        assert sink.entries[0].delivery_count >= 1


async def test_swapping_can_be_switched_off(tmp_path: Path) -> None:
    async with swappy(tmp_path, MemoryStoreData(), "queues.swap=false") as broker:
        vhost = broker.default_vhost
        queue = vhost.declare_queue("q", durable=True)
        fill(vhost, "q", 300)
        assert queue.statistics().messages_swapped == 0

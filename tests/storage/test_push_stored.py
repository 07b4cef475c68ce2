"""The one-queue publish path for persistent messages (`Queue.push` storing them itself): the
same promises as the general path, on the real commit-log store. A message is stored before any
consumer sees it, a refused append changes nothing in the queue, and the result carries the
durability ticket a confirm waits for."""

from __future__ import annotations

import errno
import os
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from herald.core.broker import Broker
from herald.core.embedding import embedded
from herald.core.errors import ResourceError
from herald.core.queue import Queue
from herald.core.vhost import RouteStatus, VirtualHost
from herald.storage.commitlog import CommitLogStore
from herald.storage.mapped_file import MappedFile, write_record
from tests.sinks import RecordingSink, body, msg

SETTINGS = ['store.backend="commitlog"', "commitlog.segment_size=65536"]


@pytest.fixture(name="broker")
async def broker_fixture(tmp_path: Path) -> AsyncIterator[Broker]:
    async with embedded(data_dir=tmp_path / "data", plugins=[], settings=SETTINGS) as broker:
        yield broker


def store_of(broker: Broker) -> CommitLogStore:
    store = broker.store
    assert isinstance(store, CommitLogStore)
    return store


def refusing(file: MappedFile, at: int, parts: Sequence[bytes]) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def consumed_queue(broker: Broker) -> tuple[VirtualHost, CommitLogStore, Queue, RecordingSink]:
    """A durable queue "q" with one consumer that records what it is given."""
    vhost = broker.default_vhost
    queue = vhost.declare_queue("q", durable=True)
    sink = RecordingSink()
    queue.add_consumer("c", sink)
    return vhost, store_of(broker), queue, sink


async def test_a_waiting_consumer_gets_a_stored_message_and_its_ack_releases_it(
    broker: Broker,
) -> None:
    vhost, store, queue, sink = consumed_queue(broker)
    result = vhost.publish(msg("one", "q", delivery_mode=2))
    assert result.status is RouteStatus.ROUTED and result.queues == 1
    assert result.ticket is not None and result.ticket > 0
    assert [body(e) for e in sink.entries] == [b"one"]
    assert sink.entries[0].stored == queue.store_id
    assert store.statistics().messages == 1
    await store.wait_durable(result.ticket)
    sink.ack_all()
    assert store.statistics().messages == 0


async def test_without_a_consumer_the_stored_message_waits_in_order(broker: Broker) -> None:
    vhost, store = broker.default_vhost, store_of(broker)
    queue = vhost.declare_queue("q", durable=True)
    tickets = [vhost.publish(msg(str(n), "q", delivery_mode=2)).ticket for n in range(3)]
    assert tickets == sorted(t for t in tickets if t is not None)  # all stored, in order
    transient = vhost.publish(msg("t", "q"))
    assert transient.ticket is None  # a transient message is not stored, even here
    assert queue.message_count == 4 and store.statistics().messages == 3
    sink = RecordingSink()
    queue.add_consumer("c", sink)
    assert sink.bodies == [b"0", b"1", b"2", b"t"]
    assert [bool(e.stored) for e in sink.entries] == [True, True, True, False]


async def test_a_refused_append_changes_nothing_and_the_next_publish_works(
    broker: Broker,
) -> None:
    vhost, store, queue, sink = consumed_queue(broker)
    vhost.publish(msg("before", "q", delivery_mode=2))
    next_offset = queue.next_offset
    store._write = refusing
    with pytest.raises(ResourceError, match="disk full"):
        vhost.publish(msg("refused", "q", delivery_mode=2))
    assert queue.next_offset == next_offset  # no offset taken, nothing enqueued or delivered
    assert queue.message_count == 0 and sink.bodies == [b"before"]
    assert store.statistics().messages == 1
    store._write = write_record  # space came back
    vhost.publish(msg("after", "q", delivery_mode=2))
    assert sink.bodies == [b"before", b"after"]
    assert store.statistics().messages == 2

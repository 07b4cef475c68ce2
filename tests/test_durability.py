"""What survives a broker restart: durable definitions, users, un-acked persistent messages.

The broker is stopped and started again on the same store data (the memory store keeps its
data object across restarts; the commit-log store passes the same tests on disk).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import pytest

from herald.core.broker import Broker
from herald.core.embedding import embedded
from herald.core.errors import ResourceError
from herald.core.message import Message
from herald.core.store import QueueTarget
from herald.core.vhost import RouteStatus
from herald.storage.memory import MemoryStore, MemoryStoreData
from tests.sinks import RecordingSink, body, msg


def restarted(tmp_path: Path, data: MemoryStoreData) -> AbstractAsyncContextManager[Broker]:
    return embedded(data_dir=tmp_path, store=MemoryStore(data), plugins=[])


async def test_durable_definitions_survive(tmp_path: Path) -> None:
    data = MemoryStoreData()
    async with restarted(tmp_path, data) as broker:
        vhost = broker.default_vhost
        vhost.declare_exchange("events", "topic", durable=True)
        vhost.declare_exchange("scratch", "fanout", durable=False)
        vhost.declare_queue("audit", durable=True, arguments={"x-max-length": 10})
        vhost.declare_queue("temp", durable=False)
        vhost.bind_queue("audit", "events", "user.#")
        vhost.bind_queue("temp", "events", "user.#")  # transient queue: binding not durable
        broker.add_vhost("tenant")
        broker.users.add_user("alice", "secret", tags=("management",))
        broker.users.set_permissions("alice", "tenant", ".*", ".*", ".*")
    async with restarted(tmp_path, data) as broker:
        vhost = broker.default_vhost
        assert vhost.exchanges["events"].type == "topic"
        assert "scratch" not in vhost.exchanges and "temp" not in vhost.queues
        assert vhost.queues["audit"].args.max_length == 10
        assert vhost.publish(msg("m", "user.login", "events")).queues == 1
        assert "tenant" in broker.vhosts
        user = await broker.authenticate("alice", "secret", "10.0.0.7")
        assert "management" in user.tags
        broker.users.check_vhost_access(user, "tenant")


async def test_unacked_persistent_messages_survive_in_order(tmp_path: Path) -> None:
    data = MemoryStoreData()
    async with restarted(tmp_path, data) as broker:
        vhost = broker.default_vhost
        queue = vhost.declare_queue("jobs", durable=True)
        for i in range(6):
            vhost.publish(msg(f"p{i}", "jobs", delivery_mode=2))
        vhost.publish(msg("transient", "jobs"))
        sink = RecordingSink()
        queue.add_consumer("worker", sink, prefetch_count=3)
        p0, p1, _p2 = sink.take()
        queue.ack(p1)  # out of order
        queue.reject(p0, requeue=True)  # delivered once, back in the queue
    async with restarted(tmp_path, data) as broker:
        queue = broker.default_vhost.queues["jobs"]
        sink = RecordingSink()
        queue.add_consumer("worker", sink)
        assert sink.bodies == [b"p0", b"p2", b"p3", b"p4", b"p5"]
        assert sink.entries[0].delivery_count >= 1


async def test_persistent_message_to_transient_queue_is_not_stored(tmp_path: Path) -> None:
    data = MemoryStoreData()
    async with restarted(tmp_path, data) as broker:
        vhost = broker.default_vhost
        vhost.declare_queue("volatile")
        result = vhost.publish(msg("x", "volatile", delivery_mode=2))
        assert result.status is RouteStatus.ROUTED and result.ticket is None
        assert broker.store.statistics().messages == 0


async def test_acked_and_purged_messages_do_not_come_back(tmp_path: Path) -> None:
    data = MemoryStoreData()
    async with restarted(tmp_path, data) as broker:
        vhost = broker.default_vhost
        queue = vhost.declare_queue("q", durable=True)
        for i in range(4):
            vhost.publish(msg(str(i), "q", delivery_mode=2))
        sink = RecordingSink(auto_ack=True)
        consumer = queue.add_consumer("c", sink, prefetch_count=1)
        queue.remove_consumer(consumer)
        vhost.declare_queue("p", durable=True)
        vhost.publish(msg("gone", "p", delivery_mode=2))
        vhost.purge_queue("p")
    async with restarted(tmp_path, data) as broker:
        vhost = broker.default_vhost
        assert vhost.queues["q"].message_count == 0
        assert vhost.queues["p"].message_count == 0
        assert broker.store.statistics().messages == 0


async def test_deleted_queue_and_unbound_binding_stay_gone(tmp_path: Path) -> None:
    data = MemoryStoreData()
    async with restarted(tmp_path, data) as broker:
        vhost = broker.default_vhost
        vhost.declare_queue("a", durable=True)
        vhost.declare_queue("b", durable=True)
        vhost.publish(msg("x", "b", delivery_mode=2))
        vhost.bind_queue("a", "amq.direct", "k")
        vhost.unbind_queue("a", "amq.direct", "k")
        vhost.delete_queue("b")
    async with restarted(tmp_path, data) as broker:
        vhost = broker.default_vhost
        assert "b" not in vhost.queues
        assert vhost.publish(msg("m", "k", "amq.direct")).status is RouteStatus.UNROUTABLE
        # A new queue never reuses a deleted queue's store id, so nothing old reappears.
        fresh = vhost.declare_queue("c", durable=True)
        assert fresh.message_count == 0


async def test_dead_lettered_persistent_message_survives(tmp_path: Path) -> None:
    data = MemoryStoreData()
    async with restarted(tmp_path, data) as broker:
        vhost = broker.default_vhost
        vhost.declare_queue("dlq", durable=True)
        work = vhost.declare_queue(
            "work",
            durable=True,
            arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"},
        )
        vhost.publish(msg("poison", "work", delivery_mode=2))
        sink = RecordingSink()
        work.add_consumer("c", sink)
        work.reject(sink.entries[0], requeue=False)
    async with restarted(tmp_path, data) as broker:
        dlq = broker.default_vhost.queues["dlq"]
        (entry,) = dlq.browse()
        assert body(entry.message) == b"poison"
        assert entry.message.annotations is not None
        assert entry.message.annotations["x-death"][0]["reason"] == "rejected"


async def test_offsets_keep_growing_across_restarts(tmp_path: Path) -> None:
    """Messages acked before a restart do not give their offsets to new messages."""
    data = MemoryStoreData()
    async with restarted(tmp_path, data) as broker:
        vhost = broker.default_vhost
        queue = vhost.declare_queue("q", durable=True)
        for i in range(3):
            vhost.publish(msg(str(i), "q", delivery_mode=2))
        sink = RecordingSink(auto_ack=True)
        queue.remove_consumer(queue.add_consumer("c", sink))
        assert queue.next_offset == 3
    async with restarted(tmp_path, data) as broker:
        assert broker.default_vhost.queues["q"].next_offset == 3


class RefusingStore(MemoryStore):
    """A memory store whose disk is full: appends fail (a fault injector, not a mock)."""

    full = False

    def append(self, message: Message, targets: Sequence[QueueTarget]) -> int:
        if self.full:
            raise ResourceError("disk full")
        return super().append(message, targets)


async def test_failed_append_takes_the_whole_publish_back(tmp_path: Path) -> None:
    """No queue keeps the message and no dead-letter copy is made when the store refuses."""
    store = RefusingStore()
    async with embedded(data_dir=tmp_path, store=store, plugins=[]) as broker:
        vhost = broker.default_vhost
        vhost.declare_queue("dlq", durable=True)
        vhost.declare_exchange("fan", "fanout", durable=True)
        full = vhost.declare_queue(
            "full",
            durable=True,
            arguments={
                "x-max-length": 0,
                "x-overflow": "reject-publish-dlx",
                "x-dead-letter-exchange": "",
                "x-dead-letter-routing-key": "dlq",
            },
        )
        open_queue = vhost.declare_queue("open", durable=True)
        vhost.bind_queue("full", "fan")
        vhost.bind_queue("open", "fan")
        store.full = True
        with pytest.raises(ResourceError):
            vhost.publish(msg("m", exchange="fan", delivery_mode=2))
        assert open_queue.message_count == 0 and full.message_count == 0
        assert vhost.queues["dlq"].message_count == 0
        store.full = False
        vhost.publish(msg("m2", exchange="fan", delivery_mode=2))
        assert open_queue.message_count == 1 and vhost.queues["dlq"].message_count == 1

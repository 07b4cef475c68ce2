"""What AMQP 0-9-1 clients see when a cluster node's store fails a publish: `ReplicationTimeout`
(the sync replicas did not confirm in time) is a basic.nack for exactly the publishes waiting,
and the connection carries on; `NotMaster` (the node was demoted, or refuses writes) nacks the
confirms still owed and closes the connection 320 CONNECTION_FORCED naming the master
(CLUSTER.md §7). pika over a real socket, and a raw client where the order of frames matters;
the store fails on demand (tests/slow_store.py `SlowStore.fail`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pika
import pika.exceptions
import pytest
import trio
from pika.adapters.blocking_connection import BlockingChannel

from herald.core.errors import NotMaster, ReplicationTimeout
from herald.core.testing import listener_port
from herald.plugins.amqp.codec import BasicProperties, MethodFrame
from herald.plugins.amqp.codec.methods import (
    BasicAck,
    BasicNack,
    BasicPublish,
    ConfirmSelect,
    ConfirmSelectOk,
    ConnectionClose,
    ConnectionCloseOk,
    QueueDeclare,
    QueueDeclareOk,
)
from tests.amqp.helpers import body_frame, header_frame, method_frame
from tests.amqp_e2e.raw import RawClient
from tests.cluster_errors.helpers import (
    MASTER_TEXT,
    WAIT,
    Background,
    appended,
    blocking,
    broker_on,
)
from tests.slow_store import SlowStore

PERSISTENT = pika.BasicProperties(delivery_mode=2)
MASTER = "127.0.0.1:5999"  # where the cluster says the master is (nobody listens there)
FORCED = f"CONNECTION_FORCED - {MASTER_TEXT}; use {MASTER}"


def connect(port: int) -> pika.BlockingConnection:
    return pika.BlockingConnection(
        pika.ConnectionParameters(
            "127.0.0.1",
            port,
            credentials=pika.PlainCredentials("guest", "guest"),
            socket_timeout=WAIT,
            blocked_connection_timeout=WAIT,
            connection_attempts=1,
        )
    )


async def confirming_channel(port: int) -> tuple[pika.BlockingConnection, BlockingChannel]:
    """A pika connection with a channel in confirm mode and the durable queue `q`."""
    connection = await blocking(connect, port)
    channel = await blocking(connection.channel)
    await blocking(channel.confirm_delivery)
    await blocking(channel.queue_declare, "q", durable=True)
    return connection, channel


async def confirmed(store: SlowStore, channel: BlockingChannel, body: bytes) -> None:
    """Publish a persistent message and see it confirmed once the store made it durable."""
    before = store.appends
    async with trio.open_nursery() as nursery:
        publish = Background.thread(nursery, channel.basic_publish, "", "q", body, PERSISTENT)
        await appended(store, before)
        store.flush()
        await publish.result()  # raises NackError on a nack


async def bodies(channel: BlockingChannel, queue: str = "q") -> list[bytes]:
    """Take (and ack) every message of `queue`."""
    found: list[bytes] = []
    while True:
        method, _, body = await blocking(channel.basic_get, queue)
        if method is None:
            return found
        await blocking(channel.basic_ack, method.delivery_tag)
        found.append(body)


async def closed_quietly(connection: pika.BlockingConnection) -> None:
    if connection.is_open:
        await blocking(connection.close)


@asynccontextmanager
async def publisher_and_reader(
    store: SlowStore, data_dir: Path
) -> AsyncIterator[tuple[pika.BlockingConnection, BlockingChannel, BlockingChannel]]:
    """A broker on `store`; a confirming publisher whose first message (m0) is confirmed and a
    reader on a second connection, both closed at the end: (publisher's connection, its
    channel, the reader's channel)."""
    async with broker_on(store, data_dir, "amqp") as broker:
        port = listener_port(broker, "amqp")
        connection, channel = await confirming_channel(port)
        other = await blocking(connect, port)
        try:
            reader = await blocking(other.channel)
            await confirmed(store, channel, b"m0")
            yield connection, channel, reader
        finally:
            await closed_quietly(connection)
            await closed_quietly(other)


async def test_replication_timeout_nacks_the_waiting_publish_and_the_connection_carries_on(
    tmp_path: Path,
) -> None:
    store = SlowStore()
    async with publisher_and_reader(store, tmp_path) as (connection, channel, reader):
        before = store.appends
        async with trio.open_nursery() as nursery:
            publish = Background.thread(nursery, channel.basic_publish, "", "q", b"m1", PERSISTENT)
            await appended(store, before)
            store.fail(ReplicationTimeout())
            with pytest.raises(pika.exceptions.NackError):
                await publish.result()
        assert store.waits_failed >= 1
        # Nothing closed: the same channel confirms again once the replicas keep up.
        store.fail(None)
        await confirmed(store, channel, b"m2")
        assert connection.is_open and channel.is_open
        # The nacked message is stored and delivered: a nack is not a loss.
        assert await bodies(reader) == [b"m0", b"m1", b"m2"]


async def test_replication_timeout_nacks_exactly_the_publishes_it_failed(tmp_path: Path) -> None:
    """Three publishes wait; the first became durable before the wait failed: ack 1, nack 2
    and 3 (in order, one by one), and a later publish is still confirmed."""
    store = SlowStore()
    async with broker_on(store, tmp_path, "amqp") as broker:
        client = RawClient(listener_port(broker, "amqp"))
        try:
            await blocking(client.handshake)
            await blocking(client.send_method, 1, ConfirmSelect())
            await blocking(client.next_method, ConfirmSelectOk)
            await blocking(client.send_method, 1, QueueDeclare(queue="q", durable=True))
            await blocking(client.next_method, QueueDeclareOk)
            before = store.appends
            # In one write, so the confirms wait for the third's ticket when the first's is
            # made durable: the wait then fails, and the first must still be acked.
            publishes = b"".join(publish_frames(b, persistent=True) for b in (b"m1", b"m2", b"m3"))
            await blocking(client.send, publishes)
            await appended(store, before, 3)
            store.flush(upto=store.appended - 2)  # the first of the three
            store.fail(ReplicationTimeout())
            await blocking(client.send, publish_frames(b"transient", persistent=False))
            answers = [await blocking(next_confirm, client) for _ in range(4)]
            assert answers == [
                BasicAck(1, False),
                BasicNack(2, False, False),
                BasicNack(3, False, False),
                BasicAck(4, False),
            ]
            assert not any(isinstance(e, MethodFrame) for e in client.events)  # no close
        finally:
            client.close()
        assert store.statistics().messages == 3  # the nacked ones stored too: none lost
        assert broker.default_vhost.queues["q"].message_count == 4


async def test_not_master_while_confirms_wait_nacks_them_then_closes_320(tmp_path: Path) -> None:
    store = SlowStore()
    async with broker_on(store, tmp_path, "amqp") as broker:
        client = RawClient(listener_port(broker, "amqp"))
        try:
            await blocking(client.handshake)
            await blocking(client.send_method, 1, ConfirmSelect())
            await blocking(client.next_method, ConfirmSelectOk)
            await blocking(client.send_method, 1, QueueDeclare(queue="q", durable=True))
            await blocking(client.next_method, QueueDeclareOk)
            before = store.appends
            for body in (b"m1", b"m2"):
                await blocking(client.send, publish_frames(body, persistent=True))
            await appended(store, before, 2)
            store.fail(NotMaster(MASTER_TEXT, addrs={"amqp": MASTER, "mqtt": "elsewhere:1"}))
            answers = [await blocking(next_method, client) for _ in range(3)]
            assert answers == [
                BasicNack(1, False, False),  # every confirm owed is nacked, then the close
                BasicNack(2, False, False),
                ConnectionClose(320, FORCED, 0, 0),
            ]
            await blocking(client.send_method, 0, ConnectionCloseOk())
        finally:
            client.close()
        assert store.statistics().messages == 2  # stored: still there


async def test_not_master_while_a_pika_confirm_waits_closes_the_connection_320(
    tmp_path: Path,
) -> None:
    store = SlowStore()
    async with publisher_and_reader(store, tmp_path) as (connection, channel, reader):
        before = store.appends
        async with trio.open_nursery() as nursery:
            publish = Background.thread(nursery, channel.basic_publish, "", "q", b"m1", PERSISTENT)
            await appended(store, before)
            store.fail(NotMaster(MASTER_TEXT, MASTER), appends=True)
            # pika reports the close that follows the nack rather than the nack itself
            with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as caught:
                await publish.result()
        assert (caught.value.reply_code, caught.value.reply_text) == (320, FORCED)
        assert connection.is_closed
        # The other connection keeps working, and what was stored is still there.
        assert await bodies(reader) == [b"m0", b"m1"]
        store.fail(None)
        await blocking(reader.confirm_delivery)
        await confirmed(store, reader, b"m2")
        assert await bodies(reader) == [b"m2"]


async def test_a_publish_refused_by_not_master_closes_the_connection_320(tmp_path: Path) -> None:
    store = SlowStore()
    async with publisher_and_reader(store, tmp_path) as (connection, channel, reader):
        appends = store.appends
        store.fail(NotMaster(MASTER_TEXT, MASTER), appends=True)
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as caught:
            await blocking(channel.basic_publish, "", "q", b"refused", PERSISTENT)
        assert (caught.value.reply_code, caught.value.reply_text) == (320, FORCED)
        assert connection.is_closed
        assert store.appends == appends  # the refused publish stored nothing
        # The other connection carries on: reads, declares (no write refused to it yet).
        assert await bodies(reader) == [b"m0"]
        declared = await blocking(reader.queue_declare, "q", passive=True)
        assert declared.method.message_count == 0


async def test_a_publish_refused_by_not_master_without_a_known_master(tmp_path: Path) -> None:
    store = SlowStore()
    async with broker_on(store, tmp_path, "amqp") as broker:
        _, channel = await confirming_channel(listener_port(broker, "amqp"))
        store.fail(NotMaster(MASTER_TEXT), appends=True)
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as caught:
            await blocking(channel.basic_publish, "", "q", b"refused", PERSISTENT)
        assert caught.value.reply_code == 320
        assert caught.value.reply_text == f"CONNECTION_FORCED - {MASTER_TEXT}"


async def test_tx_commit_failed_by_a_replication_timeout_closes_only_its_channel(
    tmp_path: Path,
) -> None:
    store = SlowStore()
    async with broker_on(store, tmp_path, "amqp") as broker:
        connection = await blocking(connect, listener_port(broker, "amqp"))
        channel = await blocking(connection.channel)
        await blocking(channel.queue_declare, "q", durable=True)
        await blocking(channel.tx_select)
        await blocking(channel.basic_publish, "", "q", b"m1", PERSISTENT)
        before = store.appends
        async with trio.open_nursery() as nursery:
            commit = Background.thread(nursery, channel.tx_commit)
            await appended(store, before)
            store.fail(ReplicationTimeout())
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as caught:
                await commit.result()
        assert caught.value.reply_code == 506
        assert caught.value.reply_text.startswith("RESOURCE_ERROR - replication timeout")
        assert connection.is_open
        store.fail(None)
        fresh = await blocking(connection.channel)
        assert await bodies(fresh) == [b"m1"]  # stored, and delivered
        await closed_quietly(connection)


# -- the raw client's frames ------------------------------------------------------------------
def publish_frames(body: bytes, *, persistent: bool) -> bytes:
    properties = BasicProperties(delivery_mode=2 if persistent else 1)
    return (
        method_frame(1, BasicPublish(exchange="", routing_key="q"))
        + header_frame(1, len(body), properties)
        + body_frame(1, body)
    )


def next_method(client: RawClient) -> Any:
    """The next method the server sends, of any kind."""
    while True:
        while client.events:
            event = client.events.pop(0)
            if isinstance(event, MethodFrame):
                return event.method
        data = client.receive()
        if not data:
            raise EOFError("the server closed the connection")
        client.events.extend(client.reader.feed(data))


def next_confirm(client: RawClient) -> Any:
    method = next_method(client)
    assert isinstance(method, BasicAck | BasicNack), method
    return method

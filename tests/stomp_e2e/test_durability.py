"""What survives a broker restart (the memory store's data kept, the broker made anew)."""

from __future__ import annotations

from pathlib import Path

import trio

from herald.storage.memory import MemoryStoreData
from tests.stomp_e2e.helpers import WAIT, Client, stomp_broker


async def test_a_persistent_message_to_a_durable_queue_survives_a_restart(
    tmp_path: Path, store_data: MemoryStoreData
) -> None:
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path, data=store_data) as broker:
            client = await Client.connect(broker)
            await client.send(
                "/queue/keep", "kept", persistent="true", receipt="p", **{"x-tag": "1"}
            )
            await client.send("/queue/keep", "lost", receipt="t")  # transient: not stored
            await client.receipt("t")
            assert client.frames.receipts == ["p", "t"]
            await client.disconnect("bye")
        async with stomp_broker(tmp_path, data=store_data) as broker:
            client = await Client.connect(broker)
            await client.subscribe("/queue/keep", "s", ack="client-individual")
            (message,) = await client.messages(1)
            assert message.body == "kept"
            assert message.headers["persistent"] == "true"
            assert message.headers["x-tag"] == "1"
            await client.call(client.conn.ack, message.headers["ack"], receipt="a")
            await client.receipt("a")
            await client.disconnect("bye")
        async with stomp_broker(tmp_path, data=store_data) as broker:
            assert broker.default_vhost.queues["keep"].message_count == 0  # acked: gone for good


async def test_a_durable_topic_subscription_survives_a_restart(
    tmp_path: Path, store_data: MemoryStoreData
) -> None:
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path, data=store_data) as broker:
            client = await Client.connect(broker)
            await client.call(
                client.conn.subscribe,
                "/topic/alerts",
                "watch",
                headers={"durable": "true"},
                receipt="s",
            )
            await client.receipt("s")
            await client.disconnect("bye")
        async with stomp_broker(tmp_path, data=store_data) as broker:
            publisher = await Client.connect(broker)
            await publisher.send("/topic/alerts", "after restart", persistent="true", receipt="p")
            await publisher.receipt("p")
            await publisher.disconnect("bye")
        async with stomp_broker(tmp_path, data=store_data) as broker:
            client = await Client.connect(broker)
            await client.subscribe("/topic/alerts", "watch", durable="true")
            (message,) = await client.messages(1)
            assert message.body == "after restart"
            assert message.headers["destination"] == "/topic/alerts"
            await client.disconnect("bye")

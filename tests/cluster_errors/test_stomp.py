"""What STOMP clients see when a cluster node's store fails a persistent SEND: the RECEIPTs
already due, then an ERROR naming the frame still waiting (`receipt-id`): `Replication
timeout` (the message is stored and may still be delivered) or `Not master` (naming the
master when known), and the connection closes; a SEND refused by a node that is not master
is ERROR `Not master` too. Another connection carries on and what was stored is delivered
(CLUSTER.md §7). stomp.py over a real socket; the store fails on demand
(tests/slow_store.py `SlowStore.fail`).
"""

from __future__ import annotations

from pathlib import Path

import trio

from herald.core.errors import NotMaster, ReplicationTimeout
from tests.cluster_errors.helpers import MASTER_TEXT, Background, appended, broker_on
from tests.slow_store import SlowStore
from tests.stomp_e2e.helpers import Client

MASTER = "127.0.0.1:61999"  # where the cluster says the master's STOMP listener is
QUEUE = "/queue/q"  # durable: a persistent SEND to it is stored, its receipt waits


async def sent(store: SlowStore, client: Client, body: str, receipt: str) -> None:
    """SEND a persistent message and see its RECEIPT once the store made it durable."""
    before = store.appends
    async with trio.open_nursery() as nursery:
        receipt_seen = Background.task(nursery, client.receipt, receipt)
        await client.send(QUEUE, body, persistent="true", receipt=receipt)
        await appended(store, before)
        store.flush()
        await receipt_seen.result()


async def bodies(client: Client, count: int) -> list[str]:
    return [frame.body for frame in await client.messages(count)]


async def test_replication_timeout_answers_the_waiting_receipt_with_an_error(
    tmp_path: Path,
) -> None:
    store = SlowStore()
    async with broker_on(store, tmp_path, "stomp") as broker:
        sender = await Client.connect(broker)
        await sent(store, sender, "m0", "r0")
        before = store.appends
        await sender.send(QUEUE, "m1", persistent="true", receipt="r1")
        await sender.send(QUEUE, "m2", persistent="true", receipt="r2")
        await appended(store, before, 2)
        store.flush(upto=store.appended - 1)  # m1 is durable, m2 is not
        store.fail(ReplicationTimeout())
        await sender.wait(lambda: bool(sender.frames.errors))
        await sender.wait_disconnected()
        (error,) = sender.frames.errors
        assert error.headers["message"] == "Replication timeout"
        assert error.headers["receipt-id"] == "r2"  # the frame still waiting, not r1
        assert "stored on the master and may still be delivered" in error.body
        assert sender.frames.receipts == ["r0", "r1"]  # due before the failure: sent first
        # Another connection carries on, and every stored message is delivered.
        reader = await Client.connect(broker)
        await reader.subscribe(QUEUE, "s")
        assert await bodies(reader, 3) == ["m0", "m1", "m2"]
        store.fail(None)
        await sent(store, reader, "m3", "r3")
        assert await bodies(reader, 4) == ["m0", "m1", "m2", "m3"]
        await reader.disconnect()


async def test_not_master_while_a_receipt_waits_names_the_master(tmp_path: Path) -> None:
    store = SlowStore()
    async with broker_on(store, tmp_path, "stomp") as broker:
        reader = await Client.connect(broker)
        await reader.subscribe(QUEUE, "s", receipt="sub")
        await reader.receipt("sub")
        sender = await Client.connect(broker)
        before = store.appends
        await sender.send(QUEUE, "m1", persistent="true", receipt="r1")
        await appended(store, before)
        store.fail(NotMaster(MASTER_TEXT, addrs={"amqp": "127.0.0.1:5999", "stomp": MASTER}))
        await sender.wait(lambda: bool(sender.frames.errors))
        await sender.wait_disconnected()
        (error,) = sender.frames.errors
        assert error.headers["message"] == "Not master"
        assert error.headers["receipt-id"] == "r1"
        assert error.body == f"{MASTER_TEXT}; use {MASTER}"
        assert sender.frames.receipts == []
        assert await bodies(reader, 1) == ["m1"]  # stored before: still delivered
        await reader.disconnect()


async def test_a_send_refused_by_not_master_is_an_error(tmp_path: Path) -> None:
    store = SlowStore()
    async with broker_on(store, tmp_path, "stomp") as broker:
        sender = await Client.connect(broker)
        await sent(store, sender, "m0", "r0")
        appends = store.appends
        store.fail(NotMaster(MASTER_TEXT, MASTER), appends=True)
        await sender.send(QUEUE, "refused", persistent="true", receipt="r1")
        await sender.wait(lambda: bool(sender.frames.errors))
        await sender.wait_disconnected()
        (error,) = sender.frames.errors
        assert error.headers["message"] == "Not master"
        assert error.headers["receipt-id"] == "r1"
        assert error.body == f"{MASTER_TEXT}; use {MASTER}"
        assert store.appends == appends  # nothing of the refused SEND was stored
        reader = await Client.connect(broker)
        await reader.subscribe(QUEUE, "s")
        assert await bodies(reader, 1) == ["m0"]
        store.fail(None)
        await sent(store, reader, "m2", "r2")
        assert await bodies(reader, 2) == ["m0", "m2"]
        await reader.disconnect()

"""What MQTT clients see when a cluster node's store fails a QoS 1 publish: `ReplicationTimeout`
while PUBACKs wait ends the connection (MQTT 5: DISCONNECT 0x83 with a reason string; 3.1.1:
a plain close), `NotMaster` (the node was demoted while they waited, or refuses writes) ends it
with MQTT 5 DISCONNECT 0x9C Use another server and the master's address as Server Reference
(3.1.1: a plain close). The message stored before the failure is still delivered; another
connection carries on (CLUSTER.md §7). paho-mqtt over a real socket; the store fails on
demand (tests/slow_store.py `SlowStore.fail`).
"""

from __future__ import annotations

import queue
from pathlib import Path
from typing import Any

import pytest
import trio
from paho.mqtt.client import Client as PahoClient

from herald.core.broker import Broker
from herald.core.errors import NotMaster, ReplicationTimeout
from tests.cluster_errors.helpers import MASTER_TEXT, Background, appended, broker_on
from tests.mqtt_e2e.helpers import Paho, wait_for
from tests.slow_store import SlowStore

MASTER = "127.0.0.1:1999"  # where the cluster says the master's MQTT listener is
USE_ANOTHER_SERVER = 0x9C
IMPLEMENTATION_SPECIFIC_ERROR = 0x83


class Client(Paho):
    """`Paho`, keeping the properties of the DISCONNECT the broker sent."""

    def __init__(self, broker: Broker, **kwargs: Any) -> None:
        self.disconnect_properties: queue.Queue[Any] = queue.Queue()
        super().__init__(broker, **kwargs)

    def _on_disconnect(
        self, client: PahoClient, userdata: Any, flags: Any, rc: Any, props: Any
    ) -> None:
        self.disconnect_properties.put(props)
        super()._on_disconnect(client, userdata, flags, rc, props)


async def keeper(broker: Broker) -> Client:
    """A 3.1.1 subscriber whose session outlives its connection, so its queue is durable and
    QoS 1 messages to `t/#` are stored (their PUBACK waits for the store)."""
    client = Client(broker, version=4, client_id="keeper", clean=False)
    await client.connect()
    await client.subscribe("t/#", 1)
    return client


async def acknowledged(store: SlowStore, client: Client, topic: str, payload: bytes) -> Any:
    """Publish at QoS 1 and return the PUBACK's reason code, once the store made it durable."""
    before = store.appends
    async with trio.open_nursery() as nursery:
        publish = Background.task(nursery, client.publish, topic, payload, 1)
        await appended(store, before)
        store.flush()
        return await publish.result()


async def payloads(client: Client, count: int) -> list[bytes]:
    return [bytes((await client.message()).payload) for _ in range(count)]


async def no_more_messages(client: Client) -> None:
    with pytest.raises(queue.Empty):
        await client.message(timeout=0.2)


async def gone(client: Client) -> tuple[int, Any]:
    """The reason code and properties of the disconnection the broker caused."""
    rc = await client.wait_gone()
    return rc.value, await wait_for(client.disconnect_properties)


async def subscriber_and_publisher(broker: Broker, version: int) -> tuple[Client, Client]:
    """A subscriber that keeps `t/#` (`keeper`) and a connected publisher of `version`."""
    subscriber = await keeper(broker)
    publisher = Client(broker, version=version)
    await publisher.connect()
    return subscriber, publisher


async def told_to_use_the_master(publisher: Client, version: int) -> None:
    """MQTT 5: DISCONNECT 0x9C naming the master (Server Reference and reason); 3.1.1 has no
    server DISCONNECT, so the connection just ends."""
    code, properties = await gone(publisher)
    if version == 5:
        assert code == USE_ANOTHER_SERVER
        assert properties.ServerReference == MASTER
        assert properties.ReasonString == f"{MASTER_TEXT}; use {MASTER}"
    else:
        assert code != 0


@pytest.mark.parametrize("version", [5, 4])
async def test_replication_timeout_while_pubacks_wait_ends_the_connection(
    tmp_path: Path, version: int
) -> None:
    store = SlowStore()
    async with broker_on(store, tmp_path, "mqtt") as broker:
        subscriber, publisher = await subscriber_and_publisher(broker, version)
        assert await acknowledged(store, publisher, "t/a", b"m0") == 0
        before = store.appends
        publisher.client.publish("t/a", b"m1", 1)  # its PUBACK never comes
        await appended(store, before)
        store.fail(ReplicationTimeout())
        code, properties = await gone(publisher)
        if version == 5:
            assert code == IMPLEMENTATION_SPECIFIC_ERROR
            assert properties.ReasonString.startswith("replication timeout:")
            assert "stored on the master and may still be delivered" in properties.ReasonString
        else:  # 3.1.1 has no DISCONNECT from the server: the connection is just closed
            assert code != 0
        assert publisher.publishes.empty()  # neither PUBACK was owed long enough to be sent
        # The other connection carries on, and the stored message is delivered: not lost.
        assert await payloads(subscriber, 2) == [b"m0", b"m1"]
        store.fail(None)
        assert await acknowledged(store, subscriber, "t/b", b"m2") == 0
        assert await payloads(subscriber, 1) == [b"m2"]
        await subscriber.disconnect()


@pytest.mark.parametrize("version", [5, 4])
async def test_not_master_while_pubacks_wait_says_use_another_server(
    tmp_path: Path, version: int
) -> None:
    store = SlowStore()
    async with broker_on(store, tmp_path, "mqtt") as broker:
        subscriber, publisher = await subscriber_and_publisher(broker, version)
        before = store.appends
        publisher.client.publish("t/a", b"m1", 1)
        await appended(store, before)
        store.fail(NotMaster(MASTER_TEXT, addrs={"amqp": "127.0.0.1:5999", "mqtt": MASTER}))
        await told_to_use_the_master(publisher, version)
        assert publisher.publishes.empty()
        assert await payloads(subscriber, 1) == [b"m1"]  # stored before: still delivered
        await subscriber.disconnect()


@pytest.mark.parametrize("version", [5, 4])
async def test_a_publish_refused_by_not_master_says_use_another_server(
    tmp_path: Path, version: int
) -> None:
    store = SlowStore()
    async with broker_on(store, tmp_path, "mqtt") as broker:
        subscriber, publisher = await subscriber_and_publisher(broker, version)
        assert await acknowledged(store, publisher, "t/a", b"m0") == 0
        appends = store.appends
        store.fail(NotMaster(MASTER_TEXT, MASTER), appends=True)
        publisher.client.publish("t/a", b"refused", 1)
        await told_to_use_the_master(publisher, version)
        assert store.appends == appends  # nothing of the refused publish was stored
        assert await payloads(subscriber, 1) == [b"m0"]
        await no_more_messages(subscriber)
        store.fail(None)
        assert await acknowledged(store, subscriber, "t/b", b"m2") == 0
        assert await payloads(subscriber, 1) == [b"m2"]
        await subscriber.disconnect()


async def test_not_master_without_a_known_master_has_no_server_reference(tmp_path: Path) -> None:
    store = SlowStore()
    async with broker_on(store, tmp_path, "mqtt") as broker:
        await keeper(broker)
        publisher = Client(broker, version=5)
        await publisher.connect()
        store.fail(NotMaster(MASTER_TEXT), appends=True)
        publisher.client.publish("t/a", b"refused", 1)
        code, properties = await gone(publisher)
        assert code == USE_ANOTHER_SERVER
        assert not hasattr(properties, "ServerReference")
        assert properties.ReasonString == MASTER_TEXT

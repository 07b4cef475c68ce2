"""A master demoted while clients are connected tells each of them where the master went
(CLUSTER.md §7): pika gets connection.close 320 naming the new master's AMQP address, paho
(MQTT 5) DISCONNECT 0x9C Use another server with the new master's address as Server
Reference, stomp.py an ERROR "Not master" naming its STOMP address. The demotion is an
operator's `promote --force` of a sync-set slave, on real processes.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pika
import pika.exceptions
import pytest
import stomp
import trio
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from herald.cluster.controller import GroupController
from herald.cluster.etcd import EtcdClient
from tests.cluster.ha_cluster import GROUP, WAIT_S, HACluster
from tests.cluster.harness import EtcdProcess
from tests.cluster.workload import amqp_parameters

USE_ANOTHER_SERVER = 0x9C


@pytest.fixture
def group(tmp_path: Path, etcd: EtcdProcess) -> Iterator[HACluster]:
    with HACluster(tmp_path, etcd.endpoint, nodes=2, replication="sync") as cluster:
        yield cluster


def promote(cluster: HACluster, node: str) -> None:
    async def run() -> None:
        async with EtcdClient([cluster.etcd]) as etcd:
            await GroupController(etcd, cluster.cluster, GROUP, node).promote(node, force=True)

    trio.run(run)


class MqttWatcher:
    """A paho MQTT 5 client that records its DISCONNECT's reason code and properties."""

    def __init__(self, port: int) -> None:
        self.client = mqtt.Client(
            CallbackAPIVersion.VERSION2, client_id="demotion-watcher", protocol=mqtt.MQTTv5
        )
        self.client.username_pw_set("guest", "guest")
        self.connected = threading.Event()
        self.gone: queue.Queue[tuple[int, Any]] = queue.Queue()
        self.client.on_connect = lambda *args: self.connected.set()
        self.client.on_disconnect = lambda _c, _u, _f, code, props: self.gone.put(
            (int(code.value), props)
        )
        self.client.connect("127.0.0.1", port, properties=Properties(PacketTypes.CONNECT))
        self.client.loop_start()
        assert self.connected.wait(WAIT_S)


def test_demoted_master_names_the_new_one_to_every_client(group: HACluster) -> None:
    state = group.wait_full_sync_set()
    old = state["master"]
    (new,) = [node for node in state["sync_set"] if node != old]
    amqp = pika.BlockingConnection(amqp_parameters(group.port(old), heartbeat=10))
    amqp.channel()
    watcher = MqttWatcher(group.port(old, "mqtt"))
    errors: queue.Queue[tuple[dict[str, str], str]] = queue.Queue()
    listener = stomp.ConnectionListener()
    listener.on_error = lambda frame: errors.put((frame.headers, frame.body))
    connection = stomp.Connection12([("127.0.0.1", group.port(old, "stomp"))])
    connection.set_listener("watch", listener)
    connection.connect("guest", "guest", wait=True)

    promote(group, new)
    group.wait_state(lambda s: s["master"] == new, f"{new} master")

    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            amqp.process_data_events(time_limit=0.2)
    assert closed.value.reply_code == 320
    assert f"127.0.0.1:{group.port(new)}" in closed.value.reply_text

    code, props = watcher.gone.get(timeout=WAIT_S)
    assert code == USE_ANOTHER_SERVER
    assert props.ServerReference == f"127.0.0.1:{group.port(new, 'mqtt')}"

    headers, body = errors.get(timeout=WAIT_S)
    assert headers["message"] == "Not master"
    assert f"127.0.0.1:{group.port(new, 'stomp')}" in body

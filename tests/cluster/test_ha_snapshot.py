"""Snapshot resync on real processes (CLUSTER.md §3.3, §8.2 scenario 10): a fourth node added
to a master whose early segments were reclaimed catches up by snapshot.

A sync group of three (`herald cluster dev`) with 1 MiB segments and a checkpoint every MiB:
a first batch of 2 KiB persistent messages is published and consumed, a second published and
kept, so the master's retention deletes its first segments (no slave needs them: both are in
the sync set). Then n4, a node of the group with its own config and an empty data dir, starts:
it says START(0), the master no longer holds offset 0 and ships a snapshot, n4 swaps it in,
streams on from its end and enters the sync set; a third batch is confirmed with n4 in the sync
set. At a quiesced point (n4's flushed offset at the master's log end) n4 and then the master
stop cleanly, and their stores, opened offline, hold the same state: every message kept, acks,
metadata, consume queues.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest
import trio

from herald.cluster import keys
from herald.cluster.dev import LOOPBACK, PROTOCOLS, node_config
from herald.core.message import CodecRegistry
from herald.core.ports import free_port
from herald.storage.commitlog import CommitLogStore
from herald.storage.commitlog_config import CommitLogConfig
from tests.cluster.ha_cluster import WAIT_S, HACluster
from tests.cluster.harness import EtcdProcess, NodeProcess, etcd_get, wait_until
from tests.cluster.workload import amqp_parameters
from tests.storage.test_replica import state_of

QUEUE = "snap"
SEGMENT = 1 << 20
STORE = CommitLogConfig(segment_size=SEGMENT, checkpoint_bytes=SEGMENT)
OPTIONS = (
    "--set", f"commitlog.segment_size={SEGMENT}",
    "--set", f"commitlog.checkpoint_bytes={SEGMENT}",
)  # fmt: skip
BODY = 2048


@pytest.fixture
def group(tmp_path: Path, etcd: EtcdProcess) -> Iterator[HACluster]:
    with HACluster(tmp_path, etcd.endpoint, nodes=3, replication="sync", options=OPTIONS) as ha:
        yield ha


def publish(port: int, first: int, count: int) -> list[str]:
    """`count` persistent 2 KiB messages with confirms: their ids, all confirmed."""
    connection = pika.BlockingConnection(amqp_parameters(port, heartbeat=10))
    try:
        channel = connection.channel()
        channel.queue_declare(QUEUE, durable=True)
        channel.confirm_delivery()
        ids = []
        for seq in range(first, first + count):
            mid = f"m{seq}"
            body = mid.encode().ljust(BODY, b".")
            props = pika.BasicProperties(delivery_mode=2, message_id=mid)
            channel.basic_publish("", QUEUE, body, props, mandatory=True)  # raises on a nack
            ids.append(mid)
        return ids
    finally:
        connection.close()


def consume(port: int, count: int) -> list[str]:
    """Consume and ack `count` messages."""
    connection = pika.BlockingConnection(amqp_parameters(port, heartbeat=10))
    try:
        channel = connection.channel()
        channel.basic_qos(prefetch_count=200)
        got: list[str] = []
        for method, props, _body in channel.consume(QUEUE, inactivity_timeout=WAIT_S):
            assert method is not None, f"only {len(got)} of {count} messages came"
            got.append(props.message_id)
            channel.basic_ack(method.delivery_tag)
            if len(got) == count:
                break
        channel.cancel()
        return got
    finally:
        connection.close()


def add_node(group: HACluster, name: str) -> NodeProcess:
    """A node of the group like the others (its config is n1's with its own name, data dir and
    ports), started with an empty data dir: a child of the test, stopped with the group."""
    root = group.dev.root
    sections: dict[str, dict[str, Any]] = tomllib.loads((root / "n1.toml").read_text())
    used = {free_port(LOOPBACK)}
    ports = {}
    for kind in (*PROTOCOLS, "cluster"):
        ports[kind] = free_port(LOOPBACK, used)
        used.add(ports[kind])
    sections["broker"].update(node_name=name, data_dir=str(root / name))
    for kind in PROTOCOLS:
        sections[kind]["port"] = ports[kind]
    sections["cluster"]["listen"] = f"{LOOPBACK}:{ports['cluster']}"
    config = root / f"{name}.toml"
    config.write_text(node_config(sections))
    node = NodeProcess(config, root / f"{name}.log", name)
    node.start()
    group.processes[name] = node
    return node


def node_key(group: HACluster, node: str) -> dict[str, Any]:
    kv = etcd_get(group.etcd, keys.node_key(group.cluster, node))
    return {} if kv is None else dict(json.loads(kv.value))


async def stored_state(data_dir: Path) -> dict[str, Any]:
    store = CommitLogStore(data_dir / "store", STORE)
    await store.open(CodecRegistry())
    try:
        return state_of(store)
    finally:
        await store.close()


def test_a_fourth_node_catches_up_by_snapshot(group: HACluster) -> None:
    state = group.wait_full_sync_set()
    master = state["master"]
    port = group.port(master)
    master_dir = group.dev.root / master

    gone = publish(port, 0, 2500)  # about 5 MiB
    assert consume(port, len(gone)) == gone
    kept = publish(port, 2500, 1500)  # 3 MiB more: two checkpoints past the first segments
    first = master_dir / "store" / "commitlog" / ("0" * 20)
    wait_until(lambda: not first.exists(), "the master reclaiming its first segment")

    add_node(group, "n4")
    group.wait_state(lambda s: "n4" in s["sync_set"], "n4 in the sync set")
    assert "shipped a snapshot to n4" in group.log_of(master)
    n4_log = group.log_of("n4")
    assert "took a snapshot" in n4_log, n4_log[-3000:]
    kept += publish(port, 4000, 300)  # confirmed only once n4 flushed them too (sync set)

    def quiesced() -> bool:
        replication = node_key(group, master).get("replication", {})
        end = replication.get("log_end")
        return end is not None and node_key(group, "n4").get("offset") == end

    wait_until(quiesced, "n4 flushed up to the master's log end")
    group.processes["n4"].stop()
    group.processes[master].stop()
    on_master = trio.run(stored_state, master_dir)
    on_n4 = trio.run(stored_state, group.dev.root / "n4")
    assert on_n4 == on_master
    (queue,) = on_master["queues"].values()
    assert [mid for _offset, mid, _count, _raw in queue[1]] == kept

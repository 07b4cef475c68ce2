"""Commit-log HA on real processes (CLUSTER.md §3, §8 scenario 4's single kill): `herald
cluster dev --nodes 3 --replication sync`, pika publishing with confirms to the master,
`kill -9` of the master; a new master is elected from the sync set, named by `herald cluster
status`, and holds every confirmed message; the old master comes back as a slave, cuts the
tail nobody confirmed, and rejoins the sync set.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest

from herald.pipeline.log_view import open_log
from herald.pipeline.options import ReadOptions
from herald.pipeline.read import plan, read_split
from tests.cluster.ha_cluster import WAIT_S, HACluster, status_master
from tests.cluster.harness import EtcdProcess, wait_until
from tests.cluster.workload import amqp_parameters

QUEUE = "ha"


@pytest.fixture
def group(tmp_path: Path, etcd: EtcdProcess) -> Iterator[HACluster]:
    with HACluster(tmp_path, etcd.endpoint, nodes=3, replication="sync") as cluster:
        yield cluster


def publish_confirmed(port: int, count: int, first: int = 0) -> list[str]:
    """Publish `count` persistent messages with confirms; the ids confirmed, in order."""
    connection = pika.BlockingConnection(amqp_parameters(port, heartbeat=10))
    try:
        channel = connection.channel()
        channel.queue_declare(QUEUE, durable=True)
        channel.confirm_delivery()
        confirmed = []
        for seq in range(first, first + count):
            mid = f"m{seq}"
            props = pika.BasicProperties(delivery_mode=2, message_id=mid)
            channel.basic_publish("", QUEUE, mid.encode(), props, mandatory=True)
            confirmed.append(mid)  # basic_publish raised on a nack or a return
        return confirmed
    finally:
        connection.close()


def drain(port: int) -> list[str]:
    """Every message of the queue, acked, until it has been idle for a second."""
    return [mid for mid, _redelivered in drain_flagged(port)]


def drain_flagged(port: int) -> list[tuple[str, bool]]:
    """`drain`, with each delivery's redelivered flag."""
    connection = pika.BlockingConnection(amqp_parameters(port, heartbeat=10))
    try:
        channel = connection.channel()
        channel.queue_declare(QUEUE, durable=True)
        got: list[tuple[str, bool]] = []
        for method, _props, body in channel.consume(QUEUE, inactivity_timeout=1.0):
            if method is None:
                break
            got.append((body.decode(), bool(method.redelivered)))
            channel.basic_ack(method.delivery_tag)
        channel.cancel()
        return got
    finally:
        connection.close()


def test_kill_9_of_the_master_loses_no_confirmed_message(group: HACluster) -> None:
    state = group.wait_full_sync_set()
    old = state["master"]
    assert state["epoch"] >= 1 and old in state["sync_set"]
    confirmed = publish_confirmed(group.port(old), 300)

    group.processes[old].kill()
    new_state = group.wait_new_master(old)
    new = new_state["master"]
    assert new_state["epoch"] > state["epoch"]
    assert new in state["sync_set"]  # only a sync-set member may be elected
    wait_until(lambda: status_master(group.status()) == new, "cluster status names the new master")

    got = drain_flagged(group.port(new))
    assert sorted({mid for mid, _ in got}) == sorted(confirmed), "every confirmed message only"
    # Found in the log at promotion: the old master may have delivered them (at-least-once).
    assert all(redelivered for _, redelivered in got)

    # The old master comes back as a slave of the new one and rejoins the sync set.
    group.processes[old].start()
    group.wait_state(
        lambda s: s["master"] == new and old in s["sync_set"] and len(s["sync_set"]) == 3,
        f"{old} back in the sync set",
    )
    # A cut keeps the checkpoints below it: no replay of the whole log to rejoin.
    assert "no usable checkpoint" not in group.log_of(old)
    more = publish_confirmed(group.port(new), 50, first=300)
    assert drain_flagged(group.port(new)) == [(mid, False) for mid in more]


def test_a_slave_serves_no_client_and_the_master_confirms_with_it(group: HACluster) -> None:
    state = group.wait_full_sync_set()
    slaves = [node for node in group.processes if node != state["master"]]
    for slave in slaves:
        with pytest.raises(pika.exceptions.AMQPConnectionError):
            pika.BlockingConnection(amqp_parameters(group.port(slave)))
    confirmed = publish_confirmed(group.port(state["master"]), 100)
    assert drain(group.port(state["master"])) == confirmed


def test_a_killed_slave_leaves_the_sync_set_and_comes_back(group: HACluster) -> None:
    state = group.wait_full_sync_set()
    master = state["master"]
    slave = next(node for node in group.processes if node != master)
    group.processes[slave].kill()
    group.wait_state(lambda s: slave not in s["sync_set"], f"{slave} out of the sync set")
    # Two copies remain (master + one slave): confirms go on without the dead slave.
    confirmed = publish_confirmed(group.port(master), 100)
    group.processes[slave].start()
    group.wait_full_sync_set(WAIT_S)
    assert drain(group.port(master)) == confirmed


def stored_messages(data_dir: Path) -> list[tuple[str | None, bytes]]:
    """(queue, body) of every message record in a data dir, as the Spark reader reads it."""
    view = open_log(data_dir, durable_only=False)
    options = ReadOptions(path=data_dir)
    out: list[tuple[str | None, bytes]] = []
    for split in plan(view, options):
        for batch in read_split(view.root, split, options, view.queues):
            table = batch.to_pydict()
            out += [(q, bytes(b)) for q, b in zip(table["queue"], table["body"], strict=True)]
    return out


def test_the_pipeline_reads_a_slaves_log_as_the_masters(group: HACluster) -> None:
    """A slave's log is the master's byte for byte, so the Spark reader can read a group's
    messages from a slave and keep that load off the master (RocketMQ's slaveReadEnable)."""
    state = group.wait_full_sync_set()
    master = state["master"]
    confirmed = publish_confirmed(group.port(master), 200)
    slave = next(node for node in state["sync_set"] if node != master)
    slave_dir = Path(next(n for n in group.dev.info["nodes"] if n["name"] == slave)["data_dir"])
    master_dir = Path(next(n for n in group.dev.info["nodes"] if n["name"] == master)["data_dir"])

    def caught_up() -> list[tuple[str | None, bytes]] | None:
        found = stored_messages(slave_dir)
        return found if len(found) >= len(confirmed) else None

    from_slave = wait_until(caught_up, "the slave's log holding every confirmed message")
    assert [body.decode() for _, body in from_slave] == confirmed  # in order, once each
    assert from_slave == stored_messages(master_dir)


def test_a_node_elected_but_unable_to_serve_steps_down(group: HACluster) -> None:
    """The slave that should win the election cannot bind its AMQP port (the test holds it):
    it gives the group back to the old sync set and stays out of elections a while, so the
    other slave takes over; nothing confirmed is lost and no node exits."""
    state = group.wait_full_sync_set()
    old = state["master"]
    first, second = sorted(node for node in state["sync_set"] if node != old)
    confirmed = publish_confirmed(group.port(old), 100)
    with socket.socket() as squatter:  # the first candidate's client port, taken
        squatter.bind(("127.0.0.1", group.port(first)))
        squatter.listen()
        group.processes[old].kill()
        new_state = group.wait_state(lambda s: s["master"] not in (old, first), "a master")
        assert new_state["master"] == second
        assert group.processes[first].running  # it stepped down, it did not exit
    log = group.log_of(first)
    if "elected master" in log:  # it ranks first (its name), unless its log was behind
        assert "cannot serve as master" in log and "steps down" in log
    group.wait_serving(second)
    assert sorted(drain(group.port(second))) == sorted(confirmed)

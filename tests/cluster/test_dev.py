"""`herald cluster dev` and `herald cluster status` as real processes (CLUSTER.md §9, §8.2
scenario 3 at process level).

One `herald cluster dev --nodes 3` for the module (starting etcd, a name server and three
nodes costs seconds, so the tests share it and run in file order): pika, paho-mqtt and
stomp.py each make a publish + consume round trip on every node from the addresses in
cluster.json; `herald cluster status --dir D --json` and a node's `/api/cluster` list the
three nodes, with their offsets; a node killed
with kill -9 leaves the name server's `/v1/cluster` within expiry + scan (2 s + 0.5 s here,
bounded by a hang guard, never timed); SIGTERM stops everything with exit code 0.
"""

from __future__ import annotations

import json
import queue
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import paho.mqtt.client as mqtt
import pika
import pytest
import stomp
from click.testing import CliRunner

from herald.cluster.dev import node_setting, parse_setting
from herald.core.cli import main
from tests.cluster.harness import (
    HERALD,
    DevCluster,
    cluster_view,
    find_etcd,
    herald_env,
    node_names,
    pid_alive,
    wait_until,
)

NODES = ("n1", "n2", "n3")
TEST_TIMERS = (
    "--lease-ttl-s", "2",
    "--nameserver-expiry-s", "2",
    "--nameserver-scan-s", "0.5",
)  # fmt: skip
CLIENT_WAIT_S = 10.0  # hang guard of one round trip


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    try:
        find_etcd()
    except Exception as exc:
        pytest.fail(str(exc), pytrace=False)
    root = tmp_path_factory.mktemp("dev") / "D"
    cluster = DevCluster(root, len(NODES), (*TEST_TIMERS, "--groups", str(len(NODES))))
    cluster.start()
    yield cluster
    cluster.stop()


def addr(dev: DevCluster, node: str, kind: str) -> tuple[str, int]:
    entry = next(n for n in dev.info["nodes"] if n["name"] == node)
    host, _, port = entry["addrs"][kind].rpartition(":")
    assert host == "127.0.0.1"  # loopback only
    return host, int(port)


def amqp_round_trip(host: str, port: int) -> bytes:
    params = pika.ConnectionParameters(host, port, blocked_connection_timeout=CLIENT_WAIT_S)
    connection = pika.BlockingConnection(params)
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        name = f"dev-{uuid.uuid4().hex[:8]}"
        channel.queue_declare(name, durable=True)
        channel.basic_publish("", name, b"amqp hello", mandatory=True)
        method, _props, body = next(channel.consume(name, inactivity_timeout=CLIENT_WAIT_S))
        assert method is not None, "no message within the hang guard"
        channel.basic_ack(method.delivery_tag)
        channel.cancel()
        channel.queue_delete(name)
        return body
    finally:
        connection.close()


def mqtt_round_trip(host: str, port: int) -> bytes:
    got: queue.Queue[bytes] = queue.Queue()
    subscribed: queue.Queue[int] = queue.Queue()
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=uuid.uuid4().hex[:12])
    client.on_message = lambda _c, _u, message: got.put(bytes(message.payload))
    client.on_subscribe = lambda _c, _u, mid, _codes, _props: subscribed.put(mid)
    client.connect(host, port)
    client.loop_start()
    try:
        topic = f"dev/{uuid.uuid4().hex[:8]}"
        client.subscribe(topic, qos=1)
        subscribed.get(timeout=CLIENT_WAIT_S)
        client.publish(topic, b"mqtt hello", qos=1).wait_for_publish(CLIENT_WAIT_S)
        return got.get(timeout=CLIENT_WAIT_S)
    finally:
        client.disconnect()
        client.loop_stop()


class _Messages(stomp.ConnectionListener):
    def __init__(self) -> None:
        self.bodies: queue.Queue[Any] = queue.Queue()

    def on_message(self, frame: Any) -> None:
        self.bodies.put(frame.body)


def stomp_round_trip(host: str, port: int) -> Any:
    conn = stomp.Connection12([(host, port)], vhost="/")
    listener = _Messages()
    conn.set_listener("messages", listener)
    conn.connect("guest", "guest", wait=True)
    try:
        destination = f"/queue/dev-{uuid.uuid4().hex[:8]}"
        conn.subscribe(destination, "1", ack="auto")
        conn.send(destination, "stomp hello", headers={"receipt": "sent"})
        return listener.bodies.get(timeout=CLIENT_WAIT_S)
    finally:
        conn.disconnect()


@pytest.mark.parametrize("node", NODES)
def test_every_protocol_on_every_node(dev: DevCluster, node: str) -> None:
    assert amqp_round_trip(*addr(dev, node, "amqp")) == b"amqp hello"
    assert mqtt_round_trip(*addr(dev, node, "mqtt")) == b"mqtt hello"
    assert stomp_round_trip(*addr(dev, node, "stomp")) in ("stomp hello", b"stomp hello")


def test_cluster_json_and_status(dev: DevCluster) -> None:
    info = dev.info
    assert [n["name"] for n in info["nodes"]] == list(NODES)
    assert [n["group"] for n in info["nodes"]] == ["g1", "g2", "g3"]
    assert all(n["role"] == "master" for n in info["nodes"])
    assert all(pid_alive(pid) for pid in dev.pids())
    assert info["etcd"].startswith("http://127.0.0.1:")
    done = subprocess.run(
        [*HERALD, "cluster", "status", "--dir", str(dev.root), "--json"],
        capture_output=True,
        text=True,
        env=herald_env(),
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    view = json.loads(done.stdout)
    assert node_names(view) == set(NODES)
    assert view["nameserver"] == dev.nameserver
    # Each node's commit-log offset as of its last registration (a real node sends one).
    offsets = [n["offset"] for g in view["groups"] for n in g["nodes"]]
    assert all(isinstance(o, int) and o >= 0 for o in offsets), offsets
    table = subprocess.run(
        [*HERALD, "cluster", "status", "--nameserver", dev.nameserver],
        capture_output=True,
        text=True,
        env=herald_env(),
        timeout=30,
    )
    assert table.returncode == 0, table.stderr
    assert all(node in table.stdout for node in NODES)
    head = table.stdout.splitlines()[1]
    assert head.split()[:7] == ["GROUP", "NODE", "ROLE", "EPOCH", "LAST", "SEEN", "OFFSET"]


def test_management_api_cluster(dev: DevCluster) -> None:
    host, port = addr(dev, "n2", "management")
    response = httpx.get(
        f"http://{host}:{port}/api/cluster", auth=("guest", "guest"), timeout=CLIENT_WAIT_S
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["enabled"], body["node"], body["group"], body["role"]) == (
        True,
        "n2",
        "g2",
        "master",
    )
    assert body["addrs"]["amqp"] == f"127.0.0.1:{addr(dev, 'n2', 'amqp')[1]}"
    assert body["nameserver"] == dev.nameserver
    assert node_names(body["view"]) == set(NODES)
    # Its own offset is read now; the view's is as of its last registration.
    assert isinstance(body["offset"], int) and body["offset"] >= 0
    (own,) = [n for g in body["view"]["groups"] for n in g["nodes"] if n["node"] == "n2"]
    assert isinstance(own["offset"], int)


def test_killed_node_leaves_the_name_server(dev: DevCluster) -> None:
    """Scenario 3: kill -9 a node; the name server drops it after expiry + scan."""
    victim = dev.node("n3")
    victim.kill()
    assert not victim.running
    wait_until(
        lambda: (names := node_names(cluster_view(dev.nameserver))) and "n3" not in names,
        "n3 dropped from /v1/cluster",
    )
    assert node_names(cluster_view(dev.nameserver)) == {"n1", "n2"}


def test_sigterm_stops_everything(dev: DevCluster) -> None:
    pids = dev.pids()
    assert dev.stop() == 0
    wait_until(lambda: not any(pid_alive(pid) for pid in pids), "every process gone", 5.0)


def test_more_groups_than_nodes_is_refused(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        ["cluster", "dev", "--nodes", "2", "--groups", "3", "--dir", str(tmp_path / "D")],
        prog_name="herald",
    )
    assert result.exit_code == 2
    assert "--groups 3 is more than --nodes 2" in result.output
    assert not (tmp_path / "D").exists()  # refused before anything started


def test_set_writes_every_nodes_config_and_refuses_a_bad_one(tmp_path: Path) -> None:
    assert parse_setting("commitlog.segment_size=8388608") == (
        "commitlog",
        "segment_size",
        8388608,
    )
    assert parse_setting('amqp.host="127.0.0.2"') == ("amqp", "host", "127.0.0.2")
    assert parse_setting("broker.log_level=info") == ("broker", "log_level", "info")
    result = CliRunner().invoke(
        main,
        ["cluster", "dev", "--nodes", "1", "--set", "nokey=1", "--dir", str(tmp_path / "D")],
        prog_name="herald",
    )
    assert result.exit_code == 2
    assert "expected SECTION.KEY=VALUE" in result.output
    assert not (tmp_path / "D").exists()  # refused before anything started


def test_set_for_one_node_and_refuses_an_unknown_node(tmp_path: Path) -> None:
    """`--set NODE:SECTION.KEY=VALUE` is node NODE's alone (the partition tests put a proxy on
    one node's links with it: test_ha_partitions.py runs it on real processes)."""
    assert node_setting('n2:cluster.advertise="127.0.0.1:7000"', 3) == (
        "n2",
        "cluster",
        "advertise",
        "127.0.0.1:7000",
    )
    assert node_setting("commitlog.segment_size=1", 3) == ("", "commitlog", "segment_size", 1)
    unknown = ["--set", "n3:broker.log_level=info", "--dir", str(tmp_path / "D")]
    result = CliRunner().invoke(
        main, ["cluster", "dev", "--nodes", "2", *unknown], prog_name="herald"
    )
    assert result.exit_code == 2
    assert "no node 'n3' (the nodes are n1..n2)" in result.output
    assert not (tmp_path / "D").exists()  # refused before anything started

"""Reading a group's log on a slave through the management API (RocketMQ's slaveReadEnable),
on real processes: `herald cluster dev --nodes 3 --replication sync` (ha_cluster.py), pika
publishing with confirms to the master.

- On a slave's management port (plugins/management/replica_api.py): search by key and read
  by position answer the master's JSON, byte for byte; browse lists a durable queue's
  stored, un-acked messages (an ack on the master removes one); bad input is 400, an unknown
  queue 404, no or wrong credentials 401, a management-only user 403 where the master says
  403 too; users created on the master after start log in on the slave (replicated); every
  write, and every read of kernel state, is 503 naming the master.
- The master killed, the promoted slave's management port serves the normal API (its
  read-only listener closed before its broker bound the port), and the other slave's
  read-only API names the new master.

Each test talks to a node through one kept-alive `httpx.Client`: `herald cluster dev` gives
nodes ports from the ephemeral range, and every closed client connection holds one in
TIME_WAIT for 60 s (see `GroupWatch` in ha_cluster.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pika
import pytest

from herald.storage import record as rec
from herald.storage.mapped_file import parse_name
from tests.cluster.ha_cluster import GROUP, HACluster
from tests.cluster.harness import EtcdProcess, wait_until
from tests.cluster.test_ha import QUEUE, publish_confirmed
from tests.cluster.workload import amqp_parameters

AUTH = ("guest", "guest")
BROWSE = f"/api/queues/%2F/{QUEUE}/messages"


@pytest.fixture
def group(tmp_path: Path, etcd: EtcdProcess) -> Iterator[HACluster]:
    with HACluster(tmp_path, etcd.endpoint, nodes=3, replication="sync") as cluster:
        yield cluster


def api(group: HACluster, node: str, auth: tuple[str, str] | None = AUTH) -> httpx.Client:
    port = group.port(node, "management")
    return httpx.Client(base_url=f"http://127.0.0.1:{port}", auth=auth, timeout=10)


def answer(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json() if response.content else None


def probe(http: httpx.Client, path: str) -> Any:
    """`path`'s JSON if it answers 200, else None (not listening yet, or another status)."""
    try:
        response = http.get(path)
    except httpx.HTTPError:
        return None
    return response.json() if response.status_code == 200 else None


def data_dir(group: HACluster, node: str) -> Path:
    return Path(next(n for n in group.dev.info["nodes"] if n["name"] == node)["data_dir"])


def positions(root: Path) -> dict[str, int]:
    """message id -> commit-log position, read from a node's segment files (read-only, as the
    Spark reader reads a live data dir); a record still being written ends the scan."""
    found: dict[str, int] = {}
    for path in sorted((root / "store" / "commitlog").iterdir()):
        start = parse_name(path.name)
        if start is None:
            continue
        data = path.read_bytes()
        at = 0
        while at + rec.PREFIX.size <= len(data):
            size, _magic = rec.PREFIX.unpack_from(data, at)
            if size < rec.PREFIX.size or at + size > len(data):
                break
            try:
                record = rec.decode(data[at : at + size], start + at)
            except rec.RecordError:
                break
            if isinstance(record, rec.EndRecord):
                break
            if isinstance(record, rec.MessageRecord) and record.message_id:
                found[record.message_id] = start + at
            at += rec.aligned(size)
    return found


def take_one(port: int) -> str:
    """Get one message of the queue and ack it; its body."""
    connection = pika.BlockingConnection(amqp_parameters(port, heartbeat=10))
    try:
        channel = connection.channel()
        method, _props, body = channel.basic_get(QUEUE)
        assert method is not None
        channel.basic_ack(method.delivery_tag)
        return body.decode()
    finally:
        connection.close()


def test_a_slave_answers_reads_from_its_replicated_store(group: HACluster) -> None:
    state = group.wait_full_sync_set()
    master = state["master"]
    slave = min(node for node in state["sync_set"] if node != master)
    assert publish_confirmed(group.port(master), 3) == ["m0", "m1", "m2"]
    assert take_one(group.port(master)) == "m0"
    with api(group, master) as on_master, api(group, slave) as on_slave:
        # Users made on the master after start: replicated with everything else.
        admin = {"password": "ops-pw", "tags": "administrator"}
        answer(on_master.put("/api/users/ops", json=admin), 201)
        limited = {"password": "v", "tags": "management"}
        answer(on_master.put("/api/users/viewer", json=limited), 201)
        grant = {"configure": "", "write": "", "read": ""}
        answer(on_master.put("/api/permissions/%2F/viewer", json=grant), 201)

        # Browse: the stored, un-acked messages, once the ack has reached the slave.
        def browsed() -> Any:
            found = probe(on_slave, BROWSE)
            done = found is not None and [m["payload"] for m in found["items"]] == ["m1", "m2"]
            return found if done else None

        page = wait_until(browsed, f"{slave}'s browse without the acked m0")
        assert (page["vhost"], page["queue"], page["offset"], page["more"]) == (
            "/",
            QUEUE,
            0,
            False,
        )
        assert [m["properties"]["message_id"] for m in page["items"]] == ["m1", "m2"]
        assert [(m["queue_offset"], m["redelivered"]) for m in page["items"]] == [
            (1, False), (2, False),
        ]  # fmt: skip
        first = answer(on_slave.get(BROWSE, params={"limit": 1}))
        assert [m["payload"] for m in first["items"]] == ["m1"] and first["more"] is True
        second = answer(on_slave.get(BROWSE, params={"limit": 1, "offset": 1}))
        assert [m["payload"] for m in second["items"]] == ["m2"] and second["more"] is False

        # Search and read by position: the master's answers, from the same code path.
        search = answer(on_slave.get("/api/messages", params={"key": "m1"}))
        assert [m["payload"] for m in search["items"]] == ["m1"]
        assert search == answer(on_master.get("/api/messages", params={"key": "m1"}))
        position = positions(data_dir(group, slave))["m2"]
        assert positions(data_dir(group, master))["m2"] == position  # the same log
        at = answer(on_slave.get(f"/api/messages/{position}"))
        assert (at["payload"], at["position"]) == ("m2", position)
        assert at["queues"] == [{"vhost": "/", "name": QUEUE, "queue_offset": 2}]
        assert at == answer(on_master.get(f"/api/messages/{position}"))

        # The node says what it is.
        overview = answer(on_slave.get("/api/overview"))
        assert (overview["node"], overview["group"], overview["role"]) == (slave, GROUP, "slave")
        assert overview["master"] == master and overview["read_only"] is True
        assert overview["applied_offset"] >= position
        assert "GET /api/messages" in overview["read_only_endpoints"]
        cluster = answer(on_slave.get("/api/cluster"))
        assert (cluster["node"], cluster["role"]) == (slave, "slave")
        assert cluster["replication"]["master"] == state["master_addr"]
        assert cluster["group_state"]["master"] == master

        # Bad input 400, unknown things 404, as on the master.
        for path in ("/api/messages", "/api/messages/x1", "/api/messages?key=a&from=5&to=1"):
            answer(on_slave.get(path), 400)
        answer(on_slave.get(BROWSE, params={"limit": 0}), 400)
        answer(on_slave.get(BROWSE, params={"encoding": "hex"}), 400)
        answer(on_slave.get(f"/api/messages/{position + 8}"), 404)
        answer(on_slave.get("/api/queues/%2F/nowhere/messages"), 404)
        answer(on_slave.get(f"/api/queues/elsewhere/{QUEUE}/messages"), 404)

        # Writes and kernel state: the master's, said so.
        for method, path in (
            ("POST", "/api/exchanges/%2F/amq.default/publish"),
            ("DELETE", f"/api/queues/%2F/{QUEUE}"),
            ("PUT", "/api/users/x"),
            ("GET", "/api/queues"),
            ("POST", "/api/messages"),
        ):
            refused = answer(on_slave.request(method, path, json={}), 503)
            assert refused["error"] == "service_unavailable" and refused["master"] == master
            assert refused["reason"] == (
                f"{slave} is a slave of group {GROUP} (master {master}): its management API "
                f"is read-only; {method} {path} is served by the master"
            )

    # Authentication and tags as on the master, with the master's (replicated) users.
    with api(group, slave, auth=None) as anonymous:
        refused = answer(anonymous.get("/api/messages", params={"key": "m1"}), 401)
        assert anonymous.get("/api/overview").headers["www-authenticate"].startswith("Basic")
        assert refused["error"] == "not_authorised"
    with api(group, slave, auth=("guest", "wrong")) as wrong:
        answer(wrong.get("/api/overview"), 401)
    with api(group, slave, auth=("ops", "ops-pw")) as ops:
        assert wait_until(lambda: probe(ops, "/api/messages?key=m1"), "ops on the slave") == search
    with (
        api(group, slave, auth=("viewer", "v")) as viewer,
        api(group, master, ("viewer", "v")) as v,
    ):
        assert wait_until(lambda: probe(viewer, "/api/overview"), "viewer")["role"] == "slave"
        answer(viewer.get("/api/messages", params={"key": "m1"}), 403)  # administrators only
        no_read = answer(v.get(BROWSE), 403)  # the master's refusal: no read permission
        assert "refused for user 'viewer'" in no_read["reason"]
        wait_until(lambda: viewer.get(BROWSE).json() == no_read, "the slave's same refusal")


def test_a_promoted_slave_serves_the_full_api(group: HACluster) -> None:
    state = group.wait_full_sync_set()
    old = state["master"]
    slaves = sorted(node for node in state["sync_set"] if node != old)
    assert publish_confirmed(group.port(old), 2) == ["m0", "m1"]
    for slave in slaves:
        with api(group, slave) as http:
            assert wait_until(lambda: probe(http, "/api/overview"), slave)["read_only"] is True

    group.processes[old].kill()
    new = group.wait_new_master(old)["master"]
    (other,) = [node for node in slaves if node != new]
    with api(group, new) as on_new:
        overview = wait_until(
            lambda: (
                (found := probe(on_new, "/api/overview")) and "object_totals" in found and found
            ),
            f"{new}'s broker serving the full API on its management port",
        )
        assert "read_only" not in overview
        assert {"amqp", "management"} <= {lst["protocol"] for lst in overview["listeners"]}
        page = answer(on_new.get(BROWSE))
        assert page["messages_ready"] == 2
        assert [m["payload"] for m in page["items"]] == ["m0", "m1"]
        body = {"routing_key": QUEUE, "payload": "m2", "payload_encoding": "string"}
        assert answer(on_new.post("/api/exchanges/%2F/amq.default/publish", json=body))["routed"]
    with api(group, other) as on_other:
        following = wait_until(
            lambda: (
                (found := probe(on_other, "/api/overview")) and found["master"] == new and found
            ),
            f"{other}'s read-only API naming {new}",
        )
        assert following["role"] == "slave"

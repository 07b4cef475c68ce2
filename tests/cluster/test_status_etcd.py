"""`herald cluster status` and `herald cluster promote` against group and node keys written
by hand into the session's real etcd, with nodes registered by hand with a real `herald
nameserver` process: every case of the merge, quickly, without running a group
(test_ha_status.py does that on real processes).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

import httpx
import pytest
import trio

from herald.cluster import keys
from herald.cluster.etcd import EtcdClient
from tests.cluster.harness import EtcdProcess, etcd_get
from tests.cluster.nodes import cluster_name
from tests.cluster.test_cli import LISTENING, NameServerProcess, herald

MASTER_REPLICATION = {
    "epoch": 4,
    "sync_set": ["n1", "n2"],
    "confirmed": 9000,
    "log_end": 9500,
    "slaves": {
        "n2": {"connected": True, "in_sync": True, "acked": 9000, "lag_bytes": 500, "lag_ms": 12.5},
        "n3": {"connected": False, "in_sync": False, "acked": 1, "lag_bytes": 9499, "lag_ms": None},
    },
}  # fmt: skip
SLAVE_REPLICATION = {
    "master": "127.0.0.1:25680",
    "applied": 9000,
    "flushed": 9000,
    "confirm_offset": 9000,
    "truncations": 0,
    "problem": "",
}


@pytest.fixture
def nameserver() -> Iterator[str]:
    server = NameServerProcess("--port", "0", "--scan-s", "0.5", "--expiry-s", "30")
    try:
        yield server.wait_for(LISTENING).group(1)
    finally:
        server.process.kill()
        server.process.wait()


def put(endpoint: str, items: Mapping[str, Any]) -> None:
    """Put each key (a dict value as JSON, bytes as they are) into etcd."""

    async def run() -> None:
        async with EtcdClient(endpoint) as client:
            for key, value in items.items():
                data = value if isinstance(value, bytes) else json.dumps(value).encode()
                await client.put(key, data)

    trio.run(run)


def register(nameserver: str, cluster: str, group: str, node: str, role: str) -> None:
    body = {
        "cluster": cluster, "group": group, "node": node, "role": role, "epoch": 4,
        "data_version": 1, "addrs": {"amqp": f"127.0.0.1:{5670 + int(node[1:])}"},
        "queues": [], "offset": 9000,
    }  # fmt: skip
    response = httpx.post(f"http://{nameserver}/v1/register", json=body, timeout=5)
    assert response.is_success, response.text


def rows(lines: list[str]) -> list[dict[str, str]]:
    head, *body = (re.split(r"  +", line) for line in lines)
    return [dict(zip(head, row, strict=True)) for row in body]


def state(epoch: int, master: str, sync_set: list[str]) -> dict[str, Any]:
    return {"epoch": epoch, "master": master, "sync_set": sync_set, "master_addr": "127.0.0.1:1"}


def node_key(group: str, node: str, role: str, replication: dict[str, Any]) -> dict[str, Any]:
    return {"node": node, "group": group, "role": role, "epoch": 4, "offset": 9000,
            "addrs": {"cluster": "127.0.0.1:1"}, "replication": replication}  # fmt: skip


@pytest.fixture
def cluster(etcd: EtcdProcess, nameserver: str) -> tuple[str, str, str]:
    """Group g1: n1 master (claim alive), n2 slave in sync, n3 a slave away; group g2: a
    state that is not JSON. n1 and n2 registered with the name server, n3 not."""
    name = cluster_name()
    put(
        etcd.endpoint,
        {
            keys.group_state_key(name, "g1"): state(4, "n1", ["n1", "n2"]),
            keys.group_master_key(name, "g1"): {"node": "n1", "epoch": 4},
            keys.node_key(name, "n1"): node_key("g1", "n1", "master", MASTER_REPLICATION),
            keys.node_key(name, "n2"): node_key("g1", "n2", "slave", SLAVE_REPLICATION),
            keys.group_state_key(name, "g2"): b"{not json",
        },
    )
    register(nameserver, name, "g1", "n1", "master")
    register(nameserver, name, "g1", "n2", "slave")
    register(nameserver, name, "g2", "n4", "master")
    return name, etcd.endpoint, nameserver


def test_status_merges_etcd_into_the_name_servers_view(cluster: tuple[str, str, str]) -> None:
    name, endpoint, nameserver = cluster
    args = ("cluster", "status", "--nameserver", nameserver, "--etcd", endpoint)
    result = herald(*args, "--json")
    assert result.exit_code == 0 and result.stderr == "", result.output
    view = json.loads(result.stdout)
    assert (view["etcd"], view["etcd_error"]) == ([endpoint], None)
    groups = {g["group"]: g for g in view["groups"]}
    assert groups["g1"]["ha"] == {
        "epoch": 4, "master": "n1", "sync_set": ["n1", "n2"], "master_addr": "127.0.0.1:1",
        "master_alive": True, "claim": {"node": "n1", "epoch": 4},
        "confirmed": 9000, "log_end": 9500, "problem": None,
    }  # fmt: skip
    nodes = {n["node"]: n for n in groups["g1"]["nodes"]}
    assert {k: nodes["n1"][k] for k in ("in_sync", "lag_bytes", "lag_ms")} == {
        "in_sync": True, "lag_bytes": None, "lag_ms": None,
    }  # fmt: skip
    assert nodes["n1"]["replication"] == MASTER_REPLICATION
    assert {k: nodes["n2"][k] for k in ("in_sync", "lag_bytes", "lag_ms", "replication")} == {
        "in_sync": True, "lag_bytes": 500, "lag_ms": 12.5, "replication": SLAVE_REPLICATION,
    }  # fmt: skip
    assert nodes["n2"]["offset"] == 9000 and nodes["n2"]["role"] == "slave"  # as before
    (n4,) = groups["g2"]["nodes"]
    g2 = groups["g2"]["ha"]
    assert g2["epoch"] is None and g2["problem"].startswith(
        f"etcd key {keys.group_state_key(name, 'g2')}: "
    )
    assert (n4["in_sync"], n4["lag_bytes"], n4["replication"]) == (None, None, None)

    table = herald(*args)
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    blank = lines.index("")
    cells = {row["NODE"]: row for row in rows(lines[1:blank])}
    shown = [(cells[n]["IN SYNC"], cells[n]["LAG BYTES"], cells[n]["LAG MS"]) for n in cells]
    assert shown == [("yes", "-", "-"), ("yes", "500", "12.5"), ("-", "-", "-")]
    assert lines[blank + 1] == f"etcd {endpoint}, cluster {name}: 2 group(s)"
    assert lines[blank + 2].split() == [
        "GROUP", "EPOCH", "MASTER", "ALIVE", "SYNC", "SET", "CONFIRMED", "LOG", "END",
    ]  # fmt: skip
    assert lines[blank + 3].split() == ["g1", "4", "n1", "yes", "n1,n2", "9000", "9500"]
    assert lines[blank + 4].startswith("g2") and "(etcd key" in lines[blank + 4]


def test_status_of_a_group_whose_master_claim_is_gone(cluster: tuple[str, str, str]) -> None:
    name, endpoint, nameserver = cluster

    async def drop_claim() -> None:
        async with EtcdClient(endpoint) as client:
            await client.delete(keys.group_master_key(name, "g1"))

    trio.run(drop_claim)
    args = ("cluster", "status", "--nameserver", nameserver, "--etcd", endpoint, "--name", name)
    view = json.loads(herald(*args, "--json").stdout)
    ha = next(g["ha"] for g in view["groups"] if g["group"] == "g1")
    assert (ha["master"], ha["master_alive"], ha["claim"]) == ("n1", False, None)
    table = herald(*args).stdout.splitlines()
    assert table[table.index("") + 3].split()[:4] == ["g1", "4", "n1", "no"]


def test_promote_without_a_live_master_needs_no_force(cluster: tuple[str, str, str]) -> None:
    name, endpoint, _nameserver = cluster

    async def drop_claim() -> None:
        async with EtcdClient(endpoint) as client:
            await client.delete(keys.group_master_key(name, "g1"))

    trio.run(drop_claim)
    # No --group: n2's node key names g1.
    result = herald("cluster", "promote", "n2", "--etcd", endpoint, "--name", name)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == (
        f"promoted n2: group g1 of cluster {name} is at epoch 5, master n2, sync set n2 "
        "(was epoch 4, master n1, not alive)"
    )
    kv = etcd_get(endpoint, keys.group_state_key(name, "g1"))
    assert kv is not None
    # n2's node key has no cluster address here (its `addrs` name 127.0.0.1:1).
    assert json.loads(kv.value) == {
        "epoch": 5, "master": "n2", "sync_set": ["n2"], "master_addr": "127.0.0.1:1",
    }  # fmt: skip


def test_promote_needs_a_group_it_can_tell_and_an_etcd(cluster: tuple[str, str, str]) -> None:
    name, endpoint, _nameserver = cluster
    # n5 has no node key and no state names it: two groups, so which one?
    ambiguous = herald("cluster", "promote", "n5", "--etcd", endpoint, "--name", name)
    assert ambiguous.exit_code == 2
    assert ambiguous.stderr == (
        "herald: error: cannot tell which group n5 is in (g1, g2): give --group\n"
    )
    # An unreadable state: the controller's message, refused.
    broken = herald(
        "cluster", "promote", "n4", "--etcd", endpoint, "--name", name, "--group", "g2"
    )  # fmt: skip
    assert broken.exit_code == 1
    assert "holds no valid value" in broken.stderr
    usage = herald("cluster", "promote", "n2", "--etcd", endpoint)
    assert usage.exit_code == 2
    assert "give --dir DIR, or --etcd URL and --name CLUSTER" in usage.stderr

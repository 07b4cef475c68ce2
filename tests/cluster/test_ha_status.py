"""What an operator sees of a replicated group, and `herald cluster promote`, on real
processes: `herald cluster dev --nodes 3 --replication sync` (tests/cluster/ha_cluster.py).

- `herald cluster status --dir D` (table and `--json`) adds etcd's side to the name server's:
  the group's epoch, master, sync set, confirm offset and log end, and each slave's lag as
  the master publishes it in its node key; `--nameserver` with `--etcd` gives the same; an
  etcd that does not answer leaves the old output and a note. The master's `/api/cluster`,
  its console Cluster page (headless Chromium) and its `/metrics` show the same figures,
  now. A killed slave leaves the sync set; its lag grows with what the master writes after.
- `herald cluster promote`: refused with exit code 1 while the master lives (no `--force`),
  for an unknown node and for a node outside the sync set; with `--force` a slave becomes
  master at a higher epoch, `herald cluster status` names it, and it holds every message
  confirmed before.

The waits here poll every `POLL_S`, not every 50 ms: each poll opens connections, each closed
connection holds an ephemeral port in TIME_WAIT for 60 s, and `herald cluster dev` gives its
nodes ports from the ephemeral range, which a slave binds only when it is promoted (see
`GroupWatch` in ha_cluster.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
import trio
from click.testing import CliRunner, Result
from prometheus_client.parser import text_string_to_metric_families

from herald.cluster import keys
from herald.cluster.etcd import EtcdClient
from herald.core.cli import main
from tests.cluster import harness
from tests.cluster.ha_cluster import GROUP, WAIT_S, HACluster, status_master
from tests.cluster.harness import EtcdProcess, free_port
from tests.cluster.test_ha import drain, publish_confirmed

T = TypeVar("T")
AUTH = ("guest", "guest")
POLL_S = 0.3
READ_TABLE = """(table) => [
  [...table.tHead.rows[0].cells].map((c) => c.textContent),
  ...[...table.tBodies[0].rows].map((r) => [...r.cells].map((c) => c.textContent)),
]"""


@pytest.fixture
def group(tmp_path: Path, etcd: EtcdProcess) -> Iterator[HACluster]:
    with HACluster(tmp_path, etcd.endpoint, nodes=3, replication="sync") as cluster:
        yield cluster


def wait_until(probe: Callable[[], T | None], what: str, timeout: float = WAIT_S) -> T:
    """`harness.wait_until`, polling every `POLL_S`."""
    return harness.wait_until(probe, what, timeout, POLL_S)


def group_keys(group: HACluster) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The group's state and claim, read together (one range: one revision)."""

    async def read() -> dict[str, dict[str, Any]]:
        async with EtcdClient(group.etcd) as client:
            found = await client.range(keys.groups_prefix(group.cluster, GROUP), prefix=True)
        return {kv.key.decode().rpartition("/")[2]: dict(json.loads(kv.value)) for kv in found.kvs}

    both = trio.run(read)
    return both.get("state"), both.get("master")


def wait_state(group: HACluster, condition: Callable[[dict[str, Any]], bool], what: str) -> Any:
    """The group's state once its master holds the claim and `condition` holds."""

    def probe() -> dict[str, Any] | None:
        state, claim = group_keys(group)
        if state is None or claim is None or claim["node"] != state["master"]:
            return None
        return state if condition(state) else None

    return wait_until(probe, what)


def full_sync_set(group: HACluster) -> Any:
    size = len(group.processes)
    return wait_state(group, lambda s: len(s["sync_set"]) == size, f"a sync set of {size}")


def herald(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), prog_name="herald", catch_exceptions=False)


def status(group: HACluster, *args: str) -> dict[str, Any]:
    """`herald cluster status --dir D --json`, its one group."""
    result = herald("cluster", "status", "--dir", str(group.dev.root), "--json", *args)
    assert result.exit_code == 0, result.output
    view: dict[str, Any] = json.loads(result.stdout)
    return view


def nodes_of(view: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n["node"]: n for g in view["groups"] for n in g["nodes"]}


def rows(lines: list[str]) -> list[dict[str, str]]:
    """A table printed by `herald cluster status`: heading line, then rows."""
    head, *body = lines
    columns = re.split(r"  +", head)
    return [dict(zip(columns, re.split(r"  +", row), strict=True)) for row in body]


def management(group: HACluster, node: str) -> str:
    return f"http://127.0.0.1:{group.port(node, 'management')}"


def metrics(group: HACluster, node: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = httpx.get(f"{management(group, node)}/metrics", auth=AUTH, timeout=10)
    assert response.status_code == 200, response.text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def slave(name: str) -> tuple[tuple[str, str], ...]:
    return (("slave", name),)


def console(base: str) -> dict[str, Any]:
    """The master's Cluster page: the group line and the slaves table."""
    from playwright.sync_api import expect, sync_playwright

    from tests.management.test_console import WAIT_MS, chromium_path, log_in

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 720})
            page.set_default_timeout(WAIT_MS)
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(base + "/#/cluster")
            log_in(page, *AUTH)
            slaves = page.locator("#cluster-slaves table")
            expect(slaves.locator("tbody tr")).to_have_count(2)
            found = {
                "group_state": page.locator("#cluster-group-state").inner_text(),
                "slaves": slaves.evaluate(READ_TABLE),
            }
            assert errors == [], errors
            return found
        finally:
            browser.close()


def test_status_api_console_and_metrics_of_a_sync_group(group: HACluster) -> None:
    state = full_sync_set(group)
    master, epoch = state["master"], state["epoch"]
    b, c = sorted(node for node in group.processes if node != master)
    publish_confirmed(group.port(master), 50)
    # The master's /api/cluster: its replication now (every publish confirmed by both slaves).
    api = httpx.get(f"{management(group, master)}/api/cluster", auth=AUTH, timeout=10).json()
    replication = api["replication"]
    log_end = replication["log_end"]

    def settled() -> dict[str, Any] | None:
        """Every node listed, and the master's node key put since the last publish (it is
        put again at each lease renewal), with each slave caught up."""
        view = status(group)
        nodes, ha = nodes_of(view), view["groups"][0]["ha"]
        done = set(nodes) == {master, b, c} and ha["log_end"] == log_end
        return view if done and all(nodes[s]["lag_bytes"] == 0 for s in (b, c)) else None

    view = wait_until(settled, "status shows both slaves caught up")
    assert view["etcd"] == [group.etcd] and view["etcd_error"] is None
    (listed,) = view["groups"]
    ha, nodes = listed["ha"], nodes_of(view)
    assert ha == {
        "epoch": epoch,
        "master": master,
        "sync_set": state["sync_set"],  # as etcd keeps it: the master first
        "master_addr": state["master_addr"],
        "master_alive": True,
        "claim": {"node": master, "epoch": epoch},
        "confirmed": log_end,
        "log_end": log_end,
        "problem": None,
    }
    assert all(nodes[n]["in_sync"] for n in (master, b, c))
    assert (nodes[master]["lag_bytes"], nodes[master]["lag_ms"]) == (None, None)
    assert [(nodes[s]["lag_bytes"], nodes[s]["lag_ms"]) for s in (b, c)] == [(0, 0.0)] * 2
    assert set(nodes[master]["replication"]["slaves"]) == {b, c}
    assert nodes[b]["replication"]["master"] == state["master_addr"]  # a slave's own key
    assert all("offset" in n and "last_seen_ms_ago" in n for n in nodes.values())  # as before

    # The same as a table: the replication columns, then the group as etcd has it.
    table = herald("cluster", "status", "--dir", str(group.dev.root))
    assert table.exit_code == 0 and table.stderr == "", table.output
    lines = table.stdout.splitlines()
    blank = lines.index("")
    assert lines[0].endswith(": 3 node(s)")
    shown = {r["NODE"]: r for r in rows(lines[1:blank])}
    assert [shown[n]["IN SYNC"] for n in (master, b, c)] == ["yes"] * 3
    assert [(shown[n]["LAG BYTES"], shown[n]["LAG MS"]) for n in (master, b, c)] == [
        ("-", "-"), ("0", "0.0"), ("0", "0.0"),
    ]  # fmt: skip
    assert lines[blank + 1] == f"etcd {group.etcd}, cluster {group.cluster}: 1 group(s)"
    assert rows(lines[blank + 2 :]) == [
        {
            "GROUP": GROUP, "EPOCH": str(epoch), "MASTER": master, "ALIVE": "yes",
            "SYNC SET": ",".join(state["sync_set"]),
            "CONFIRMED": str(log_end), "LOG END": str(log_end),
        }
    ]  # fmt: skip

    # --nameserver and --etcd: the cluster's name comes from the name server.
    other = herald(
        "cluster", "status", "--nameserver", group.dev.nameserver, "--etcd", group.etcd, "--json"
    )  # fmt: skip
    assert other.exit_code == 0, other.output
    assert json.loads(other.stdout)["groups"][0]["ha"] == ha

    # etcd not answering: the name server's part as before, and a note.
    dead = f"http://127.0.0.1:{free_port()}"
    args = ("cluster", "status", "--dir", str(group.dev.root), "--etcd", dead, "--timeout", "1")
    old = herald(*args)
    assert old.exit_code == 0, old.output
    assert re.split(r"  +", old.stdout.splitlines()[1]) == [
        "GROUP", "NODE", "ROLE", "EPOCH", "LAST SEEN", "OFFSET", "AMQP", "MQTT", "STOMP",
        "MANAGEMENT",
    ]  # fmt: skip
    assert len(old.stdout.splitlines()) == 5
    assert old.stderr.startswith(f"herald: note: etcd {dead}: ")
    assert old.stderr.endswith(": epochs, sync sets and lag not shown\n")
    old_json = json.loads(herald(*args, "--json").stdout)
    assert old_json["etcd_error"].startswith(f"etcd {dead}: ")
    assert old_json["groups"][0]["ha"] is None
    assert all(n["lag_bytes"] is None for n in nodes_of(old_json).values())

    # The master's /api/cluster (read above): the group's keys as it saw them, its replication.
    assert api["group_state"] == {k: ha[k] for k in ("epoch", "master", "sync_set", "master_addr")}
    assert api["master_claim"] == {"node": master, "epoch": epoch}
    assert (replication["epoch"], replication["sync_set"]) == (epoch, sorted(group.processes))
    assert replication["confirmed"] == replication["log_end"] == log_end
    assert replication["slaves"] == {
        s: {"connected": True, "in_sync": True, "acked": log_end, "lag_bytes": 0, "lag_ms": 0.0}
        for s in (b, c)
    }

    # Its console page: the group line and a row per slave.
    page = console(management(group, master))
    members = ", ".join(state["sync_set"])
    assert page["group_state"] == (
        f"Group {GROUP} in etcd: epoch {epoch}, master {master} (alive), sync set {members}."
    )
    head, *cells = page["slaves"]
    assert head == ["Slave", "Connected", "In sync set", "Acked", "Lag (bytes)", "Lag (ms)"]
    assert cells == [[s, "yes", "yes", str(log_end), "0", "0"] for s in (b, c)]

    # Its /metrics.
    found = metrics(group, master)
    assert found[("herald_cluster_fenced", ())] == 0
    assert found[("herald_ha_epoch", ())] == epoch
    assert found[("herald_ha_sync_set_size", ())] == 3
    assert found[("herald_ha_confirmed_offset", ())] == log_end
    assert found[("herald_ha_log_end_offset", ())] == log_end
    for s in (b, c):
        assert found[("herald_ha_slave_connected", slave(s))] == 1
        assert found[("herald_ha_slave_in_sync", slave(s))] == 1
        assert found[("herald_ha_lag_bytes", slave(s))] == 0
        assert found[("herald_ha_lag_seconds", slave(s))] == 0

    # A killed slave leaves the sync set; what the master writes after is its lag.
    group.processes[b].kill()
    wait_until(
        lambda: metrics(group, master)[("herald_ha_sync_set_size", ())] == 2,
        f"{b} out of the sync set",
    )
    publish_confirmed(group.port(master), 20, first=50)  # master + c: still 2 copies
    found = metrics(group, master)
    end = found[("herald_ha_log_end_offset", ())]
    assert end > log_end and found[("herald_ha_confirmed_offset", ())] == end
    assert found[("herald_ha_slave_connected", slave(b))] == 0
    assert found[("herald_ha_slave_in_sync", slave(b))] == 0
    assert found[("herald_ha_lag_bytes", slave(b))] == end - log_end
    assert ("herald_ha_lag_seconds", slave(b)) not in found  # unknown while it is away
    assert found[("herald_ha_lag_bytes", slave(c))] == 0
    assert found[("herald_ha_slave_in_sync", slave(c))] == 1
    after = wait_until(
        lambda: (v := status(group))["groups"][0]["ha"]["sync_set"] == [master, c] and v,
        "status shows the smaller sync set",
    )
    assert after["groups"][0]["ha"]["epoch"] == epoch


def test_promote_refusals_then_a_forced_handover(group: HACluster) -> None:
    state = full_sync_set(group)
    master = state["master"]
    b, c = sorted(node for node in group.processes if node != master)
    root = str(group.dev.root)

    live = herald("cluster", "promote", c, "--dir", root)
    assert live.exit_code == 1
    assert live.stderr == f"herald: error: {master} is master and alive; use --force\n"
    unknown = herald("cluster", "promote", "n9", "--dir", root, "--force")
    assert unknown.exit_code == 1
    assert unknown.stderr.startswith("herald: error: n9 is not in the sync set ")

    group.processes[b].kill()
    wait_state(group, lambda s: b not in s["sync_set"], f"{b} out of the sync set")
    outside = herald(
        "cluster", "promote", b, "--force",
        "--etcd", group.etcd, "--name", group.cluster, "--group", GROUP,
    )  # fmt: skip
    assert outside.exit_code == 1
    assert outside.stderr == (
        f"herald: error: {b} is not in the sync set {[master, c]} of group "
        f"'{GROUP}': it may miss confirmed messages\n"
    )
    before, _claim = group_keys(group)
    assert before is not None and before["master"] == master  # nothing changed

    confirmed = publish_confirmed(group.port(master), 100)
    done = herald("cluster", "promote", c, "--force", "--dir", root, "--json")
    assert done.exit_code == 0, done.output
    promoted = json.loads(done.stdout)
    assert promoted == {
        "cluster": group.cluster,
        "group": GROUP,
        "changed": True,
        "epoch": before["epoch"] + 1,
        "master": c,
        "sync_set": [c],
        "master_addr": promoted["master_addr"],
        "before": {
            "epoch": before["epoch"],
            "master": master,
            "sync_set": before["sync_set"],
            "master_alive": True,
        },
    }
    (entry,) = [n for n in group.dev.info["nodes"] if n["name"] == c]
    assert promoted["master_addr"] == entry["addrs"]["cluster"]

    # c claims the group (one more epoch, on its own lease); status names it.
    new = wait_state(group, lambda s: s["master"] == c, f"{c} holds the master claim")
    assert new["epoch"] > promoted["epoch"]

    def named() -> dict[str, Any] | None:
        view = status(group)
        ha = view["groups"][0]["ha"]
        return (
            view if ha["master"] == c and ha["master_alive"] and status_master(view) == c else None
        )

    view = wait_until(named, f"herald cluster status names {c}")
    assert view["groups"][0]["ha"]["epoch"] >= new["epoch"]
    again = herald("cluster", "promote", c, "--dir", root)
    assert again.exit_code == 0, again.output
    assert again.stdout.startswith(f"{c} is master of group {GROUP} of cluster {group.cluster} ")

    assert sorted(set(drain(group.port(c)))) == sorted(confirmed)

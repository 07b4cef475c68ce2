"""The console's Cluster page in headless Chromium (as test_console.py drives it).

A standalone broker's page says it is not a cluster node (and a `management`-only user, whom
`/api/cluster` would refuse, has no Cluster menu). Then two real cluster nodes (embedded
brokers with the cluster plugin, tests/cluster/nodes.py) in groups g1 and g2, on the
session's real etcd and a real name server, plus a name server that is down listed first:
n1's page lists both nodes with the groups, roles, epochs, offsets and addresses of its
`/api/cluster`, marks n1 as this node, and shows the name server that did not answer. Both
nodes store messages first (n2 more), so the offsets are not 0 and differ: the node table's
`Offset` is each node's as of its last registration, "This node"'s is n1's own, now.
Each node is the master of its one-node group, so its Replication section shows the group's
epoch, master and sync set from etcd, its confirm offset and log end, and no slave (a
group with slaves, and their lag, is tests/cluster/test_ha_status.py's, on real processes).
Everything listens on 127.0.0.1. A screenshot `console-cluster.png` is kept like the
overview's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from herald.core.broker import Broker
from tests.cluster.conftest import etcd  # noqa: F401  (a fixture)
from tests.cluster.harness import EtcdProcess, free_port
from tests.cluster.nodes import (
    NameServer,
    cluster_name,
    cluster_node,
    eventually,
    node_of,
    store_messages,
)
from tests.management.helpers import add_user, client, port
from tests.management.test_console import WAIT_MS, chromium_path, log_in, save_shot

MANAGEMENT = (
    'broker.plugins=["amqp", "management"]',
    'management.host="127.0.0.1"',
    "management.port=0",
)
# The node table as the page shows it: its headings, then each row's cells.
READ_TABLE = """(table) => [
  [...table.tHead.rows[0].cells].map((c) => c.textContent),
  ...[...table.tBodies[0].rows].map((r) => [...r.cells].map((c) => c.textContent)),
]"""


def _log_in(page: Any, base: str, user: str, password: str) -> None:
    page.goto(base + "/#/cluster")
    log_in(page, user, password)


def _drive_standalone(base: str, executable: str, node: str) -> None:
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True)
        try:
            page = browser.new_page()
            page.set_default_timeout(WAIT_MS)
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            _log_in(page, base, "guest", "guest")
            note = page.locator("#cluster-standalone")
            expect(note).to_have_text(f"This broker ({node}) is not a cluster node.")
            expect(page.locator("#view")).to_contain_text("docs/cluster.md")
            expect(page.locator("#nav a.active")).to_have_text("Cluster")
            expect(page.locator("#cluster-nodes")).to_have_count(0)

            # The page polls: still there (and still no error) after a few rounds.
            page.wait_for_timeout(4500)
            expect(note).to_be_visible()
            expect(page.locator("#flash")).to_be_hidden()

            page.click("#logout")
            _log_in(page, base, "mia", "mia")
            expect(page.locator("#whoami")).to_contain_text("mia (management)")
            expect(page.locator("#nav-cluster")).to_be_hidden()
            assert errors == [], errors
        finally:
            browser.close()


async def test_cluster_page_of_a_standalone_broker(broker: Broker) -> None:
    executable = chromium_path()
    add_user(broker, "mia", ["management"], ["/"])
    async with client(broker) as http:
        answer = (await http.get("/api/cluster")).json()
    node = broker.config.broker.node_name
    assert answer == {"enabled": False, "node": node}
    base = f"http://127.0.0.1:{port(broker)}"
    with trio.fail_after(60):
        await trio.to_thread.run_sync(_drive_standalone, base, executable, node)


def _drive_member(base: str, executable: str, shots: Path) -> dict[str, Any]:
    """n1's Cluster page; returns its two tables (headings first) and its error lines."""
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 720})
            page.set_default_timeout(WAIT_MS)
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            _log_in(page, base, "guest", "guest")
            nodes = page.locator("#cluster-nodes")
            expect(nodes).to_contain_text("n2")
            expect(nodes.locator("tr.self")).to_have_count(1)
            expect(nodes.locator("tr.self")).to_contain_text("n1 (this node)")
            expect(page.locator("#cluster-errors li")).to_have_count(1)
            expect(page.locator("#cluster-summary")).to_contain_text("2 node(s) in 2 group(s)")
            expect(page.locator("#cluster-offset-note")).to_contain_text(
                "as of its last registration"
            )
            expect(page.locator("#cluster-slaves")).to_have_text(
                "no slave has connected to this master"
            )
            shot = shots / "console-cluster.png"
            page.screenshot(path=str(shot), full_page=True)
            save_shot(shot)
            tables = page.locator("#view table")
            replication = page.locator("#cluster-replication")
            found = {
                "this": tables.nth(0).evaluate(READ_TABLE),
                "group_state": page.locator("#cluster-group-state").inner_text(),
                "master": replication.locator("table").nth(0).evaluate(READ_TABLE),
                "nodes": nodes.locator("table").evaluate(READ_TABLE),
                "errors": page.locator("#cluster-errors li").all_inner_texts(),
            }
            assert errors == [], errors
            return found
        finally:
            browser.close()


def _rows(table: list[list[str]]) -> list[dict[str, str]]:
    head, *rows = table
    return [dict(zip(head, row, strict=True)) for row in rows]


async def test_cluster_page_of_a_cluster_node(
    etcd: EtcdProcess,  # noqa: F811
    tmp_path: Path,
    nursery: trio.Nursery,
) -> None:
    executable = chromium_path()
    server = await NameServer().start(nursery)
    down = f"127.0.0.1:{free_port()}"  # nothing listens there
    cluster = cluster_name()
    options: dict[str, Any] = {"nameservers": [down, server.hostport], "settings": MANAGEMENT}

    async with (
        cluster_node(tmp_path, etcd.endpoint, cluster, "n1", group="g1", **options) as n1,
        cluster_node(tmp_path, etcd.endpoint, cluster, "n2", group="g2", **options) as n2,
        client(n1) as http,
    ):
        stored = {
            "n1": await store_messages(n1, "orders", count=5, size=500),
            "n2": await store_messages(n2, "orders", count=20, size=1000),
        }
        assert 0 < stored["n1"] < stored["n2"]

        async def both_registered_since() -> dict[str, Any] | None:
            """Both listed, each with the offset it has now (registered since storing)."""
            answer = (await http.get("/api/cluster")).json()
            view = answer["view"] or {"groups": []}
            offsets = {n["node"]: n["offset"] for g in view["groups"] for n in g["nodes"]}
            now = {"n1": node_of(n1).offset(), "n2": node_of(n2).offset()}
            return answer if offsets == now else None

        await eventually(both_registered_since)
        with trio.fail_after(60):
            shown = await trio.to_thread.run_sync(
                _drive_member, f"http://127.0.0.1:{port(n1)}", executable, tmp_path
            )
        answer = (await http.get("/api/cluster")).json()

    # This node's own view, as /api/cluster gives it.
    (this,) = _rows(shown["this"])
    assert (this["Cluster"], this["Node"], this["Group"]) == (cluster, "n1", "g1")
    epoch = answer["epoch"]
    assert (this["Role"], this["Epoch"]) == ("master", str(epoch)) and epoch >= 1
    assert this["Fenced"] == "no"
    assert this["Offset"] == str(answer["offset"]) and answer["offset"] >= stored["n1"]
    addrs = answer["addrs"]
    assert this["Client addresses"] == (
        f"amqp {addrs['amqp']}, management {addrs['management']}, cluster {addrs['cluster']}"
    )
    assert this["Name servers"] == f"{down}, {server.hostport}"

    # Replication: the group's keys as n1 last saw them, and n1's own figures as a master.
    assert answer["group_state"] == {
        "epoch": epoch,
        "master": "n1",
        "sync_set": ["n1"],
        "master_addr": addrs["cluster"],
    }
    assert answer["master_claim"] == {"node": "n1", "epoch": epoch}
    replication = answer["replication"]
    assert replication["slaves"] == {} and replication["sync_set"] == ["n1"]
    assert replication["epoch"] == epoch and replication["log_end"] >= stored["n1"]
    assert (
        shown["group_state"] == f"Group g1 in etcd: epoch {epoch}, master n1 (alive), sync set n1."
    )
    (master,) = _rows(shown["master"])
    assert master == {
        "Epoch": str(epoch),
        "Sync set": "n1",
        "Confirmed offset": str(replication["confirmed"]),
        "Log end": str(replication["log_end"]),
    }

    # The name server's view: the same groups, nodes, roles, epochs and addresses.
    expected = [
        {
            "Group": g["group"],
            "Node": n["node"] + (" (this node)" if n["node"] == "n1" else ""),
            "Role": n["role"],
            "Epoch": str(n["epoch"]),
            "Offset": str(n["offset"]),
            "AMQP": n["addrs"]["amqp"],
            "MANAGEMENT": n["addrs"]["management"],
            "CLUSTER": n["addrs"]["cluster"],
        }
        for g in answer["view"]["groups"]
        for n in g["nodes"]
    ]
    rows = _rows(shown["nodes"])
    assert all(r.pop("Last seen").endswith(" s ago") for r in rows)
    assert rows == expected
    assert sorted((r["Group"], r["Role"]) for r in rows) == [("g1", "master"), ("g2", "master")]
    offsets = {r["Node"].removesuffix(" (this node)"): int(r["Offset"]) for r in rows}
    assert offsets["n1"] >= stored["n1"] and offsets["n2"] >= stored["n2"]
    assert list(rows[0]) == [
        "Group", "Node", "Role", "Epoch", "Offset", "AMQP", "MANAGEMENT", "CLUSTER",
    ]  # fmt: skip

    # The name server that is down, as /api/cluster reported it.
    assert answer["nameserver"] == server.hostport
    (error,) = answer["nameserver_errors"]
    assert error.startswith(f"{down}: ")
    assert shown["errors"] == [error]

"""The cluster's Prometheus series on an embedded node (tests/cluster/nodes.py): a one-node
group's master has its epoch, a sync set of itself, its confirm offset and log end, and no
slave series; `herald_cluster_fenced` goes to 1 while etcd is away and back to 0 after; a
standalone broker has none of them. Slaves' series (lag, in sync) need a real group:
tests/cluster/test_ha_status.py.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import trio

from herald.cluster.membership import ALARM
from tests.cluster.harness import EtcdProcess
from tests.cluster.nodes import cluster_name, cluster_node, node_of, store_messages, until
from tests.management.helpers import client, management_broker
from tests.management.test_metrics import samples

MANAGEMENT = (
    'broker.plugins=["amqp", "management"]',
    'management.host="127.0.0.1"',
    "management.port=0",
)
CLUSTER_SERIES = ("herald_cluster_", "herald_ha_")


async def scrape(http: httpx.AsyncClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = await http.get("/metrics")
    assert response.status_code == 200, response.text
    return samples(response.text)


async def test_a_one_node_groups_master(own_etcd: EtcdProcess, tmp_path: Path) -> None:
    cluster = cluster_name()
    async with (
        cluster_node(tmp_path, own_etcd.endpoint, cluster, settings=MANAGEMENT) as broker,
        client(broker) as http,
    ):
        stored = await store_messages(broker, "metered", count=10, size=200)
        node = node_of(broker)
        found = await scrape(http)
        replication = node.replication()
        assert replication["log_end"] >= stored and replication["slaves"] == {}
        assert {k: v for k, v in found.items() if k[0].startswith(CLUSTER_SERIES)} == {
            ("herald_cluster_fenced", ()): 0,
            ("herald_ha_epoch", ()): node.status.epoch,
            ("herald_ha_sync_set_size", ()): 1,
            ("herald_ha_confirmed_offset", ()): replication["confirmed"],
            ("herald_ha_log_end_offset", ()): replication["log_end"],
        }
        assert node.status.epoch >= 1 and replication["confirmed"] >= stored

        # etcd away past the lease guard: fenced (and the `cluster` alarm); back: not.
        await trio.to_thread.run_sync(own_etcd.stop)
        await until(lambda: ALARM in broker.alarms.active)
        found = await scrape(http)
        assert found[("herald_cluster_fenced", ())] == 1
        assert found[("herald_alarm", (("alarm", ALARM),))] == 1
        await trio.to_thread.run_sync(own_etcd.start)
        await until(lambda: ALARM not in broker.alarms.active)
        assert (await scrape(http))[("herald_cluster_fenced", ())] == 0


async def test_a_standalone_broker_has_no_cluster_series(tmp_path: Path) -> None:
    async with management_broker(tmp_path / "data") as broker, client(broker) as http:
        found = await scrape(http)
    assert ("herald_vhosts", ()) in found
    assert not [k for k in found if k[0].startswith(CLUSTER_SERIES)]

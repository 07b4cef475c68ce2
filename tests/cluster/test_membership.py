"""Membership against a real etcd: a node (an embedded broker with the cluster plugin and the
commit-log store) holds a lease and its node key; the lease guard raises the `cluster` alarm
when etcd goes away and clears it when etcd is back; a clean stop revokes the lease.

The lease guard's arithmetic is tested on its own first (no etcd, no clock)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import trio

from herald.cluster import keys
from herald.cluster.etcd import EtcdClient, KeyValue
from herald.cluster.membership import ALARM, LeaseGuard
from tests.cluster.harness import EtcdProcess, free_port
from tests.cluster.nodes import (
    amqp_address,
    cluster_name,
    cluster_node,
    cluster_runner,
    eventually,
    node_of,
    until,
)

# -- the lease guard ------------------------------------------------------------------------------


def test_guard_is_invalid_until_a_first_renewal() -> None:
    guard = LeaseGuard(1.0)
    assert guard.valid_until == -math.inf
    assert not guard.valid(0.0)


def test_guard_runs_from_the_send_time_of_the_last_renewal() -> None:
    guard = LeaseGuard(1.0)
    guard.renewed(sent_at=100.0, ttl=10)
    assert guard.valid_until == 109.0  # sent + TTL - guard
    assert guard.valid(108.999) and not guard.valid(109.0)
    guard.renewed(sent_at=103.0, ttl=10)
    assert guard.valid_until == 112.0


def test_guard_never_moves_back_and_is_lost_with_its_lease() -> None:
    guard = LeaseGuard(1.0)
    guard.renewed(sent_at=103.0, ttl=10)
    guard.renewed(sent_at=100.0, ttl=10)  # an older answer arriving late changes nothing
    assert guard.valid_until == 112.0
    guard.lost()
    assert not guard.valid(104.0)


# -- a node against a real etcd -------------------------------------------------------------------


async def node_key(client: EtcdClient, cluster: str, node: str = "n1") -> KeyValue | None:
    return await client.get(keys.node_key(cluster, node))


NODE = "n1@test"  # "@" travels percent-encoded in the key


async def key_with_amqp(client: EtcdClient, cluster: str) -> KeyValue | None:
    kv = await node_key(client, cluster, NODE)
    return kv if kv is not None and "amqp" in json.loads(kv.value)["addrs"] else None


async def test_node_key_on_its_lease_and_revoked_at_stop(etcd: EtcdProcess, tmp_path: Path) -> None:
    cluster = cluster_name()
    async with EtcdClient(etcd.endpoint) as client:
        async with cluster_node(tmp_path, etcd.endpoint, cluster, NODE) as broker:
            membership = node_of(broker).membership
            assert membership is not None and membership.lease_id != 0
            kv = await eventually(lambda: key_with_amqp(client, cluster))
            assert kv.key == b"/herald/" + cluster.encode() + b"/nodes/n1%40test"
            assert kv.lease == membership.lease_id
            value = json.loads(kv.value)
            assert value["node"] == NODE
            assert value["group"] == "g1"
            assert value["role"] == "master"
            assert value["epoch"] == 1  # the first node of a group bootstraps it at epoch 1
            assert value["addrs"]["amqp"] == amqp_address(broker)
            assert isinstance(value["offset"], int) and value["offset"] >= 0
            lease = await client.call("/v3/lease/timetolive", {"ID": str(kv.lease)})
            assert 0 < int(lease["TTL"]) <= 2 and int(lease["grantedTTL"]) == 2
            assert ALARM not in broker.alarms.active
        # A clean stop revoked the lease: the key is gone now, not after the TTL.
        assert await node_key(client, cluster, NODE) is None
        lease = await client.call("/v3/lease/timetolive", {"ID": str(kv.lease)})
        assert int(lease["TTL"]) == -1


async def test_etcd_stopped_raises_the_cluster_alarm_and_its_return_clears_it(
    own_etcd: EtcdProcess, tmp_path: Path
) -> None:
    cluster = cluster_name()
    async with cluster_node(tmp_path, own_etcd.endpoint, cluster) as broker:
        membership = node_of(broker).membership
        assert membership is not None
        assert not broker.alarms.blocked

        await trio.to_thread.run_sync(own_etcd.stop)
        await until(lambda: ALARM in broker.alarms.active)
        assert broker.alarms.blocked and membership.fenced  # publishers wait from here on

        await trio.to_thread.run_sync(own_etcd.start)
        await until(lambda: ALARM not in broker.alarms.active)
        assert not membership.fenced
        async with EtcdClient(own_etcd.endpoint) as client:
            kv = await eventually(lambda: node_key(client, cluster))
            assert kv.lease == membership.lease_id


async def test_the_node_leaves_when_its_broker_is_stopped(
    etcd: EtcdProcess, tmp_path: Path
) -> None:
    """The node runner's life ends with its broker's, whoever stops the broker."""
    from herald.cluster.node import running_node

    cluster = cluster_name()
    async with (
        EtcdClient(etcd.endpoint) as client,
        cluster_node(tmp_path, etcd.endpoint, cluster, NODE) as broker,
    ):
        await eventually(lambda: key_with_amqp(client, cluster))
        broker.stop()
        await until(lambda: running_node(broker) is None)  # the runner has returned
        assert await node_key(client, cluster, NODE) is None  # and revoked its lease


async def test_an_expired_lease_is_granted_again_with_the_node_key(
    etcd: EtcdProcess, tmp_path: Path
) -> None:
    """etcd dropping the lease (as at expiry; here by a revoke) makes the node join again."""
    cluster = cluster_name()
    async with (
        EtcdClient(etcd.endpoint) as client,
        cluster_node(tmp_path, etcd.endpoint, cluster) as broker,
    ):
        membership = node_of(broker).membership
        assert membership is not None
        first = membership.lease_id
        await eventually(lambda: node_key(client, cluster))
        await client.revoke(first)
        kv = await eventually(lambda: node_key(client, cluster))
        assert membership.joins == 2 and kv.lease == membership.lease_id != first
        await until(lambda: ALARM not in broker.alarms.active)


async def test_a_node_takes_no_role_while_etcd_is_unreachable(tmp_path: Path) -> None:
    """Without etcd nobody can say whether this node is its group's master: it stays fenced,
    runs no broker and no follower, and stops cleanly when asked."""
    nobody = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    node = cluster_runner(tmp_path, nobody, cluster_name())
    async with trio.open_nursery() as nursery:
        nursery.start_soon(node.run)
        await until(lambda: node.membership is not None and node.alarms.fenced)
        await trio.sleep(1)  # a few rounds of trying etcd
        assert node.membership is not None and node.membership.lease_id == 0
        assert node.broker is None and node.follower is None and node.ha is None
        node.stop()


async def test_a_standalone_broker_runs_no_cluster_service(tmp_path: Path) -> None:
    from herald.cluster.node import running_node
    from herald.core.embedding import embedded

    async with embedded(
        plugins=["amqp"],
        data_dir=tmp_path,
        settings=['amqp.host="127.0.0.1"', "amqp.port=0", 'store.backend="memory"'],
    ) as broker:
        assert running_node(broker) is None
        assert broker.plugins.node_runner(broker.config) is None  # a bare broker runs
        assert not [s for s in broker.plugins.services(broker) if s.name.startswith("cluster")]

"""Registration with real name servers (CLUSTER.md §8.2 scenario 3, the parts a single node
shows): a node registers with every name server, its queues appear in routes within a
register period, a second name server keeps answering when the first is stopped, `resolve`
moves on to it, a restarted name server gets the queue table at once, a node's commit-log
offset reaches the name servers with its next registration, and a clean stop unregisters the
node."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import httpx
import trio

from herald.cluster import resolve
from herald.cluster.nameserver.client import route_path
from herald.cluster.nameserver.registry import QueueInfo, RouteRegistry
from herald.cluster.registration import queue_table
from herald.core.broker import Broker
from tests.cluster.harness import EtcdProcess
from tests.cluster.nodes import (
    NameServer,
    amqp_address,
    cluster_name,
    cluster_node,
    eventually,
    node_of,
    nodes_of,
    store_messages,
    until,
)


async def route(http: httpx.AsyncClient, server: NameServer, queue: str) -> dict[str, Any] | None:
    response = await http.get(server.url + route_path("/", queue), params={"protocol": "amqp"})
    return response.json() if response.status_code == 200 else None


def declare(broker: Broker, name: str, **options: Any) -> None:
    broker.default_vhost.declare_queue(name, **options)


async def test_queues_reach_every_name_server_and_resolve_moves_on(
    etcd: EtcdProcess, tmp_path: Path, nursery: trio.Nursery
) -> None:
    first = await NameServer().start(nursery)
    second = await NameServer().start(nursery)
    cluster = cluster_name()
    nameservers = [first.hostport, second.hostport]
    async with (
        httpx.AsyncClient(timeout=5) as http,
        cluster_node(tmp_path, etcd.endpoint, cluster, "n1", nameservers=nameservers) as broker,
    ):
        registrar = node_of(broker).registrar
        assert registrar is not None
        await until(lambda: registrar.rounds > 0)
        declare(broker, "orders", durable=True)
        declare(broker, "mine", exclusive=True, owner=object())  # one connection's: not listed

        # Within a register period (0.5 s here; the wait is a hang guard, not a timing check).
        for server in (first, second):
            found = await eventually(partial(route, http, server, "orders"))
            (group,) = found["groups"]
            assert group["group"] == "g1"
            assert group["master"]["node"] == "n1"
            assert group["master"]["addr"] == amqp_address(broker)
            assert await route(http, server, "mine") is None

        first.stop()
        answer = await http.get(second.url + "/v1/cluster")
        (group,) = answer.json()["groups"]
        assert group["cluster"] == cluster and [n["node"] for n in group["nodes"]] == ["n1"]
        url = await resolve(nameservers, "/", "orders", "amqp", timeout=2)
        assert url == f"amqp://{amqp_address(broker)}/%2F"

    # A clean stop unregistered the node from the name server still running.
    assert nodes_of(second.registry, trio.current_time()) == {}


async def test_a_restarted_name_server_gets_the_queue_table_at_once(
    etcd: EtcdProcess, tmp_path: Path, nursery: trio.Nursery
) -> None:
    server = await NameServer().start(nursery)
    assert server.address is not None
    port = server.address.port
    async with (
        httpx.AsyncClient(timeout=5) as http,
        cluster_node(
            tmp_path, etcd.endpoint, cluster_name(), nameservers=[server.hostport]
        ) as broker,
    ):
        declare(broker, "orders", durable=True)
        await eventually(lambda: route(http, server, "orders"))
        server.stop()
        # The same address, an empty registry: the node's next heartbeat is answered
        # `need_full`, and the node sends its table at once.
        restarted = await NameServer().start(nursery, port)
        assert restarted.registry is not server.registry
        found = await eventually(lambda: route(http, restarted, "orders"))
        assert found["groups"][0]["master"]["node"] == "n1"


async def test_a_role_change_registers_at_once(
    etcd: EtcdProcess, tmp_path: Path, nursery: trio.Nursery
) -> None:
    from herald.cluster.nameserver.registry import Role

    server = await NameServer().start(nursery)
    settings = ["cluster.register_interval_s=60"]  # only the role change can register again
    async with cluster_node(
        tmp_path, etcd.endpoint, cluster_name(), nameservers=[server.hostport], settings=settings
    ) as broker:
        node = node_of(broker)
        assert node.registrar is not None
        await until(lambda: "n1" in nodes_of(server.registry, trio.current_time()))
        node.status.set_role(Role.SLAVE, 1)
        registry: RouteRegistry = server.registry
        await until(lambda: nodes_of(registry, trio.current_time())["n1"].role is Role.SLAVE)


async def test_queue_table_lists_every_vhost_but_exclusive_queues(
    etcd: EtcdProcess, tmp_path: Path
) -> None:
    async with cluster_node(tmp_path, etcd.endpoint, cluster_name()) as broker:
        broker.add_vhost("b")
        broker.vhost("b").declare_queue("q2", durable=False)
        declare(broker, "q1", durable=True, arguments={"x-queue-type": "quorum"})
        declare(broker, "ex", exclusive=True, owner=object())
        assert node_of(broker).registrar is None  # no name servers configured: no service
        assert queue_table(broker) == (
            QueueInfo("/", "q1", "quorum", True),
            QueueInfo("b", "q2", "classic", False),
        )


async def test_the_offset_is_as_of_the_last_registration(
    etcd: EtcdProcess, tmp_path: Path, nursery: trio.Nursery
) -> None:
    """Every registration carries the node's commit-log offset (`store.durable_ticket`, the
    node key's `offset`): after storing messages, the next round shows the larger one, in
    the registry and in `/v1/cluster`."""
    server = await NameServer().start(nursery)
    async with (
        httpx.AsyncClient(timeout=5) as http,
        cluster_node(
            tmp_path, etcd.endpoint, cluster_name(), nameservers=[server.hostport]
        ) as broker,
    ):
        node = node_of(broker)
        registrar = node.registrar
        assert registrar is not None

        def seen() -> int | None:
            found = nodes_of(server.registry, trio.current_time()).get("n1")
            return None if found is None else found.offset

        await until(lambda: seen() is not None)
        before = seen()
        assert before is not None and before <= node.offset()

        stored = await store_messages(broker, "orders", count=20, size=1000)
        assert stored > before and node.offset() == stored
        assert node.describe()["offset"] == stored  # the node key's, the same figure
        rounds = registrar.rounds
        await until(lambda: registrar.rounds >= rounds + 2)  # one round began after storing
        after = seen()
        assert after is not None and stored <= after <= node.offset()
        cluster = (await http.get(server.url + "/v1/cluster")).json()
        (listed,) = [n for g in cluster["groups"] for n in g["nodes"]]
        assert listed["node"] == "n1" and listed["offset"] == after

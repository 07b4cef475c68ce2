"""Cluster nodes as embedded brokers, for tests that need a node but not a process of its own.

`cluster_node(...)` runs a real node through `herald.core.embedded`, hence through the
cluster plugin's runner as `herald run` does (cluster/node.py): the commit-log store in a
tmp dir, AMQP on 127.0.0.1 port 0 and the short timers of CLUSTER.md §8.1 (lease TTL 2 s,
guard 1 s, registration every 0.5 s). `NameServer` runs a name server in the test's nursery
(127.0.0.1, port 0) that the test can stop.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import trio

from herald.cluster.nameserver.registry import EXPIRY_S, SCAN_S, RouteRegistry
from herald.cluster.nameserver.server import ServerAddress, run_nameserver
from herald.cluster.node import ClusterNode, running_node
from herald.core.broker import Broker
from herald.core.config import load_config
from herald.core.embedding import embedded
from herald.core.message import Message, Properties
from herald.core.plugins import get_plugin_manager
from tests.ports import free_port

T = TypeVar("T")

WAIT_S = 15.0
"""A hang guard for the waits below, never a timing assertion."""


def cluster_name() -> str:
    """A cluster of this test alone (its etcd keys live under /herald/<name>/)."""
    return f"test-{uuid.uuid4().hex[:12]}"


def node_settings(
    etcd: str | Sequence[str],
    cluster: str,
    node: str = "n1",
    *,
    group: str = "g1",
    nameservers: Sequence[str] = (),
    settings: Sequence[str] = (),
) -> list[str]:
    """`KEY=VALUE` settings of a test node: loopback, free ports, TTL 2 s."""
    endpoints = [etcd] if isinstance(etcd, str) else list(etcd)
    return [
        f"broker.node_name={json.dumps(node)}",
        'store.backend="commitlog"',
        "commitlog.segment_size=1048576",
        'amqp.host="127.0.0.1"',
        "amqp.port=0",
        "cluster.enabled=true",
        f"cluster.name={json.dumps(cluster)}",
        f"cluster.group={json.dumps(group)}",
        f"cluster.etcd={json.dumps(endpoints)}",
        "cluster.lease_ttl_s=2",
        "cluster.lease_guard_s=1",
        f"cluster.nameservers={json.dumps(list(nameservers))}",
        "cluster.register_interval_s=0.5",
        f'cluster.listen="127.0.0.1:{free_port()}"',
        *settings,
    ]


@asynccontextmanager
async def cluster_node(
    root: Path,
    etcd: str | Sequence[str],
    cluster: str,
    node: str = "n1",
    *,
    group: str = "g1",
    nameservers: Sequence[str] = (),
    settings: Sequence[str] = (),
) -> AsyncIterator[Broker]:
    """A one-node group's master, embedded (it bootstraps its group)."""
    options = node_settings(
        etcd, cluster, node, group=group, nameservers=nameservers, settings=settings
    )
    async with embedded(plugins=["amqp"], data_dir=root / node, settings=options) as broker:
        yield broker


def cluster_runner(root: Path, etcd: str, cluster: str, node: str = "n1") -> ClusterNode:
    """The `ClusterNode` `herald run` would run for these settings, not started."""
    manager = get_plugin_manager()
    config = load_config(
        data={"broker": {"plugins": ["amqp"], "data_dir": str(root / node)}},
        overrides=node_settings(etcd, cluster, node),
        plugin_sections=manager.config_sections(),
    )
    runner = manager.node_runner(config)
    assert isinstance(runner, ClusterNode)
    return runner


def node_of(broker: Broker) -> ClusterNode:
    found = running_node(broker)
    assert found is not None, "the node is not running as a cluster node"
    return found


def amqp_address(broker: Broker) -> str:
    listener = next(lst for lst in broker.listeners if lst.protocol == "amqp")
    return f"{listener.host}:{listener.port}"


async def store_messages(broker: Broker, queue: str, count: int = 10, size: int = 100) -> int:
    """Publish `count` persistent messages to durable `queue` (declared if need be) through
    the Python API and wait until the store has them on disk; returns the node's commit-log
    offset (`durable_ticket`) then."""
    broker.default_vhost.declare_queue(queue, durable=True)
    persistent = Properties(delivery_mode=2)
    ticket = 0
    for i in range(count):
        body = f"{i:06}".encode().ljust(size, b".")
        message = Message.native(body, routing_key=queue, properties=persistent)
        result = broker.default_vhost.publish(message)
        assert result.ticket is not None, "not stored"
        ticket = result.ticket
    await broker.store.wait_durable(ticket)
    return broker.store.durable_ticket


async def eventually(probe: Callable[[], Awaitable[T | None]], timeout: float = WAIT_S) -> T:
    """Call `probe` until it returns something other than None (bounded, not timed)."""
    with trio.fail_after(timeout):
        while True:
            found = await probe()
            if found is not None:
                return found
            await trio.sleep(0.02)


async def until(condition: Callable[[], bool], timeout: float = WAIT_S) -> None:
    with trio.fail_after(timeout):
        while not condition():
            await trio.sleep(0.02)


class NameServer:
    """A name server in the test's nursery, stoppable; `registry` lets the test look in."""

    def __init__(self, scan_s: float = SCAN_S, expiry_s: float = EXPIRY_S) -> None:
        self.registry = RouteRegistry(expiry_s)
        self.scan_s = scan_s
        self.scope = trio.CancelScope()
        self.address: ServerAddress | None = None

    async def _run(self, port: int, task_status: trio.TaskStatus[ServerAddress]) -> None:
        with self.scope:
            await run_nameserver(
                "127.0.0.1",
                port,
                scan_s=self.scan_s,
                registry=self.registry,
                task_status=task_status,
            )

    async def start(self, nursery: trio.Nursery, port: int = 0) -> NameServer:
        self.address = await nursery.start(partial(self._run, port))
        return self

    @property
    def hostport(self) -> str:
        return str(self.address)

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def stop(self) -> None:
        self.scope.cancel()


def nodes_of(registry: RouteRegistry, now: float) -> dict[str, Any]:
    """node -> its view in `registry`."""
    return {n.node: n for g in registry.groups(now) for n in g.nodes}

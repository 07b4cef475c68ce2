"""Shared-queue clusters on real processes (CLUSTER.md §8.2 scenarios 11-12): `herald cluster
dev --nodes N --groups G` on the session's etcd, each node's client ports from cluster.json,
the shared keys read straight from etcd (`shared_keys`), and workload clients that declare
the queue as `x-queue-type: shared` and note whether each delivery came flagged redelivered.
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import pika
import trio

from herald.cluster import keys
from tests.cluster.harness import DevCluster, NodeProcess, etcd_get, wait_until
from tests.cluster.nodes import cluster_name
from tests.cluster.workload import (
    AmqpConsumer,
    AmqpPublisher,
    History,
    amqp_parameters,
)

SHARED = {"x-queue-type": "shared"}
TIMERS = (
    "--lease-ttl-s", "2",
    "--nameserver-expiry-s", "2",
    "--nameserver-scan-s", "0.5",
    "--log-level", "info",
)  # fmt: skip
WAIT_S = 60.0
"""A hang guard for starts, restarts and drains on a loaded 2-core box."""


class SharedCluster:
    """`nodes` nodes in `groups` groups under `herald cluster dev`."""

    def __init__(
        self, root: Path, etcd: str, nodes: int = 3, groups: int = 3,
        options: Sequence[str] = (),
    ) -> None:  # fmt: skip
        self.cluster = cluster_name()
        self.etcd = etcd
        self.dev = DevCluster(
            root / "D",
            nodes,
            (*TIMERS, "--groups", str(groups), "--etcd", etcd, "--name", self.cluster,
             *options),
        )  # fmt: skip
        self.processes: dict[str, NodeProcess] = {}

    def __enter__(self) -> SharedCluster:
        self.dev.start(WAIT_S)
        for entry in self.dev.info["nodes"]:
            self.processes[entry["name"]] = self.dev.node(entry["name"])
        return self

    def __exit__(self, *exc_info: object) -> None:
        for process in self.processes.values():
            if process.process is not None:
                process.stop()
        self.dev.stop()

    @property
    def names(self) -> list[str]:
        return [entry["name"] for entry in self.dev.info["nodes"]]

    def port(self, node: str, protocol: str = "amqp") -> int:
        entry = next(n for n in self.dev.info["nodes"] if n["name"] == node)
        return int(entry["addrs"][protocol].rsplit(":", 1)[1])

    @property
    def groups(self) -> dict[str, list[str]]:
        """Group -> its nodes, as cluster.json lists them."""
        out: dict[str, list[str]] = {}
        for entry in self.dev.info["nodes"]:
            out.setdefault(entry["group"], []).append(entry["name"])
        return out

    def master_of(self, group: str) -> str | None:
        """The node holding the group's master claim now (None: no live master)."""
        found = etcd_get(self.etcd, keys.group_master_key(self.cluster, group))
        return json.loads(found.value)["node"] if found is not None else None

    def master_port(self, group: str, protocol: str = "amqp") -> Callable[[], int]:
        """The group's master's client port, asked again at each connect: a workload client
        follows the group across failovers (its old master's port until one is elected)."""
        last = [self.port(self.groups[group][0], protocol)]

        def port() -> int:
            try:
                master = self.master_of(group)
            except Exception:  # etcd busy: keep the last one
                master = None
            if master is not None:
                last[0] = self.port(master, protocol)
            return last[0]

        return port

    def log_of(self, node: str) -> str:
        return self.processes[node].log_path.read_text(errors="replace")

    def shared_keys(self) -> dict[str, bytes]:
        """Every key under the cluster's `P/shared/` now."""
        from herald.cluster.etcd import EtcdClient

        prefix = keys.shared_prefix(self.cluster)

        async def read() -> dict[str, bytes]:
            async with EtcdClient(self.etcd) as client:
                found = await client.range(prefix, prefix=True)
            return {kv.key.decode()[len(prefix) :]: kv.value for kv in found.kvs}

        return trio.run(read)

    def slot_keys(self, queue: str, vhost: str = "/") -> list[str]:
        """The queue's slot and owner keys left (a drained queue has none)."""
        where = f"{keys.part(vhost)}/{keys.part(queue)}/"
        return [
            k for k in self.shared_keys() if k.startswith((f"slots/{where}", f"owners/{where}"))
        ]


def declare(port: int, queue: str, arguments: dict[str, Any] | None = None) -> None:
    connection = pika.BlockingConnection(amqp_parameters(port))
    try:
        connection.channel().queue_declare(queue, durable=True, arguments=arguments or SHARED)
    finally:
        with contextlib.suppress(Exception):
            connection.close()


def wait_declared(ports: Sequence[int], queue: str) -> None:
    """Until the node at each port knows `queue` (declarations travel through etcd)."""
    for port in ports:
        wait_until(functools.partial(declared, port, queue), f"{queue} on port {port}")


def declared(port: int, queue: str) -> bool:
    """Whether the node at `port` knows `queue` (a passive declare)."""
    connection = pika.BlockingConnection(amqp_parameters(port))
    try:
        connection.channel().queue_declare(queue, passive=True)
        return True
    except pika.exceptions.ChannelClosedByBroker:
        return False
    finally:
        with contextlib.suppress(Exception):
            connection.close()


class SharedAmqpPublisher(AmqpPublisher):
    arguments = SHARED


class SharedAmqpConsumer(AmqpConsumer):
    """Declares the queue shared and notes each delivery's message id and redelivered flag
    (`flags`: id -> list of flags, in delivery order)."""

    arguments = SHARED

    def __init__(self, history: History, port: Any, queue_name: str, **kwargs: Any) -> None:
        super().__init__(history, port, queue_name, **kwargs)
        self.flags: dict[str, list[bool]] = {}
        self.count = 0

    def noted(self, method: Any, properties: Any) -> None:
        self.count += 1
        self.flags.setdefault(properties.message_id, []).append(method.redelivered)


def unflagged(duplicated: Iterable[str], consumers: Sequence[SharedAmqpConsumer]) -> list[str]:
    """Messages delivered n times but flagged redelivered fewer than n - 1 times. Each
    delivery after the first must be flagged: by the node that had it (a requeue), or by the
    next holder of its slot (acquired again, gen > 1)."""
    flags: dict[str, list[bool]] = {}
    for consumer in consumers:
        for mid, seen in consumer.flags.items():
            flags.setdefault(mid, []).extend(seen)
    return [mid for mid in duplicated if sum(flags[mid]) < len(flags[mid]) - 1]

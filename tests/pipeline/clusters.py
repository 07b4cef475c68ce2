"""Real clusters for the pipeline's cluster tests: `herald cluster dev` as a process (the
cluster tests' `DevCluster` / `HACluster`, on the session's etcd), filled with pika through
each group's master, confirmed; and the Spark offsets of a streaming query as it reports them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pika

from herald.pipeline.log_view import open_log
from herald.pipeline.options import ReadOptions
from herald.pipeline.read import plan, read_split
from tests.cluster.harness import DevCluster
from tests.cluster.nodes import cluster_name

QUEUE = "spark-cluster"
TIMERS = (
    "--lease-ttl-s", "2",
    "--nameserver-expiry-s", "4",
    "--nameserver-scan-s", "0.5",
    "--register-interval-s", "0.5",
    "--set", "commitlog.segment_size=1048576",
)  # fmt: skip
WAIT_S = 60.0
"""A hang guard for cluster start and catch-up on a loaded 2-core box."""


@contextmanager
def dev_cluster(root: Path, etcd: str, nodes: int, *options: str) -> Iterator[DevCluster]:
    """`herald cluster dev --nodes N OPTIONS` on `etcd`, stopped on the way out."""
    dev = DevCluster(root, nodes, (*TIMERS, "--etcd", etcd, "--name", cluster_name(), *options))
    dev.start(WAIT_S)
    try:
        yield dev
    finally:
        dev.stop()


def node_entry(dev: DevCluster, name: str) -> dict[str, Any]:
    return dict(next(n for n in dev.info["nodes"] if n["name"] == name))


def port(dev: DevCluster, name: str) -> int:
    return int(str(node_entry(dev, name)["addrs"]["amqp"]).rpartition(":")[2])


def publish(amqp_port: int, bodies: list[str]) -> None:
    """Persistent messages to QUEUE, each confirmed by the broker."""
    parameters = pika.ConnectionParameters(
        "127.0.0.1", amqp_port, credentials=pika.PlainCredentials("guest", "guest")
    )
    connection = pika.BlockingConnection(parameters)
    try:
        channel = connection.channel()
        channel.queue_declare(QUEUE, durable=True)
        channel.confirm_delivery()
        for body in bodies:
            props = pika.BasicProperties(delivery_mode=2)
            channel.basic_publish("", QUEUE, body.encode(), props, mandatory=True)
    finally:
        connection.close()


def store_dir(dev: DevCluster, name: str) -> str:
    """The store dir of a node, as the reader's partitions name it."""
    return str(open_log(Path(node_entry(dev, name)["data_dir"])).root)


def log_end(dev: DevCluster, name: str) -> int:
    return open_log(Path(node_entry(dev, name)["data_dir"])).end


def source_offsets(query: Any) -> list[dict[str, int]]:
    """The end offsets the query's source reported, batch by batch (batches with rows)."""
    return [
        json.loads(p["sources"][0]["endOffset"])
        for p in query.recentProgress
        if p["numInputRows"] > 0
    ]


def count_rows(data_dir: Path) -> int:
    """Message records readable in a data dir, read in this process with the reader's code."""
    view = open_log(data_dir)
    options = ReadOptions(path=data_dir)
    return sum(
        batch.num_rows
        for split in plan(view, options)
        for batch in read_split(view.root, split, options, view.queues)
    )

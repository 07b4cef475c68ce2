"""Shared queues (issue 23): broker CPU per delivered message, throughput over 1-3 groups, latency.

    python benchmarks/shared_queue.py [--groups 1,2,3] [--seconds 5] [--repeat 3]
        [--publishers 6] [--consumers 6] [--processes 2] [--window 100] [--prefetch 100]
        [--ack-every 10] [--size 100] [--warmup-seconds 1] [--rate 100]
        [--latency-seconds 10] [--latency-repeat 3] [--time-limit 900] [--dir DIR]
        [--json-only]

CLUSTER.md §8.3's figures for the `shared` queue type (cluster/shared/), in one run:
1. broker CPU per delivered message of a shared queue over 3 groups (`herald cluster dev
   --nodes 3 --groups 3`: three masters, no slaves) against a classic durable queue on one
   standalone node with the same clients; target: shared / classic ≤ 1.5. The cluster's figure
   is the sum over its three node processes; its etcd and name server are given apart
   (`etcd_cpu_us_per_msg`, `nameserver_cpu_us_per_msg`), with etcd's own request counters
   from its /metrics (`etcd_txns_per_1k_msgs`, `etcd_writes_per_1k_msgs`: slots should cost
   a few txns each, never one per message);
2. delivered msg/s end to end with 1, 2 and 3 groups (`--nodes G --groups G`), and the ratio
   3 groups / 1 group (target 1.8 on a box with spare cores; here clients and every node share
   `cpu_count` cores, which the JSON gives with the load average);
3. publish → delivery latency at `--rate` msg/s (one publisher on the first node, a consumer
   on every node), p50 / p99; target p50 ≤ cluster.slot_timeout_ms + 20 ms. The classic queue
   on the standalone node (same clients, all on it) is the reference.

Brokers, all real processes on loopback, up for the whole run: a `herald cluster dev` cluster
per group count (each with its own etcd and name server, the command's timers), and a
standalone `herald run` with the 3-group cluster's n1 config minus `[cluster]` (the same
plugins, store and log settings). A run declares a fresh durable queue on every node of its
broker (`x-queue-type: shared` on a cluster), runs the clients (benchmarks/_shared_clients.py)
and deletes the queue. Throughput runs: `--publishers` pika connections with confirms (at most
`--window` unconfirmed each) send persistent `--size` B messages for `--seconds`, and
`--consumers` connections (prefetch `--prefetch`, acking with `multiple` every `--ack-every`)
take them, both spread evenly over the broker's nodes and dealt to `--processes` publisher and
as many consumer processes; msg/s is every message delivered over the time from the common
start to the last delivery (the drain included). CPU is each broker process's on-CPU time
(all threads, /proc schedstat: ThreadCpu) from that start until every message was delivered
and acked, per delivered message. Latency runs: one connection publishes `--rate` msg/s for
`--latency-seconds`, each body starting with its send time; the first 0.5 s is left out.

Each repetition runs every broker in turn, the first one rotating, after one unmeasured
`--warmup-seconds` run per broker; figures are medians of the repetitions, ratios are of
medians within this run (with the median of the per-repetition ratios). Prints one JSON
object. Every process it started is stopped at the end, on an error, on Ctrl-C or SIGTERM,
and when `--time-limit` runs out.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pika
import psutil
from _common import Address, header
from _ha_group import dev_group
from _shared_clients import Clients, run_clients, spread
from cluster_overhead import SCHEDSTAT, Interrupted, ThreadCpu, accepts, bounded, standalone
from ha_throughput import echo

from herald.cluster.config import ClusterConfig

SHARED = {"x-queue-type": "shared"}
CLASSIC = "classic"
START_TIMEOUT_S = 90.0
SLOT_TIMEOUT_MS = ClusterConfig().slot_timeout_ms
TARGETS = {
    "cpu_shared_over_classic": 1.5,
    "msgs_per_s_3_over_1_groups": 1.8,
    "latency_p50_ms": SLOT_TIMEOUT_MS + 20,
}


@dataclass
class Broker:
    """Where a run's clients go and whose CPU it reads (`node:*` summed as the broker's)."""

    nodes: list[Address]
    cpus: dict[str, ThreadCpu]
    shared: bool
    etcd: str = ""


def shared_name(groups: int) -> str:
    return f"shared_{groups}"


def main(argv: list[str]) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--groups", default="1,2,3", help="cluster sizes (nodes = groups)")
    parser.add_argument("--seconds", type=float, default=5.0, help="publishing, per run")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--publishers", type=int, default=6, help="connections in all")
    parser.add_argument("--consumers", type=int, default=6, help="connections in all")
    parser.add_argument("--processes", type=int, default=2, help="per role")
    parser.add_argument("--window", type=int, default=100, help="unconfirmed per publisher")
    parser.add_argument("--prefetch", type=int, default=100)
    parser.add_argument("--ack-every", type=int, default=10)
    parser.add_argument("--size", type=int, default=100, help="message body, bytes")
    parser.add_argument("--warmup-seconds", type=float, default=1.0, help="0: none")
    parser.add_argument("--rate", type=float, default=100.0, help="latency runs; 0: none")
    parser.add_argument("--latency-seconds", type=float, default=10.0)
    parser.add_argument("--latency-repeat", type=int, default=3)
    parser.add_argument("--time-limit", type=int, default=900, help="seconds, all in all")
    parser.add_argument("--dir", type=Path, help="keep configs, data and logs here")
    parser.add_argument(
        "--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
        help="a setting of every cluster node (herald cluster dev --set), e.g. "
        "cluster.slot_locality_ms=100",
    )  # fmt: skip
    parser.add_argument("--json-only", action="store_true", help="no progress on stderr")
    args = parser.parse_args(argv)
    groups = sorted({int(g) for g in args.groups.split(",")})
    counts = [args.publishers, args.consumers, args.processes, args.window, args.prefetch]
    if min([*counts, args.ack_every, *groups]) < 1 or args.size < 8:
        parser.error("counts and --groups must be positive, --size at least 8 (the time stamp)")
    if args.seconds <= 0 or args.repeat < 1 or args.latency_repeat < 0:
        parser.error("--seconds > 0, --repeat >= 1, --latency-repeat >= 0")
    if args.rate and args.latency_seconds <= 0.5:
        parser.error("--latency-seconds > 0.5 (the first 0.5 s is left out)")

    head = header("shared_queue", ["pika"], args)
    head["settings"] = {**head["settings"], "dir": args.dir and str(args.dir)}
    head["cpu_count"] = os.cpu_count()

    def work(stack: ExitStack) -> Any:
        measured = measure(args, groups, stack)
        echo(args, "stopping the brokers")
        return measured

    runs, latency = bounded(args.time_limit, work)
    return summary(head, groups, runs, latency)


def start_brokers(
    args: argparse.Namespace, groups: list[int], stack: ExitStack
) -> dict[str, Broker]:
    if args.dir is None:
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="herald-sq-")))
    else:
        root = args.dir.resolve()
        root.mkdir(parents=True, exist_ok=True)
    brokers: dict[str, Broker] = {}
    config = Path()
    for count in groups:
        name = shared_name(count)
        echo(args, f"starting {name}: --nodes {count} --groups {count} under {root / name}")
        options = ["--groups", str(count), "--name", f"sq{count}"]
        for setting in args.set:
            options += ["--set", setting]
        group = stack.enter_context(dev_group(root / name, count, options))
        nodes = sorted(group.info["nodes"], key=lambda n: n["name"])
        addresses = [group.amqp(n["name"]) for n in nodes]
        wait_accepting(name, addresses)
        cpus = {f"node:{n['name']}": ThreadCpu(n["pid"]) for n in nodes}
        cpus["etcd"] = ThreadCpu(group.info["etcd_pid"])
        cpus["nameserver"] = ThreadCpu(group.info["nameserver_pid"])
        brokers[name] = Broker(addresses, cpus, shared=True, etcd=group.etcd)
        config = Path(nodes[0]["config"])  # the largest cluster's n1, for the standalone
    address, process = stack.enter_context(standalone(root, config))
    echo(
        args, f"{CLASSIC}: standalone at {address[0]}:{address[1]} ({config.name} minus [cluster])"
    )
    return {CLASSIC: Broker([address], {"node:standalone": process}, shared=False), **brokers}


def wait_accepting(name: str, addresses: list[Address]) -> None:
    """cluster.json is written once every group has a master; its AMQP port may lag."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while not all(accepts(a) for a in addresses):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name}: a node does not accept AMQP connections")
        time.sleep(0.1)


def _channel_do(address: Address, what: Callable[[Any], object]) -> None:
    """One channel operation (a declare, a delete) on its own connection."""
    host, port = address
    connection = pika.BlockingConnection(pika.ConnectionParameters(host, port, heartbeat=0))
    try:
        what(connection.channel())
    finally:
        with contextlib.suppress(Exception):
            connection.close()


def one_run(
    args: argparse.Namespace, broker: Broker, clients: Clients, seconds: float, rate: float = 0.0
) -> dict[str, Any]:
    """A fresh durable queue declared on every node of the broker, one run, the queue deleted
    (a shared queue's delete reaches every node through etcd)."""
    queue = f"sq-{time.monotonic_ns()}"
    arguments = SHARED if broker.shared else None
    for address in broker.nodes:
        _channel_do(address, lambda ch: ch.queue_declare(queue, durable=True, arguments=arguments))
    load = psutil.getloadavg()[0]
    before = etcd_counts(broker.etcd)
    try:
        result = run_clients(clients, queue, broker.cpus, seconds, rate)
        after = etcd_counts(broker.etcd)
    finally:
        _channel_do(broker.nodes[0], lambda ch: ch.queue_delete(queue))
    for name, count in after.items():
        result[f"{name}_per_1k_msgs"] = (count - before[name]) / result["delivered"] * 1000
    result["load_1min"] = load
    return result


ETCD_COUNTERS = {
    "etcd_txns": ("grpc_server_handled_total{", 'grpc_method="Txn"'),
    "etcd_ranges": ("grpc_server_handled_total{", 'grpc_method="Range"'),
    "etcd_writes": ("etcd_server_proposals_committed_total", ""),
}
"""What a run asks of etcd, from its /metrics: Txn and Range requests (every status), and
writes committed (each write request is one raft proposal, fsynced)."""


def etcd_counts(endpoint: str) -> dict[str, float]:
    """etcd's request counters now (none for a standalone node)."""
    counts = dict.fromkeys(ETCD_COUNTERS, 0.0) if endpoint else {}
    if endpoint:
        for line in httpx.get(f"{endpoint}/metrics", timeout=10).text.splitlines():
            for name, (prefix, label) in ETCD_COUNTERS.items():
                if line.startswith(prefix) and label in line:
                    counts[name] += float(line.rsplit(" ", 1)[1])
    return counts


def throughput_clients(args: argparse.Namespace, broker: Broker) -> Clients:
    return Clients(
        publishers=spread(broker.nodes, args.publishers, args.processes),
        consumers=spread(broker.nodes, args.consumers, args.processes),
        size=args.size, window=args.window, prefetch=args.prefetch, ack_every=args.ack_every,
    )  # fmt: skip


def latency_clients(args: argparse.Namespace, broker: Broker, consumers: int) -> Clients:
    """One publisher on the first node; `consumers` connections spread over the nodes."""
    return Clients(
        publishers=[[broker.nodes[0]]],
        consumers=spread(broker.nodes, consumers, 1),
        size=args.size, window=args.window, prefetch=args.prefetch, ack_every=args.ack_every,
    )  # fmt: skip


def measure(
    args: argparse.Namespace, groups: list[int], stack: ExitStack
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    brokers = start_brokers(args, groups, stack)
    names = list(brokers)
    if args.warmup_seconds:
        for name in names:
            echo(args, f"warm-up {name}: {args.warmup_seconds:g} s")
            one_run(
                args, brokers[name], throughput_clients(args, brokers[name]), args.warmup_seconds
            )
    runs: list[dict[str, Any]] = []
    for index in range(args.repeat):
        order = names[index % len(names) :] + names[: index % len(names)]
        entry: dict[str, Any] = {"repeat": index + 1}
        for name in order:
            broker = brokers[name]
            result = entry[name] = one_run(
                args, broker, throughput_clients(args, broker), args.seconds
            )
            echo(
                args,
                f"repeat {index + 1}/{args.repeat} {name}: {result['msgs_per_s']:,.0f} msg/s, "
                f"{result['cpu_us_per_msg']:.1f} us/msg on the nodes, "
                f"load {result['load_1min']:.2f}",
            )
        runs.append(entry)
    latency: list[dict[str, Any]] = []
    if args.rate:
        largest = shared_name(groups[-1])
        consumers = len(brokers[largest].nodes)
        pair = [largest, CLASSIC]
        for index in range(args.latency_repeat):
            entry = {"repeat": index + 1}
            for name in pair[index % 2 :] + pair[: index % 2]:
                clients = latency_clients(args, brokers[name], consumers)
                result = entry[name] = one_run(
                    args, brokers[name], clients, args.latency_seconds, args.rate
                )
                echo(
                    args,
                    f"latency {index + 1}/{args.latency_repeat} {name}: "
                    f"p50 {result['p50_ms']:.1f} ms, p99 {result['p99_ms']:.1f} ms",
                )
            latency.append(entry)
    return runs, latency


# -- the JSON --------------------------------------------------------------------------------
def median_table(entries: list[dict[str, Any]], name: str) -> dict[str, Any]:
    figures = [e[name] for e in entries]
    out: dict[str, Any] = {}
    for key, value in figures[0].items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[key] = round(statistics.median(f[key] for f in figures), 3)
    out["msgs_per_s_runs"] = [round(f["msgs_per_s"]) for f in figures]
    out["cpu_us_per_msg_runs"] = [round(f["cpu_us_per_msg"], 1) for f in figures]
    if "p50_ms" in out:
        out["p50_ms_runs"] = [round(f["p50_ms"], 1) for f in figures]
        out["p99_ms_runs"] = [round(f["p99_ms"], 1) for f in figures]
    out["delivered_share_by_node"] = figures[-1]["delivered_share_by_node"]
    return out


def ratio(
    entries: list[dict[str, Any]], table: dict[str, Any], top: str, bottom: str, key: str
) -> dict[str, Any]:
    paired = [e[top][key] / e[bottom][key] for e in entries]
    return {
        "ratio_of_medians": round(table[top][key] / table[bottom][key], 3),
        "median_of_paired_ratios": round(statistics.median(paired), 3),
        "runs": [round(r, 3) for r in paired],
    }


def summary(
    head: dict[str, Any],
    groups: list[int],
    runs: list[dict[str, Any]],
    latency: list[dict[str, Any]],
) -> dict[str, Any]:
    names = [CLASSIC, *(shared_name(g) for g in groups)]
    table = {name: median_table(runs, name) for name in names}
    largest, smallest = shared_name(groups[-1]), shared_name(groups[0])
    out: dict[str, Any] = {
        **head,
        "load_average_end": [round(x, 2) for x in psutil.getloadavg()],
        "cpu_clock": "schedstat ns, all threads" if SCHEDSTAT else "psutil, 10 ms ticks",
        "slot_timeout_ms": SLOT_TIMEOUT_MS,
        "targets": TARGETS,
        "throughput": table,
    }
    cpu = ratio(runs, table, largest, CLASSIC, "cpu_us_per_msg")
    out["cpu_per_msg_shared_over_classic"] = {
        "shared": largest,
        "cpu_us_per_msg_shared": table[largest]["cpu_us_per_msg"],
        "cpu_us_per_msg_classic": table[CLASSIC]["cpu_us_per_msg"],
        **cpu,
        "etcd_cpu_us_per_msg": table[largest].get("etcd_cpu_us_per_msg"),
        "nameserver_cpu_us_per_msg": table[largest].get("nameserver_cpu_us_per_msg"),
        "etcd_txns_per_1k_msgs": table[largest].get("etcd_txns_per_1k_msgs"),
        "etcd_writes_per_1k_msgs": table[largest].get("etcd_writes_per_1k_msgs"),
        "target": TARGETS["cpu_shared_over_classic"],
        "met": cpu["ratio_of_medians"] <= TARGETS["cpu_shared_over_classic"],
    }
    scaling: dict[str, Any] = {}
    for g in groups[1:]:
        scaling[f"{g}_over_{groups[0]}_groups"] = ratio(
            runs, table, shared_name(g), smallest, "msgs_per_s"
        )
    if groups[0] == 1 and groups[-1] == 3:
        got = scaling["3_over_1_groups"]["ratio_of_medians"]
        scaling["target_3_over_1"] = TARGETS["msgs_per_s_3_over_1_groups"]
        scaling["met"] = got >= TARGETS["msgs_per_s_3_over_1_groups"]
    scaling["shared_over_classic"] = ratio(runs, table, largest, CLASSIC, "msgs_per_s")
    out["scaling"] = scaling
    if latency:
        pair = [largest, CLASSIC]
        lat: dict[str, Any] = {name: median_table(latency, name) for name in pair}
        lat["target_p50_ms"] = TARGETS["latency_p50_ms"]
        lat["met"] = lat[largest]["p50_ms"] <= TARGETS["latency_p50_ms"]
        out["latency"] = lat
    for entry in [*runs, *latency]:
        for name, figures in entry.items():
            if isinstance(figures, dict):
                entry[name] = {
                    k: round(v, 3) if isinstance(v, float) else v for k, v in figures.items()
                }
    out["runs"] = runs
    out["latency_runs"] = latency
    return out


if __name__ == "__main__":
    try:
        print(json.dumps(main(sys.argv[1:]), indent=2))
    except (KeyboardInterrupt, Interrupted) as exc:
        print(
            f"shared_queue: stopped ({str(exc) or 'SIGINT'}); every process it started is gone",
            file=sys.stderr,
        )
        sys.exit(130 if isinstance(exc, KeyboardInterrupt) else 143)

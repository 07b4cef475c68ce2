"""Commit-log HA: AMQP persistent + confirms on a standalone node, an `async` and a `sync` group.

    python benchmarks/ha_throughput.py [--messages 40000] [--sizes 100,4096]
        [--connections 64] [--processes 4] [--window 32] [--repeat 5] [--warmup 5000]
        [--rate 1000] [--seconds 5] [--latency-repeat 3] [--time-limit 1800] [--dir DIR]
        [--json-only]

Issue 22's figures (CLUSTER.md §8.3): with publisher confirms and persistent messages, a
2-node group replicating `async` makes at least 0.85x and one replicating `sync` (1 slave) at
least 0.6x a standalone node's msg/s; at 1,000 msg/s the `sync` group's publish -> confirm
latency has p50 at most the standalone's + 1 ms and p99 at most 3 ms.

Three brokers, all real processes up for the whole run, on loopback:
- standalone: `herald run --config` with the sync group's master's own config minus
  `[cluster]` (the same plugins, store and log settings), its own ports and data dir;
- async: `herald cluster dev --nodes 2 --replication async` (its own etcd and name server,
  the command's timers: lease TTL 10 s), a master and one slave;
- sync: the same with `--replication sync` (min_in_sync_replicas 2: the slave's flushed ack
  releases a confirm).
A group is used once etcd names its master (`/herald/<name>/groups/g1/state` and the master's
claim) with both nodes in the sync set; clients talk to that master.

Throughput runs: `--processes` publisher processes share `--connections` pika
SelectConnections (one ioloop per process, one channel in confirm mode per connection), each
connection with up to `--window` unconfirmed persistent messages of one size (by default
64 x 32 = 2,048 unconfirmed in all, as amqp_throughput.py's 2 publishers x 1,000), to a fresh
durable queue with no consumer (the publish path alone: a queue of at most `--messages`,
deleted after the run). msgs_per_s is the confirmed messages over the time from the common
start to the last confirm. The CPU time of the master (and of the slave) is read at that start
and when the last publisher reports, on-CPU nanoseconds of all their threads (ThreadCpu of
cluster_overhead.py); per confirmed message it is master_cpu_us_per_msg and
slave_cpu_us_per_msg (group_cpu_us_per_msg: both). publisher_busy is the busiest publisher
process's CPU share over the run: near 1.0 the clients, not the broker, set the pace.

Latency runs: one connection publishes `--rate` msg/s for `--seconds` (paced by its ioloop,
no window), and each message's publish -> confirm time is taken (the first 0.5 s left out):
p50 / p99 / p99.9 / max.

Each repetition runs every size against the three brokers in turn, the first broker rotating
from one repetition to the next, after an unmeasured warm-up of `--warmup` messages per
broker and size; figures are medians of the repetitions, and the ratios are of medians within
this one run (and the median of the per-repetition ratios). Prints one JSON object. Every
process it started is stopped at the end, on an error, on Ctrl-C or SIGTERM, and when
`--time-limit` runs out.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from types import FrameType
from typing import Any

import psutil
from _common import Address, header
from _ha_group import dev_group
from _ha_publishers import run_clients
from cluster_overhead import (
    Interrupted,
    ThreadCpu,
    accepts,
    bounded,
    standalone,
)

GROUP = "g1"
START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 60.0  # `cluster dev` gives nodes 15 s, then the name server, then etcd
RUN_TIMEOUT_S = 300.0
LATENCY_WARMUP_S = 0.5
BROKERS = ("standalone", "async", "sync")
TARGETS = {"async": 0.85, "sync": 0.6, "sync_p99_ms": 3.0, "sync_p50_over_standalone_ms": 1.0}


def interrupt(signum: int, _frame: FrameType | None) -> None:
    raise Interrupted("--time-limit" if signum == signal.SIGALRM else signal.Signals(signum).name)


def echo(args: argparse.Namespace, line: str) -> None:
    if not args.json_only:
        print(line, file=sys.stderr, flush=True)


def main(argv: list[str]) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=40_000, help="per throughput run")
    parser.add_argument("--sizes", default="100,4096", help="message bodies, bytes")
    parser.add_argument("--connections", type=int, default=64, help="publishers in all")
    parser.add_argument("--processes", type=int, default=4, help="publisher processes")
    parser.add_argument("--window", type=int, default=32, help="unconfirmed per connection")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=5_000, help="messages; 0: none")
    parser.add_argument("--rate", type=float, default=1000.0, help="latency runs; 0: none")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of a latency run")
    parser.add_argument("--latency-repeat", type=int, default=3)
    parser.add_argument("--time-limit", type=int, default=1800, help="seconds, all in all")
    parser.add_argument("--dir", type=Path, help="keep configs, data and logs here")
    parser.add_argument("--json-only", action="store_true", help="no progress on stderr")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    if min([args.messages, args.connections, args.processes, args.window, *sizes]) < 1:
        parser.error("--messages, --connections, --processes, --window, --sizes: positive")
    if args.repeat < 0 or args.latency_repeat < 0 or args.seconds <= LATENCY_WARMUP_S:
        parser.error(f"--repeat, --latency-repeat >= 0; --seconds > {LATENCY_WARMUP_S}")
    args.processes = min(args.processes, args.connections)

    head = header("ha_throughput", ["pika"], args)
    head["settings"] = {**head["settings"], "dir": args.dir and str(args.dir)}

    def work(stack: ExitStack) -> Any:
        measured = measure(args, sizes, stack)
        echo(args, "stopping the brokers")
        return measured

    runs, latency = bounded(args.time_limit, work)
    return summary(head, sizes, runs, latency)


Target = tuple[Address, dict[str, ThreadCpu]]


def start_brokers(args: argparse.Namespace, stack: ExitStack) -> dict[str, Target]:
    if args.dir is None:
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="herald-ha-")))
    else:
        root = args.dir.resolve()
        root.mkdir(parents=True, exist_ok=True)
    targets: dict[str, Target] = {}
    config = Path()
    for mode in ("async", "sync"):
        echo(args, f"starting a 2-node {mode} group under {root / mode}")
        options = ["--replication", mode, "--name", f"ha-{mode}"]
        group = stack.enter_context(dev_group(root / mode, 2, options))
        state = group.wait_full_sync_set()
        master = state["master"]
        slave = next(n["name"] for n in group.info["nodes"] if n["name"] != master)
        address = group.amqp(master)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not accepts(address):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{mode}: master {master} does not accept AMQP connections")
            time.sleep(0.1)
        cpus = {
            "master": ThreadCpu(group.node(master)["pid"]),
            "slave": ThreadCpu(group.node(slave)["pid"]),
        }
        targets[mode] = (address, cpus)
        config = Path(group.node(master)["config"])  # the sync master's, for the standalone
        echo(args, f"{mode}: master {master} at {address[0]}:{address[1]}, slave {slave}")
    address, process = stack.enter_context(standalone(root, config))
    echo(args, f"standalone at {address[0]}:{address[1]} ({config.name} minus [cluster])")
    return {"standalone": (address, {"master": process}), **targets}


def measure(
    args: argparse.Namespace, sizes: list[int], stack: ExitStack
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    targets = start_brokers(args, stack)

    def one(name: str, size: int, total: int, rate: float = 0.0) -> dict[str, Any]:
        address, cpus = targets[name]
        if rate:
            return run_clients(address, cpus, size, total, 1, 1, 1, rate)
        return run_clients(
            address, cpus, size, total, args.connections, args.processes, args.window, 0.0
        )

    if args.warmup:
        for size in sizes:
            for name in BROKERS:
                echo(args, f"warm-up {name} {size} B: {args.warmup} messages")
                one(name, size, args.warmup)
    runs: list[dict[str, Any]] = []
    for index in range(args.repeat):
        order = BROKERS[index % 3 :] + BROKERS[: index % 3]
        for size in sizes:
            entry: dict[str, Any] = {"repeat": index + 1, "size": size}
            for name in order:
                result = entry[name] = one(name, size, args.messages)
                echo(
                    args,
                    f"repeat {index + 1}/{args.repeat} {size} B {name}: "
                    f"{result['msgs_per_s']:,.0f} msg/s, master "
                    f"{result['master_cpu_us_per_msg']:.1f} us/msg, "
                    f"load {psutil.getloadavg()[0]:.2f}",
                )
            for mode in ("async", "sync"):
                entry[f"{mode}_vs_standalone"] = round(
                    entry[mode]["msgs_per_s"] / entry["standalone"]["msgs_per_s"], 3
                )
            runs.append(entry)
    latency: list[dict[str, Any]] = []
    if args.rate:
        total = int(args.rate * args.seconds)
        for index in range(args.latency_repeat):
            order = BROKERS[index % 3 :] + BROKERS[: index % 3]
            for size in sizes:
                entry = {"repeat": index + 1, "size": size}
                for name in order:
                    result = entry[name] = one(name, size, total, args.rate)
                    echo(
                        args,
                        f"latency {index + 1}/{args.latency_repeat} {size} B {name}: "
                        f"p50 {result['p50_ms']:.2f} ms, p99 {result['p99_ms']:.2f} ms",
                    )
                latency.append(entry)
    return runs, latency


def _median_table(entries: list[dict[str, Any]], name: str) -> dict[str, Any]:
    figures = [e[name] for e in entries]
    out: dict[str, Any] = {}
    for key, value in figures[0].items():
        if isinstance(value, int | float):
            out[key] = round(statistics.median(f[key] for f in figures), 3)
    spread = "p99_ms" if "p99_ms" in out else "msgs_per_s"
    out[f"{spread}_runs"] = [round(f[spread], 2 if spread == "p99_ms" else None) for f in figures]
    return out


def summary(
    head: dict[str, Any],
    sizes: list[int],
    runs: list[dict[str, Any]],
    latency: list[dict[str, Any]],
) -> dict[str, Any]:
    throughput: dict[str, Any] = {}
    for size in sizes:
        entries = [r for r in runs if r["size"] == size]
        if not entries:  # --repeat 0: latency runs only
            continue
        table = {name: _median_table(entries, name) for name in BROKERS}
        base = table["standalone"]["msgs_per_s"]
        ratios = {}
        for mode in ("async", "sync"):
            ratio = round(table[mode]["msgs_per_s"] / base, 3)
            ratios[f"{mode}_vs_standalone"] = {
                "ratio_of_medians": ratio,
                "median_of_paired_ratios": round(
                    statistics.median(e[f"{mode}_vs_standalone"] for e in entries), 3
                ),
                "runs": [e[f"{mode}_vs_standalone"] for e in entries],
                "target": TARGETS[mode],
                "met": ratio >= TARGETS[mode],
            }
        alone_cpu = table["standalone"]["master_cpu_us_per_msg"]
        ratios["cpu_per_msg_vs_standalone"] = {
            mode: {
                "master": round(table[mode]["master_cpu_us_per_msg"] / alone_cpu, 3),
                "master_and_slave": round(table[mode]["group_cpu_us_per_msg"] / alone_cpu, 3),
            }
            for mode in ("async", "sync")
        }
        throughput[f"{size}B"] = {**table, **ratios}
    latencies: dict[str, Any] = {}
    for size in sizes:
        entries = [r for r in latency if r["size"] == size]
        if not entries:
            continue
        table = {name: _median_table(entries, name) for name in BROKERS}
        sync, alone = table["sync"], table["standalone"]
        latencies[f"{size}B"] = {
            **table,
            "sync_p50_over_standalone_ms": round(sync["p50_ms"] - alone["p50_ms"], 3),
            "sync_p50_met": sync["p50_ms"] - alone["p50_ms"]
            <= TARGETS["sync_p50_over_standalone_ms"],
            "sync_p99_met": sync["p99_ms"] <= TARGETS["sync_p99_ms"],
        }
    for entry in [*runs, *latency]:
        for name in BROKERS:
            entry[name] = {
                k: round(v, 3) if isinstance(v, float) else v for k, v in entry[name].items()
            }
    return {
        **head,
        "load_average_end": [round(x, 2) for x in psutil.getloadavg()],
        "cpu_clock": "schedstat ns, all threads",
        "targets": TARGETS,
        "throughput": throughput,
        "latency": latencies,
        "runs": runs,
        "latency_runs": latency,
    }


if __name__ == "__main__":
    try:
        print(json.dumps(main(sys.argv[1:]), indent=2))
    except (KeyboardInterrupt, Interrupted) as exc:
        print(
            f"ha_throughput: stopped ({str(exc) or 'SIGINT'}); every process it started is gone",
            file=sys.stderr,
        )
        sys.exit(130 if isinstance(exc, KeyboardInterrupt) else 143)

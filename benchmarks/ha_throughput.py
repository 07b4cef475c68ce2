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
import base64
import collections
import json
import multiprocessing as mp
import queue as queues
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
import pika
import psutil
from _common import Address, cpu_seconds, header
from cluster_overhead import (
    HERALD,
    Interrupted,
    ThreadCpu,
    accepts,
    address_of,
    spawn,
    standalone,
    stop_all,
    tail,
)
from pika.adapters.select_connection import IOLoop

from herald.cluster import keys

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


# -- a group under `herald cluster dev` (cluster_failover.py uses these too) -----------------
def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def group_keys(client: httpx.Client, etcd: str, cluster: str) -> dict[str, Any]:
    """The group's keys in etcd, read through its JSON gateway: {"state": ..., "master": ...}
    (a key that is absent is left out; the master's claim goes with its lease)."""
    prefix = keys.groups_prefix(cluster, GROUP).encode()
    end = prefix[:-1] + bytes([prefix[-1] + 1])
    response = client.post(
        f"{etcd}/v3/kv/range", json={"key": _b64(prefix), "range_end": _b64(end)}
    )
    response.raise_for_status()
    found: dict[str, Any] = {}
    for kv in response.json().get("kvs", []):
        name = base64.b64decode(kv["key"]).decode().rpartition("/")[2]
        found[name] = json.loads(base64.b64decode(kv["value"]))
    return found


def settled(found: dict[str, Any]) -> dict[str, Any] | None:
    """The group's state when its master holds its claim (the claim names the state's master
    at its epoch), else None: an election or a promotion is under way."""
    state, claim = found.get("state"), found.get("master")
    if state is None or claim is None or claim.get("node") != state.get("master"):
        return None
    return dict(state)


@dataclass
class Group:
    """One group started by `herald cluster dev`: cluster.json and the group's keys in etcd."""

    root: Path
    info: dict[str, Any]
    http: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=2.0))

    @property
    def etcd(self) -> str:
        return str(self.info["etcd"])

    @property
    def name(self) -> str:
        return str(self.info["cluster"])

    def keys(self) -> dict[str, Any]:
        return group_keys(self.http, self.etcd, self.name)

    def node(self, name: str) -> dict[str, Any]:
        return dict(next(n for n in self.info["nodes"] if n["name"] == name))

    def amqp(self, name: str) -> Address:
        return address_of(self.node(name)["addrs"]["amqp"])

    def wait_state(
        self, condition: Callable[[dict[str, Any]], bool], what: str, timeout: float
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            with suppress(httpx.HTTPError, ValueError):
                state = settled(self.keys())
                if state is not None and condition(state):
                    return state
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{what}: not after {timeout:g} s\n{tail(self.root / 'dev.log')}"
                )
            time.sleep(0.05)

    def wait_full_sync_set(self, timeout: float = START_TIMEOUT_S) -> dict[str, Any]:
        size = len(self.info["nodes"])
        return self.wait_state(
            lambda s: len(s.get("sync_set", [])) == size, f"a sync set of {size}", timeout
        )


@contextmanager
def dev_group(root: Path, nodes: int, options: list[str]) -> Iterator[Group]:
    """`herald cluster dev --nodes N --dir root OPTIONS` (one group: a master and its slaves,
    with an etcd and a name server of its own); yields it once cluster.json is written. On the
    way out it stops the command (which stops what it started), then whatever outlived it."""
    root.mkdir(parents=True, exist_ok=True)
    log = root / "dev.log"
    command = [*HERALD, "cluster", "dev", "--nodes", str(nodes), "--dir", str(root), *options]
    dev = spawn(command, log)
    dev_process = psutil.Process(dev.pid)
    started: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while (info := _cluster_json(root / "cluster.json", nodes)) is None:
            if dev.poll() is not None:
                raise RuntimeError(f"herald cluster dev exited with {dev.returncode}\n{tail(log)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"herald cluster dev: no cluster.json\n{tail(log)}")
            time.sleep(0.1)
        pids = [n["pid"] for n in info["nodes"]] + [info["nameserver_pid"], info["etcd_pid"]]
        started = [psutil.Process(pid) for pid in pids if isinstance(pid, int)]
        group = Group(root, info)
        try:
            yield group
        finally:
            group.http.close()
    finally:
        with suppress(psutil.NoSuchProcess):  # all it started, in case it cannot stop them
            started += dev_process.children(recursive=True)
        stop_all([dev_process], STOP_TIMEOUT_S)
        dev.wait()
        stop_all(started, 10.0)


def _cluster_json(path: Path, nodes: int) -> dict[str, Any] | None:
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return info if len(info.get("nodes", [])) == nodes else None


# -- publisher processes ----------------------------------------------------------------------
@dataclass
class Start:
    """What the publisher processes share with this one: readiness, the common start time, and
    a queue for each process's report."""

    ready: Any
    go: Any
    began: Any
    results: Any

    @classmethod
    def make(cls) -> Start:
        return cls(mp.Semaphore(0), mp.Event(), mp.Value("d", 0.0), mp.Queue())


def publisher(
    start: Start,
    address: Address,
    queue: str,
    counts: list[int],
    size: int,
    window: int,
    rate: float,
) -> None:
    """One process: a pika SelectConnection per entry of `counts` on one ioloop, each sending
    its count of persistent messages with confirms, at most `window` unconfirmed, or (rate > 0)
    one every 1/rate s, timing each publish -> confirm."""
    host, port = address
    params = pika.ConnectionParameters(host, port, heartbeat=0, socket_timeout=30)
    properties = pika.BasicProperties(delivery_mode=2)
    payload = b"x" * size
    ioloop = IOLoop()
    report: dict[str, Any] = {"confirmed": 0, "nacked": 0, "last": 0.0, "latencies": []}
    opened = [0]
    done = [0]
    failed: list[str] = []

    class Link:
        def __init__(self, count: int) -> None:
            self.count = count
            self.sent = 0
            self.settled = 0
            self.outstanding: collections.deque[tuple[int, float]] = collections.deque()
            self.timer: Any = None
            self.channel: Any = None
            self.connection = pika.SelectConnection(
                params,
                on_open_callback=lambda c: c.channel(on_open_callback=self.on_channel),
                on_open_error_callback=self.on_error,
                on_close_callback=self.on_close,
                custom_ioloop=ioloop,
            )

        def on_error(self, _connection: Any, exc: Any) -> None:
            failed.append(f"connect: {exc!r}")
            ioloop.stop()

        def on_close(self, _connection: Any, exc: Any) -> None:
            if self.settled < self.count:
                failed.append(f"closed after {self.settled} of {self.count}: {exc!r}")
                ioloop.stop()

        def on_channel(self, channel: Any) -> None:
            self.channel = channel
            channel.confirm_delivery(self.on_confirm, callback=self.on_confirming)

        def on_confirming(self, _frame: Any) -> None:
            opened[0] += 1
            if opened[0] == len(links):
                ioloop.stop()  # every channel in confirm mode: wait for the common start

        def send_more(self) -> None:
            now = time.perf_counter()
            while self.sent < self.count and (rate or self.sent - self.settled < window):
                if rate:
                    due = start.began.value + self.sent / rate
                    if due > now:
                        if self.timer is None:
                            self.timer = ioloop.call_later(due - now, self.on_timer)
                        return
                self.channel.basic_publish("", queue, payload, properties)
                self.sent += 1
                self.outstanding.append((self.sent, time.perf_counter()))

        def on_timer(self) -> None:
            self.timer = None
            self.send_more()

        def on_confirm(self, frame: Any) -> None:
            now = time.perf_counter()
            method = frame.method
            ok = isinstance(method, pika.spec.Basic.Ack)
            tag = method.delivery_tag
            settled = []
            if method.multiple:
                while self.outstanding and self.outstanding[0][0] <= tag:
                    settled.append(self.outstanding.popleft())
            else:
                for entry in self.outstanding:
                    if entry[0] == tag:
                        self.outstanding.remove(entry)
                        settled.append(entry)
                        break
            self.settled += len(settled)
            report["confirmed" if ok else "nacked"] += len(settled)
            report["last"] = now
            if rate and ok:
                cut = start.began.value + LATENCY_WARMUP_S
                report["latencies"] += [now - sent for _, sent in settled if sent >= cut]
            if self.settled >= self.count:
                done[0] += 1
                if done[0] == len(links):
                    ioloop.stop()
            else:
                self.send_more()

    links = [Link(count) for count in counts]
    ioloop.start()  # until every channel is in confirm mode (or a failure)
    if failed:
        start.ready.release()
        start.results.put({"error": failed[0]})
        return
    start.ready.release()
    start.go.wait()
    cpu_at_start = time.process_time()
    delay = start.began.value - time.perf_counter()
    if delay > 0:
        time.sleep(delay)
    for link in links:
        link.send_more()
    ioloop.start()  # until every message is settled (or a failure)
    report["cpu"] = time.process_time() - cpu_at_start
    if failed:
        report["error"] = failed[0]
    start.results.put(report)
    for link in links:
        with suppress(Exception):
            link.connection.close()
    with suppress(Exception):
        ioloop.call_later(0.2, ioloop.stop)
        ioloop.start()  # let the closes go out


def split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def run_clients(
    address: Address,
    cpus: dict[str, ThreadCpu],
    size: int,
    total: int,
    connections: int,
    processes: int,
    window: int,
    rate: float,
) -> dict[str, Any]:
    """One run against one broker: a fresh durable queue, the publisher processes, the
    figures; the queue is deleted afterwards."""
    queue = f"ha-{size}-{time.monotonic_ns()}"
    host, port = address
    setup = pika.BlockingConnection(pika.ConnectionParameters(host, port, heartbeat=0))
    setup.channel().queue_declare(queue, durable=True)
    per_connection = split(total, connections)
    start = Start.make()
    workers = [
        mp.Process(
            target=publisher,
            args=(start, address, queue, counts, size, window, rate),
            daemon=True,
        )
        for counts in (per_connection[i::processes] for i in range(processes))
        if counts
    ]
    reports: list[dict[str, Any]] = []
    try:
        for worker in workers:
            worker.start()
        for _ in workers:
            if not start.ready.acquire(timeout=60):
                raise TimeoutError("a publisher process did not connect")
        before = {name: cpu_seconds(p) for name, p in cpus.items()}
        start.began.value = time.perf_counter() + 0.05
        start.go.set()
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while len(reports) < len(workers):
            try:
                reports.append(start.results.get(timeout=1.0))
            except queues.Empty:
                dead = [w.exitcode for w in workers if w.exitcode not in (None, 0)]
                if dead or time.monotonic() > deadline:
                    raise RuntimeError(f"publishers failed or hung (exit codes {dead})") from None
        after = {name: cpu_seconds(p) for name, p in cpus.items()}
        for worker in workers:
            worker.join(10)
    finally:
        for worker in workers:
            if worker.is_alive():
                worker.kill()
        with suppress(Exception):
            setup.channel().queue_delete(queue)
            setup.close()
    errors = [r["error"] for r in reports if "error" in r]
    if errors:
        raise RuntimeError(f"a publisher failed: {errors[0]}")
    confirmed = sum(r["confirmed"] for r in reports)
    seconds = max(r["last"] for r in reports) - start.began.value
    result: dict[str, Any] = {
        "msgs_per_s": confirmed / seconds if confirmed else 0.0,
        "confirmed": confirmed,
        "nacked": sum(r["nacked"] for r in reports),
        "publisher_busy": max(r["cpu"] / max(r["last"] - start.began.value, 1e-9) for r in reports),
    }
    for name in cpus:
        result[f"{name}_cpu_us_per_msg"] = (after[name] - before[name]) / max(confirmed, 1) * 1e6
    if "slave" in cpus:
        result["group_cpu_us_per_msg"] = (
            result["master_cpu_us_per_msg"] + result["slave_cpu_us_per_msg"]
        )
    latencies = sorted(x for r in reports for x in r["latencies"])
    if latencies:

        def at(q: float) -> float:
            return latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1e3

        result.update(
            p50_ms=at(0.5), p99_ms=at(0.99), p999_ms=at(0.999), max_ms=latencies[-1] * 1e3
        )
        result["samples"] = len(latencies)
    return result


# -- the benchmark --------------------------------------------------------------------------
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
    stack = ExitStack()
    previous = {s: signal.signal(s, interrupt) for s in (signal.SIGTERM, signal.SIGALRM)}
    signal.alarm(args.time_limit)
    try:
        runs, latency = measure(args, sizes, stack)
        echo(args, "stopping the brokers")
    finally:
        signal.alarm(0)
        quiet = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
        try:  # a second Ctrl-C must not cut the clean-up short (it is bounded)
            stack.close()
        finally:
            for s, handler in {**quiet, **previous}.items():
                signal.signal(s, handler)
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

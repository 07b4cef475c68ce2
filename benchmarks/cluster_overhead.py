"""Cluster overhead: broker CPU per delivered message of a cluster node against a standalone node.

    python benchmarks/cluster_overhead.py [--messages 40000] [--rounds 7] [--size 100]
        [--warmup 5000] [--time-limit 1800] [--dir DIR] [--json-only]

Issue 21's figure: a node of a 3-node cluster without replication costs at most 1.05x the
broker CPU per delivered message of a standalone node. Both brokers are real processes:
- cluster: `herald cluster dev --nodes 3 --groups 3` (an etcd, a name server, nodes n1-n3,
  one per group, with the command's own timers: lease TTL 10 s, registration every 30 s);
  the measured node is n1, the others stay up and idle;
- standalone: `herald run --config` with n1's own config (`DIR/cluster/n1.toml`: the same
  plugins, i.e. every installed one, the same store and log settings) without `[cluster]`,
  on free ports and its own data dir.
Both run for the whole benchmark, on loopback. The workload is amqp_throughput.py's
persistent_confirms case, run by the same code: 2 pika SelectConnection publishers with
publisher confirms (up to 1,000 unconfirmed each), persistent messages of `--size` bytes to
a fresh durable queue, 2 consumers with prefetch 1,000 acking with `multiple` every 100.

Each round runs the standalone node, then the cluster node (A B A B), after one unmeasured
warm-up of `--warmup` messages on each. A broker's CPU time is read just before the common
start of the publishers and again after the last consumer reported (_common.run_clients), so
connecting and the queue's declare / delete are outside the window; divided by the
deliveries it is broker_cpu_us_per_msg. The CPU time is the on-CPU nanoseconds of all the
process's threads (/proc/PID/task/*/schedstat: ThreadCpu), since psutil's user + system
comes in 10 ms ticks; broker_cpu_us_per_msg_ticks is psutil's figure over the same window,
as a check. The rest of the cluster (etcd, the name server, n2, n3) is read around the round
and given as a share of one core (rest_of_cluster_cpu_share), to show it stays idle; it is
not in the node's figure.

Prints one JSON object: each round's figures for both, their paired ratio, the medians, and
cluster / standalone of the medians against the target 1.05. Every process it started is
stopped at the end, on an error, on Ctrl-C or SIGTERM, and when `--time-limit` runs out.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

import psutil
from _common import Address, cpu_seconds, header, medians
from amqp_throughput import run as amqp_run

from herald.cluster.dev import node_config
from herald.core.ports import free_port

HERALD = [sys.executable, "-m", "herald.core.cli"]
NODES = 3
MEASURED = "n1"
TARGET = 1.05
START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 60.0  # `cluster dev` gives nodes 15 s, then the name server, then etcd
SCENARIO = "persistent_confirms"
SCHEDSTAT = Path("/proc/self/schedstat").exists()
WORKLOAD = {"publishers": 2, "consumers": 2, "window": 1000}


class ThreadCpu(psutil.Process):
    """A process whose cpu_times() counts nanoseconds: /proc/PID/stat (psutil's source) gives
    user + system in 10 ms clock ticks, ±2-4 % of a round's broker CPU. Here `user` is the
    on-CPU time of every thread (/proc/PID/task/TID/schedstat, first field) seen since the
    first reading, and `system` is 0: herald's Trio thread and the worker threads that
    fsync. A thread's time counts from one reading to the next; one that worked and exited
    between two readings would go unseen, which `ticks` (psutil's reading at the same
    moments) lets a caller check. Without schedstat (an old kernel), psutil's reading."""

    def __init__(self, pid: int) -> None:
        super().__init__(pid)
        self.ticks: list[float] = []
        self._threads: dict[int, int] = {}
        self._seen_ns = 0

    def cpu_times(self) -> Any:
        coarse = super().cpu_times()
        self.ticks.append(coarse.user + coarse.system)
        if not SCHEDSTAT:
            return coarse
        threads = {}
        for entry in os.scandir(f"/proc/{self.pid}/task"):
            try:
                with open(f"{entry.path}/schedstat") as f:
                    threads[int(entry.name)] = int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                continue  # the thread exited meanwhile
        for tid, ns in threads.items():
            last = self._threads.get(tid, 0)
            self._seen_ns += ns - last if ns >= last else ns  # smaller: a new thread, same tid
        self._threads = threads
        return coarse._replace(user=self._seen_ns / 1e9, system=0.0)


T = TypeVar("T")


class Interrupted(BaseException):
    """SIGTERM or the time limit: unwind through every clean-up, like Ctrl-C."""


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    raise Interrupted("--time-limit" if signum == signal.SIGALRM else signal.Signals(signum).name)


def bounded(time_limit: int, work: Callable[[ExitStack], T]) -> T:
    """`work(stack)` with SIGTERM and `time_limit` seconds raising `Interrupted`; then the
    stack's clean-up, which a second Ctrl-C or SIGTERM does not cut short (it is bounded).
    The cluster benchmarks run their brokers this way."""
    stack = ExitStack()
    previous = {s: signal.signal(s, _interrupt) for s in (signal.SIGTERM, signal.SIGALRM)}
    signal.alarm(time_limit)
    try:
        return work(stack)
    finally:
        signal.alarm(0)
        quiet = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            stack.close()
        finally:
            for s, handler in {**quiet, **previous}.items():
                signal.signal(s, handler)


def echo(args: argparse.Namespace, line: str) -> None:
    if not args.json_only:
        print(line, file=sys.stderr, flush=True)


def tail(path: Path, size: int = 2000) -> str:
    try:
        return path.read_text(errors="replace")[-size:]
    except OSError:
        return ""


def wait_until(probe: Any, what: str, process: subprocess.Popen[bytes], log: Path) -> Any:
    """Poll `probe` until it returns something truthy; `process` exiting ends it early."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"{what}: exited with {process.returncode}\n{tail(log)}")
        found = probe()
        if found:
            return found
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not ready after {START_TIMEOUT_S:g} s\n{tail(log)}")
        time.sleep(0.1)


def accepts(address: Address) -> bool:
    try:
        with socket.create_connection(address, timeout=1.0):
            return True
    except OSError:
        return False


def address_of(hostport: str) -> Address:
    host, _, port = hostport.rpartition(":")
    return host, int(port)


def spawn(command: list[str], log: Path) -> subprocess.Popen[bytes]:
    """A child in a session of its own (Ctrl-C reaches this script, which stops it in
    order) without the caller's HERALD_* / ETCD_* settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ETCD_", "HERALD_"))}
    with open(log, "ab") as out:
        return subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            env=env,
            start_new_session=True,
        )


def stop_all(processes: list[psutil.Process], timeout: float) -> None:
    """SIGTERM the ones still running (psutil checks the pid is still theirs), then
    SIGKILL what outlives `timeout`."""
    live = []
    for process in processes:
        try:
            process.terminate()
            live.append(process)
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(live, timeout=timeout)
    for process in alive:
        with suppress(psutil.NoSuchProcess):
            process.kill()
    psutil.wait_procs(alive, timeout=5)


@contextmanager
def dev_cluster(root: Path) -> Iterator[dict[str, Any]]:
    """`herald cluster dev --nodes 3 --groups 3 --dir root`; yields its cluster.json."""
    root.mkdir(parents=True, exist_ok=True)
    log = root / "dev.log"
    command = [*HERALD, "cluster", "dev", "--nodes", str(NODES), "--groups", str(NODES)]
    dev = spawn([*command, "--dir", str(root)], log)
    dev_process = psutil.Process(dev.pid)
    started: list[psutil.Process] = []
    try:
        info = wait_until(
            lambda: _cluster_json(root / "cluster.json"), "herald cluster dev", dev, log
        )
        pids = [n["pid"] for n in info["nodes"]] + [info["nameserver_pid"], info["etcd_pid"]]
        started = [psutil.Process(pid) for pid in pids if isinstance(pid, int)]
        yield info
    finally:
        with suppress(psutil.NoSuchProcess):  # all it started, in case it cannot stop them
            started += dev_process.children(recursive=True)
        stop_all([dev_process], STOP_TIMEOUT_S)  # it stops nodes, name server, etcd
        dev.wait()
        stop_all(started, 10.0)


def _cluster_json(path: Path) -> dict[str, Any] | None:
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return info if len(info.get("nodes", [])) == NODES else None


@contextmanager
def standalone(root: Path, node_toml: Path) -> Iterator[tuple[Address, ThreadCpu]]:
    """`herald run --config`: the cluster node's config without [cluster], on ports and a
    data dir of its own."""
    with open(node_toml, "rb") as f:
        sections: dict[str, dict[str, Any]] = tomllib.load(f)
    sections.pop("cluster")
    sections["broker"].update(node_name="standalone", data_dir=str(root / "standalone"))
    for section in sections.values():
        if "port" in section:
            section["port"] = free_port()
    config = root / "standalone.toml"
    config.write_text(node_config(sections))
    log = root / "standalone.log"
    server = spawn([*HERALD, "run", "--config", str(config)], log)
    process = ThreadCpu(server.pid)
    try:
        address = ("127.0.0.1", int(sections["amqp"]["port"]))
        wait_until(lambda: accepts(address), "standalone herald", server, log)
        yield address, process
    finally:
        stop_all([process], 30.0)
        server.wait()


def one_round(
    args: argparse.Namespace,
    address: Address,
    broker: ThreadCpu,
    others: list[ThreadCpu],
    messages: int,
) -> dict[str, Any]:
    """amqp_throughput.py's persistent_confirms case against one broker; run_clients reads
    the broker's CPU time at the common start and after the last delivery."""
    workload = argparse.Namespace(messages=messages, seconds=0.0, **WORKLOAD)
    load = psutil.getloadavg()[0]
    before = [cpu_seconds(p) for p in others]
    began = time.perf_counter()
    broker.ticks.clear()
    result = amqp_run(workload, address, broker, SCENARIO, args.size, 0.0)
    wall = time.perf_counter() - began
    if len(broker.ticks) != 2:
        raise RuntimeError(f"expected 2 readings of the broker's CPU, got {len(broker.ticks)}")
    result["broker_cpu_us_per_msg_ticks"] = (broker.ticks[1] - broker.ticks[0]) / messages * 1e6
    if others:
        spent = sum(cpu_seconds(p) for p in others) - sum(before)
        result["rest_of_cluster_cpu_share"] = spent / wall
    result["load_1min"] = load
    return result


def main(argv: list[str]) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=40_000, help="per round and broker")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--size", type=int, default=100, help="message body, bytes")
    parser.add_argument("--warmup", type=int, default=5_000, help="messages; 0: none")
    parser.add_argument("--time-limit", type=int, default=1800, help="seconds, all in all")
    parser.add_argument("--dir", type=Path, help="keep configs, data and logs here")
    parser.add_argument("--json-only", action="store_true", help="no progress on stderr")
    args = parser.parse_args(argv)
    if args.messages < 1 or args.rounds < 1 or args.size < 1:
        parser.error("--messages, --rounds and --size must be positive")

    head = header("cluster_overhead", ["pika"], args)
    head["settings"] = {**head["settings"], "dir": args.dir and str(args.dir), **WORKLOAD}

    def work(stack: ExitStack) -> list[dict[str, Any]]:
        rounds = measure(args, stack)
        echo(args, "stopping the brokers and the cluster")
        return rounds

    return summary(head, bounded(args.time_limit, work))


def measure(args: argparse.Namespace, stack: ExitStack) -> list[dict[str, Any]]:
    """Start the cluster and the standalone node (closed by `stack`), warm both up, run the
    rounds: each round's figures."""
    if args.dir is None:
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="herald-co-")))
    else:
        root = args.dir.resolve()
        root.mkdir(parents=True, exist_ok=True)
    echo(args, f"starting a {NODES}-node cluster and a standalone node under {root}")
    info = stack.enter_context(dev_cluster(root / "cluster"))
    node = next(n for n in info["nodes"] if n["name"] == MEASURED)
    others = [ThreadCpu(n["pid"]) for n in info["nodes"] if n is not node]
    others += [ThreadCpu(info[k]) for k in ("nameserver_pid", "etcd_pid")]
    alone_address, alone_process = stack.enter_context(standalone(root, Path(node["config"])))
    brokers = {
        "standalone": (alone_address, alone_process, []),
        "cluster_node": (address_of(node["addrs"]["amqp"]), ThreadCpu(node["pid"]), others),
    }
    if args.warmup:
        for name, (address, process, _) in brokers.items():
            echo(args, f"warm-up {name}: {args.warmup} messages")
            one_round(args, address, process, [], args.warmup)
    rounds: list[dict[str, Any]] = []
    for index in range(1, args.rounds + 1):
        entry: dict[str, Any] = {"round": index}
        for name, (address, process, rest) in brokers.items():
            result = entry[name] = one_round(args, address, process, rest, args.messages)
            echo(
                args,
                f"round {index}/{args.rounds} {name}: "
                f"{result['broker_cpu_us_per_msg']:.1f} us/msg, "
                f"{result['msgs_per_s']:,.0f} msg/s, load {result['load_1min']:.2f}",
            )
        entry["ratio"] = round(
            entry["cluster_node"]["broker_cpu_us_per_msg"]
            / entry["standalone"]["broker_cpu_us_per_msg"],
            3,
        )
        rounds.append(entry)
    return rounds


def summary(head: dict[str, Any], rounds: list[dict[str, Any]]) -> dict[str, Any]:
    table = {}
    for name in ("standalone", "cluster_node"):
        runs = [r[name] for r in rounds]
        table[name] = medians(runs)
        table[name]["broker_cpu_us_per_msg_runs"] = [
            round(r["broker_cpu_us_per_msg"], 1) for r in runs
        ]
    for entry in rounds:
        for name in ("standalone", "cluster_node"):
            entry[name] = {
                k: round(v, 3) if isinstance(v, float) else v for k, v in entry[name].items()
            }
    ours = table["cluster_node"]["broker_cpu_us_per_msg"]
    theirs = table["standalone"]["broker_cpu_us_per_msg"]
    ratio = round(ours / theirs, 3)
    return {
        **head,
        "load_average_end": [round(x, 2) for x in psutil.getloadavg()],
        "cluster": {"nodes": NODES, "groups": NODES, "replication": None, "measured": MEASURED},
        "cpu_clock": "schedstat ns, all threads" if SCHEDSTAT else "psutil, 10 ms ticks",
        "rounds": rounds,
        "medians": table,
        "cluster_vs_standalone": {
            "broker_cpu_us_per_msg": ratio,
            "median_of_round_ratios": round(statistics.median(r["ratio"] for r in rounds), 3),
            "msgs_per_s": round(
                table["cluster_node"]["msgs_per_s"] / table["standalone"]["msgs_per_s"], 3
            ),
            "target": TARGET,
            "met": ratio <= TARGET,
        },
    }


if __name__ == "__main__":
    try:
        print(json.dumps(main(sys.argv[1:]), indent=2))
    except (KeyboardInterrupt, Interrupted) as exc:
        print(
            f"cluster_overhead: stopped ({str(exc) or 'SIGINT'}); every process it started is gone",
            file=sys.stderr,
        )
        sys.exit(130 if isinstance(exc, KeyboardInterrupt) else 143)

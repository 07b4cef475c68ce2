"""Commit-log HA failover: kill -9 of a sync group's master, over and over; how long writes stop.

    python benchmarks/cluster_failover.py [--ttls 2,10] [--kills 20[,10]] [--size 100]
        [--settle-s 1] [--log-level warning] [--time-limit 1800] [--dir DIR] [--json-only]

Issue 22's figure (CLUSTER.md §8.3): with lease TTL T, the client-visible write gap of a
master kill has p50 at most T + 2 s (RocketMQ 5 with its defaults: about 10-15 s).

For each TTL of `--ttls`: `herald cluster dev --nodes 3 --replication sync --lease-ttl-s T`
(its own etcd and name server; the name server's timers shortened as in the HA tests: scan
0.5 s, expiry 2 s), one group of a master and two slaves. One pika publisher (a process of
its own) publishes persistent `--size`-byte messages with confirms, one at a time
(BlockingConnection, heartbeat 2 s), to whichever node etcd names master
(`/herald/<name>/groups/g1/state`, read through etcd's JSON gateway before every connect);
on any error it drops the connection and dials again 50 ms later. It records each stretch of
more than 0.25 s without a confirm: (last confirm, next confirm).

Each kill: wait until the sync set holds all 3 nodes and the publisher had a confirm in the
last 0.5 s, `--settle-s` more, then SIGKILL the master etcd names, and poll the group's keys
every 20 ms:
- detect_s: kill -> the old master's claim gone from etcd (its lease expired);
- elect_s: kill -> etcd's state names another master (epoch + 1) and it holds its claim;
- gap_s: the client-visible write gap, last confirm before the kill -> first confirm after
  it (the publisher's stretch that holds the kill);
- resume_after_elect_s: the new master's election -> that first confirm (promotion, the
  client's reconnect);
- then the killed node is started again (`herald run --config DIR/nX.toml`, same data dir:
  it comes back as a slave and cuts any unreplicated tail), and rejoin_s is its restart ->
  the sync set of 3 again.
Prints one JSON object: every kill, and per TTL p50 / p99 / max of each figure, with the
target gap <= TTL + 2 s checked on the p50. At the end the queue's depth on the last master
is read (a passive declare): it must be at least the number of confirmed messages (nothing
confirmed is lost; unconfirmed publishes may or may not be there). Every process it started
is stopped at the end, on an error, on Ctrl-C or SIGTERM, and when `--time-limit` runs out.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue as queues
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from contextlib import ExitStack, suppress
from pathlib import Path
from typing import Any

import httpx
import pika
import pika.exceptions
import psutil
from _common import header
from _ha_group import Group, dev_group, group_keys, settled
from cluster_overhead import HERALD, Interrupted, spawn, stop_all
from ha_throughput import echo, interrupt

NODES = 3
QUEUE = "failover"
GAP_S = 0.25
POLL_S = 0.02
RETRY_S = 0.05
READY_S = 0.5
WAIT_S = 120.0
"""A hang guard for a failover or a rejoin on a loaded 2-core box."""
NAMESERVER = ["--nameserver-scan-s", "0.5", "--nameserver-expiry-s", "2"]


# -- the publisher (a process of its own) -------------------------------------------------------
def publisher(
    etcd: str,
    cluster: str,
    ports: dict[str, int],
    size: int,
    stop: Any,
    last_ok: Any,
    confirmed: Any,
    gaps: Any,
    errors: Any,
) -> None:
    """Publish with confirms to etcd's master until `stop`; record the gaps between confirms
    (monotonic clock, which is system-wide: the main process compares it with its own)."""
    http = httpx.Client(timeout=1.0)
    properties = pika.BasicProperties(delivery_mode=2)
    body = b"x" * size
    master = next(iter(ports))
    seen: Counter[str] = Counter()
    while not stop.is_set():
        with suppress(httpx.HTTPError, ValueError, KeyError, TypeError):
            master = group_keys(http, etcd, cluster)["state"]["master"]
        connection = None
        try:
            connection = pika.BlockingConnection(
                pika.ConnectionParameters(
                    "127.0.0.1",
                    ports[master],
                    heartbeat=2,
                    socket_timeout=2.0,
                    blocked_connection_timeout=5.0,
                    connection_attempts=1,
                )
            )
            channel = connection.channel()
            channel.queue_declare(QUEUE, durable=True)
            channel.confirm_delivery()
            while not stop.is_set():
                channel.basic_publish("", QUEUE, body, properties)  # raises on a nack
                now = time.monotonic()
                if last_ok.value and now - last_ok.value > GAP_S:
                    gaps.put((last_ok.value, now, master))
                last_ok.value = now
                confirmed.value += 1
        except Exception as exc:  # any failure: count it, dial etcd's master again
            seen[type(exc).__name__] += 1
        finally:
            if connection is not None:
                with suppress(Exception):
                    connection.close()
        time.sleep(RETRY_S)
    errors.put(dict(seen))


# -- one TTL ----------------------------------------------------------------------------------
class Nodes:
    """The group's node processes: those `cluster dev` started, then the restarts (children of
    this script, stopped by it). A node that exits on its own is started again by `revive`,
    and noted with the reason its log gives."""

    def __init__(self, group: Group) -> None:
        self.group = group
        self.process = {n["name"]: psutil.Process(n["pid"]) for n in group.info["nodes"]}
        self.restarted: list[subprocess.Popen[bytes]] = []

    def alive(self, name: str) -> bool:
        try:
            return self.process[name].status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    def kill(self, name: str) -> None:
        os.kill(self.process[name].pid, signal.SIGKILL)

    def wait_dead(self, name: str) -> None:
        """Gone or a zombie (its sockets and file locks are released either way)."""
        deadline = time.monotonic() + 30
        while self.alive(name):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} (pid {self.process[name].pid}) outlived SIGKILL")
            time.sleep(POLL_S)

    def restart(self, name: str) -> None:
        node = self.group.node(name)
        child = spawn([*HERALD, "run", "--config", node["config"]], Path(node["log"]))
        self.restarted.append(child)
        self.process[name] = psutil.Process(child.pid)

    def revive(self, skip: str | None) -> list[dict[str, Any]]:
        """Start again every node but `skip` that exited by itself; what each said last."""
        revived = []
        for name in self.process:
            if name != skip and not self.alive(name):
                revived.append({"node": name, "reason": last_error(self.group, name)})
                self.restart(name)
        return revived

    def stop_restarted(self) -> None:
        live = []
        for child in self.restarted:
            with suppress(psutil.NoSuchProcess):
                live.append(psutil.Process(child.pid))
        stop_all(live, 20.0)
        for child in self.restarted:
            child.wait()


def last_error(group: Group, name: str) -> str:
    """The last line of a node's log that names an error (its traceback's last word)."""
    try:
        text = Path(group.node(name)["log"]).read_text(errors="replace")[-20_000:]
    except OSError:
        return "?"
    lines = [line.strip(" |+") for line in text.splitlines()]
    errors = [line for line in lines if "Error" in line or "error" in line]
    return (errors or [line for line in lines if line] or ["?"])[-1][:300]


def wait_for(probe: Any, what: str, timeout: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = probe()
        if found:
            return found
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not after {timeout:g} s")
        time.sleep(POLL_S)


def keys_now(group: Group) -> dict[str, Any]:
    try:
        return group.keys()
    except (httpx.HTTPError, ValueError):
        return {}


def ready(group: Group, nodes: Nodes, last_ok: Any, revived: list[dict[str, Any]]) -> Any:
    """Every node running, the group settled with all of them in the sync set, and the
    publisher confirmed within READY_S: the group's state, else None."""
    revived += nodes.revive(None)
    state = settled(keys_now(group))
    if state is None or len(state.get("sync_set", [])) != NODES:
        return None
    if not all(nodes.alive(n) for n in nodes.process):
        return None
    return state if time.monotonic() - last_ok.value < READY_S else None


def one_kill(
    args: argparse.Namespace,
    group: Group,
    nodes: Nodes,
    last_ok: Any,
    gaps: list[tuple[float, float, str]],
    gap_queue: Any,
) -> dict[str, Any]:
    """Kill etcd's master once; follow etcd and the publisher until the new master is elected,
    writes resumed, and the killed node, started again, is back in the sync set."""
    revived: list[dict[str, Any]] = []
    wait_for(lambda: ready(group, nodes, last_ok, revived), "a ready group")
    time.sleep(args.settle_s)
    state = wait_for(lambda: ready(group, nodes, last_ok, revived), "a ready group")
    revived.clear()  # only what happens from the kill on counts for this kill
    old, epoch = state["master"], state["epoch"]
    killed = time.monotonic()
    nodes.kill(old)
    detect = elect = dropped = restarted = None
    gap: tuple[float, float, str] | None = None
    while True:
        found = keys_now(group)
        now = time.monotonic()
        claim, current = found.get("master"), found.get("state")
        if detect is None and found and (claim is None or claim.get("node") != old):
            detect = now - killed
        new = settled(found)
        if elect is None and new is not None and new["master"] != old and new["epoch"] > epoch:
            elect, state = now - killed, new
        if dropped is None and current is not None and old not in current["sync_set"]:
            dropped = now - killed
        with suppress(queues.Empty):
            while True:
                gaps.append(gap_queue.get_nowait())
        if gap is None:
            # The write gap: the first stretch without confirms that ends after the kill. It
            # may start a little after the kill: confirms already on their way still arrive.
            gap = next((g for g in gaps if g[1] > killed), None)
        revived += nodes.revive(old if restarted is None else None)
        if restarted is None and gap is not None and elect is not None:
            nodes.wait_dead(old)
            restarted = time.monotonic()
            nodes.restart(old)
        if (
            restarted is not None
            and dropped is not None
            and new is not None
            and old in new["sync_set"]
            and len(new["sync_set"]) == NODES
            and all(nodes.alive(n) for n in nodes.process)
        ):
            elections = new["epoch"] - epoch
            break
        if now - killed > 2 * WAIT_S:
            alive = {n: nodes.alive(n) for n in nodes.process}
            raise RuntimeError(
                f"kill of {old}: no recovery after {2 * WAIT_S:g} s: keys {found}, nodes "
                f"alive {alive}, elect {elect}, gap {gap}, restarted {restarted}"
            )
        time.sleep(POLL_S)
    assert gap is not None and elect is not None and detect is not None
    start, end, _ = gap
    result = {
        "killed": old,
        "new_master": state["master"],
        "epoch": state["epoch"],
        "detect_s": detect,
        "elect_s": elect,
        "gap_s": end - start,
        "last_confirm_after_kill_s": max(0.0, start - killed),
        "resume_after_elect_s": end - killed - elect,
        "out_of_sync_set_s": dropped,
        "rejoin_s": time.monotonic() - restarted,
        "elections": elections,
        "unplanned_restarts": revived,
    }
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in result.items()}


def run_ttl(
    args: argparse.Namespace, root: Path, ttl: int, kills: int, stack: ExitStack
) -> dict[str, Any]:
    """One TTL's kills; what it starts goes on `stack`, which the caller closes (with Ctrl-C
    held off) before the next TTL or on the way out."""
    options = ["--replication", "sync", "--lease-ttl-s", str(ttl), "--name", f"failover-{ttl}"]
    echo(args, f"TTL {ttl} s: starting a {NODES}-node sync group under {root}")
    options += ["--log-level", args.log_level, *NAMESERVER]
    group = stack.enter_context(dev_group(root, NODES, options))
    nodes = Nodes(group)
    stack.callback(nodes.stop_restarted)
    ports = {n["name"]: int(n["addrs"]["amqp"].rpartition(":")[2]) for n in group.info["nodes"]}
    stop, last_ok, confirmed = mp.Event(), mp.Value("d", 0.0), mp.Value("q", 0)
    gap_queue: Any = mp.Queue()
    errors: Any = mp.Queue()
    worker = mp.Process(
        target=publisher,
        args=(group.etcd, group.name, ports, args.size, stop, last_ok, confirmed, gap_queue,
              errors),
        daemon=True,
    )  # fmt: skip
    worker.start()
    stack.callback(worker.kill)
    gaps: list[tuple[float, float, str]] = []
    results = []
    began = time.monotonic()
    for index in range(1, kills + 1):
        result = one_kill(args, group, nodes, last_ok, gaps, gap_queue)
        result["load_1min"] = round(psutil.getloadavg()[0], 2)
        results.append(result)
        echo(
            args,
            f"TTL {ttl} kill {index}/{kills}: {result['killed']} -> "
            f"{result['new_master']} (epoch {result['epoch']}): detect "
            f"{result['detect_s']:.2f} s, elect {result['elect_s']:.2f} s, gap "
            f"{result['gap_s']:.2f} s, rejoin {result['rejoin_s']:.2f} s, "
            f"load {result['load_1min']:.2f}",
        )
    stop.set()
    try:
        seen = errors.get(timeout=30)
    except queues.Empty:
        seen = {"publisher did not report": 1}
    worker.join(20)
    total = confirmed.value
    depth = queue_depth(group)
    return summarise_ttl(ttl, results, seen, total, depth, time.monotonic() - began)


def queue_depth(group: Group) -> int | None:
    """Messages in the queue on the master etcd names (a passive declare), or None."""
    try:
        master = group.wait_state(lambda s: True, "a master", WAIT_S)["master"]
        host, port = group.amqp(master)
        connection = pika.BlockingConnection(pika.ConnectionParameters(host, port, heartbeat=0))
        try:
            ok = connection.channel().queue_declare(QUEUE, durable=True, passive=True)
            return int(ok.method.message_count)
        finally:
            connection.close()
    except Exception:
        return None


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return {
        "p50": round(statistics.median(ordered), 3),
        "p99": round(at(0.99), 3),
        "max": round(ordered[-1], 3),
        "min": round(ordered[0], 3),
    }


def summarise_ttl(
    ttl: int,
    results: list[dict[str, Any]],
    errors: dict[str, int],
    confirmed: int,
    depth: int | None,
    seconds: float,
) -> dict[str, Any]:
    figures = {
        key: percentiles([r[key] for r in results])
        for key in (
            "detect_s",
            "elect_s",
            "gap_s",
            "resume_after_elect_s",
            "out_of_sync_set_s",
            "rejoin_s",
        )
    }
    clean = [r for r in results if not r["unplanned_restarts"]]
    if clean and len(clean) < len(results):
        figures["gap_s_without_unplanned_restarts"] = percentiles([r["gap_s"] for r in clean])
    target = ttl + 2.0
    return {
        "lease_ttl_s": ttl,
        "kills": len(results),
        "seconds": round(seconds, 1),
        **figures,
        "gap_target_s": target,
        "gap_p50_met": figures["gap_s"]["p50"] <= target,
        "kills_with_unplanned_restarts": sum(1 for r in results if r["unplanned_restarts"]),
        "confirmed": confirmed,
        "queue_depth_end": depth,
        "confirmed_missing_at_least": None if depth is None else max(0, confirmed - depth),
        "publisher_errors": errors,
        "each_kill": results,
    }


def main(argv: list[str]) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ttls", default="2", help="lease TTLs, seconds, comma-separated")
    parser.add_argument("--kills", default="20", help="kills per TTL: one number or one per TTL")
    parser.add_argument("--size", type=int, default=100, help="message body, bytes")
    parser.add_argument("--settle-s", type=float, default=1.0, help="pause before each kill")
    parser.add_argument(
        "--log-level", default="warning", help="the nodes' (DIR/ttlT/nX.log; info shows roles)"
    )
    parser.add_argument("--time-limit", type=int, default=1800, help="seconds, all in all")
    parser.add_argument("--dir", type=Path, help="keep configs, data and logs here")
    parser.add_argument("--json-only", action="store_true", help="no progress on stderr")
    args = parser.parse_args(argv)
    ttls = [int(t) for t in args.ttls.split(",")]
    kills = [int(k) for k in args.kills.split(",")]
    if len(kills) == 1:
        kills *= len(ttls)
    if len(kills) != len(ttls) or min(ttls) < 2 or min(kills) < 1 or args.size < 1:
        parser.error("--ttls >= 2 each, --kills >= 1 (one, or one per TTL), --size >= 1")

    head = header("cluster_failover", ["pika"], args)
    head["settings"] = {**head["settings"], "dir": args.dir and str(args.dir)}
    previous = {s: signal.signal(s, interrupt) for s in (signal.SIGTERM, signal.SIGALRM)}
    signal.alarm(args.time_limit)
    stack = ExitStack()
    try:
        if args.dir is None:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="herald-fo-")))
        else:
            root = args.dir.resolve()
        runs = []
        for ttl, count in zip(ttls, kills, strict=True):
            ttl_stack = stack.enter_context(ExitStack())
            runs.append(run_ttl(args, root / f"ttl{ttl}", ttl, count, ttl_stack))
            echo(args, f"TTL {ttl} s: stopping the group")
            ttl_stack.close()
    finally:
        signal.alarm(0)
        quiet = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            stack.close()
        finally:
            for s, handler in {**quiet, **previous}.items():
                signal.signal(s, handler)
    return {
        **head,
        "load_average_end": [round(x, 2) for x in psutil.getloadavg()],
        "group": {"nodes": NODES, "replication": "sync", "nameserver": NAMESERVER},
        "ttls": runs,
    }


if __name__ == "__main__":
    try:
        print(json.dumps(main(sys.argv[1:]), indent=2))
    except (KeyboardInterrupt, Interrupted) as exc:
        print(
            f"cluster_failover: stopped ({str(exc) or 'SIGINT'}); every process it started is gone",
            file=sys.stderr,
        )
        sys.exit(130 if isinstance(exc, KeyboardInterrupt) else 143)

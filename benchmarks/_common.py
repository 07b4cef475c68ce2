"""Shared pieces of the end-to-end benchmarks (amqp/mqtt/stomp_throughput.py).

They run the same client processes against herald and against peer brokers (RabbitMQ,
Mosquitto, amqtt) in one session, alternating brokers round by round, because the machine is
shared and noisy: only figures from one run can be compared. This module starts herald in its
own process (so its CPU time can be read apart from the clients'), finds a peer's process by
its listening port, runs publisher and consumer processes against a shared clock, and turns
per-message timestamps into latency percentiles. Besides throughput and broker CPU per
message, each run reports `consumer_busy` / `publisher_busy`, the busiest client's CPU time
over its run: near 1.0 that client, not the broker, set the pace.

`python benchmarks/_common.py --serve DIR --plugins mqtt --store memory` is the broker process.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import multiprocessing as mp
import platform
import queue
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, overload

import psutil

TIMEOUT = 300.0
STAMP = struct.Struct("<d")


# -- brokers --------------------------------------------------------------------------------
def serve(data_dir: Path, plugins: list[str], store: str, settings: list[str]) -> None:
    """The herald process: an embedded broker that writes its TCP ports to DIR/ports.json."""
    import trio

    from herald.core.embedding import embedded

    installed = {e.name for e in importlib.metadata.entry_points(group="herald")}
    extra = [
        importlib.import_module(f"herald.plugins.{name}.plugin")
        for name in plugins
        if name not in installed
    ]
    base = [f"{name}.{key}" for name in plugins for key in ("host=127.0.0.1", "port=0")]
    base += [f"{name}.ws_enabled=false" for name in plugins if name != "amqp"]
    base.append(f"store.backend={store}")

    async def main() -> None:
        async with embedded(
            plugins=plugins, settings=base + settings, data_dir=data_dir, extra_plugins=extra
        ) as broker:
            ports = {lst.protocol: lst.port for lst in broker.listeners if lst.transport == "tcp"}
            (data_dir / "ports.tmp").write_text(json.dumps(ports))
            (data_dir / "ports.tmp").rename(data_dir / "ports.json")
            await trio.sleep_forever()

    trio.run(main)


@contextmanager
def herald_broker(
    plugins: list[str], store: str, settings: Sequence[str] = ()
) -> Iterator[tuple[dict[str, int], psutil.Process]]:
    """Start herald in its own process; yield its ports by protocol and its process."""
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp)
        command = [sys.executable, __file__, "--serve", str(data_dir), "--store", store]
        command += ["--plugins", ",".join(plugins)]
        for setting in settings:
            command += ["--set", setting]
        server = subprocess.Popen(command)
        try:
            deadline = time.monotonic() + 30
            while not (data_dir / "ports.json").exists():
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("herald did not start")
                time.sleep(0.05)
            ports = json.loads((data_dir / "ports.json").read_text())
            yield ports, psutil.Process(server.pid)
        finally:
            server.terminate()
            server.wait(30)


Address = tuple[str, int]
"""Where a broker listens: (host, port)."""


@contextmanager
def maybe_herald(
    brokers: list[tuple[str, Address | None]],
    plugins: list[str],
    store: str,
    settings: Sequence[str] = (),
) -> Iterator[tuple[dict[str, int], psutil.Process | None]]:
    """herald_broker() when herald is among the brokers, else nothing."""
    if any(address is None for _, address in brokers):
        with herald_broker(plugins, store, settings) as started:
            yield started
    else:
        yield {}, None


def listening_process(address: Address) -> psutil.Process | None:
    """The process listening on a local TCP port (a peer broker: beam.smp, mosquitto, ...);
    None for a broker on another machine, whose CPU time this machine cannot see.

    Seeing another user's process (RabbitMQ runs as `rabbitmq`) takes root."""
    host, port = address
    if host not in ("127.0.0.1", "localhost", "::1"):
        return None
    for conn in psutil.net_connections(kind="tcp"):
        # laddr is () for a socket with no address
        if (
            conn.status == psutil.CONN_LISTEN
            and conn.laddr
            and conn.laddr.port == port
            and conn.pid
        ):
            return psutil.Process(conn.pid)
    raise RuntimeError(f"no listener seen on port {port}: peer down, or not root?")


def parse_brokers(
    text: str, default_ports: dict[str, int], host: str = "127.0.0.1"
) -> list[tuple[str, Address | None]]:
    """`herald,rabbitmq=5673,mosquitto,other=10.0.0.7:1883` -> [(name, (host, port))].

    `herald` alone is a herald this script starts (address None); any other name needs a port,
    its own or the default for that peer, and listens on `host` unless it names one."""
    brokers: list[tuple[str, Address | None]] = []
    for item in text.split(","):
        name, _, where = item.partition("=")
        if name == "herald" and not where:
            brokers.append((name, None))
            continue
        at, _, port = where.rpartition(":")
        if not port and name not in default_ports:
            raise SystemExit(f"{name!r} needs a port: {name}=[HOST:]PORT")
        brokers.append((name, (at or host, int(port) if port else default_ports[name])))
    return brokers


def resolve_targets(
    brokers: list[tuple[str, Address | None]],
    herald_ports: dict[str, int],
    herald_process: psutil.Process | None,
    protocol: str,
) -> dict[str, tuple[Address, psutil.Process | None]]:
    """Each broker's address for `protocol` and its process (for its CPU time)."""
    return {
        name: (("127.0.0.1", herald_ports[protocol]), herald_process)
        if address is None
        else (address, listening_process(address))
        for name, address in brokers
    }


def interleaved(
    repeat: int,
    cases: Sequence[Any],
    targets: dict[str, tuple[Address, psutil.Process | None]],
    run_one: Callable[[Address, psutil.Process | None, Any], dict],
    key: Callable[[Any], str],
) -> dict[str, dict[str, list[dict]]]:
    """Every case against every broker in turn, `repeat` times: machine noise hits them alike.
    Returns each run's result by case key and broker name."""
    results: dict[str, dict[str, list[dict]]] = {}
    for _ in range(repeat):
        for case in cases:
            for name, (address, process) in targets.items():
                result = run_one(address, process, case)
                results.setdefault(key(case), {}).setdefault(name, []).append(result)
    return results


def report(
    name: str,
    clients: list[str],
    args: argparse.Namespace,
    brokers: list[tuple[str, Address | None]],
    results: dict[str, dict[str, list[dict]]],
) -> dict[str, Any]:
    """The benchmark's JSON: head, brokers, medians per scenario and broker, ratios."""
    table = {key: {b: medians(r) for b, r in by.items()} for key, by in results.items()}
    return {
        **header(name, clients, args),
        "brokers": {b: None if a is None else f"{a[0]}:{a[1]}" for b, a in brokers},
        "scenarios": table,
        "herald_vs_peers": ratios(table),
    }


@overload
def cpu_seconds(process: psutil.Process) -> float: ...
@overload
def cpu_seconds(process: psutil.Process | None) -> float | None: ...
def cpu_seconds(process: psutil.Process | None) -> float | None:
    """User + system CPU time of a process; None when it is not on this machine."""
    if process is None:
        return None
    times = process.cpu_times()
    return times.user + times.system


# -- one run of client processes ------------------------------------------------------------
class Shared:
    """What client processes share: the start signal, the delivery count, the results."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.counter = mp.Value("q", 0)
        self.ready = mp.Semaphore(0)
        self.start = mp.Event()
        self.began = mp.Value("d", 0.0)
        self.publishers_done = mp.Value("q", 0)
        self.results: Any = mp.Queue()
        self.publisher_cpu: Any = mp.Queue()
        self.cpu_at_start = 0.0  # set in each publisher's own copy by wait_start()

    def delivered(self) -> bool:
        """Count one delivery; True once every expected delivery has arrived."""
        with self.counter.get_lock():
            self.counter.value += 1
            return self.counter.value >= self.expected

    def finished(self) -> bool:
        return self.counter.value >= self.expected


class Receipts:
    """A consumer's own record: how many it got, when the last came, latencies (seconds)."""

    def __init__(self, shared: Shared, stamped: bool, warmup: float) -> None:
        self.shared = shared
        self.stamped = stamped
        self.warmup = warmup
        self.count = 0
        self.last = 0.0
        self.latencies: list[float] = []
        self.idle_since = time.perf_counter()
        self.cpu_at_start = time.process_time()

    def got(self, body: bytes) -> bool:
        now = time.perf_counter()
        self.count += 1
        self.last = now
        if self.stamped:
            sent = STAMP.unpack_from(body)[0]
            if sent - self.shared.began.value >= self.warmup:
                self.latencies.append(now - sent)
        return self.shared.delivered()

    def should_stop(self, publishers: int, idle: float = 3.0) -> bool:
        """Stop when all arrived, or (lossy QoS 0) publishers are done and nothing comes."""
        now = time.perf_counter()
        if self.shared.finished():
            return True
        if self.last > self.idle_since:
            self.idle_since = self.last
        if self.shared.publishers_done.value >= publishers:
            return now - max(self.idle_since, self.shared.began.value) > idle
        return now - self.shared.began.value > TIMEOUT if self.shared.began.value else False

    def report(self) -> None:
        cpu = time.process_time() - self.cpu_at_start
        self.shared.results.put((self.count, self.last, self.latencies, cpu))


def stamped_body(size: int) -> Callable[[], bytes]:
    """A body of `size` bytes that starts with the send time (perf_counter is system-wide)."""
    pad = b"x" * max(0, size - STAMP.size)
    return lambda: STAMP.pack(time.perf_counter()) + pad


def pace(shared: Shared, index: int, publishers: int, rate: float) -> Callable[[int], float]:
    """When message i of publisher `index` is due: publishers interleave to `rate` in all."""
    return lambda i: shared.began.value + (i * publishers + index) / rate


def publisher_done(shared: Shared) -> None:
    """Count a publisher as done; report its CPU time and how long it published."""
    cpu = time.process_time() - shared.cpu_at_start
    shared.publisher_cpu.put((cpu, time.perf_counter() - shared.began.value))
    with shared.publishers_done.get_lock():
        shared.publishers_done.value += 1


def run_clients(
    shared: Shared,
    consumers: list[tuple[Callable, tuple]],
    publishers: list[tuple[Callable, tuple]],
    broker: psutil.Process | None,
) -> dict:
    """Start consumers, wait until they are subscribed, start publishers, time the whole."""
    cons = [mp.Process(target=t, args=(shared, *a), daemon=True) for t, a in consumers]
    pubs = [mp.Process(target=t, args=(shared, *a), daemon=True) for t, a in publishers]
    try:
        for process in cons:
            process.start()
        for _ in cons:
            if not shared.ready.acquire(timeout=60):
                raise TimeoutError("a consumer did not start")
        for process in pubs:
            process.start()
        for _ in pubs:
            if not shared.ready.acquire(timeout=60):
                raise TimeoutError("a publisher did not connect")
        cpu_before = cpu_seconds(broker)
        shared.began.value = time.perf_counter() + 0.05
        shared.start.set()
        received = [_result(shared, pubs + cons) for _ in cons]
        cpu_after = cpu_seconds(broker)
        published = [shared.publisher_cpu.get(timeout=30) for _ in pubs]
        for process in pubs + cons:
            process.join(30)
    except queue.Empty:
        raise TimeoutError(f"consumers got {shared.counter.value} of {shared.expected}") from None
    finally:
        for process in pubs + cons:
            if process.is_alive():
                process.kill()
    count = sum(r[0] for r in received)
    seconds = max(r[1] for r in received) - shared.began.value
    latencies = [x for r in received for x in r[2]]
    result = {
        "msgs_per_s": count / seconds if count else 0.0,
        "delivered": count / shared.expected,
        "broker_cpu_us_per_msg": (cpu_after - cpu_before) / count * 1e6
        if count and cpu_before is not None and cpu_after is not None
        else None,
        # the busiest client's CPU share over its run: near 1.0, that client set the pace
        "consumer_busy": max(r[3] / max(r[1] - shared.began.value, 1e-9) for r in received),
        "publisher_busy": max(c / max(t, 1e-9) for c, t in published),
    }
    if latencies:
        result.update(latency_ms(latencies))
    return result


def _result(shared: Shared, processes: list[mp.Process]) -> tuple:
    """A consumer's report; fails at once if a client process died (e.g. the peer refused it)."""
    deadline = time.monotonic() + TIMEOUT + 30
    while time.monotonic() < deadline:
        try:
            return shared.results.get(timeout=1)
        except queue.Empty:
            failed = [p.exitcode for p in processes if p.exitcode not in (None, 0)]
            if failed:
                raise RuntimeError(f"a client process failed (exit codes {failed})") from None
    raise queue.Empty


def wait_start(shared: Shared) -> None:
    """A publisher has connected: say so, then wait for the common start."""
    shared.ready.release()
    shared.start.wait()
    shared.cpu_at_start = time.process_time()
    delay = shared.began.value - time.perf_counter()
    if delay > 0:
        time.sleep(delay)


# -- figures --------------------------------------------------------------------------------
def latency_ms(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e3

    return {"p50_ms": at(0.50), "p99_ms": at(0.99), "samples": len(ordered)}


def medians(runs: list[dict]) -> dict[str, Any]:
    """Medians of every figure, and every run's throughput (or p99) to show the spread."""
    keys = [k for k in runs[0] if isinstance(runs[0][k], int | float)]
    out = {k: round(statistics.median(r[k] for r in runs), 3) for k in keys}
    for key in ("msgs_per_s", "broker_cpu_us_per_msg", "samples"):
        if key in out:
            out[key] = round(out[key], 1)
    spread = "p99_ms" if "p99_ms" in out else "msgs_per_s"
    out[f"{spread}_runs"] = [round(r[spread], 3 if spread == "p99_ms" else None) for r in runs]
    return out


def header(name: str, clients: list[str], args: argparse.Namespace) -> dict:
    """The JSON's common head: machine, versions of the clients, the settings of the run."""
    versions = {c: importlib.metadata.version(c) for c in clients}
    return {
        "benchmark": name,
        "python": platform.python_version(),
        "cpus": psutil.cpu_count(),
        "load_average": [round(x, 2) for x in psutil.getloadavg()],
        "clients": versions,
        "settings": vars(args),
    }


def ratios(table: dict[str, dict[str, dict]], base: str = "herald") -> dict[str, dict]:
    """herald's median over each peer's, per scenario: throughput (higher is better) or, for
    latency runs, p50 and p99 (lower is better)."""
    out: dict[str, dict] = {}
    for scenario, by_broker in table.items():
        ours = by_broker.get(base, {})
        for peer, theirs in by_broker.items():
            if peer == base or not ours or not theirs:
                continue
            entry = out.setdefault(scenario, {})
            if "p50_ms" in ours and "p50_ms" in theirs:
                for q in ("p50", "p99"):
                    entry[f"{q}_vs_{peer}"] = round(ours[f"{q}_ms"] / theirs[f"{q}_ms"], 2)
            elif theirs.get("msgs_per_s"):
                entry[f"vs_{peer}"] = round(ours["msgs_per_s"] / theirs["msgs_per_s"], 2)
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="the herald broker process of a benchmark")
    parser.add_argument("--serve", type=Path, required=True)
    parser.add_argument("--plugins", required=True)
    parser.add_argument("--store", default="commitlog")
    parser.add_argument("--set", action="append", default=[])
    opts = parser.parse_args()
    serve(opts.serve, opts.plugins.split(","), opts.store, opts.set)

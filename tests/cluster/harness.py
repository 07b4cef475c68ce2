"""Processes for the cluster tests: a real etcd, herald nodes and `herald cluster dev`.

Everything here is synchronous and blocking, so session fixtures can use it; a Trio test
calls the slow parts through `trio.to_thread.run_sync` (e.g. `etcd.restart`) so its own
tasks (a watcher) keep running meanwhile.

etcd is the binary `etcd` from PATH (Debian: `apt-get install etcd-server`). Each instance
gets two free loopback ports (client, peer) and its own data dir, so tests never touch a
system etcd on 2379 nor each other.

Nodes: `NodeProcess` is one `herald run --config FILE` (kill -9, SIGSTOP/SIGCONT, SIGTERM,
restart on the same config, hence the same ports and data dir); `NodeProcess.adopt` takes a
node another process started (a `herald cluster dev`'s, by pid from its cluster.json).
`DevCluster` runs `herald cluster dev` itself and `wait_cluster_json` waits for its
cluster.json; `cluster_view` / `node_names` read a name server's `/v1/cluster`, `etcd_get`
one etcd key (a node key, to see a lease expire and come back).
`pid_alive` says whether a pid is a live process (a zombie is not).
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
import httpx
import psutil
import trio

from tests.ports import free_port as free_port  # re-exported: the cluster tests import it here

if TYPE_CHECKING:
    from herald.cluster.etcd import KeyValue

T = TypeVar("T")
HERALD = [sys.executable, "-m", "herald.core.cli"]
WAIT_S = 30.0
"""A hang guard for process waits, never a timing assertion."""

ETCD_BINARY = "etcd"
ETCD_MISSING = "etcd not found: apt-get install etcd-server"
START_TIMEOUT = 15.0
STOP_TIMEOUT = 10.0


_LIVE: set[subprocess.Popen[bytes]] = set()


@atexit.register
def _kill_leftovers() -> None:
    """A test run interrupted before its fixtures' teardown leaves no process behind."""
    for process in list(_LIVE):
        if process.poll() is None:
            process.kill()


class HarnessError(Exception):
    """A process of the harness did not start or stop as it should."""


def find_etcd() -> str:
    """The etcd binary's path; a missing binary is an error, never a skip, since a skipped
    cluster test would count as passing."""
    path = shutil.which(ETCD_BINARY)
    if path is None:
        raise HarnessError(ETCD_MISSING)
    return path


def clean_env() -> dict[str, str]:
    """This environment without `ETCD_*` variables, which etcd reads as flags."""
    return {k: v for k, v in os.environ.items() if not k.startswith("ETCD_")}


def wait_healthy(url: str, timeout: float, alive: object = None) -> None:
    """Poll `url` (etcd's /health) until it answers `"health": "true"`; `alive`, if given,
    is a Popen whose exit ends the wait early."""
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=1.0) as client:
        while time.monotonic() < deadline:
            if isinstance(alive, subprocess.Popen) and alive.poll() is not None:
                raise HarnessError(f"exited with {alive.returncode} before {url} was healthy")
            try:
                if client.get(url).json().get("health") == "true":
                    return
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(0.05)
    raise HarnessError(f"{url} not healthy after {timeout} s")


@attrs.define
class EtcdProcess:
    """One single-member etcd on 127.0.0.1 with its own data dir.

    `start()` blocks until `/health` answers; `stop()` (SIGTERM) and `kill()` (SIGKILL) keep
    the data dir and ports, so `start()` again is a restart of the same member with the same
    revisions. Its stderr goes to `log_path`.
    """

    root: Path
    name: str = "etcd"
    client_port: int = 0
    peer_port: int = 0
    process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def log_path(self) -> Path:
        return self.root / "etcd.log"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def command(self) -> list[str]:
        peer = f"http://127.0.0.1:{self.peer_port}"
        return [
            find_etcd(),
            "--name",
            self.name,
            "--data-dir",
            str(self.data_dir),
            "--listen-client-urls",
            self.endpoint,
            "--advertise-client-urls",
            self.endpoint,
            "--listen-peer-urls",
            peer,
            "--initial-advertise-peer-urls",
            peer,
            "--initial-cluster",
            f"{self.name}={peer}",
            "--initial-cluster-state",
            "new",
            "--logger",
            "zap",
            "--log-outputs",
            "stderr",
            "--log-level",
            "error",
        ]

    def start(self, timeout: float = START_TIMEOUT) -> None:
        """Start (or restart) etcd and wait until it is healthy. The first start picks free
        ports, and picks again if another process took one first."""
        if self.running:
            raise HarnessError(f"{self.name} is already running")
        self.root.mkdir(parents=True, exist_ok=True)
        attempts = 1 if self.client_port else 3
        for attempt in range(attempts):
            if attempts > 1:  # a fresh member: its data dir must not name other ports
                shutil.rmtree(self.data_dir, ignore_errors=True)
                self.client_port = free_port()
                self.peer_port = free_port(avoid={self.client_port})
            with open(self.log_path, "ab") as log:
                self.process = subprocess.Popen(
                    self.command(),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    env=clean_env(),
                )
            _LIVE.add(self.process)
            try:
                wait_healthy(f"{self.endpoint}/health", timeout, self.process)
                return
            except HarnessError as exc:
                self.kill()
                if attempt == attempts - 1:
                    tail = self.log_path.read_text(errors="replace")[-2000:]
                    raise HarnessError(f"{self.name}: {exc}\n{tail}") from exc

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """SIGTERM and wait (SIGKILL if it does not exit in time)."""
        self._signal(signal.SIGTERM, timeout)

    def kill(self) -> None:
        self._signal(signal.SIGKILL, STOP_TIMEOUT)

    def restart(self) -> None:
        """Stop, then start on the same ports and data dir."""
        self.stop()
        self.start()

    def _signal(self, signum: signal.Signals, timeout: float) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        _LIVE.discard(process)
        if process.poll() is not None:
            return
        process.send_signal(signum)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def herald_env() -> dict[str, str]:
    """This environment without `HERALD_*` (a config of the caller's) and `ETCD_*`."""
    return {k: v for k, v in clean_env().items() if not k.startswith("HERALD_")}


def pid_alive(pid: int) -> bool:
    """Whether `pid` is a running process (a zombie, killed but not reaped, is not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_until(
    probe: Callable[[], T | None], what: str, timeout: float = WAIT_S, poll: float = 0.05
) -> T:
    """Poll `probe` every `poll` s until it returns something truthy (bounded, not timed)."""
    deadline = time.monotonic() + timeout
    while True:
        found = probe()
        if found:
            return found
        if time.monotonic() > deadline:
            raise HarnessError(f"{what}: not after {timeout} s")
        time.sleep(poll)


def cluster_view(nameserver: str, timeout: float = 2.0) -> dict[str, Any] | None:
    """A name server's `/v1/cluster`, None when it does not answer."""
    try:
        response = httpx.get(f"http://{nameserver}/v1/cluster", timeout=timeout)
        return response.json() if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None


def node_names(view: dict[str, Any] | None) -> set[str]:
    """The nodes a `/v1/cluster` answer lists."""
    if view is None:
        return set()
    return {n["node"] for g in view.get("groups", []) for n in g.get("nodes", [])}


def etcd_get(endpoint: str, key: str) -> KeyValue | None:
    """One key of the etcd at `endpoint` (None when absent), read with herald's own client in
    a Trio loop of its own: for sync tests (a Trio test uses `EtcdClient` directly)."""
    from herald.cluster.etcd import EtcdClient

    async def get() -> KeyValue | None:
        async with EtcdClient(endpoint) as client:
            return await client.get(key)

    return trio.run(get)


@attrs.define
class NodeProcess:
    """One herald node, `herald run --config config`, as a process.

    Started here (`start`) it is a child of the test; adopted (`adopt`, e.g. a node of
    `herald cluster dev`) only its pid is known, and waits poll that pid.
    """

    config: Path
    log_path: Path
    name: str = ""
    process: subprocess.Popen[bytes] | None = None
    pid: int | None = None

    @classmethod
    def adopt(cls, name: str, pid: int, config: Path, log_path: Path) -> NodeProcess:
        return cls(config, log_path, name, None, pid)

    @property
    def running(self) -> bool:
        return self.pid is not None and pid_alive(self.pid)

    def start(self) -> None:
        if self.running:
            raise HarnessError(f"{self.name or self.config} is already running")
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [*HERALD, "run", "--config", str(self.config)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=herald_env(),
            )
        _LIVE.add(self.process)
        self.pid = self.process.pid

    def kill(self) -> None:
        """kill -9, and wait until the process is gone."""
        self.signal(signal.SIGKILL)
        self.wait_gone()

    def pause(self) -> None:
        self.signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.signal(signal.SIGCONT)

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """SIGTERM (after SIGCONT, in case it is paused); SIGKILL if it outlives `timeout`."""
        if not self.running:
            return
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            self.wait_gone(timeout)
        except HarnessError:
            self.kill()

    def restart(self) -> None:
        """Stop (cleanly) and start again on the same config: same ports, same data."""
        self.stop()
        self.start()

    def signal(self, signum: signal.Signals) -> None:
        if self.pid is not None and self.running:
            os.kill(self.pid, signum)

    def wait_gone(self, timeout: float = STOP_TIMEOUT) -> None:
        if self.process is not None:
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                raise HarnessError(f"{self.name} still running after {timeout} s") from None
            _LIVE.discard(self.process)
            return
        if self.pid is not None:
            wait_until(lambda: not pid_alive(self.pid or 0), f"{self.name} exits", timeout)


def wait_cluster_json(
    path: Path, nodes: int, timeout: float = WAIT_S, alive: object = None
) -> dict[str, Any]:
    """`herald cluster dev`'s cluster.json once it lists `nodes` nodes; `alive` (a Popen)
    exiting first ends the wait with an error."""

    def probe() -> dict[str, Any] | None:
        if isinstance(alive, subprocess.Popen) and alive.poll() is not None:
            raise HarnessError(f"herald cluster dev exited with {alive.returncode}")
        try:
            info = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return info if len(info.get("nodes", [])) == nodes else None

    return wait_until(probe, f"{path} with {nodes} nodes", timeout)


@attrs.define
class DevCluster:
    """`herald cluster dev --dir root ...` as a process; `info` is its cluster.json."""

    root: Path
    nodes: int
    options: Sequence[str] = ()
    process: subprocess.Popen[bytes] | None = None
    info: dict[str, Any] = attrs.field(factory=dict)

    @property
    def log_path(self) -> Path:
        return self.root.parent / f"{self.root.name}-dev.log"

    def start(self, timeout: float = WAIT_S) -> dict[str, Any]:
        command = [*HERALD, "cluster", "dev", "--nodes", str(self.nodes), "--dir", str(self.root)]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [*command, *self.options],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=herald_env(),
            )
        _LIVE.add(self.process)
        try:
            self.info = wait_cluster_json(
                self.root / "cluster.json", self.nodes, timeout, self.process
            )
        except HarnessError as exc:
            self.stop()
            raise HarnessError(f"{exc}\n{self.log_path.read_text(errors='replace')}") from exc
        return self.info

    @property
    def nameserver(self) -> str:
        return str(self.info["nameserver"])

    def node(self, name: str) -> NodeProcess:
        entry = next(n for n in self.info["nodes"] if n["name"] == name)
        return NodeProcess.adopt(name, entry["pid"], Path(entry["config"]), Path(entry["log"]))

    def status(self, timeout: float = WAIT_S) -> dict[str, Any]:
        """`herald cluster status --dir ROOT --json`, as a test reads it."""
        done = subprocess.run(
            [*HERALD, "cluster", "status", "--dir", str(self.root), "--json"],
            capture_output=True,
            text=True,
            env=herald_env(),
            timeout=timeout,
        )
        assert done.returncode == 0, done.stderr
        view: dict[str, Any] = json.loads(done.stdout)
        return view

    def pids(self) -> list[int]:
        """Every process it started (nodes, name server, etcd)."""
        found = [n["pid"] for n in self.info.get("nodes", [])]
        found += [self.info.get("nameserver_pid"), self.info.get("etcd_pid")]
        return [pid for pid in found if isinstance(pid, int)]

    def stop(self, timeout: float = WAIT_S) -> int:
        """SIGTERM, wait: its exit code (the processes it started are left to it)."""
        process, self.process = self.process, None
        if process is None:
            return 0
        _LIVE.discard(process)
        if process.poll() is None:
            process.terminate()
        try:
            return process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise HarnessError("herald cluster dev did not stop on SIGTERM") from None

"""Processes for the cluster tests: a real etcd (and, later, herald nodes) on loopback.

Everything here is synchronous and blocking, so session fixtures can use it; a Trio test
calls the slow parts through `trio.to_thread.run_sync` (e.g. `etcd.restart`) so its own
tasks (a watcher) keep running meanwhile.

etcd is the binary `etcd` from PATH (Debian: `apt-get install etcd-server`). Each instance
gets two free loopback ports (client, peer) and its own data dir, so tests never touch a
system etcd on 2379 nor each other.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import attrs
import httpx

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


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on `host` right now (another process may take it before it is bound:
    callers that bind later retry with a new one)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


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
                self.client_port, self.peer_port = free_port(), free_port()
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

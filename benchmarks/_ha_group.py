"""A replicated group under `herald cluster dev` for the HA benchmarks (ha_throughput.py,
cluster_failover.py): start it, read its keys in etcd, wait for its sync set."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
from _common import Address
from cluster_overhead import (
    HERALD,
    address_of,
    spawn,
    stop_all,
    tail,
)

from herald.cluster import keys

GROUP = "g1"
START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 60.0  # `cluster dev` gives nodes 15 s, then the name server, then etcd


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

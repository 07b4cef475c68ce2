"""A replicated group on real processes for the HA tests: `herald cluster dev --nodes N` (one
group, a master and its slaves) on the session's etcd, with the group's keys read straight
from etcd (`state`, `wait_state`) and each node's client ports from cluster.json, so a
workload can follow the master (`master_port`) across failovers.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from herald.cluster import keys
from tests.cluster.harness import (
    HERALD,
    DevCluster,
    NodeProcess,
    etcd_get,
    herald_env,
    wait_until,
)
from tests.cluster.nodes import cluster_name

GROUP = "g1"
TIMERS = (
    "--lease-ttl-s", "2",  # guard 1 s: keepalive every 0.67 s
    "--nameserver-expiry-s", "2",
    "--nameserver-scan-s", "0.5",
    "--log-level", "info",
)  # fmt: skip
WAIT_S = 60.0
"""A hang guard for failovers and catch-ups on a loaded 2-core box, never a timing assertion."""


class HACluster:
    """One group of `nodes` nodes under `herald cluster dev`, replicating `replication`."""

    def __init__(
        self, root: Path, etcd: str, nodes: int = 3, replication: str = "sync",
        options: Sequence[str] = (),
    ) -> None:  # fmt: skip
        self.cluster = cluster_name()
        self.etcd = etcd
        self.replication = replication
        self.dev = DevCluster(
            root / "D",
            nodes,
            (*TIMERS, "--replication", replication, "--etcd", etcd, "--name", self.cluster,
             *options),
        )  # fmt: skip
        self.processes: dict[str, NodeProcess] = {}

    def start(self) -> None:
        self.dev.start(WAIT_S)
        for entry in self.dev.info["nodes"]:
            self.processes[entry["name"]] = self.dev.node(entry["name"])

    def stop(self) -> None:
        """Stop the nodes this test restarted (children of the test), then the dev cluster
        (which stops the nodes it started)."""
        for process in self.processes.values():
            process.resume()  # a paused node must see its SIGTERM
            if process.process is not None:
                process.stop()
        self.dev.stop()

    # -- the group in etcd ---------------------------------------------------------------------
    def state(self) -> dict[str, Any] | None:
        kv = etcd_get(self.etcd, keys.group_state_key(self.cluster, GROUP))
        return None if kv is None else dict(json.loads(kv.value))

    def claim(self) -> dict[str, Any] | None:
        kv = etcd_get(self.etcd, keys.group_master_key(self.cluster, GROUP))
        return None if kv is None else dict(json.loads(kv.value))

    def wait_state(
        self, condition: Callable[[dict[str, Any]], bool], what: str, timeout: float = WAIT_S
    ) -> dict[str, Any]:
        def probe() -> dict[str, Any] | None:
            state, claim = self.state(), self.claim()
            if state is None or claim is None or claim["node"] != state["master"]:
                return None
            return state if condition(state) else None

        return wait_until(probe, what, timeout)

    def wait_full_sync_set(self, timeout: float = WAIT_S) -> dict[str, Any]:
        size = len(self.processes)
        return self.wait_state(
            lambda s: len(s["sync_set"]) == size, f"a sync set of {size}", timeout
        )

    def wait_new_master(self, old: str, timeout: float = WAIT_S) -> dict[str, Any]:
        return self.wait_state(lambda s: s["master"] != old, f"a master other than {old}", timeout)

    # -- nodes ---------------------------------------------------------------------------------
    def port(self, node: str, protocol: str = "amqp") -> int:
        entry = next(n for n in self.dev.info["nodes"] if n["name"] == node)
        return int(str(entry["addrs"][protocol]).rpartition(":")[2])

    def master_port(self, protocol: str = "amqp") -> Callable[[], int]:
        """A callable for workloads: the port of whichever node etcd names master now."""
        last = [self.port(self.dev.info["nodes"][0]["name"], protocol)]

        def port() -> int:
            try:
                state = self.state()
            except Exception:  # etcd away for a moment: keep dialling the last master
                return last[0]
            if state is not None:
                last[0] = self.port(state["master"], protocol)
            return last[0]

        return port

    def log_of(self, node: str) -> str:
        return self.processes[node].log_path.read_text(errors="replace")

    def status(self) -> dict[str, Any]:
        """`herald cluster status --dir D --json`."""
        done = subprocess.run(
            [*HERALD, "cluster", "status", "--dir", str(self.dev.root), "--json"],
            capture_output=True,
            text=True,
            env=herald_env(),
            timeout=WAIT_S,
        )
        assert done.returncode == 0, done.stderr
        view: dict[str, Any] = json.loads(done.stdout)
        return view


def status_master(view: dict[str, Any]) -> str | None:
    """The master `herald cluster status --json` names: the master with the highest epoch."""
    masters = [
        (node.get("epoch", 0), node["node"])
        for group in view.get("groups", [])
        for node in group.get("nodes", [])
        if node.get("role") == "master"
    ]
    return max(masters)[1] if masters else None

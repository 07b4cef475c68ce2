"""A replicated group on real processes for the HA tests: `herald cluster dev --nodes N` (one
group, a master and its slaves) on the session's etcd, with the group's keys read straight
from etcd (`state`, `wait_state`) and each node's client ports from cluster.json, so a
workload can follow the master (`master_port`) across failovers. `GroupWatch` reads the same
keys on one etcd connection, for loops that ask for the master through many failovers.

Links to cut (CLUSTER.md §8.2 scenarios 7, 8): `etcd_links=True` gives each node its own
`ProxyThread` in front of etcd (`etcd_links[node]`, the node's only `cluster.etcd`);
`cluster_links=True` puts a `LinkProxyThread` in front of each node's cluster port
(`cluster_links[node]`, advertised as the node's `cluster.advertise`, so every slave streams
from a master through the master's proxy, which can cut one slave's stream: `set_cut`). The
test still reads etcd directly. Both go through `herald cluster dev --set NODE:...`.
"""

from __future__ import annotations

import json
import socket
import threading
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psutil
import trio

from herald.cluster import keys
from tests.cluster.harness import (
    DevCluster,
    HarnessError,
    NodeProcess,
    etcd_get,
    wait_until,
)
from tests.cluster.link_proxy import LinkProxyThread
from tests.cluster.nodes import cluster_name
from tests.cluster.proxy import ProxyThread

GROUP = "g1"
TIMERS = (
    "--lease-ttl-s", "2",  # guard 1 s: keepalive every 0.67 s
    "--nameserver-expiry-s", "2",
    "--nameserver-scan-s", "0.5",
    "--log-level", "info",
    "--set", "commitlog.segment_size=8388608",  # 8 MiB: each node makes its segments ahead
)  # fmt: skip
WAIT_S = 60.0
"""A hang guard for failovers and catch-ups on a loaded 2-core box, never a timing assertion."""


class HACluster:
    """One group of `nodes` nodes under `herald cluster dev`, replicating `replication`."""

    def __init__(
        self, root: Path, etcd: str, nodes: int = 3, replication: str = "sync",
        options: Sequence[str] = (), *, etcd_links: bool = False, cluster_links: bool = False,
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
        names = [f"n{i}" for i in range(1, nodes + 1)]
        etcd_port = int(etcd.rstrip("/").rpartition(":")[2])
        self.etcd_links = {n: ProxyThread(etcd_port) for n in names if etcd_links}
        self.cluster_links = {
            n: LinkProxyThread(0, self._owner_of_port) for n in names if cluster_links
        }

    def __enter__(self) -> HACluster:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> None:
        links: list[str] = []
        for node, proxy in self.etcd_links.items():
            proxy.start()
            links += ["--set", f'{node}:cluster.etcd=["http://{proxy.address}"]']
        for node, link in self.cluster_links.items():
            link.start()  # forwards nowhere until the node's cluster port is known
            links += ["--set", f'{node}:cluster.advertise="{link.address}"']
        self.dev.options = (*self.dev.options, *links)
        try:
            self.dev.start(WAIT_S)
        except BaseException:
            self._stop_links()
            raise
        for entry in self.dev.info["nodes"]:
            self.processes[entry["name"]] = self.dev.node(entry["name"])
        for entry in self.dev.info["nodes"]:  # every owner known before a stream gets through
            if entry["name"] in self.cluster_links:
                config = tomllib.loads(Path(entry["config"]).read_text())
                port = int(config["cluster"]["listen"].rpartition(":")[2])
                self.cluster_links[entry["name"]].retarget(port)

    def stop(self) -> None:
        """Heal every link, stop the nodes this test restarted (children of the test), then
        the dev cluster (which stops the nodes it started), then the proxies."""
        self.heal()
        try:
            for process in self.processes.values():
                process.resume()  # a paused node must see its SIGTERM
                if process.process is not None:
                    process.stop()
            self.dev.stop()
        finally:
            self._stop_links()

    def heal(self) -> None:
        """Every proxied link passes again (so nodes leave etcd cleanly on their way out)."""
        for proxy in self.etcd_links.values():
            proxy.set_mode("pass")
        for link in self.cluster_links.values():
            link.set_mode("pass")
            link.set_cut(())

    def _stop_links(self) -> None:
        for proxy in [*self.etcd_links.values(), *self.cluster_links.values()]:
            proxy.stop()

    def _owner_of_port(self, port: int) -> str | None:
        """The node whose socket has local port `port` and dials one of the cluster links:
        which slave a cluster link's connection comes from."""
        wanted = {(port, link.port) for link in self.cluster_links.values()}
        for name, process in list(self.processes.items()):
            if process.pid is None:
                continue
            try:
                sockets = psutil.Process(process.pid).net_connections("tcp")
            except psutil.Error:
                continue
            for sock in sockets:
                if sock.laddr and sock.raddr and (sock.laddr.port, sock.raddr.port) in wanted:
                    return name
        return None

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

    def wait_serving(self, node: str, protocol: str = "amqp", timeout: float = WAIT_S) -> None:
        """Until `node`'s client port accepts connections: etcd names a new master when it is
        elected, a moment before its broker has opened its store and bound its ports."""
        port = self.port(node, protocol)

        def accepting() -> bool:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
            except OSError:
                return False
            return True

        wait_until(accepting, f"{node}'s {protocol} port", timeout)

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
        return self.dev.status(WAIT_S)


def status_master(view: dict[str, Any]) -> str | None:
    """The master `herald cluster status --json` names: the master with the highest epoch."""
    masters = [
        (node.get("epoch", 0), node["node"])
        for group in view.get("groups", [])
        for node in group.get("nodes", [])
        if node.get("role") == "master"
    ]
    return max(masters)[1] if masters else None


class GroupWatch:
    """The group's keys (state and claim), read every `interval` s by a thread of its own on one
    etcd client (one kept-alive connection), for workloads and nemeses that ask for the master
    all the time (`master_port`, `wait_state`) across many failovers.

    `HACluster.state()` / `claim()` open and close an etcd connection per call, and a closed
    client connection keeps its ephemeral port in TIME_WAIT for 60 s. `herald cluster dev`
    gives its nodes ports from the ephemeral range, so while a node is down such a socket can
    take one of its ports, and the node's restart on the same config then fails with "Address
    already in use" (SO_REUSEADDR does not help against a client socket). Polling on fresh
    connections through every failover makes that likely; one connection does not.

    `wait_state` also watches `alive` (nodes that must stay up meanwhile): one that exits ends
    the wait at once with the tail of its log, instead of at the hang guard.
    """

    def __init__(self, group: HACluster, interval: float = 0.05) -> None:
        self.group = group
        self.interval = interval
        self._lock = threading.Lock()
        self._latest: tuple[dict[str, Any] | None, dict[str, Any] | None] = (None, None)
        self._reads = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="group-watch", daemon=True)
        self.error: BaseException | None = None

    def __enter__(self) -> GroupWatch:
        self._thread.start()
        wait_until(lambda: self._reads or self.error, "the group watch's first read", WAIT_S)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(WAIT_S)

    def _run(self) -> None:
        try:
            trio.run(self._poll)
        except BaseException as exc:  # surfaced by the waits
            self.error = exc

    async def _poll(self) -> None:
        from herald.cluster.etcd import EtcdClient

        state_key = keys.group_state_key(self.group.cluster, GROUP)
        claim_key = keys.group_master_key(self.group.cluster, GROUP)
        async with EtcdClient(self.group.etcd) as client:
            while not self._stop.is_set():
                try:
                    state, claim = await client.get(state_key), await client.get(claim_key)
                except Exception:  # etcd away for a moment: keep the last answer
                    await trio.sleep(self.interval)
                    continue
                latest = tuple(
                    None if kv is None else dict(json.loads(kv.value)) for kv in (state, claim)
                )
                with self._lock:
                    self._latest = (latest[0], latest[1])
                    self._reads += 1
                await trio.sleep(self.interval)

    def current(self) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """The last (state, claim) read."""
        if self.error is not None:
            raise HarnessError(f"the group watch failed: {self.error!r}") from self.error
        with self._lock:
            return self._latest

    def wait_state(
        self,
        condition: Callable[[dict[str, Any]], bool],
        what: str,
        timeout: float = WAIT_S,
        alive: Sequence[str] = (),
    ) -> dict[str, Any]:
        """As `HACluster.wait_state`, on the watch's reads (never older than the last return)."""

        def probe() -> dict[str, Any] | None:
            for node in alive:
                if not self.group.processes[node].running:
                    tail = self.group.log_of(node)[-3000:]
                    raise HarnessError(f"{node} exited while waiting for {what}:\n{tail}")
            state, claim = self.current()
            if state is None or claim is None or claim["node"] != state["master"]:
                return None
            return state if condition(state) else None

        return wait_until(probe, what, timeout)

    def wait_full_sync_set(
        self, timeout: float = WAIT_S, alive: Sequence[str] = ()
    ) -> dict[str, Any]:
        size = len(self.group.processes)
        return self.wait_state(
            lambda s: len(s["sync_set"]) == size, f"a sync set of {size}", timeout, alive
        )

    def wait_new_master(
        self, old: str, timeout: float = WAIT_S, alive: Sequence[str] = ()
    ) -> dict[str, Any]:
        return self.wait_state(
            lambda s: s["master"] != old, f"a master other than {old}", timeout, alive
        )

    def master_port(self, protocol: str = "amqp") -> Callable[[], int]:
        """As `HACluster.master_port`, from the watch's last read."""
        first = self.group.port(self.group.dev.info["nodes"][0]["name"], protocol)

        def port() -> int:
            state, _claim = self._latest
            return first if state is None else self.group.port(state["master"], protocol)

        return port

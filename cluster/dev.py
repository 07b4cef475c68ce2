"""`herald cluster dev`: a whole cluster on loopback, in one command (CLUSTER.md §9).

It starts, as processes of their own, an etcd (the `etcd` binary from PATH, on free ports
with its data dir under DIR; or it uses the one a reachable `--etcd` names), a name server
(`herald nameserver`) and N nodes (`herald run --config DIR/nX.toml`), each node with its own
data dir `DIR/nX/`, free ports for AMQP, MQTT, STOMP, the management API and the cluster
port, and `[cluster]` filled in. Once every node has registered with the name server it
writes `DIR/cluster.json` (written whole, then renamed: a reader never sees half of it) and
prints the same as a table. It then runs until SIGINT or SIGTERM and stops everything it
started: the nodes (SIGTERM, SIGKILL after a grace period), the name server, then etcd.

A node that exits meanwhile (a test's kill -9) is reported on stderr, not restarted: the
command keeps the others running. Logs are `DIR/<process>.log`.

Everything here is blocking and process-level (subprocess, signal), not Trio: the command
only waits on children and on HTTP endpoints.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import httpx

from herald.core.errors import HeraldError
from herald.core.ports import free_port

HERALD = [sys.executable, "-m", "herald.core.cli"]
LOOPBACK = "127.0.0.1"
ETCD_MISSING = "etcd not found on PATH: apt-get install etcd-server (or give --etcd URL)"
STOP_GRACE_S = 15.0
POLL_S = 0.1
PROTOCOLS = ("amqp", "mqtt", "stomp", "management")


class DevError(HeraldError):
    """`herald cluster dev` cannot go on; the message says why."""


def parse_setting(text: str) -> tuple[str, str, Any]:
    """`commitlog.segment_size=16777216` -> ("commitlog", "segment_size", 16777216); the
    value is TOML (a bare word is taken as a string)."""
    name, sep, raw = text.partition("=")
    section, dot, key = name.strip().partition(".")
    if not (sep and dot and section and key and "." not in key):
        raise DevError(f"--set {text!r}: expected SECTION.KEY=VALUE")
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()
    return section, key, value


def node_setting(text: str, nodes: int) -> tuple[str, str, str, Any]:
    """`--set` for one node or all: `n2:cluster.advertise="127.0.0.1:7000"` -> ("n2",
    "cluster", "advertise", "127.0.0.1:7000"); without a `NODE:` prefix the node is "" (every
    node). One node's setting is what a test needs to put a proxy on that node's links (its
    etcd endpoint, its advertised cluster address)."""
    name, sep, raw = text.partition("=")
    node, colon, setting = name.partition(":")
    if not colon:
        return ("", *parse_setting(text))
    node = node.strip()
    if node not in {f"n{i}" for i in range(1, nodes + 1)}:
        raise DevError(f"--set {text!r}: no node {node!r} (the nodes are n1..n{nodes})")
    return (node, *parse_setting(f"{setting}{sep}{raw}"))


def group_names(nodes: int, groups: int | None) -> list[str]:
    """The group of each node: n1, n2, ... spread round-robin over g1..gG (one group, all
    nodes replicating one master, when `groups` is None)."""
    count = 1 if groups is None else groups
    if count > nodes:
        raise DevError(f"--groups {count} is more than --nodes {nodes}: a group needs a node")
    return [f"g{(i % count) + 1}" for i in range(nodes)]


@attrs.define
class Child:
    """A process `herald cluster dev` started."""

    name: str
    command: list[str]
    log: Path
    process: subprocess.Popen[bytes] | None = None
    reported: bool = False

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ETCD_", "HERALD_"))}
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                self.command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=env,
                start_new_session=True,  # Ctrl-C in the terminal reaches only `dev`
            )

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def exited(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def tail(self, size: int = 2000) -> str:
        try:
            return self.log.read_text(errors="replace")[-size:]
        except OSError:
            return ""

    def terminate(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()

    def reap(self, deadline: float) -> None:
        if self.process is None:
            return
        try:
            self.process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def wait_for(
    probe: Callable[[], Any], what: str, timeout: float, children: Sequence[Child] = ()
) -> Any:
    """Call `probe` until it returns something truthy; a child exiting ends it early."""
    deadline = time.monotonic() + timeout
    while True:
        for child in children:
            code = child.exited()
            if code is not None:
                raise DevError(f"{child.name} exited with {code} ({child.log}):\n{child.tail()}")
        found = probe()
        if found:
            return found
        if time.monotonic() > deadline:
            raise DevError(f"{what} not ready after {timeout:g} s")
        time.sleep(POLL_S)


def get_json(url: str, timeout: float = 1.0) -> Any:
    """GET `url` as JSON; None when it does not answer (yet)."""
    try:
        response = httpx.get(url, timeout=timeout)
        return response.json() if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None


def etcd_command(root: Path, client_port: int, peer_port: int) -> list[str]:
    binary = shutil.which("etcd")
    if binary is None:
        raise DevError(ETCD_MISSING)
    client, peer = f"http://{LOOPBACK}:{client_port}", f"http://{LOOPBACK}:{peer_port}"
    return [
        binary,
        "--name=dev",
        f"--data-dir={root / 'etcd'}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=dev={peer}",
        "--initial-cluster-state=new",
        "--log-level=error",
    ]


def toml_value(value: Any) -> str:
    return json.dumps(value)  # strings, numbers, booleans and lists of them: JSON is TOML


def node_config(
    sections: Mapping[str, Mapping[str, Any]],
) -> str:
    lines: list[str] = []
    for section, keys in sections.items():
        lines.append(f"[{section}]")
        lines += [f"{key} = {toml_value(value)}" for key, value in keys.items()]
        lines.append("")
    return "\n".join(lines)


@attrs.frozen
class DevOptions:
    nodes: int
    groups: int | None = None
    replication: str | None = None
    root: Path = Path("cluster")
    etcd: str | None = None
    name: str = "dev"
    lease_ttl_s: int = 10
    register_interval_s: float | None = None
    nameserver_scan_s: float = 10.0
    nameserver_expiry_s: float = 120.0
    log_level: str = "warning"
    start_timeout_s: float = 60.0
    settings: tuple[str, ...] = ()
    """`SECTION.KEY=VALUE` (a TOML value) for every node's config, as `herald run --set`;
    `NODE:SECTION.KEY=VALUE` for node NODE's alone."""


@attrs.define
class NodeSpec:
    name: str
    group: str
    ports: dict[str, int]
    child: Child
    config: Path
    data_dir: Path

    def addrs(self) -> dict[str, str]:
        return {kind: f"{LOOPBACK}:{port}" for kind, port in self.ports.items()}


class DevCluster:
    """The processes of one `herald cluster dev`, started in order and stopped in reverse."""

    def __init__(self, options: DevOptions) -> None:
        self.options = options
        self.root = options.root.resolve()
        self.groups = group_names(options.nodes, options.groups)
        self.etcd: Child | None = None
        self.etcd_endpoint = options.etcd or ""
        self.nameserver: Child | None = None
        self.nameserver_addr = ""
        self.nodes: list[NodeSpec] = []
        self.ports_given: set[int] = set()

    def port(self) -> int:
        """A free port none of this cluster's processes was given yet."""
        port = free_port(LOOPBACK, self.ports_given)
        self.ports_given.add(port)
        return port

    @property
    def children(self) -> list[Child]:
        out = [c for c in (self.etcd, self.nameserver) if c is not None]
        return out + [n.child for n in self.nodes]

    def start(self, echo: Callable[[str], None]) -> dict[str, Any]:
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "cluster.json").unlink(missing_ok=True)
        self._start_etcd(echo)
        self._start_nameserver(echo)
        for index, group in enumerate(self.groups, start=1):
            self._start_node(f"n{index}", group)
        echo(f"started {len(self.nodes)} node(s); waiting for them to register")
        view = wait_for(
            self._registered,
            "the nodes' registration",
            self.options.start_timeout_s,
            self.children,
        )
        return self.write(view)

    def _start_etcd(self, echo: Callable[[str], None]) -> None:
        if self.etcd_endpoint:
            url = self.etcd_endpoint.rstrip("/")
            health = get_json(f"{url}/health", timeout=2.0)
            if not (isinstance(health, dict) and health.get("health") == "true"):
                raise DevError(f"no healthy etcd at --etcd {url}; leave --etcd out to start one")
            echo(f"using etcd at {url}")
            return
        client_port, peer_port = self.port(), self.port()
        self.etcd = Child(
            "etcd", etcd_command(self.root, client_port, peer_port), self.root / "etcd.log"
        )
        self.etcd.start()
        self.etcd_endpoint = f"http://{LOOPBACK}:{client_port}"
        health = f"{self.etcd_endpoint}/health"
        wait_for(
            lambda: (get_json(health) or {}).get("health") == "true",
            "etcd",
            self.options.start_timeout_s,
            [self.etcd],
        )
        echo(f"etcd at {self.etcd_endpoint} (pid {self.etcd.pid})")

    def _start_nameserver(self, echo: Callable[[str], None]) -> None:
        port = self.port()
        options = self.options
        self.nameserver = Child(
            "nameserver",
            [
                *HERALD, "nameserver", "--host", LOOPBACK, "--port", str(port),
                "--scan-s", str(options.nameserver_scan_s),
                "--expiry-s", str(options.nameserver_expiry_s),
                "--log-level", options.log_level,
            ],
            self.root / "nameserver.log",
        )  # fmt: skip
        self.nameserver.start()
        self.nameserver_addr = f"{LOOPBACK}:{port}"
        wait_for(
            lambda: get_json(self.cluster_url) is not None,
            "the name server",
            options.start_timeout_s,
            [self.nameserver],
        )
        echo(f"name server at {self.nameserver_addr} (pid {self.nameserver.pid})")

    @property
    def cluster_url(self) -> str:
        return f"http://{self.nameserver_addr}/v1/cluster"

    def register_interval_s(self) -> float:
        """Nodes register well within the name server's expiry, however short it is."""
        if self.options.register_interval_s is not None:
            return self.options.register_interval_s
        return min(30.0, self.options.nameserver_expiry_s / 4)

    def _start_node(self, name: str, group: str) -> None:
        options = self.options
        ports = {kind: self.port() for kind in (*PROTOCOLS, "cluster")}
        data_dir = self.root / name
        config = self.root / f"{name}.toml"
        sections: dict[str, dict[str, Any]] = {
            "broker": {
                "node_name": name,
                "data_dir": str(data_dir),
                "log_level": options.log_level,
            },
            "store": {"backend": "commitlog"},
            "amqp": {"host": LOOPBACK, "port": ports["amqp"]},
            "mqtt": {"host": LOOPBACK, "port": ports["mqtt"], "ws_enabled": False},
            "stomp": {"host": LOOPBACK, "port": ports["stomp"], "ws_enabled": False},
            "management": {"host": LOOPBACK, "port": ports["management"]},
            "cluster": {
                "enabled": True,
                "name": options.name,
                "group": group,
                "etcd": [self.etcd_endpoint],
                "lease_ttl_s": options.lease_ttl_s,
                "lease_guard_s": min(1.0, options.lease_ttl_s / 2),
                "nameservers": [self.nameserver_addr],
                "register_interval_s": self.register_interval_s(),
                "listen": f"{LOOPBACK}:{ports['cluster']}",
            },
        }
        if options.replication is not None:
            sections["cluster"]["replication"] = options.replication
        for setting in options.settings:
            node, section, key, value = node_setting(setting, options.nodes)
            if node in ("", name):
                sections.setdefault(section, {})[key] = value
        config.write_text(node_config(sections))
        child = Child(name, [*HERALD, "run", "--config", str(config)], self.root / f"{name}.log")
        child.start()
        self.nodes.append(NodeSpec(name, group, ports, child, config, data_dir))

    def _registered(self) -> dict[str, dict[str, Any]] | None:
        """node -> its entry in the name server's /v1/cluster, once every node is there and
        each group has a master (a master registers as one once its listeners are bound)."""
        view = get_json(self.cluster_url)
        if not isinstance(view, dict):
            return None
        seen = {
            n["node"]: n
            for g in view.get("groups", [])
            if g.get("cluster") == self.options.name
            for n in g.get("nodes", [])
        }
        mastered = {
            g.get("group")
            for g in view.get("groups", [])
            if g.get("cluster") == self.options.name
            and any(n.get("role") == "master" for n in g.get("nodes", []))
        }
        if not all(n.name in seen for n in self.nodes) or not mastered >= set(self.groups):
            return None
        return seen

    def describe(self, seen: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        nodes = []
        for node in self.nodes:
            entry = seen.get(node.name, {})
            addrs = node.addrs()
            addrs.update(entry.get("addrs", {}))  # as the node bound and published them
            nodes.append(
                {
                    "name": node.name,
                    "group": node.group,
                    "pid": node.child.pid,
                    "role": entry.get("role", "unknown"),
                    "epoch": entry.get("epoch", 0),
                    "addrs": addrs,
                    "config": str(node.config),
                    "data_dir": str(node.data_dir),
                    "log": str(node.child.log),
                }
            )
        return {
            "cluster": self.options.name,
            "dir": str(self.root),
            "pid": os.getpid(),
            "etcd": self.etcd_endpoint,
            "etcd_pid": None if self.etcd is None else self.etcd.pid,
            "nameserver": self.nameserver_addr,
            "nameserver_pid": None if self.nameserver is None else self.nameserver.pid,
            "nodes": nodes,
        }

    def write(self, seen: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        info = self.describe(seen)
        path = self.root / "cluster.json"
        partial = path.with_suffix(".json.tmp")
        partial.write_text(json.dumps(info, indent=2) + "\n")
        partial.replace(path)
        return info

    def check_children(self, echo: Callable[[str], None]) -> None:
        """Report, once each, the children that exited while the cluster runs."""
        for child in self.children:
            code = child.exited()
            if code is not None and not child.reported:
                child.reported = True
                echo(f"{child.name} (pid {child.pid}) exited with {code}; see {child.log}")

    def stop(self) -> None:
        """Nodes first (they unregister and revoke their leases), then the name server, then
        etcd: each SIGTERM, then SIGKILL after the grace period."""
        for batch in ([n.child for n in self.nodes], [self.nameserver], [self.etcd]):
            live = [c for c in batch if c is not None]
            for child in live:
                child.terminate()
            deadline = time.monotonic() + STOP_GRACE_S
            for child in live:
                child.reap(deadline)


def _row(cells: Sequence[str], widths: Sequence[int]) -> str:
    return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()


def table(info: Mapping[str, Any]) -> str:
    """`cluster.json` as text: where etcd and the name server are, and a row per node."""
    head = ["NODE", "GROUP", "ROLE", "PID", *(p.upper() for p in PROTOCOLS), "CLUSTER"]
    rows = [
        [
            n["name"], n["group"], n["role"], str(n["pid"]),
            *(n["addrs"].get(kind, "-") for kind in (*PROTOCOLS, "cluster")),
        ]
        for n in info["nodes"]
    ]  # fmt: skip
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = [
        f"cluster {info['cluster']}: etcd {info['etcd']}, name server {info['nameserver']}",
        *(_row(r, widths) for r in [head, *rows]),
    ]
    return "\n".join(lines)


class _Stop(Exception):
    pass


def run_dev(options: DevOptions, echo: Callable[[str], None], out: Callable[[str], None]) -> None:
    """Start the cluster, wait for SIGINT or SIGTERM, stop it. Raises DevError. Progress
    goes to `echo` (stderr), the table to `out` (stdout)."""

    def stop(signum: int, _frame: object) -> None:
        raise _Stop(signum)

    previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    cluster = DevCluster(options)
    try:
        info = cluster.start(echo)
        out(table(info))
        echo(f"wrote {cluster.root / 'cluster.json'}; Ctrl-C stops the cluster")
        while True:
            cluster.check_children(echo)
            time.sleep(0.5)
    except _Stop as signum:
        echo(f"{signal.Signals(signum.args[0]).name}: stopping the cluster")
    finally:
        for s in previous:
            signal.signal(s, signal.SIG_IGN)  # a second Ctrl-C must not cut the clean-up
        cluster.stop()
        for s, handler in previous.items():
            signal.signal(s, handler)
    echo("cluster stopped")

"""`herald nameserver` as a real process (signals and exit codes are the point) and
`herald cluster resolve` and `herald cluster status` through click's CliRunner against it."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner, Result

from herald.core.cli import main
from tests.cluster.harness import free_port

HANG_GUARD_S = 30.0  # process waits are bounded by this, never timed
LISTENING = re.compile(r"name server listening on http://(127\.0\.0\.1:\d+)$")


def herald(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), prog_name="herald", catch_exceptions=False)


class NameServerProcess:
    """`herald nameserver` in a process of its own; stderr read on a thread."""

    def __init__(self, *args: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HERALD_")}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "herald.core.cli", "nameserver", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for(self, pattern: re.Pattern[str]) -> re.Match[str]:
        while True:
            line = self._queue.get(timeout=HANG_GUARD_S)
            if line is None:
                raise AssertionError("stderr ended:\n" + "\n".join(self.lines))
            self.lines.append(line)
            if found := pattern.search(line):
                return found

    def rest(self) -> list[str]:
        while (line := self._queue.get(timeout=HANG_GUARD_S)) is not None:
            self.lines.append(line)
        return self.lines


@pytest.fixture
def nameserver() -> Iterator[tuple[NameServerProcess, str]]:
    server = NameServerProcess("--port", "0", "--scan-s", "0.5", "--expiry-s", "5")
    try:
        yield server, server.wait_for(LISTENING).group(1)
    finally:
        server.process.kill()
        server.process.wait()


def registration(addr: str) -> dict[str, Any]:
    return {
        "cluster": "c",
        "group": "g1",
        "node": "n1",
        "role": "master",
        "epoch": 0,
        "data_version": 1,
        "addrs": {"amqp": "127.0.0.1:5672", "mqtt": "127.0.0.1:1883"},
        "queues": [{"vhost": "/", "name": "orders", "type": "classic", "durable": True}],
    }


def test_nameserver_serves_until_sigterm_and_exits_0(
    nameserver: tuple[NameServerProcess, str],
) -> None:
    server, address = nameserver
    with httpx.Client(timeout=5) as http:
        answer = http.get(f"http://{address}/v1/cluster")
    assert answer.status_code == 200 and answer.json() == {"version": 0, "groups": []}
    server.process.send_signal(signal.SIGTERM)
    assert server.process.wait(timeout=HANG_GUARD_S) == 0
    lines = server.rest()
    assert any("SIGTERM: stopping the name server" in line for line in lines)
    assert any("name server stopped" in line for line in lines)
    assert not any("Traceback" in line for line in lines)


def test_cluster_resolve_prints_the_url_and_moves_past_a_dead_name_server(
    nameserver: tuple[NameServerProcess, str],
) -> None:
    _server, address = nameserver
    with httpx.Client(timeout=5) as http:
        assert http.post(f"http://{address}/v1/register", json=registration(address)).is_success
    dead = f"127.0.0.1:{free_port()}"
    result = herald(
        "cluster", "resolve", "orders", "--protocol", "mqtt",
        "--nameserver", dead, "--nameserver", address,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.stdout == "mqtt://127.0.0.1:1883/%2F\n"
    default = herald("cluster", "resolve", "orders", "--vhost", "/", "--nameserver", address)
    assert default.stdout == "amqp://127.0.0.1:5672/%2F\n"


def test_cluster_status_shows_offsets_as_of_the_last_registration(
    nameserver: tuple[NameServerProcess, str],
) -> None:
    """`OFFSET` / `offset`: the offset each node sent with its last registration; `-` / null
    for a node that sent none (a registration from before the field)."""
    _server, address = nameserver
    old = {**registration(address), "node": "n2", "group": "g2", "queues": None}
    with httpx.Client(timeout=5) as http:
        url = f"http://{address}/v1/register"
        assert http.post(url, json={**registration(address), "offset": 4096}).is_success
        assert http.post(url, json={**registration(address), "offset": 18432}).is_success
        assert http.post(url, json=old).is_success

    as_json = herald("cluster", "status", "--nameserver", address, "--json")
    assert as_json.exit_code == 0, as_json.output
    view = json.loads(as_json.stdout)
    assert view["nameserver"] == address
    nodes = {n["node"]: n for g in view["groups"] for n in g["nodes"]}
    assert (nodes["n1"]["offset"], nodes["n2"]["offset"]) == (18432, None)

    table = herald("cluster", "status", "--nameserver", address)
    assert table.exit_code == 0, table.output
    title, head, *rows = table.stdout.splitlines()
    assert title == f"name server {address}: 2 node(s)"
    columns = re.split(r"  +", head)
    assert columns[:6] == ["GROUP", "NODE", "ROLE", "EPOCH", "LAST SEEN", "OFFSET"]
    cells = [dict(zip(columns, re.split(r"  +", row), strict=True)) for row in rows]
    assert [(c["NODE"], c["OFFSET"]) for c in cells] == [("n1", "18432"), ("n2", "-")]
    assert cells[0]["AMQP"] == "127.0.0.1:5672" and cells[1]["MANAGEMENT"] == "-"


def test_cluster_resolve_of_an_unknown_queue_is_one_error_line(
    nameserver: tuple[NameServerProcess, str],
) -> None:
    _server, address = nameserver
    result = herald("cluster", "resolve", "nope", "--nameserver", address)
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("herald: error: queue 'nope' in vhost '/': ")
    assert "404 no amqp master" in line


def test_cluster_resolve_with_no_name_server_answering() -> None:
    dead = f"127.0.0.1:{free_port()}"
    result = herald("cluster", "resolve", "orders", "--nameserver", dead, "--timeout", "2")
    assert result.exit_code == 2
    assert result.stderr.startswith("herald: error: queue 'orders'")


def test_cluster_resolve_needs_a_name_server() -> None:
    result = herald("cluster", "resolve", "orders")
    assert result.exit_code == 2
    assert "Missing option '--nameserver'" in result.stderr


def test_nameserver_on_a_port_in_use_is_one_error_line(
    nameserver: tuple[NameServerProcess, str],
) -> None:
    _server, address = nameserver
    port = address.rpartition(":")[2]
    clash = NameServerProcess("--port", port)
    try:
        code = clash.process.wait(timeout=HANG_GUARD_S)
        lines = [line for line in clash.rest() if "ERROR" in line or "error" in line]
    finally:
        clash.process.kill()
    assert code == 1
    assert any(line.startswith("herald: error: cannot start: ") for line in lines), lines


def test_herald_help_lists_the_cluster_commands() -> None:
    result = herald("--help")
    assert re.search(r"^\s+cluster\s+Work with a herald cluster", result.stdout, re.M)
    assert re.search(r"^\s+nameserver\s+Run a herald name server", result.stdout, re.M)
    group = herald("cluster", "--help")
    assert group.exit_code == 0 and "resolve" in group.stdout


def test_herald_run_of_a_misconfigured_cluster_node_is_one_error_line(tmp_path: Path) -> None:
    """The node runner builds the broker (and so checks the config) before it asks etcd."""
    sets = [
        "broker.plugins=[]",
        'broker.node_name="n1"',
        "cluster.enabled=true",
        'cluster.etcd=["http://127.0.0.1:1"]',  # never asked
        'store.backend="memory"',
    ]
    args = [arg for option in sets for arg in ("--set", option)]
    result = herald("run", "--data-dir", str(tmp_path), *args)
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [
        'herald: error: config: cluster.enabled = true needs store.backend = "commitlog" '
        "(it is 'memory'): replication ships the commit log"
    ]

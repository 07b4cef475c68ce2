"""`herald run` and friends as real processes, because signals and exit codes are the point
(the in-process tests of the command are tests/test_cli.py)."""

from __future__ import annotations

import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from tests.test_cli import BROKEN_PLUGIN, EXAMPLE_PLUGIN, HERALD_ENV, LINE

# -- herald as a real process ------------------------------------------------------------------


def herald_process(*args: str, plugins: bool = True) -> subprocess.Popen[str]:
    if args[:1] == ("run",):
        # The default store is the commit log: small segments keep test data dirs small.
        args = (*args, "--set", "commitlog.segment_size=1048576")
    env = {k: v for k, v in os.environ.items() if k not in HERALD_ENV}
    if plugins:
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(EXAMPLE_PLUGIN), str(BROKEN_PLUGIN), env.get("PYTHONPATH")])
        )
    return subprocess.Popen(
        [sys.executable, "-m", "herald.core.cli", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def run_to_end(*args: str) -> tuple[int, str, str]:
    proc = herald_process(*args)
    try:
        out, err = proc.communicate(timeout=60)  # a hang guard, not a timing assertion
    finally:
        proc.kill()
    return proc.returncode, out, err


def test_process_unknown_plugin(tmp_path: Path) -> None:
    code, out, err = run_to_end("run", "--data-dir", str(tmp_path), "--plugins", "echo,nope")
    assert code == 2
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("herald: error: ")
    assert "'nope'" in lines[0]


def test_process_unloadable_plugin(tmp_path: Path) -> None:
    """Asking for an installed plugin that fails to import: one line naming it and why."""
    code, out, err = run_to_end("run", "--data-dir", str(tmp_path), "--plugins", "broken")
    assert code == 2
    assert out == ""
    (line,) = err.splitlines()
    assert line.startswith("herald: error: plugin 'broken' cannot be loaded")


def test_process_unrequested_broken_plugin_does_not_stop_the_broker(tmp_path: Path) -> None:
    """A broken plugin that was not asked for is only a warning: the broker still starts."""
    proc = herald_process(
        "run", "--data-dir", str(tmp_path), "--plugins", "echo", "--set", "echo.port=0"
    )
    assert proc.stderr is not None
    stderr = LineReader(proc.stderr)
    try:
        stderr.wait_for("herald started")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        proc.kill()
    assert any("broken" in line and "WARNING" in line for line in stderr.rest())


def test_process_bad_config_value(tmp_path: Path) -> None:
    path = tmp_path / "herald.toml"
    path.write_text("[broker]\ngraceful_timeout = 'soon'\n")
    code, _out, err = run_to_end("run", "--config", str(path), "--data-dir", str(tmp_path))
    assert code == 2
    assert err.splitlines() == [
        "herald: error: config: broker.graceful_timeout: expected a number, got 'soon'"
    ]


class LineReader:
    """Collects a process's stderr lines on a thread, so the test can wait for one."""

    def __init__(self, stream: Iterable[str]) -> None:
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: Iterable[str]) -> None:
        for line in stream:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for(self, needle: str, timeout: float = 60) -> str:
        while True:
            line = self._queue.get(timeout=timeout)  # a hang guard, not a timing assertion
            if line is None:
                raise AssertionError(f"stderr ended before {needle!r}:\n" + "\n".join(self.lines))
            self.lines.append(line)
            if needle in line:
                return line

    def rest(self) -> list[str]:
        self._thread.join(timeout=10)
        while not self._queue.empty():
            line = self._queue.get()
            if line is not None:
                self.lines.append(line)
        return self.lines


@pytest.fixture
def broker_process(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], LineReader]]:
    proc = herald_process(
        "run", "--data-dir", str(tmp_path / "data"), "--plugins", "echo", "--set", "echo.port=0"
    )
    assert proc.stderr is not None
    try:
        yield proc, LineReader(proc.stderr)
    finally:
        proc.kill()
        proc.wait()


def test_process_runs_and_stops_cleanly_on_sigterm(
    tmp_path: Path, broker_process: tuple[subprocess.Popen[str], LineReader]
) -> None:
    proc, stderr = broker_process
    listening = stderr.wait_for("listening: ")
    assert re.search(r"INFO herald\.core\.cli: listening: echo tcp 127\.0\.0\.1:\d+$", listening)
    started = stderr.wait_for("herald started")
    assert f"data dir {tmp_path / 'data'}" in started
    assert LINE.fullmatch(started)
    proc.send_signal(signal.SIGTERM)
    # The requirement: "stops cleanly on SIGTERM in under 2 s".
    assert proc.wait(timeout=2) == 0
    lines = stderr.rest()
    assert any("SIGTERM: stopping" in line for line in lines)
    assert any("herald stopped" in line for line in lines)
    assert all(LINE.fullmatch(line) for line in lines), lines  # no traceback


def test_process_runs_without_protocol_plugins(tmp_path: Path) -> None:
    proc = herald_process(
        "run", "--data-dir", str(tmp_path), "--set", "broker.plugins=[]", plugins=False
    )
    assert proc.stderr is not None
    stderr = LineReader(proc.stderr)
    try:
        stderr.wait_for("herald started")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0
    finally:
        proc.kill()
        proc.wait()
    assert not any("listening:" in line for line in stderr.rest())


def test_process_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, _out, err = run_to_end(
            "run", "--data-dir", str(tmp_path), "--plugins", "echo", "--set", f"echo.port={port}"
        )
    assert code == 1
    last = err.splitlines()[-1]
    assert last == (
        f"herald: error: cannot start: echo tcp listener cannot bind 127.0.0.1:{port}: "
        "Address already in use (another process holds that port); "
        "move it with --set echo.port=PORT (0 picks a free port)"
    )
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("plugin", "setting", "others"),
    [
        ("amqp", "amqp.port", ["amqp.host=127.0.0.1"]),
        ("mqtt", "mqtt.ws_port", ["mqtt.host=127.0.0.1", "mqtt.port=0", "mqtt.ws_host=127.0.0.1"]),
        ("management", "management.port", ["management.host=127.0.0.1"]),
    ],
)
def test_process_port_in_use_names_the_listener(
    tmp_path: Path, plugin: str, setting: str, others: list[str]
) -> None:
    """Every built-in listener names itself and its key when its port is taken (issue 19)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        sets = [arg for option in [*others, f"{setting}={port}"] for arg in ("--set", option)]
        code, _out, err = run_to_end("run", "--data-dir", str(tmp_path), "--plugins", plugin, *sets)
    assert code == 1
    last = err.splitlines()[-1]
    assert f"listener cannot bind 127.0.0.1:{port}: Address already in use" in last
    assert last.endswith(f"move it with --set {setting}=PORT (0 picks a free port)")
    assert "Traceback" not in err

"""Run the Eclipse Paho MQTT interoperability suite against herald and print the counts as JSON.

The suite (github.com/eclipse/paho.mqtt.testing, folder `interoperability/`) is not part of
herald: fetch it yourself and pass its path (the checkout or its `interoperability/` folder)
as the argument or in $PAHO_TESTING_DIR. This tool starts `herald run --plugins mqtt` with a
temporary data dir on a free port, with the broker settings the suite expects (below), runs
`client_test.py` (MQTT 3.1.1) and `client_test5.py` (MQTT 5.0) in subprocesses, and prints
one JSON object: per suite the tests run, passed, failed and errored (with their names), and
how many ERROR records the broker logged.

The suite's scripts read host and port from their `__main__` block, which also hands the
command line to `unittest.main`; so each suite runs here in a child process that imports it
as a module, sets the globals that block would set, and runs its `Test` class itself.

    python tools/paho_interop.py /tmp/paho.mqtt.testing [--suite client_test5] [-k test_basic]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path
from typing import Any

SUITES = ("client_test", "client_test5")

# What the suite expects of a broker (the Paho test broker's settings, mqtt/brokers/start.py):
# anonymous clients, Server Keep Alive 60 for clients asking for more, and subscriptions to
# "test/nosubscribe" refused.
BROKER_SETTINGS = (
    "mqtt.allow_anonymous=true",
    "mqtt.keepalive_max=60",
    'mqtt.subscribe_denied=["test/nosubscribe"]',
    "mqtt.ws_enabled=false",
)
SUITE_TIMEOUT = 900.0  # seconds per suite; it sleeps a lot (keep alive, expiry, will delay)


def _interop_dir(path: str) -> Path:
    root = Path(path).expanduser().resolve()
    for candidate in (root / "interoperability", root):
        if (candidate / "client_test5.py").is_file():
            return candidate
    raise SystemExit(f"no interoperability/client_test5.py under {root}")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_listening(port: int, process: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"herald exited with {process.returncode} before listening")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.1)
    raise SystemExit(f"herald did not listen on port {port} within {timeout}s")


def _git_commit(interop: Path) -> str | None:
    """The suite's commit, if the checkout is a git work tree or has a COMMIT file beside it."""
    for marker in (interop / "COMMIT", interop.parent / "COMMIT"):
        if marker.is_file():
            return marker.read_text().strip()
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        out = subprocess.run(
            ["git", "-C", str(interop), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.strip()
    return None


def run(interop: Path, suites: list[str], selected: list[str], verbose: bool) -> dict:
    port = _free_port()
    workdir = Path(tempfile.mkdtemp(prefix="herald-paho-"))
    log_path = workdir / "herald.log"
    herald = [sys.executable, "-m", "herald.core.cli", "run", "--plugins", "mqtt"]
    herald += ["--data-dir", str(workdir / "data"), "--set", f"mqtt.port={port}"]
    herald += ["--set", "mqtt.host=127.0.0.1"]
    for setting in BROKER_SETTINGS:
        herald += ["--set", setting]
    report: dict = {"suite_commit": _git_commit(interop), "port": port, "suites": {}}
    with log_path.open("wb") as log_file:
        broker = subprocess.Popen(herald, stdout=log_file, stderr=subprocess.STDOUT)
        try:
            _wait_listening(port, broker)
            for suite in suites:
                report["suites"][suite] = _run_suite(interop, suite, port, selected, verbose)
        finally:
            broker.terminate()
            try:
                broker.wait(30)
            except subprocess.TimeoutExpired:
                broker.kill()
                broker.wait()
    text = log_path.read_text(errors="replace")
    report["broker_errors"] = sum(" ERROR " in line for line in text.splitlines())
    report["broker_exit_code"] = broker.returncode
    if report["broker_errors"]:
        report["broker_log"] = str(log_path)
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    totals = [s for s in report["suites"].values()]
    report["passed"] = sum(s["passed"] for s in totals)
    report["run"] = sum(s["run"] for s in totals)
    return report


def _run_suite(interop: Path, suite: str, port: int, selected: list[str], verbose: bool) -> dict:
    command = [sys.executable, str(Path(__file__).resolve()), "--child", suite]
    command += ["--port", str(port), str(interop)]
    for name in selected:
        command += ["-k", name]
    env = dict(os.environ, PYTHONPATH=str(interop))
    started = time.monotonic()
    child = subprocess.run(
        command,
        cwd=interop,
        env=env,
        capture_output=True,
        text=True,
        timeout=SUITE_TIMEOUT,
    )
    if verbose:
        sys.stderr.write(child.stdout + child.stderr)
    lines = [line for line in child.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return {"run": 0, "passed": 0, "failed": [], "errors": ["suite did not run"]}
    result = json.loads(lines[-1])
    result["seconds"] = round(time.monotonic() - started, 1)
    return result


class _Counting(unittest.TextTestResult):
    def __init__(self, *args: Any, **kwargs: Any) -> None:  # unittest's (stream, ...) as it is
        super().__init__(*args, **kwargs)
        self.passed: list[str] = []

    def addSuccess(self, test: unittest.TestCase) -> None:  # unittest's name
        super().addSuccess(test)
        self.passed.append(test.id().rpartition(".")[2])


def _child(suite: str, interop: Path, port: int, selected: list[str]) -> None:
    """Import one suite as a module, set the globals its __main__ block sets, run it."""
    sys.path.insert(0, str(interop))
    spec = importlib.util.spec_from_file_location(suite, interop / f"{suite}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    prefix = "client_test5/" if suite == "client_test5" else ""
    vars(module).update(
        host="127.0.0.1",
        port=port,
        topic_prefix=prefix,
        topics=tuple(prefix + t for t in ("TopicA", "TopicA/B", "Topic/C", "TopicA/C", "/TopicA")),
        wildtopics=tuple(
            prefix + t for t in ("TopicA/+", "+/C", "#", "/#", "/+", "+/+", "TopicA/#")
        ),
        nosubscribe_topics=("test/nosubscribe",),
    )
    loader = unittest.TestLoader()
    if selected:
        loader.testNamePatterns = [f"*{name}*" for name in selected]
    tests = loader.loadTestsFromTestCase(module.Test)
    runner = unittest.TextTestRunner(stream=sys.stderr, verbosity=2, resultclass=_Counting)
    result = runner.run(tests)
    assert isinstance(result, _Counting)
    name = lambda pair: pair[0].id().rpartition(".")[2]  # noqa: E731
    print(
        json.dumps(
            {
                "run": result.testsRun,
                "passed": len(result.passed),
                "failed": sorted(map(name, result.failures)),
                "errors": sorted(map(name, result.errors)),
                "skipped": sorted(map(name, result.skipped)),
            }
        ),
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", nargs="?", default=os.environ.get("PAHO_TESTING_DIR"))
    parser.add_argument("--suite", action="append", choices=SUITES, help="default: both")
    parser.add_argument("-k", dest="tests", action="append", default=[], help="test name part")
    parser.add_argument("-v", "--verbose", action="store_true", help="show the suites' output")
    parser.add_argument("--child", choices=SUITES, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not args.path:
        parser.error("give the suite's path (or set PAHO_TESTING_DIR)")
    interop = _interop_dir(args.path)
    if args.child:
        _child(args.child, interop, args.port, args.tests)
        return
    report = run(interop, args.suite or list(SUITES), args.tests, args.verbose)
    print(json.dumps(report, indent=2))
    sys.exit(0 if report["passed"] == report["run"] and not report["broker_errors"] else 1)


if __name__ == "__main__":
    main()

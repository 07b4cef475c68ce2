"""Run pika's and aio-pika's own broker test suites against herald, and count the results.

The suites are not part of herald: keep them outside the repository, with a virtualenv of
their own (the clients at the versions under test plus the suites' test dependencies), e.g.

    mkdir -p /tmp/suites/amqp && cd /tmp/suites/amqp
    git clone --depth 1 --branch 1.4.4 https://github.com/pika/pika pika-1.4.4  # sdist has no tests
    pip download --no-deps --no-binary aio-pika aio-pika==10.2.1 && tar xzf aio_pika-10.2.1.tar.gz
    python3.11 -m venv venv && venv/bin/pip install pika==1.4.4 aio-pika==10.2.1 pytest \\
        pytest-timeout gevent tornado twisted aiomisc aiomisc-pytest shortuuid \\
        timeout-decorator pytest-rst

then, from the repository with herald's virtualenv:

    .venv/bin/python tools/run_client_suites.py --suites-dir /tmp/suites/amqp \\
        --python /tmp/suites/amqp/venv/bin/python

This starts `herald run --plugins amqp` (this interpreter's herald, a fresh data dir) on
127.0.0.1:5672, runs each suite with pytest, prints passed / failed / skipped per suite and
one line per failure, and says whether herald logged any ERROR (a crashed handler).

How each suite finds the broker:
- pika (tests/acceptance) connects to localhost:5672 and 127.0.0.1:5672, fixed in the suite;
  that is why the port is 5672.
- aio-pika's conftest starts RabbitMQ in Docker through its own small Docker client
  (tests/docker_client.py) and takes the broker's address from the container it gets back.
  This module is also a pytest plugin (`-p run_client_suites`): it swaps that client for one
  whose "container" is the running herald, so every fixture built on it (amqp_url,
  amqp_direct_url, the proxied URLs) points at herald; removing the container is a no-op.
  Tests that restart the broker (docker kill / start, rabbitmqctl stop_app) cannot run and
  are reported as failures.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

SUITES = {
    # name: (directory glob under --suites-dir, test paths in it)
    "pika": ("pika-*", ["tests/acceptance"]),
    "aio-pika": ("aio_pika-*", ["tests"]),
}
URL_ENV = "HERALD_AMQP_URL"
TLS_PORT_ENV = "HERALD_AMQPS_PORT"
TLS_PORT = 5671
PORT = 5672
HERALD_SETTINGS = [
    # aio-pika's test_big_message publishes 22 MB; its broker image allows it (herald's
    # default, like RabbitMQ 4's, is 16 MiB). 128 MiB was RabbitMQ 3.8-3.13's default.
    "amqp.max_message_size=134217728",
]


# -- the pytest plugin side (imported by the suite's pytest, not by the runner) ---------------


class _HeraldContainers:
    """Stands in for aio-pika's DockerClient: every container it "runs" is herald."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def run(self, image: str, ports: list[str], environment: Any = None) -> Any:
        from tests.docker_client import ContainerInfo  # the suite's own class

        url = urlsplit(os.environ[URL_ENV])
        mapped = {"5672/tcp": url.port, "5671/tcp": int(os.environ[TLS_PORT_ENV])}
        return ContainerInfo(id="herald", ports=mapped, host=url.hostname)

    def kill(self, container_id: str) -> None:
        pass  # herald outlives the suite: the runner stops it

    def remove(self, container_id: str) -> None:
        pass


def pytest_plugin_registered(plugin: Any, manager: Any) -> None:
    """Patch aio-pika's conftest as it is registered, before its pytest_configure runs."""
    if getattr(plugin, "__name__", "") != "tests.conftest" or URL_ENV not in os.environ:
        return
    if hasattr(plugin, "check_docker_available") and hasattr(plugin, "DockerClient"):
        import tests.docker_client as docker_client

        plugin.check_docker_available = lambda: docker_client.DockerHostInfo(is_tcp=False)
        plugin.DockerClient = docker_client.DockerClient = _HeraldContainers  # test modules too


# -- the runner -------------------------------------------------------------------------------


def _wait_for_port(host: str, port: int, process: subprocess.Popen[bytes], limit: float) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"herald exited with {process.returncode} before listening")
        try:
            with socket.create_connection((host, port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"herald is not listening on {host}:{port} after {limit}s")


def _certificate(path: Path) -> Path:
    """A throwaway certificate for 127.0.0.1 and localhost, key included (the suites do
    not verify it), made with trustme (a test dependency of herald)."""
    import trustme

    trustme.CA().issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(
        str(path)
    )
    return path


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex((host, port)) != 0


def _results(junit: Path) -> dict[str, Any]:
    """Per test (its call and teardown may be two junit entries): passed, failed or skipped."""
    outcome: dict[str, str] = {}
    reasons: dict[str, str] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        problem = next((c for c in case if c.tag in ("failure", "error")), None)
        if problem is not None:
            message = (problem.get("message") or problem.text or problem.tag).strip()
            outcome[name] = "failed"
            reasons.setdefault(name, message.splitlines()[0][:160])
        elif any(c.tag == "skipped" for c in case):
            outcome.setdefault(name, "skipped")
        else:
            outcome.setdefault(name, "passed")
    counts: dict[str, Any] = {
        kind: sum(1 for value in outcome.values() if value == kind)
        for kind in ("passed", "failed", "skipped")
    }
    counts["failures"] = sorted(reasons.items())
    return counts


def run_suite(
    name: str, directory: Path, paths: list[str], python: str, url: str, extra: list[str]
) -> dict[str, Any]:
    junit = Path(tempfile.mkdtemp(prefix="herald-suite-")) / "junit.xml"
    env = dict(os.environ, **{URL_ENV: url, TLS_PORT_ENV: str(TLS_PORT)})
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parent), str(directory)])
    command = [
        python, "-m", "pytest", *paths, "-p", "run_client_suites", "-p", "no:cacheprovider",
        "-q", "-o", "log_cli=false", "--timeout", "120", f"--junitxml={junit}", *extra,
    ]  # fmt: skip
    print(f"== {name}: {' '.join(command)}  (in {directory})", flush=True)
    output = junit.with_name("output.txt")
    with output.open("wb") as out:
        subprocess.run(command, cwd=directory, env=env, check=False, stdout=out, stderr=out)
    return {**_results(junit), "output": output}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suites-dir", type=Path, required=True)
    parser.add_argument("--python", required=True, help="the suites' virtualenv interpreter")
    parser.add_argument("--suite", choices=[*SUITES, "all"], default="all")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=PORT, help="pika's suite needs 5672")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = parser.parse_args(argv)
    if not _port_free(args.host, args.port):
        raise SystemExit(f"{args.host}:{args.port} is in use; pika's suite needs that port")
    herald = Path(sys.executable).with_name("herald")
    data_dir = Path(tempfile.mkdtemp(prefix="herald-suites-data-"))
    log_path = data_dir.with_suffix(".log")
    tls = _certificate(data_dir.with_suffix(".pem"))  # aio-pika's test_amqps: AMQPS on 5671
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [str(herald), "run", "--plugins", "amqp", "--data-dir", str(data_dir),
             "--set", f"amqp.host={args.host}", "--set", f"amqp.port={args.port}",
             "--set", f"amqp.tls_port={TLS_PORT}", "--set", f"tls.certfile={tls}",
             *(arg for setting in HERALD_SETTINGS for arg in ("--set", setting))],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            _wait_for_port(args.host, args.port, process, 30)
            url = f"amqp://guest:guest@{args.host}:{args.port}/"
            results = {}
            for name in SUITES if args.suite == "all" else [args.suite]:
                pattern, paths = SUITES[name]
                found = sorted(p for p in args.suites_dir.glob(pattern) if p.is_dir())
                if not found:
                    print(f"== {name}: no {pattern} in {args.suites_dir}, skipped")
                    continue
                results[name] = run_suite(
                    name, found[-1], paths, args.python, url, args.pytest_args
                )
        finally:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
            shutil.rmtree(data_dir, ignore_errors=True)
    errors = [line for line in log_path.read_text().splitlines() if " ERROR " in line]
    for name, counts in results.items():
        print(
            f"{name}: {counts['passed']} passed, {counts['failed']} failed, "
            f"{counts['skipped']} skipped  (pytest output: {counts['output']})"
        )
        for test, reason in counts["failures"]:
            print(f"  FAILED {test}: {reason}")
    print(f"herald log: {log_path} ({len(errors)} ERROR lines)")
    for line in errors[:20]:
        print("  " + line)
    return 0 if not errors and all(not c["failed"] for c in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

"""Run stomp.py's own test suite against herald and print the counts as JSON.

stomp.py's tests (github.com/jasonrbriggs/stomp.py, folder `tests/`) are written for live
brokers in a docker image: ActiveMQ (config section `default`, user admin), RabbitMQ
(`rabbitmq`, `rabbitmq_ws`), Artemis (`artemis`), the Ruby stompserver (`stompserver`,
anonymous) and ActiveMQ again over IPv6 (`ipv6`). They read host, port and user per broker
from `tests/setup.ini`. The sdist has no tests, so the suite is kept outside the repo; get
the commit that is stomp.py 8.2.0 (no tag: the `dev` branch head whose pyproject says 8.2.0):

    git --git-dir=<mirror of jasonrbriggs/stomp.py> archive e2b3590 tests pytest.ini \\
        | tar -x -C /tmp/suites/stomp.py
    python tools/run_stomppy_suite.py [--suite /tmp/suites/stomp.py] [--all] [-- PYTEST_ARGS]

Leave stomp.py's own `stomp/` package out of that folder: the tests must import the client
installed in this virtualenv. This tool runs herald embedded in its own Trio loop (so it can
create the suites' users), writes `tests/setup.ini` pointing every broker section at it, runs
pytest on the suite in a child process, and prints one JSON object: the counts, every test
that did not pass, the tests it did not run with the reason, and the ERROR records herald
logged (a handler that died would show there).

One broker serves every flavour: STOMP on 127.0.0.1 (61613 when free, as `stomp.Connection()`
with no address needs it) and Web-STOMP on 15674 when free; a second one on [::1] serves the
IPv6 test. The suite's own setup.ini is kept as setup.ini.orig. The settings are the
ActiveMQ-like ones the suite assumes:
`strict_host=false` (stomp.py 1.2 sends the server's address as `host`) and
`allow_anonymous=true` (the stompserver tests log in without a user).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import sys
import tempfile
import xml.etree.ElementTree as ET
from contextlib import AsyncExitStack
from importlib import metadata
from pathlib import Path

import trio

from herald.core.embedding import embedded

SETTINGS = ("stomp.strict_host=false", "stomp.allow_anonymous=true")
USERS = {"admin": "password", "testuser": "password"}  # `default`/`ipv6` and `artemis`
SUITE_TIMEOUT = 900.0

# Tests that never reach a broker (a stub server, a mock transport, pure client code) or
# that need what herald does not offer; `--all` runs them too.
NOT_RUN = {
    "tests/test_ssl.py": "TLS: herald has no stomp+ssl listener yet; the certificates come "
    "from the docker image's keytool setup",
    "tests/test_cli_ssl.py": "TLS, as test_ssl.py",
    "tests/test_ssl_sni.py": "TLS with SNI, as test_ssl.py",
    "tests/test_ss.py": "a stub server in the test (port 60000), no broker",
    "tests/test_multicast.py": "stomp.py's multicast adapter, no broker",
    "tests/test_transport.py": "client unit tests, no broker",
    "tests/test_utils.py": "client unit tests, no broker",
    "tests/test_basic.py::TestBasic::test_timeout": "no broker: a connect timeout to an "
    "unroutable address (fails here: the sandbox refuses it at once, not after 5 s)",
    "tests/test_cli.py::TestCLI::test_invalid_version": "fails before connecting",
    "tests/test_cli.py::TestCLI::test_multicast": "multicast adapter, no broker",
    "tests/test_misc.py::TestNoResponseConnectionKill": "a stub server, no broker",
    "tests/test_misc.py::TestMiscellaneousLogic": "client unit tests, no broker",
    "tests/test_s11.py::Test11Send::testheartbeat_timeout": "a stub server, no broker",
    "tests/test_s11.py::Test11Send::testheartbeat_shutdown": "a stub server, no broker",
    "tests/test_s12.py::Test12Connect::test_timeout": "a stub server, no broker",
    "tests/test_threading.py": "the suite's own failure: set_listener('', None), which "
    "stomp.py 8.2 refuses (assert listener is not None) before connecting",
}
DEFAULT_ADDRESS = {  # stomp.Connection() with no address: localhost:61613
    "tests/test_basic.py::TestBasic::test_default_to_localhost": "61613 was taken",
    "tests/test_basic.py::TestBasic::test_host_bind_port": "61613 was taken",
}


def _free(port: int, host: str = "127.0.0.1") -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as trio's listeners do
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _pick(preferred: int, host: str = "127.0.0.1") -> int:
    if _free(preferred, host):
        return preferred
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _setup_ini(tcp: int, ws: int, ipv6: int) -> str:
    host = "127.0.0.1"
    return (
        f"[default]\nhost = {host}\nport = {tcp}\nssl_port = 1\nssl_expired_port = 1\n"
        f"user = admin\npassword = {USERS['admin']}\n\n"
        f"[ipv6]\nhost = ::1\nport = {ipv6}\n\n"
        f"[rabbitmq]\nhost = {host}\nport = {tcp}\nuser = guest\npassword = guest\n\n"
        f"[rabbitmq_ws]\nhost = {host}\nport = {ws}\nuser = guest\npassword = guest\n\n"
        f"[stompserver]\nhost = {host}\nport = {tcp}\n\n"
        "[sni]\nhost = my.example.com\nssl_port = 1\n\n"
        f"[artemis]\nhost = {host}\nport = {tcp}\nuser = testuser\n"
        f"password = {USERS['testuser']}\n"
    )


class _BrokerLog(logging.Handler):
    """Counts what the brokers did: connections, ERROR frames sent, and ERROR records."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.connections = self.error_frames = 0
        self.errors: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR:
            self.errors.append(f"{record.name}: {record.getMessage()}")
        elif str(record.msg).startswith("connection #%d opened"):
            self.connections += 1
        elif str(record.msg).startswith("stomp error to"):
            self.error_frames += 1


def _results(junit: Path) -> dict[str, object]:
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    problems: dict[str, str] = {}
    for case in ET.parse(junit).iter("testcase"):
        package, module, *classes = case.get("classname", "").split(".")
        name = "::".join([f"{package}/{module}.py", *classes, case.get("name", "")])
        for kind, key in (("failure", "failed"), ("error", "errors"), ("skipped", "skipped")):
            child = case.find(kind)
            if child is not None:
                counts[key] += 1
                problems[name] = f"{key}: {(child.get('message') or '').splitlines()[0][:200]}"
                break
        else:
            counts["passed"] += 1
    return {**counts, "not_passed": problems}


def _selection(run_all: bool, default_address: bool) -> dict[str, str]:
    """What not to run, with the reason: nothing with --all."""
    if run_all:
        return {}
    return {**NOT_RUN, **({} if default_address else DEFAULT_ADDRESS)}


async def _brokers(stack: AsyncExitStack, work: Path, tcp: int, ws: int, ipv6: int) -> None:
    """The main broker on 127.0.0.1 (TCP and WebSocket) and one on [::1], with the users."""
    flavours = {
        "main": [
            *("stomp.host=127.0.0.1", f"stomp.port={tcp}"),
            *("stomp.ws_host=127.0.0.1", f"stomp.ws_port={ws}"),
        ],
        "ipv6": ["stomp.host=::1", f"stomp.port={ipv6}", "stomp.ws_enabled=false"],
    }
    for name, settings in flavours.items():
        broker = await stack.enter_async_context(
            embedded(plugins=["stomp"], data_dir=work / name, settings=[*settings, *SETTINGS])
        )
        for user, password in USERS.items():
            broker.users.add_user(user, password, ["administrator"])
            broker.users.set_permissions(user, "/", ".*", ".*", ".*")


async def run(suite: Path, run_all: bool, extra: list[str]) -> dict[str, object]:
    tcp, ws, ipv6 = _pick(61613), _pick(15674), _pick(61613, "::1")
    ini = suite / "tests" / "setup.ini"
    original = ini.with_suffix(".ini.orig")
    if ini.exists() and not original.exists():
        ini.rename(original)
    ini.write_text(_setup_ini(tcp, ws, ipv6))
    broker_log = _BrokerLog()
    logging.getLogger().addHandler(broker_log)
    logging.getLogger().setLevel(logging.INFO)
    not_run = _selection(run_all, tcp == 61613)
    deselect = []
    for test in not_run:
        deselect += ["--ignore" if test.endswith(".py") else "--deselect", test]
    with tempfile.TemporaryDirectory(prefix="herald-stomppy-") as tmp:
        work = Path(tmp)
        junit, log = work / "junit.xml", work / "pytest.log"
        command = [
            *(sys.executable, "-m", "pytest", "-c", "pytest.ini", "--rootdir", "."),
            *("-p", "no:cacheprovider", "-p", "no:herald", "-q", "-rfE"),
            *(f"--junitxml={junit}", "tests", *deselect, *extra),
        ]
        env = {**os.environ, "TEST_THREADS_DONT_WEDGE": "true"}  # else it passes doing nothing
        async with AsyncExitStack() as stack:
            await _brokers(stack, work, tcp, ws, ipv6)
            with trio.fail_after(SUITE_TIMEOUT), log.open("wb") as out:
                done = await trio.run_process(
                    command, cwd=suite, env=env, stdout=out, stderr=out, check=False
                )
        tail = log.read_text(errors="replace").splitlines()[-12:]
        results = _results(junit) if junit.exists() else {"junit": "missing"}
    return {
        "suite": "stomp.py tests at e2b3590 (8.2.0)",
        "client": f"stomp.py {metadata.version('stomp.py')}",
        "command": " ".join(["python", "tools/run_stomppy_suite.py", *sys.argv[1:]]),
        "ports": {"stomp": tcp, "ws": ws, "ipv6": ipv6},
        "exit_code": done.returncode,
        **results,
        "not_run": not_run,
        "connections_served": broker_log.connections,
        "error_frames_sent": broker_log.error_frames,
        "broker_errors": broker_log.errors,
        "pytest_tail": tail,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="/tmp/suites/stomp.py", type=Path, help="its folder")
    parser.add_argument("--all", action="store_true", help="also run the tests in NOT_RUN")
    parser.add_argument("pytest_args", nargs="*", help="after --: passed to pytest")
    args = parser.parse_args()
    suite = args.suite.expanduser().resolve()
    if not (suite / "tests" / "testutils.py").is_file():
        raise SystemExit(f"no stomp.py tests under {suite} (see this tool's docstring)")
    if (suite / "stomp").exists():
        raise SystemExit(f"{suite}/stomp would shadow the installed stomp.py: remove it")
    report = trio.run(run, suite, args.all, args.pytest_args)
    print(json.dumps(report, indent=2))
    sys.exit(0 if report["exit_code"] == 0 else 1)


if __name__ == "__main__":
    main()

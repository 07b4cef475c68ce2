"""The `herald` command in-process, through click's CliRunner (as a real process:
tests/test_cli_process.py).

Errors a user can fix end in exactly one stderr line and exit code 2.
"""

from __future__ import annotations

import io
import json
import logging
import re
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from herald.core.cli import main
from herald.core.errors import ConfigError
from herald.core.log import configure_logging, reset_logging

TESTS = Path(__file__).resolve().parent
EXAMPLE_PLUGIN = TESTS / "example_plugin"
BROKEN_PLUGIN = TESTS / "broken_plugin"
HERALD_ENV = ("HERALD_DISABLE_PLUGIN_AUTOLOAD", "HERALD_BLOCKED_PLUGINS", "HERALD_CONFIG")


@pytest.fixture(autouse=True)
def _plain_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in HERALD_ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Install the example (echo) and the broken plugin: their dist-info makes entry points."""
    monkeypatch.syspath_prepend(str(EXAMPLE_PLUGIN))
    monkeypatch.syspath_prepend(str(BROKEN_PLUGIN))


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), prog_name="herald", catch_exceptions=False)


def one_error_line(result: Result) -> str:
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("herald: error: ")
    assert result.stdout == ""
    return lines[0]


# -- herald config check -----------------------------------------------------------------------


def test_config_check_ok(tmp_path: Path) -> None:
    path = tmp_path / "herald.toml"
    path.write_text('[broker]\nnode_name = "n@h"\n[memory]\nhigh_watermark = "40%"\n')
    result = invoke("config", "check", str(path))
    assert result.exit_code == 0, result.stderr
    assert result.stdout == f"ok: {path}\n"


def test_config_check_unknown_key(tmp_path: Path) -> None:
    path = tmp_path / "herald.toml"
    path.write_text("[broker]\ngracefull_timeout = 1\n")
    line = one_error_line(invoke("config", "check", str(path)))
    assert line.startswith("herald: error: config: unknown key 'broker.gracefull_timeout'")
    assert "did you mean 'broker.graceful_timeout'?" in line


def test_config_check_applies_set(tmp_path: Path) -> None:
    path = tmp_path / "herald.toml"
    path.write_text("")
    line = one_error_line(invoke("config", "check", str(path), "--set", "memory.check_interval=x"))
    assert line == "herald: error: config: memory.check_interval: expected a number, got 'x'"
    assert invoke("config", "check", str(path), "--set", "memory.check_interval=2").exit_code == 0


def test_config_check_reports_several_errors_on_one_line(tmp_path: Path) -> None:
    path = tmp_path / "herald.toml"
    path.write_text(
        '[broker]\ngraceful_timeout = "5"\nnode_name = 1\n[memory]\ncheck_interval = 0\n'
    )
    line = one_error_line(invoke("config", "check", str(path)))
    assert "broker.graceful_timeout: expected a number, got '5'" in line
    assert "broker.node_name: expected a string, got 1" in line
    assert "memory.check_interval: must be more than 0" in line


def test_config_check_bad_toml_and_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "herald.toml"
    path.write_text("[broker\n")
    assert "invalid TOML" in one_error_line(invoke("config", "check", str(path)))
    missing = tmp_path / "missing.toml"
    assert "missing.toml" in one_error_line(invoke("config", "check", str(missing)))


def test_config_check_checks_plugin_names_and_store(tmp_path: Path) -> None:
    path = tmp_path / "herald.toml"
    path.write_text('[broker]\nplugins = ["nope"]\n')
    assert "'nope'" in one_error_line(invoke("config", "check", str(path)))
    path.write_text('[store]\nbackend = "tape"\n')
    line = one_error_line(invoke("config", "check", str(path)))
    assert "store.backend" in line
    assert "'tape'" in line


def test_config_check_runs_the_plugins_checks_of_settings_that_go_together(
    tmp_path: Path,
) -> None:
    """`herald_configure` (here the cluster plugin's: a node needs the commit log) refuses in
    `config check` what `herald run` would refuse."""
    path = tmp_path / "herald.toml"
    path.write_text(
        '[broker]\nnode_name = "n1"\n[store]\nbackend = "memory"\n[cluster]\nenabled = true\n'
    )
    line = one_error_line(invoke("config", "check", str(path)))
    assert "cluster.enabled = true needs store.backend" in line


def test_config_check_validates_an_installed_plugins_section(
    tmp_path: Path, installed: None
) -> None:
    path = tmp_path / "herald.toml"
    path.write_text('[broker]\nplugins = []\n[echo]\nport = "x"\n')
    line = one_error_line(invoke("config", "check", str(path)))
    assert line == "herald: error: config: echo.port: expected an integer, got 'x'"


# -- herald plugins ----------------------------------------------------------------------------


def test_plugins_table(installed: None) -> None:
    result = invoke("plugins")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["NAME", "VERSION", "DESCRIPTION"]
    echo = next(line for line in lines if line.startswith("echo "))
    assert echo.split(None, 2) == ["echo", "0.1", "Line echo protocol (example plugin)"]
    broken = lines.index("broken:")
    assert "frobnicate" in lines[broken + 1]
    assert lines[broken + 1].split()[0] == "broken"


def test_plugins_json(installed: None) -> None:
    result = invoke("plugins", "--json")
    assert result.exit_code == 0, result.stderr
    listing = json.loads(result.stdout)
    echo = next(p for p in listing["plugins"] if p["name"] == "echo")
    assert echo == {
        "name": "echo",
        "version": "0.1",
        "description": "Line echo protocol (example plugin)",
    }
    assert "frobnicate" in listing["broken"]["broken"]
    assert "\n" not in listing["broken"]["broken"]


# -- plugins' commands (hook herald_cli_commands) ------------------------------------------------

COMMAND_PLUGIN = '''
import click

from herald.core import hookimpl
from herald.core.plugin_types import CliCommand

loaded = []


@click.command()
@click.argument("name")
def greet(name):
    """Say hello (the full help of the command)."""
    click.echo(f"hello {name}")


def load():
    loaded.append(True)
    return greet


@hookimpl
def herald_cli_commands():
    return [CliCommand(NAME, "Say hello.", load)]
'''


@pytest.fixture
def command_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    """Install, through an entry point, a plugin adding the `herald <name>` command."""

    def install(name: str) -> None:
        (tmp_path / "herald_test_greet.py").write_text(f"NAME = {name!r}\n{COMMAND_PLUGIN}")
        info = tmp_path / "herald_test_greet-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            "Metadata-Version: 2.1\nName: herald-test-greet\nVersion: 0.1\n"
        )
        (info / "entry_points.txt").write_text("[herald]\ngreet = herald_test_greet\n")
        monkeypatch.syspath_prepend(str(tmp_path))
        monkeypatch.delitem(sys.modules, "herald_test_greet", raising=False)

    return install


def test_admin_comes_from_the_management_plugin(monkeypatch: pytest.MonkeyPatch) -> None:
    result = invoke("admin", "--help")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("Usage: herald admin [OPTIONS] COMMAND [ARGS]...")
    assert "overview" in result.stdout

    listed = invoke("--help")
    assert re.search(r"^  admin +Manage a running broker", listed.stdout, re.MULTILINE)

    monkeypatch.setenv("HERALD_BLOCKED_PLUGINS", "management")
    blocked = CliRunner().invoke(main, ["admin", "--help"], prog_name="herald")
    assert blocked.exit_code == 2
    assert "No such command 'admin'" in blocked.stderr
    assert not re.search(r"^  admin ", invoke("--help").stdout, re.MULTILINE)


def test_a_plugins_command_is_listed_without_loading_it(
    command_plugin: Callable[[str], None],
) -> None:
    command_plugin("greet")
    listed = invoke("--help")
    assert re.search(r"^  greet +Say hello\.$", listed.stdout, re.MULTILINE)
    assert sys.modules["herald_test_greet"].loaded == []

    result = invoke("greet", "world")
    assert result.exit_code == 0, result.output
    assert result.stdout == "hello world\n"
    assert sys.modules["herald_test_greet"].loaded == [True]


def test_a_plugins_command_cannot_take_a_builtin_name(
    command_plugin: Callable[[str], None],
) -> None:
    command_plugin("run")
    line = one_error_line(invoke("nonexistent"))
    assert line == "herald: error: a plugin's command 'run' is herald's own"
    assert invoke("run", "--help").exit_code == 0  # herald's own commands still work


def test_version() -> None:
    result = invoke("--version")
    assert result.exit_code == 0
    assert re.fullmatch(r"herald, version \S+\n", result.stdout)


def test_run_with_a_bad_config_in_process(tmp_path: Path) -> None:
    line = one_error_line(invoke("run", "--data-dir", str(tmp_path), "--set", "store=1"))
    assert line == "herald: error: config: store: expected a table, got 1"


def test_run_with_an_unknown_store_in_process(tmp_path: Path) -> None:
    result = invoke(
        "run",
        "--data-dir",
        str(tmp_path),
        "--set",
        "broker.plugins=[]",
        "--set",
        "store.backend=tape",
    )
    assert "store.backend: unknown store 'tape'" in one_error_line(result)


# -- logging -----------------------------------------------------------------------------------


LINE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (\w+) ([\w.]+): (.*)")


def test_log_lines() -> None:
    stream = io.StringIO()
    try:
        configure_logging("info", stream)
        logging.getLogger("herald.core.broker").info("hello %s", "world")
        logging.getLogger("herald.core.broker").debug("not shown")
        logging.getLogger("herald.x").warning("forged?\n2026-01-01T00:00:00.000Z INFO x: y")
    finally:
        reset_logging()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2
    first, second = (LINE.fullmatch(line) for line in lines)
    assert first is not None and second is not None
    assert first.groups() == ("INFO", "herald.core.broker", "hello world")
    assert second.groups()[:2] == ("WARNING", "herald.x")
    assert "\\n2026" in second.group(3)


def test_logging_reconfiguration_replaces_the_handler() -> None:
    first, second = io.StringIO(), io.StringIO()
    try:
        configure_logging("info", first)
        configure_logging("debug", second)
        logging.getLogger("herald.core").debug("once")
    finally:
        reset_logging()
    assert first.getvalue() == ""
    assert second.getvalue().count("once") == 1
    with pytest.raises(ConfigError, match="loud"):
        configure_logging("loud")

"""The `herald` command: run a broker, list plugins, check a config file.

Every error a user can fix (a `HeraldError`: bad config, unknown plugin) ends the command with
one line on stderr, "herald: error: <message>", and exit code 2; never a traceback.

Other subcommands come from plugins (hook `herald_cli_commands`: the management plugin's
`herald admin`, the pipeline's `herald pipeline`): this module imports no plugin. The plugins
are loaded only when a name is not one of the commands here, or when the commands are listed,
and a plugin's command module only when that command runs or shows its help.
"""

from __future__ import annotations

import json
import logging
import os
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import trio

from herald.core.config import HeraldConfig, load_config
from herald.core.errors import ConfigError, HeraldError, PluginError
from herald.core.log import configure_logging, reset_logging
from herald.core.process_memory import fix_mmap_threshold

if TYPE_CHECKING:
    from herald.core.broker import Broker
    from herald.core.plugin_types import CliCommand, Listener, NodeRunner
    from herald.core.plugins import Plugins

log = logging.getLogger("herald.core.cli")

EXIT_USAGE = 2
"""Exit code of a configuration or plugin error (as click's own usage errors)."""


def _error_line(message: str) -> str:
    return "herald: error: " + " ".join(str(message).split())


class HeraldGroup(click.Group):
    """A click group that turns any `HeraldError` into one stderr line and exit code 2."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except HeraldError as exc:
            click.echo(_error_line(str(exc)), err=True)
            ctx.exit(EXIT_USAGE)


_PLUGIN_COMMANDS = "herald.plugin_commands"
"""`ctx.meta` key: the plugins' commands, found once per invocation."""


class MainGroup(HeraldGroup):
    """`herald`: its own commands, then those plugins add (hook `herald_cli_commands`)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self._plugin_commands(ctx)})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            return command
        declared = self._plugin_commands(ctx).get(cmd_name)
        if declared is None:
            return None
        loaded = declared.load()
        if not isinstance(loaded, click.Command):
            raise PluginError(f"command {cmd_name!r}: load() returned {loaded!r}, not a command")
        return loaded

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list of `herald --help`: plugins' commands with the help line they
        declared, without loading them."""
        try:
            declared = self._plugin_commands(ctx)
        except HeraldError as exc:
            click.echo(_error_line(f"plugin commands not listed: {exc}"), err=True)
            declared = {}
        limit = formatter.width - 6 - max(len(name) for name in [*self.commands, *declared])
        rows = [(name, cmd.get_short_help_str(limit)) for name, cmd in self.commands.items()]
        for name, command in declared.items():  # click's own shortening of a help text
            rows.append((name, click.Command(name, help=command.help).get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(sorted(rows))

    def _plugin_commands(self, ctx: click.Context) -> dict[str, CliCommand]:
        """The installed plugins' commands by name (plugins are loaded on the first call).

        :raises PluginError: a plugin declares a command named like one of herald's own.
        """
        found: dict[str, CliCommand] | None = ctx.meta.get(_PLUGIN_COMMANDS)
        if found is None:
            from herald.core.plugins import get_plugin_manager

            quiet = logging.getLogger("herald.plugins")  # `herald plugins` lists broken ones
            level = quiet.level
            quiet.setLevel(logging.ERROR)
            try:
                commands = get_plugin_manager().cli_commands()
            finally:
                quiet.setLevel(level)
            found = {}
            for command in commands:
                if command.name in self.commands:
                    raise PluginError(f"a plugin's command {command.name!r} is herald's own")
                found[command.name] = command
            ctx.meta[_PLUGIN_COMMANDS] = found
        return found


_set_option = click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override one config key, e.g. --set amqp.port=5673 (repeatable).",
)


@click.group(cls=MainGroup)
@click.version_option(package_name="heraldmq", prog_name="herald")
def main() -> None:
    """herald: a multi-protocol message broker (AMQP 0-9-1, MQTT, STOMP) on Trio."""


def _load(config_path: Path | None, overrides: Sequence[str]) -> tuple[HeraldConfig, Plugins]:
    """Plugins first (their config sections), then the config, then the enabled plugin names.

    Logging is configured from the config; until then only errors are logged, so a failure is
    reported in exactly one line. Plugins that failed to load are logged afterwards.
    """
    from herald.core.plugins import get_plugin_manager

    configure_logging("error")
    plugins = get_plugin_manager()
    config = load_config(
        config_path, overrides=overrides, plugin_sections=plugins.config_sections()
    )
    if config.broker.plugins is not None:
        plugins.require(config.broker.plugins)
    configure_logging(config.broker.log_level)
    for name, reason in sorted(plugins.broken.items()):
        log.warning("plugin %r cannot be loaded: %s", name, reason)
    return config, plugins


def _toml_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a valid TOML basic string


@main.command()
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="HERALD_CONFIG",
    help="TOML config file (default: none, or $HERALD_CONFIG).",
)
@click.option(
    "--plugins",
    metavar="NAME,...",
    help="Protocol plugins to enable, e.g. amqp,mqtt (default: every installed one).",
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory for the store and metadata (broker.data_dir).",
)
@_set_option
@click.pass_context
def run(
    ctx: click.Context,
    config_path: Path | None,
    plugins: str | None,
    data_dir: Path | None,
    overrides: tuple[str, ...],
) -> None:
    """Run a broker until SIGINT or SIGTERM (a second signal exits at once)."""
    ctx.call_on_close(reset_logging)
    options = []
    if plugins is not None:
        names = [name.strip() for name in plugins.split(",") if name.strip()]
        options.append(f"broker.plugins=[{', '.join(_toml_string(n) for n in names)}]")
    if data_dir is not None:
        options.append(f"broker.data_dir={_toml_string(str(data_dir))}")
    config, manager = _load(config_path, [*options, *overrides])
    fix_mmap_threshold()  # scrypt's 16 MiB would otherwise stay in RSS after the first login
    started = trio.Event()
    try:
        trio.run(_serve, config, manager, started)
    except KeyboardInterrupt:  # Ctrl-C before the signal watcher was in place
        ctx.exit(128 + signal.SIGINT)
    except (BaseExceptionGroup, OSError) as exc:
        group = exc if isinstance(exc, BaseExceptionGroup) else BaseExceptionGroup("", [exc])
        _exit_on_user_errors(ctx, group, started.is_set())
        raise


def _exit_on_user_errors(ctx: click.Context, group: BaseExceptionGroup, started: bool) -> None:
    """Report a failed start (bad config, port in use) as one line, if that is all it was."""
    config_errors, rest = group.split(HeraldError)
    if rest is None and config_errors is not None:
        errors = _leaves(config_errors)
        click.echo(_error_line("; ".join(str(e) for e in errors)), err=True)
        ctx.exit(EXIT_USAGE)
    os_errors, rest = group.split(OSError)
    if not started and rest is None and os_errors is not None:
        reasons = "; ".join(str(e) for e in _leaves(os_errors))
        click.echo(_error_line(f"cannot start: {reasons}"), err=True)
        ctx.exit(1)


def _leaves(group: BaseExceptionGroup) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        out.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out


def describe_listener(listener: Listener) -> str:
    """`amqp tcp 127.0.0.1:5672` (IPv6 hosts in brackets)."""
    host = f"[{listener.host}]" if ":" in listener.host else listener.host
    return f"{listener.protocol} {listener.transport} {host}:{listener.port}"


async def _serve(config: HeraldConfig, plugins: Plugins, started: trio.Event) -> None:
    """Run the node until it stops: the runner a plugin returns (`herald_node_runner`, e.g. a
    cluster node), else a bare broker, which is its own runner."""
    runner = plugins.node_runner(config)
    if runner is None:
        from herald.core.broker import Broker

        runner = Broker(config, plugins)
    async with trio.open_nursery() as nursery:
        await nursery.start(_watch_signals, runner)
        broker = await nursery.start(_run_broker, runner, nursery.cancel_scope)
        if broker is None:
            log.info("no client listener: this node runs without a broker (a cluster slave)")
        for listener in broker.listeners if broker is not None else ():
            log.info("listening: %s", describe_listener(listener))
        log.info(
            "herald started (node %s, data dir %s)",
            config.broker.node_name,
            config.broker.data_dir.absolute(),
        )
        started.set()


async def _run_broker(
    runner: NodeRunner,
    done: trio.CancelScope,
    *,
    task_status: trio.TaskStatus[Broker | None] = trio.TASK_STATUS_IGNORED,
) -> None:
    await runner.run(task_status=task_status)
    done.cancel()  # the node has stopped: stop watching signals too


async def _watch_signals(
    runner: NodeRunner, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    """First SIGINT/SIGTERM: graceful stop. Second: exit at once, without cleaning up."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        task_status.started()
        stopping = False
        async for signum in signals:
            name = signal.Signals(signum).name
            if stopping:
                log.warning("%s again: exiting now", name)
                os._exit(128 + signum)
            stopping = True
            log.info("%s: stopping (send it again to exit at once)", name)
            runner.stop()


@main.command(name="plugins")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_context
def plugins_command(ctx: click.Context, as_json: bool) -> None:
    """List installed plugins, and those that failed to load."""
    from herald.core.plugins import get_plugin_manager

    ctx.call_on_close(reset_logging)
    configure_logging("error")  # broken plugins are listed below, not warned about
    manager = get_plugin_manager()
    infos = manager.info()
    broken = dict(manager.broken)
    if as_json:
        listed = [
            {"name": i.name, "version": i.version, "description": i.description} for i in infos
        ]
        click.echo(json.dumps({"plugins": listed, "broken": broken}, indent=2))
        return
    rows = [("NAME", "VERSION", "DESCRIPTION")] + [
        (i.name, i.version, i.description) for i in infos
    ]
    widths = [max(len(row[col]) for row in rows) for col in range(2)]
    for name, version, description in rows:
        click.echo(f"{name:<{widths[0]}}  {version:<{widths[1]}}  {description}".rstrip())
    if broken:
        click.echo("\nbroken:")
        width = max(len(name) for name in broken)
        for name, reason in sorted(broken.items()):
            click.echo(f"  {name:<{width}}  {reason}")


@main.group(name="config", cls=HeraldGroup)
def config_group() -> None:
    """Work with config files."""


@config_group.command(name="check")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@_set_option
@click.pass_context
def config_check(ctx: click.Context, file: Path, overrides: tuple[str, ...]) -> None:
    """Validate FILE (with any --set applied) the way `herald run` would."""
    ctx.call_on_close(reset_logging)
    config, manager = _load(file, overrides)
    backends = manager.storage_backends()
    if config.store.backend not in backends:
        known = ", ".join(sorted(backends)) or "none"
        raise ConfigError(
            f"config: store.backend: unknown store {config.store.backend!r} (installed: {known})"
        )
    manager.configure(config)  # the plugins' own checks of settings that go together
    click.echo(f"ok: {file}")


if __name__ == "__main__":
    main(prog_name="herald")

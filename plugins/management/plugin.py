"""herald's management plugin: the hooks herald calls.

Registered through the `herald` entry-point group as
`management = "herald.plugins.management.plugin"`; selected like a protocol with
`herald run --plugins amqp,mqtt,stomp,management`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from herald.core import hookimpl
from herald.core.plugin_types import CliCommand, ConfigSection, PluginInfo, Service
from herald.plugins.management import server
from herald.plugins.management.config import ManagementConfig

if TYPE_CHECKING:
    import click

    from herald.core.broker import Broker


@hookimpl
def herald_plugin_info() -> PluginInfo:
    return PluginInfo("management", "REST/JSON management API and Prometheus metrics (HTTP)")


@hookimpl
def herald_config_sections() -> list[ConfigSection]:
    return [ConfigSection(server.NAME, ManagementConfig)]


@hookimpl
def herald_services(broker: Broker) -> list[Service]:
    return [Service("management", server.run)]


@hookimpl
def herald_cli_commands() -> list[CliCommand]:
    return [CliCommand("admin", "Manage a running broker through its management API.", _admin)]


def _admin() -> click.Command:
    """`herald admin ...` (admin_cli.py), imported only when it runs."""
    from herald.plugins.management.admin_cli import admin

    return admin

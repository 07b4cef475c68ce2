"""The pipeline's plugin: `herald pipeline ...` (cli.py), added to the `herald` command
through the `herald_cli_commands` hook.

Registered through the `herald` entry-point group as `pipeline = "herald.pipeline.plugin"`.
Every broker loads this module with the other plugins, so it imports neither cli.py nor
pyspark: the command is loaded only when it runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from herald.core import hookimpl
from herald.core.plugin_types import CliCommand, PluginInfo

if TYPE_CHECKING:
    import click


@hookimpl
def herald_plugin_info() -> PluginInfo:
    return PluginInfo("pipeline", "Spark jobs over the commit log (herald pipeline)")


@hookimpl
def herald_cli_commands() -> list[CliCommand]:
    return [
        CliCommand(
            "pipeline",
            "Spark jobs over a data dir's commit log (needs pip install 'heraldmq[spark]').",
            _pipeline,
        )
    ]


def _pipeline() -> click.Command:
    from herald.pipeline.cli import pipeline

    return pipeline

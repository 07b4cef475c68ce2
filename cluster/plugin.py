"""herald's cluster plugin: the hooks herald calls.

Registered through the `herald` entry-point group as `cluster = "herald.cluster.plugin"`.
Every broker loads this module, so it imports only the config class: the node runner
(node.py: etcd, httpx) loads when a node runs with `cluster.enabled = true`, the commands
(cli.py) when they run, `GET /api/cluster` (api.py) when it is asked. A broker without
`[cluster]` (or with `enabled = false`) gets None from `herald_node_runner` and runs as a bare
broker: nothing of the cluster runs, nothing is on its message path.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from herald.cluster.config import SECTION, ClusterConfig
from herald.core import hookimpl
from herald.core.errors import ConfigError
from herald.core.plugin_types import (
    CliCommand,
    ConfigSection,
    ManagementRoute,
    NodeRunner,
    PluginInfo,
    QueueType,
)

if TYPE_CHECKING:
    import click

    from herald.core.broker import Broker
    from herald.core.config import HeraldConfig
    from herald.core.plugins import Plugins

log = logging.getLogger("herald.cluster")

STORE_BACKEND = "commitlog"
DEFAULT_NODE_NAME = "herald@localhost"  # BrokerSection's default


@hookimpl
def herald_plugin_info() -> PluginInfo:
    return PluginInfo(
        "cluster", "Cluster membership in etcd, name-server registration, herald nameserver"
    )


@hookimpl
def herald_config_sections() -> list[ConfigSection]:
    return [ConfigSection(SECTION, ClusterConfig)]


def cluster_config(config: HeraldConfig) -> ClusterConfig | None:
    """The `[cluster]` section when the node is in a cluster, else None."""
    section = config.plugins.get(SECTION)
    if isinstance(section, ClusterConfig) and section.enabled:
        return section
    return None


@hookimpl
def herald_configure(config: HeraldConfig) -> None:
    """A cluster node keeps everything in the commit log (what replication ships) and has a
    name of its own (its etcd key and its name-server entry)."""
    section = config.plugins.get(SECTION)
    if not isinstance(section, ClusterConfig):
        return
    if not section.enabled:
        if section != ClusterConfig():
            log.warning("[cluster] is set but cluster.enabled = false: running standalone")
        return
    backend = config.store.backend
    if backend != STORE_BACKEND:
        raise ConfigError(
            f'config: cluster.enabled = true needs store.backend = "{STORE_BACKEND}" '
            f"(it is {backend!r}): replication ships the commit log"
        )
    if config.broker.node_name == DEFAULT_NODE_NAME:
        raise ConfigError(
            "config: cluster.enabled = true needs broker.node_name set to a name unique in "
            f"the cluster (it is the default {DEFAULT_NODE_NAME!r})"
        )


@hookimpl
def herald_node_runner(config: HeraldConfig, plugins: Plugins) -> NodeRunner | None:
    """A node with `cluster.enabled = true` runs as a `ClusterNode` (node.py): etcd first,
    then its broker; any other node as a bare broker."""
    section = cluster_config(config)
    if section is None:
        return None
    from herald.cluster.node import ClusterNode

    return ClusterNode(config, plugins, section)


@hookimpl
def herald_queue_types() -> list[QueueType]:
    """`x-queue-type: shared` (cluster/shared/): one queue on every master of the cluster.
    Declared on any broker; a node outside a cluster refuses it with 406."""
    from herald.cluster.shared.queue import QUEUE_TYPE, REFUSED_ARGUMENTS, SharedQueue, runtime_of

    description = "one queue on every master of a cluster, delivered in slots (WSO2 MB)"
    available = lambda services: runtime_of(services) is not None  # noqa: E731
    return [QueueType(QUEUE_TYPE, description, SharedQueue, REFUSED_ARGUMENTS, available)]


@hookimpl
def herald_management_routes() -> list[ManagementRoute]:
    return [
        ManagementRoute(
            "GET",
            "/api/cluster",
            _cluster_view,
            "This node's place in its cluster, and the cluster as a name server sees it",
        )
    ]


async def _cluster_view(broker: Broker, request: object) -> object:
    from herald.cluster.api import cluster_view  # httpx and the node runner: only when asked

    return await cluster_view(broker, request)


@hookimpl
def herald_cli_commands() -> list[CliCommand]:
    return [
        CliCommand("nameserver", "Run a herald name server (routes for cluster clients).", _ns),
        CliCommand("cluster", "Work with a herald cluster: dev, status, resolve.", _cluster),
    ]


def _ns() -> click.Command:
    from herald.cluster.cli import nameserver

    return nameserver


def _cluster() -> click.Command:
    from herald.cluster.cli import cluster

    return cluster

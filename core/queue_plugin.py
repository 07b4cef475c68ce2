"""The kernel's own plugin: the built-in queue types, declared through `herald_queue_types`
like any other plugin's (registered by every plugin manager, see `plugins.DEFAULT_PLUGINS`).

- `classic`, the default: core/queue.py, with swapping and paging (core/swap.py);
- `quorum`: accepted, as RabbitMQ clients declare it, and served with classic semantics on
  one node (no replication); queues report it as their `queue_type`.
"""

from __future__ import annotations

from herald.core.hookspecs import hookimpl
from herald.core.plugin_types import PluginInfo, QueueType
from herald.core.queue import Queue

CLASSIC = "classic"
QUORUM = "quorum"


@hookimpl
def herald_plugin_info() -> PluginInfo:
    return PluginInfo("queue_types", "built-in queue types: classic, quorum (classic semantics)")


@hookimpl
def herald_queue_types() -> list[QueueType]:
    return [
        QueueType(CLASSIC, "a queue on this node, swapped to the store when long", Queue),
        QueueType(QUORUM, "accepted for RabbitMQ clients; served as a classic queue", Queue),
    ]

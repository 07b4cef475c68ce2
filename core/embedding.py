"""Run a broker (a node) inside another Trio program or test suite.

    async with herald.core.embedded(plugins=["amqp"], settings=["amqp.port=0"]) as broker:
        port = broker.listeners[0].port
        ...

The broker runs in a nursery owned by the context manager; leaving the block stops it
gracefully (connections are asked to close, the store is flushed and closed). A node that a
plugin runs (hook `herald_node_runner`: a cluster node) runs the same way as under
`herald run`, and the block still gets its `Broker`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from herald.core.broker import Broker
from herald.core.config import load_config
from herald.core.errors import ConfigError
from herald.core.plugins import get_plugin_manager

if TYPE_CHECKING:
    from herald.core.config import HeraldConfig
    from herald.core.plugin_types import NodeRunner
    from herald.core.store import Store


@asynccontextmanager
async def embedded(
    config: HeraldConfig | None = None,
    *,
    plugins: Iterable[str] | None = None,
    data_dir: str | Path | None = None,
    settings: Sequence[str] = (),
    data: Mapping[str, Any] | None = None,
    load_entrypoints: bool = True,
    extra_plugins: Iterable[object] = (),
    store: Store | None = None,
) -> AsyncIterator[Broker]:
    """Start a node, yield its broker once the listeners are bound, stop it on exit.

    `plugins` names the protocol plugins to enable (None: every installed one), `settings`
    are `KEY=VALUE` overrides as on the command line, `data` a config mapping as from TOML.
    `extra_plugins` are plugin objects registered in addition to the installed ones, and
    `store` replaces the configured store (e.g. a MemoryStore on data kept across restarts).

    The node runs as under `herald run`: by the runner a plugin returns from
    `herald_node_runner` (a cluster node), else as a bare broker.

    :raises ConfigError: `store` is given for a node a plugin runs (its runner builds the
        broker, and with it the store).
    """
    manager = get_plugin_manager(load_entrypoints=load_entrypoints)
    for plugin in extra_plugins:
        manager.register(plugin)
    if config is None:
        merged: dict[str, Any] = {k: dict(v) for k, v in (data or {}).items()}
        broker_section = merged.setdefault("broker", {})
        if plugins is not None:
            broker_section["plugins"] = list(plugins)
        if data_dir is not None:
            broker_section["data_dir"] = str(data_dir)
        config = load_config(
            data=merged, overrides=settings, plugin_sections=manager.config_sections()
        )
    if config.broker.plugins is not None:
        manager.require(config.broker.plugins)
    runner: NodeRunner | None = manager.node_runner(config)
    if runner is None:
        runner = Broker(config, manager, store=store)
    elif store is not None:
        raise ConfigError(
            f"embedded(store=...): this node is run by a plugin ({type(runner).__name__}, "
            "hook herald_node_runner), whose broker opens the configured store"
        )
    async with trio.open_nursery() as nursery:
        broker = await nursery.start(runner.run)
        try:
            if broker is None:
                raise ConfigError(
                    f"embedded(): the node started without a broker ({type(runner).__name__}: "
                    "a cluster slave serves no client); run it with `herald run` instead"
                )
            yield broker
        finally:
            runner.stop()

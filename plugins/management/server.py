"""The management service: hypercorn's Trio worker serving the API in the broker's nursery,
and the rate sampler beside it.

It is a `herald_services` service rather than a protocol: it speaks to people and tools, not
to messaging clients, and it needs the broker open before it starts. It serves only when
selected (`herald run --plugins ...,management`, or no `--plugins` at all) and reports its
listener in `broker.listeners` (protocol "management", transport "http").
"""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING

import attrs
import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve

from herald.core.plugin_types import Listener
from herald.plugins.management.config import ManagementConfig
from herald.plugins.management.metrics import HeraldCollector, make_registry
from herald.plugins.management.rates import Rates

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from herald.core.broker import Broker
    from herald.plugins.management.endpoints import Endpoint

log = logging.getLogger("herald.plugins.management")

NAME = "management"


@attrs.define
class ManagementState:
    """What every request handler shares: the broker, the config, rates and metrics."""

    broker: Broker
    config: ManagementConfig
    rates: Rates
    registry: CollectorRegistry
    collector: HeraldCollector
    endpoints: list[Endpoint] = attrs.field(factory=list)
    listener: Listener | None = None

    @classmethod
    def for_broker(cls, broker: Broker, config: ManagementConfig) -> ManagementState:
        rates = Rates(broker)
        return cls(broker, config, rates, *make_registry(broker, rates))

    def broker_started(self) -> bool:
        """Every selected protocol has bound its listeners."""
        broker = self.broker
        bound = {listener.protocol for listener in broker.listeners}
        wanted = broker.plugins.protocols(broker.config.broker.plugins)
        return all(spec.name in bound for spec in wanted)

    def broker_stopping(self) -> bool:
        return self.listener is None


def selected(broker: Broker) -> bool:
    chosen = broker.config.broker.plugins
    return chosen is None or NAME in chosen


def hypercorn_config(config: ManagementConfig) -> HypercornConfig:
    hc = HypercornConfig()
    host = f"[{config.host}]" if ":" in config.host else config.host
    hc.bind = [f"{host}:{config.port}"]
    hc.accesslog = None
    hc.errorlog = logging.getLogger("herald.plugins.management.http")
    hc.graceful_timeout = config.graceful_timeout
    hc.include_server_header = False
    return hc


def _port_of(bind: str) -> int:
    return int(bind.rpartition(":")[2])


async def run(broker: Broker, *, task_status: trio.TaskStatus[None]) -> None:
    """The service: serve until the broker's nursery is cancelled."""
    if not selected(broker):
        task_status.started()
        return
    from herald.plugins.management.app import build_app

    section = broker.config.plugins.get(NAME)
    config = section if isinstance(section, ManagementConfig) else ManagementConfig()
    state = ManagementState.for_broker(broker, config)
    app = build_app(state)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(state.rates.run, config.sample_interval)
        binds = await nursery.start(partial(serve, app, hypercorn_config(config)))
        listener = Listener(NAME, "http", config.host, _port_of(binds[0]))
        state.listener = listener
        broker.listeners.append(listener)
        task_status.started()
        try:
            await trio.sleep_forever()
        finally:
            state.listener = None
            if listener in broker.listeners:
                broker.listeners.remove(listener)

"""The management service: hypercorn's Trio worker serving the API in the broker's nursery,
and the rate sampler beside it.

It is a `herald_services` service rather than a protocol: it speaks to people and tools, not
to messaging clients, and it needs the broker open before it starts. It serves only when
selected (`herald run --plugins ...,management`, or no `--plugins` at all) and reports its
listener in `broker.listeners` (protocol "management", transport "http"). When the broker's
`[tls]` section has a certificate, the same hypercorn server also serves HTTPS on
`https_port` (transport "https"), with a context built from that section.
"""

from __future__ import annotations

import logging
import socket
import ssl
from functools import partial
from typing import TYPE_CHECKING, cast

import attrs
import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve
from hypercorn.typing import ASGIFramework

from herald.core.listeners import ListenerBindError
from herald.core.plugin_types import Listener
from herald.core.tls import TLSSection, server_context
from herald.plugins.management.config import ManagementConfig
from herald.plugins.management.metrics import HeraldCollector, make_registry
from herald.plugins.management.rates import Rates

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from herald.core.broker import Broker
    from herald.core.config import HeraldConfig
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
        return self.broker.stopping or self.listener is None


def selected(config: HeraldConfig) -> bool:
    """`herald run --plugins` chose the management plugin (no `--plugins`: every plugin)."""
    chosen = config.broker.plugins
    return chosen is None or NAME in chosen


def section(config: HeraldConfig) -> ManagementConfig:
    """The `[management]` section (its defaults when the config has none)."""
    found = config.plugins.get(NAME)
    return found if isinstance(found, ManagementConfig) else ManagementConfig()


class _Config(HypercornConfig):
    """Hypercorn's config with the TLS context handed in rather than built from files, so
    HTTPS follows the broker's `[tls]` section (verify mode, ciphers, key passphrase)."""

    def __init__(self, ssl_context: ssl.SSLContext | None) -> None:
        super().__init__()
        self._ssl_context = ssl_context
        self.settings: dict[str, tuple[str, str, int, str]] = {}
        """bind address -> (transport, host, port, config key), to name a bind failure."""

    @property
    def ssl_enabled(self) -> bool:
        return self._ssl_context is not None

    def create_ssl_context(self) -> ssl.SSLContext | None:
        return self._ssl_context

    def _create_sockets(
        self, binds: list[str], type_: int = socket.SOCK_STREAM
    ) -> list[socket.socket]:
        """hypercorn's binding, one address at a time, so a port clash names its listener
        (hypercorn's own error says only "Address already in use")."""
        sockets: list[socket.socket] = []
        for bind in binds:
            try:
                sockets.extend(super()._create_sockets([bind], type_))
            except OSError as exc:
                for sock in sockets:
                    sock.close()
                transport, host, port, key = self.settings[bind]
                raise ListenerBindError(exc, f"{NAME} {transport}", host, port, key) from exc
        return sockets


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def https_context(tls: TLSSection) -> ssl.SSLContext | None:
    """A fresh server context from `[tls]` (not the broker's shared one: ALPN is set here for
    HTTP/2 and HTTP/1.1, which must not leak into the AMQP or STOMP handshakes); None
    without a certificate."""
    context = server_context(tls)
    if context is not None:
        context.set_alpn_protocols(["h2", "http/1.1"])
    return context


def hypercorn_config(
    config: ManagementConfig, tls: ssl.SSLContext | None = None
) -> HypercornConfig:
    """HTTP on `port`; with a TLS context, also HTTPS on `https_port` (hypercorn names the
    TLS sockets `bind` and the plain ones `insecure_bind`)."""
    hc = _Config(tls)
    plain = [_address(config.host, config.port)]
    hc.settings[plain[0]] = ("http", config.host, config.port, f"{NAME}.port")
    if tls is None:
        hc.bind = plain
    else:
        hc.bind = [_address(config.host, config.https_port)]
        hc.insecure_bind = plain
        hc.settings[hc.bind[0]] = ("https", config.host, config.https_port, f"{NAME}.https_port")
    hc.accesslog = None
    hc.errorlog = logging.getLogger("herald.plugins.management.http")
    hc.graceful_timeout = config.graceful_timeout
    hc.include_server_header = False
    return hc


def listeners_of(binds: list[str], host: str) -> list[Listener]:
    """hypercorn's bound addresses ("https://127.0.0.1:15671") as broker listeners, plain
    HTTP first (tools that take the first management listener expect it)."""
    out = []
    for bind in binds:
        scheme, _, address = bind.partition("://")
        out.append(Listener(NAME, scheme, host, int(address.rpartition(":")[2])))
    return sorted(out, key=lambda listener: listener.transport != "http")


async def run(broker: Broker, *, task_status: trio.TaskStatus[None]) -> None:
    """The service: serve until the broker's nursery is cancelled."""
    if not selected(broker.config):
        task_status.started()
        return
    from herald.plugins.management.app import build_app

    config = section(broker.config)
    state = ManagementState.for_broker(broker, config)
    # Starlette's ASGI types (MutableMapping scopes) and hypercorn's (TypedDicts) describe
    # the same calls but do not unify (hypercorn issue #353): say which one this is.
    app = cast(ASGIFramework, build_app(state))
    hc = hypercorn_config(config, https_context(broker.config.tls))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(state.rates.run, config.sample_interval)
        binds = await nursery.start(partial(serve, app, hc))
        listeners = listeners_of(binds, config.host)
        state.listener = next(lst for lst in listeners if lst.transport == "http")
        broker.listeners.extend(listeners)
        task_status.started()
        try:
            await trio.sleep_forever()
        finally:
            state.listener = None
            for listener in listeners:
                if listener in broker.listeners:
                    broker.listeners.remove(listener)

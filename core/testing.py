"""pytest plugin: a real broker for other projects' tests (and herald's own).

Installed with herald through the `pytest11` entry point. Fixtures:

- `herald_settings`: a list of `KEY=VALUE` overrides; override this fixture to configure.
- `herald_broker`: a running broker (pytest-trio) with every installed protocol plugin on a
  free port (every `*port` key is set to 0), the memory store and a temporary data dir.
  `herald_broker.listeners` tells where each protocol listens.

And a function: `listener_port(broker, protocol, transport="tcp")`, the port a protocol's
listener is bound to (a LookupError naming the broker's listeners when it has no such one).

    from herald.core.testing import listener_port

    async def test_publish(herald_broker):
        port = listener_port(herald_broker, "amqp")  # over "tcp"; ("mqtt", "ws") for another
        stream = await trio.open_tcp_stream("127.0.0.1", port)
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import attrs
import pytest

from herald.core.broker import Broker
from herald.core.plugins import get_plugin_manager


def free_port_settings(sections: dict[str, type]) -> list[str]:
    """Every plugin listener on loopback and a free port (`*host` = 127.0.0.1, `*port` = 0),
    so test brokers never clash with each other or with a broker installed on the machine."""
    out = []
    for section, cls in sections.items():
        if not attrs.has(cls):
            continue
        for field in attrs.fields(cls):
            name, default = field.name, field.default
            if (name == "port" or name.endswith("_port")) and isinstance(default, int):
                out.append(f"{section}.{name}=0")
            elif (name == "host" or name.endswith("_host")) and isinstance(default, str):
                out.append(f'{section}.{name}="127.0.0.1"')
    return out


def listener_port(broker: Broker, protocol: str, transport: str = "tcp") -> int:
    """The port `broker` listens on for `protocol` over `transport` ("tcp", "tls", "ws",
    "wss", "http" or "https"), as bound (never 0 once the broker has started).

    Raises LookupError, naming the listeners the broker does have, when none matches (the
    protocol's plugin is not loaded, or the transport is not configured, e.g. no `[tls]`).
    """
    for listener in broker.listeners:
        if listener.protocol == protocol and listener.transport == transport:
            return listener.port
    bound = ", ".join(f"{lst.protocol}/{lst.transport}:{lst.port}" for lst in broker.listeners)
    raise LookupError(
        f"the broker has no {protocol!r} listener over {transport!r}"
        f" (its listeners: {bound or 'none'})"
    )


@pytest.fixture
def herald_settings() -> list[str]:
    return []


@pytest.fixture
async def herald_broker(tmp_path: Path, herald_settings: list[str]) -> AsyncIterator[Broker]:
    from herald.core.embedding import embedded

    sections = get_plugin_manager().config_sections()
    settings = [*free_port_settings(sections), 'store.backend="memory"', *herald_settings]
    async with embedded(data_dir=tmp_path / "data", settings=settings) as broker:
        yield broker

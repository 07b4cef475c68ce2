"""herald's kernel.

The public API for embedding and for plugin authors:

- `herald.core.embedded(...)`: an async context manager running a broker in-process;
- `herald.core.Broker`: the broker itself;
- `herald.core.hookimpl`: the marker for plugin hook implementations.

All three are imported lazily: plugin modules importing `hookimpl` do not pull in the whole
kernel, and a sans-IO codec importing `herald.core.errors` loads neither pluggy nor trio.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from herald.core.broker import Broker as Broker
    from herald.core.embedding import embedded as embedded
    from herald.core.hookspecs import hookimpl as hookimpl

__all__ = ["Broker", "embedded", "hookimpl"]


def __getattr__(name: str) -> Any:
    if name == "hookimpl":
        from herald.core.hookspecs import hookimpl

        return hookimpl
    if name == "embedded":
        from herald.core.embedding import embedded

        return embedded
    if name == "Broker":
        from herald.core.broker import Broker

        return Broker
    raise AttributeError(f"module 'herald.core' has no attribute {name!r}")

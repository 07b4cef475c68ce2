"""herald's kernel.

The public API for embedding and for plugin authors:

- `herald.core.embedded(...)`: an async context manager running a broker in-process;
- `herald.core.Broker`: the broker itself;
- `herald.core.hookimpl`: the marker for plugin hook implementations.

`embedded` and `Broker` are imported lazily so that plugin modules importing `hookimpl` do
not pull in the whole kernel.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from herald.core.hookspecs import hookimpl as hookimpl

if TYPE_CHECKING:
    from herald.core.broker import Broker as Broker
    from herald.core.embedding import embedded as embedded

__all__ = ["Broker", "embedded", "hookimpl"]


def __getattr__(name: str) -> Any:
    if name == "embedded":
        from herald.core.embedding import embedded

        return embedded
    if name == "Broker":
        from herald.core.broker import Broker

        return Broker
    raise AttributeError(f"module 'herald.core' has no attribute {name!r}")

"""herald.cluster: name server, etcd coordination, and (later) replication and shared queues.

Importing this package is cheap: `resolve` and `resolve_sync` (find the node serving a queue
through the name servers, for applications) are loaded on first use. See docs/cluster.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from herald.cluster.nameserver.client import resolve, resolve_sync

__all__ = ["resolve", "resolve_sync"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from herald.cluster.nameserver import client

        return getattr(client, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

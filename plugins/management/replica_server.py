"""The slave's read-only management API as a service of its role: `serve_replica(node,
follower)` runs in `run_slave`'s nursery (cluster/roles.py).

It listens where the node's broker would (`[management]` host, port, and HTTPS port when
`[tls]` has a certificate), with the same hypercorn setup as server.py, and only when the
management plugin is selected. The role's end cancels it: the listeners close before
`run_slave` returns, so a promoted node's broker binds the same ports right after. A port
that cannot be bound (or a `[tls]` section that cannot be loaded) is logged and tried again
every `RETRY_S`: replication goes on without the API, never stops for it.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING, Any, cast

import trio
from hypercorn.trio import serve
from hypercorn.typing import ASGIFramework

from herald.core.errors import HeraldError
from herald.core.message import CodecRegistry
from herald.plugins.management.replica_api import ReplicaState, build_replica_app
from herald.plugins.management.replica_auth import ReplicaUsers
from herald.plugins.management.server import (
    https_context,
    hypercorn_config,
    listeners_of,
    section,
    selected,
)

if TYPE_CHECKING:
    from herald.cluster.ha.slave import Follower
    from herald.cluster.node import ClusterNode
    from herald.core.plugins import Plugins

log = logging.getLogger("herald.plugins.management")

RETRY_S = 5.0


def codecs_of(plugins: Plugins) -> CodecRegistry:
    """Every loaded protocol's message codec, as the broker registers them."""
    codecs = CodecRegistry(converter=plugins.converter)
    for codec in plugins.message_codecs():
        codecs.register(codec)
    return codecs


def replica_state(node: ClusterNode, follower: Follower) -> ReplicaState:
    config = node.herald_config

    def role() -> dict[str, Any]:
        view = node.view
        state = None if view is None else view.state
        claim = None if view is None else view.master
        master = claim.node if claim is not None else None if state is None else state.master
        return {
            "node": node.status.node,
            "group": node.status.group,
            "role": "slave",
            "epoch": node.status.epoch,
            "master": master,
            "master_addr": node.master_address() or None,
            "streaming_from": follower.streaming_from or None,
            "applied_offset": follower.applied,
            "flushed_offset": follower.flushed,
            "confirm_offset": follower.confirm_offset,
        }

    async def cluster() -> dict[str, Any]:
        from herald.cluster.api import node_view  # httpx and the node runner: when asked

        return await node_view(config, node)

    return ReplicaState(
        section(config),
        codecs_of(node.plugins),
        ReplicaUsers(node.plugins, config.auth.loopback_users),
        lambda: follower.store,
        role,
        cluster,
    )


def _reasons(group: BaseExceptionGroup[Exception]) -> str:
    def leaves(exc: BaseException) -> list[BaseException]:
        if isinstance(exc, BaseExceptionGroup):
            return [leaf for inner in exc.exceptions for leaf in leaves(inner)]
        return [exc]

    return "; ".join(str(leaf) for leaf in leaves(group))


async def serve_replica(node: ClusterNode, follower: Follower) -> None:
    """Serve the read-only API until cancelled (see the module docstring)."""
    config = node.herald_config
    if not selected(config):
        return
    state = replica_state(node, follower)
    # Starlette's ASGI types and hypercorn's do not unify (hypercorn issue #353): see server.py.
    app = cast(ASGIFramework, build_replica_app(state))
    settings = section(config)
    warned = False
    while True:
        try:
            hc = hypercorn_config(settings, https_context(config.tls))
            async with trio.open_nursery() as nursery:
                binds = await nursery.start(partial(serve, app, hc))
                state.listeners = listeners_of(binds, settings.host)
                warned = False
                log.info(
                    "management: %s serves its read-only API on %s",
                    node.status.node,
                    ", ".join(binds),
                )
        except* (OSError, HeraldError) as group:
            if not warned:
                log.warning(
                    "management: no read-only API on slave %s (%s); retrying every %g s",
                    node.status.node,
                    _reasons(group),
                    RETRY_S,
                )
            warned = True
        state.listeners = []
        await trio.sleep(RETRY_S)

"""A slave's read-only management API (RocketMQ's slaveReadEnable): reads that need only the
replicated store, so they can be sent to a slave and kept off the master.

A slave runs no broker: its follower store (cluster/ha/slave.py) is all it has, and that
store holds the master's messages, index, queue definitions and users as of the last record
applied. Served here, with the master's basic auth and tag rules (replica_auth.py):

- `GET /api/messages?key=` and `GET /api/messages/{position}`: stored_messages.py, the code
  path the master's API answers them with, so the JSON is the master's (administrator);
- `GET /api/queues/{vhost}/{queue}/messages`: a durable queue's stored, un-acked messages in
  queue-offset order (`browse_stored`: no kernel, so no ready/unacked split, no priority
  order, no TTL; `more` instead of a ready count);
- `GET /api/overview` (this node is a slave: its master, its applied offset) and
  `GET /api/cluster` (the master's `/api/cluster` answer, from the node).

Every other method and path answers 503 naming the master, without asking for credentials:
writes, and reads of kernel state, are the master's.
"""

from __future__ import annotations

import platform
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from herald.core.version import herald_version
from herald.plugins.management import stored_messages
from herald.plugins.management.access import READ, Caller, Level, authenticate
from herald.plugins.management.app import RawPath
from herald.plugins.management.endpoints import guarded, path_params, peer
from herald.plugins.management.errors import ApiError, not_found
from herald.plugins.management.stored_messages import (
    VHOST_KIND,
    BrowsePage,
    StoredMessages,
    durable_queue_names,
)

if TYPE_CHECKING:
    from starlette.types import ASGIApp

    from herald.core.message import CodecRegistry
    from herald.core.plugin_types import Listener
    from herald.core.store import Store
    from herald.plugins.management.config import ManagementConfig
    from herald.plugins.management.replica_auth import ReplicaUsers


@attrs.define
class ReplicaState:
    """What the slave's API reads; replica_server.py builds it from the node and its
    follower. `role()`: this node's place (`node`, `group`, `master`, offsets); `cluster()`:
    its `/api/cluster` answer."""

    config: ManagementConfig
    codecs: CodecRegistry
    users: ReplicaUsers
    store: Callable[[], Store | None]
    role: Callable[[], dict[str, Any]]
    cluster: Callable[[], Awaitable[dict[str, Any]]]
    listeners: list[Listener] = attrs.field(factory=list)


@attrs.frozen
class ReplicaCtx:
    """What a handler gets: the state, the request, the caller, decoded path parameters."""

    state: ReplicaState
    request: Request
    caller: Caller
    params: Mapping[str, str]

    @property
    def query(self) -> Mapping[str, str]:
        return self.request.query_params

    def source(self) -> StoredMessages:
        """The store as it is now; 503 while the follower reopens it (between streams)."""
        store = self.state.store()
        if store is None:
            raise ApiError(503, "this slave's store is reopening; try again")
        return StoredMessages.of_store(store, self.state.codecs)


Handler = Callable[[ReplicaCtx], Awaitable[Any]]


async def overview(ctx: ReplicaCtx) -> dict[str, Any]:
    version = herald_version()
    role = ctx.state.role()
    return {
        "product_name": "herald",
        "product_version": version,
        "management_version": version,
        "herald_version": version,
        "python_version": platform.python_version(),
        "cluster_name": role["node"],
        **role,
        "read_only": True,
        "read_only_endpoints": [f"{method} {path}" for method, path, _, _ in ENDPOINTS],
        "listeners": [
            {
                "node": role["node"],
                "protocol": listener.protocol,
                "transport": listener.transport,
                "ip_address": listener.host,
                "port": listener.port,
            }
            for listener in ctx.state.listeners
        ],
    }


async def cluster(ctx: ReplicaCtx) -> dict[str, Any]:
    return await ctx.state.cluster()


async def search(ctx: ReplicaCtx) -> dict[str, Any]:
    return stored_messages.search(ctx.source(), ctx.query, ctx.state.config.max_messages)


async def by_position(ctx: ReplicaCtx) -> dict[str, Any]:
    return stored_messages.at_position(ctx.source(), ctx.params["position"], ctx.query)


async def browse(ctx: ReplicaCtx) -> dict[str, Any]:
    """Checked in the master's browse's order: vhost (404, 403), queue (404), parameters
    (400), read permission (403; administrators unchecked). Queues by the store's metadata,
    so durable queues only."""
    source = ctx.source()
    vhost, name = ctx.params["vhost"], ctx.params["queue"]
    caller, users = ctx.caller, ctx.state.users
    metadata = source.store.load_metadata()
    if vhost not in metadata.get(VHOST_KIND, {}):
        raise not_found(f"vhost '{vhost}'")
    if not caller.is_monitor and not users.sees_vhost(caller.user, vhost):
        raise ApiError(403, f"access to vhost '{vhost}' refused for user '{caller.user.name}'")
    ids = {named: store_id for store_id, named in durable_queue_names(metadata).items()}
    store_id = ids.get((vhost, name))
    if store_id is None:
        raise not_found(f"durable queue '{name}' in vhost '{vhost}'")
    page = BrowsePage.parse(ctx.query, ctx.state.config.max_messages)
    if not caller.is_admin:
        users.authorize(caller.user, vhost, READ, "queue", name)
    return {"vhost": vhost, "queue": name, **stored_messages.browse_stored(source, store_id, page)}


ENDPOINTS: tuple[tuple[str, str, Level, Handler], ...] = (
    ("GET", "/api/overview", Level.MANAGEMENT, overview),
    ("GET", "/api/cluster", Level.MONITORING, cluster),
    ("GET", "/api/messages", Level.ADMINISTRATOR, search),
    ("GET", "/api/messages/{position}", Level.ADMINISTRATOR, by_position),
    ("GET", "/api/queues/{vhost}/{queue}/messages", Level.MANAGEMENT, browse),
)
"""(method, path, level, handler): everything a slave serves."""


def _route(state: ReplicaState, method: str, path: str, level: Level, handler: Handler) -> Route:
    async def call(request: Request) -> Any:
        store = state.store()
        if store is not None:
            state.users.refresh(store)  # else: the users as last loaded
        user = await authenticate(state.users, request.headers.get("authorization"), peer(request))
        caller = Caller(user)
        caller.require(level)
        return await handler(ReplicaCtx(state, request, caller, path_params(request)))

    async def run(request: Request) -> Response:
        return await guarded(request, call)

    run.__name__ = handler.__name__
    return Route(path, run, methods=[method])


def refusal(state: ReplicaState, method: str, path: str) -> JSONResponse:
    """503 for what a slave does not serve, naming the master to send it to."""
    role = state.role()
    master = role.get("master")
    where = f"master {master}" if master else "no master elected yet"
    reason = (
        f"{role['node']} is a slave of group {role['group']} ({where}): its management API is "
        f"read-only; {method} {path} is served by the master"
    )
    body = {
        "error": "service_unavailable",
        "reason": reason,
        "role": "slave",
        "master": master,
        "master_addr": role.get("master_addr"),
    }
    return JSONResponse(body, status_code=503)


def build_replica_app(state: ReplicaState) -> ASGIApp:
    async def refuse(request: Request) -> Response:
        return refusal(state, request.method, request.url.path)

    routes: list[BaseRoute] = [_route(state, *endpoint) for endpoint in ENDPOINTS]
    every = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
    routes.append(Route("/{path:path}", refuse, methods=every))
    return RawPath(Starlette(routes=routes))

"""Routes other plugins add through `herald_management_routes` (MQTT sessions, STOMP
subscriptions, cluster state...).

A `ManagementRoute(method, path, handler, description)` is mounted like a built-in endpoint:
same basic auth, same JSON errors, same %2F handling in paths, listed in the OpenAPI spec.
The handler is called as `handler(broker, request)` with a `RouteRequest` (below); it may be
a plain or an async function, returns JSON-able data (None answers 204), and signals
failures by raising a kernel error (`NotFound` answers 404, `AccessRefused` 403, ...).
Contributing plugins need not import anything from this package: `request` is duck-typed.

Access: GET routes need the `monitoring` (or `administrator`) tag, as they usually show
cross-vhost state; other methods need `administrator`. A path that clashes with a built-in
endpoint, or does not start with "/api/", is refused at start-up (logged), never mounted.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from herald.plugins.management.access import Level
from herald.plugins.management.endpoints import Ctx, Endpoint

if TYPE_CHECKING:
    from herald.core.auth import User
    from herald.core.plugin_types import ManagementRoute

log = logging.getLogger(__name__)

_METHODS = frozenset({"GET", "PUT", "POST", "DELETE", "PATCH"})


@attrs.frozen
class RouteRequest:
    """What a contributed handler gets besides the broker."""

    method: str
    path_params: Mapping[str, str]  # percent-decoded ("%2F" is "/")
    query: Mapping[str, str]
    user: User
    body: Any  # the parsed JSON body; None for GET / DELETE or an empty body


def _endpoint(route: ManagementRoute) -> Endpoint:
    method = route.method.upper()
    handler = route.handler

    async def call(ctx: Ctx) -> Any:
        body = None
        if method not in ("GET", "DELETE"):
            body = await ctx.json(required=False)
        request = RouteRequest(
            method, dict(ctx.params), dict(ctx.query), ctx.access.user, body or None
        )
        result = handler(ctx.broker, request)
        if inspect.isawaitable(result):
            result = await result
        return result

    call.__name__ = getattr(handler, "__name__", "contributed")
    level = Level.MONITORING if method == "GET" else Level.ADMINISTRATOR
    return Endpoint(method, route.path, call, route.description, level=level, tag="plugins")


def contributed(routes: list[ManagementRoute], builtin: list[Endpoint]) -> list[Endpoint]:
    """Endpoints for the routes plugins contribute, minus the ones that cannot be mounted."""
    taken = {(e.method, e.path) for e in builtin}
    out = []
    for route in routes:
        method = route.method.upper()
        if method not in _METHODS or not route.path.startswith("/api/"):
            log.error(
                "management: not mounting %s %s: the method must be one of %s and the path "
                "must start with /api/",
                route.method,
                route.path,
                ", ".join(sorted(_METHODS)),
            )
            continue
        if (method, route.path) in taken:
            log.error("management: not mounting %s %s: the path is taken", method, route.path)
            continue
        taken.add((method, route.path))
        out.append(_endpoint(route))
    return out

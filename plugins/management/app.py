"""The ASGI application: Starlette routes for every endpoint, JSON errors, raw paths.

Routing runs on the *raw* request path, so a percent-encoded "/" inside a segment stays inside
it: `/api/queues/%2F/orders` is vhost "/" and queue "orders", as in RabbitMQ's API (decoding
first would make it `/api/queues///orders`). Handlers get the decoded parameters.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from herald.plugins.management import (
    api_bindings,
    api_clients,
    api_messages,
    api_overview,
    api_topology,
    api_users,
    console,
    definitions,
    metrics,
    openapi,
)
from herald.plugins.management.contrib import contributed
from herald.plugins.management.endpoints import Ctx, Endpoint, EndpointTable, as_starlette
from herald.plugins.management.errors import error_response

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

    from herald.plugins.management.server import ManagementState

_spec = EndpointTable("meta")


@_spec.get("/api/openapi.json", "This API's OpenAPI document")
async def openapi_document(ctx: Ctx) -> dict[str, Any]:
    return openapi.build(ctx.state.endpoints, api_overview.herald_version())


TABLES = (
    api_overview.table,
    api_topology.table,
    api_bindings.table,
    api_messages.table,
    api_clients.table,
    api_users.table,
    definitions.table,
    metrics.table,
    _spec,
)


def builtin_endpoints() -> list[Endpoint]:
    return [endpoint for table in TABLES for endpoint in table.endpoints]


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        reason = f"no endpoint {request.method} {request.url.path}"
    else:
        reason = str(exc.detail)
    return error_response(exc.status_code, reason, dict(exc.headers or {}))


class RawPath:
    """ASGI middleware: route on the raw (still percent-encoded) path."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            raw = scope.get("raw_path")
            if raw:
                scope = {**scope, "path": raw.split(b"?", 1)[0].decode("latin-1")}
        await self.app(scope, receive, send)


def build_app(state: ManagementState) -> ASGIApp:
    endpoints = builtin_endpoints()
    endpoints += contributed(state.broker.plugins.management_routes(), endpoints)
    state.endpoints = endpoints
    routes: list[BaseRoute] = [
        Route(e.path, as_starlette(state, e), methods=[e.method], name=None) for e in endpoints
    ]
    routes += console.routes()
    app = Starlette(routes=routes, exception_handlers={HTTPException: _http_error})
    return RawPath(app)

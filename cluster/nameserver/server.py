"""The name server process: `RouteRegistry` served as HTTP/JSON (CLUSTER.md §4.2).

Starlette on hypercorn's Trio worker, the management plugin's stack, so the handlers and the
expiry scan run on one Trio thread and share the registry without locks. Stateless and in
memory: a restarted name server answers `need_full` until every master has re-sent its
queues (one register period). Name servers never talk to each other.

`run_nameserver` is what `herald nameserver` runs.
"""

from __future__ import annotations

import json
import logging
from functools import partial
from typing import Any, cast
from urllib.parse import unquote

import attrs
import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve
from hypercorn.typing import ASGIFramework
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from herald.cluster.nameserver.registry import EXPIRY_S, SCAN_S, RouteRegistry
from herald.cluster.nameserver.wire import (
    BadRequest,
    cluster_json,
    parse_registration,
    parse_unregister,
    route_json,
)

log = logging.getLogger("herald.cluster.nameserver")

DEFAULT_PORT = 9876  # RocketMQ's
MAX_BODY = 4 * 1024 * 1024  # a node with ~20,000 queues


@attrs.frozen
class ServerAddress:
    """Where a name server listens, as bound (port 0 asked -> the real port)."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def _error(status: int, message: str, field: str | None = None) -> JSONResponse:
    body: dict[str, Any] = {"error": message}
    if field is not None:
        body["field"] = field
    return JSONResponse(body, status_code=status)


async def _body(request: Request) -> Any:
    raw = await request.body()
    if len(raw) > MAX_BODY:
        raise BadRequest("body", f"at most {MAX_BODY} bytes")
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise BadRequest("body", f"not JSON ({exc})") from None


def build_app(registry: RouteRegistry) -> Starlette:
    """The ASGI app over `registry`; time is Trio's clock, as for the expiry scan."""

    async def register(request: Request) -> JSONResponse:
        try:
            reg = parse_registration(await _body(request))
        except BadRequest as exc:
            return _error(400, exc.message, exc.field)
        result = registry.register(reg, trio.current_time())
        return JSONResponse({"need_full": result.need_full})

    async def unregister(request: Request) -> JSONResponse:
        try:
            node = parse_unregister(await _body(request))
        except BadRequest as exc:
            return _error(400, exc.message, exc.field)
        return JSONResponse({"removed": registry.unregister(node)})

    async def route(request: Request) -> JSONResponse:
        # The raw path, since a vhost "/" arrives as %2F and decoded would split the path.
        raw = request.scope.get("raw_path") or request.url.path.encode()
        parts = raw.decode("latin-1").split("?")[0].split("/")[3:]
        if len(parts) != 2 or not all(parts):
            return _error(400, "expected /v1/route/{vhost}/{queue}, each percent-encoded", "path")
        vhost, queue = (unquote(p) for p in parts)
        protocol = request.query_params.get("protocol") or None
        found = registry.route(vhost, queue, protocol)
        if found is None:
            return _error(404, "no route")
        return JSONResponse(route_json(found))

    async def cluster(request: Request) -> JSONResponse:
        now = trio.current_time()
        return JSONResponse(cluster_json(registry.version, registry.groups(now)))

    return Starlette(
        routes=[
            Route("/v1/register", register, methods=["POST"]),
            Route("/v1/unregister", unregister, methods=["POST"]),
            Route("/v1/route/{path:path}", route, methods=["GET"]),
            Route("/v1/cluster", cluster, methods=["GET"]),
        ]
    )


async def scan(registry: RouteRegistry, scan_s: float) -> None:
    """Every `scan_s`, drop nodes silent for longer than the registry's `expiry_s`."""
    while True:
        await trio.sleep(scan_s)
        for node in registry.expire(trio.current_time()):
            log.info("name server: dropped %s, silent for over %s s", node, registry.expiry_s)


def hypercorn_config(host: str, port: int) -> HypercornConfig:
    hc = HypercornConfig()
    hc.bind = [str(ServerAddress(host, port))]
    hc.accesslog = None
    hc.errorlog = logging.getLogger("herald.cluster.nameserver.http")
    hc.include_server_header = False
    hc.graceful_timeout = 1.0
    return hc


async def run_nameserver(
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    *,
    scan_s: float = SCAN_S,
    expiry_s: float = EXPIRY_S,
    registry: RouteRegistry | None = None,
    task_status: trio.TaskStatus[ServerAddress] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve a name server until cancelled; `task_status.started(address)` reports the
    bound address (port 0 picks a free one). `registry` lets a test look inside."""
    registry = registry if registry is not None else RouteRegistry(expiry_s)
    # Starlette's ASGI types and hypercorn's describe the same calls but do not unify
    # (hypercorn issue #353), as in plugins/management/server.py.
    app = cast(ASGIFramework, build_app(registry))
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(partial(serve, app, hypercorn_config(host, port)))
        bound = int(binds[0].rpartition(":")[2])
        address = ServerAddress(host, bound)
        nursery.start_soon(scan, registry, scan_s)
        log.info("name server listening on http://%s", address)
        task_status.started(address)

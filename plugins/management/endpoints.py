"""How an API endpoint is declared and called.

Each `api_*.py` module fills an `EndpointTable` with decorated handlers. A declaration carries
what the OpenAPI spec needs (summary, access level, query parameters, body) next to the code,
so the served spec cannot drift from the routes. `as_starlette` wraps a handler with what
every endpoint does the same way: authenticate, check the tag level, decode path parameters
(vhost "/" arrives as %2F), bound and parse the JSON body, map errors to JSON answers.
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import attrs
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from herald.core.errors import KernelError
from herald.plugins.management.access import Access, Level, authenticate
from herald.plugins.management.errors import (
    ApiError,
    bad_request,
    error_response,
    status_of,
)

if TYPE_CHECKING:
    from herald.core.broker import Broker
    from herald.plugins.management.server import ManagementState

log = logging.getLogger(__name__)

_NO_BODY = object()


@attrs.frozen
class Reply:
    """A JSON answer with another status than 200 (201 created, 204 no content)."""

    status: int
    body: Any = None
    headers: Mapping[str, str] = attrs.field(factory=dict)


@attrs.define
class Ctx:
    """What a handler gets: the broker, the caller, decoded parameters, the body on demand."""

    state: ManagementState
    request: Request
    access: Access
    params: dict[str, str]
    _body: Any = _NO_BODY

    @property
    def broker(self) -> Broker:
        return self.state.broker

    @property
    def query(self) -> Mapping[str, str]:
        return self.request.query_params

    def flag(self, name: str) -> bool:
        return self.query.get(name, "").lower() in ("true", "1", "yes")

    def int_query(self, name: str, default: int, *, low: int = 0, high: int | None = None) -> int:
        return int_query(self.query, name, default, low=low, high=high)

    async def json(self, *, required: bool = True) -> Any:
        """The request body as JSON: 400 if malformed, 413 if over `max_body_bytes`."""
        if self._body is not _NO_BODY:
            return self._body
        limit = self.state.config.max_body_bytes
        data = bytearray()
        async for chunk in self.request.stream():
            data += chunk
            if len(data) > limit:
                # The rest of the body is not read: the connection cannot be reused.
                raise ApiError(413, f"request body over {limit} bytes", {"Connection": "close"})
        if not data.strip():
            if required:
                raise bad_request("a JSON body is required")
            self._body = {}
            return self._body
        try:
            self._body = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise bad_request(f"malformed JSON body: {exc}") from None
        return self._body

    async def json_object(self, *, required: bool = True) -> dict[str, Any]:
        body = await self.json(required=required)
        if not isinstance(body, dict):
            raise bad_request("the JSON body must be an object")
        return body


def int_query(
    query: Mapping[str, str], name: str, default: int, *, low: int = 0, high: int | None = None
) -> int:
    """Query parameter `name` as an integer in [low, high]; 400 otherwise (absent: `default`)."""
    text = query.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise bad_request(f"query parameter '{name}' must be an integer") from None
    if value < low or (high is not None and value > high):
        upper = "" if high is None else f"..{high}"
        raise bad_request(f"query parameter '{name}' must be in {low}{upper}")
    return value


Handler = Callable[[Ctx], Awaitable[Any]]


@attrs.frozen
class Endpoint:
    """One method on one path, and what the OpenAPI spec says about it."""

    method: str
    path: str
    handler: Handler
    summary: str
    level: Level = Level.MANAGEMENT
    query: tuple[str, ...] = ()
    body: str | None = None  # what the JSON body holds, for the spec; None: no body
    tag: str = "api"


class EndpointTable:
    """A module's endpoints, declared with `@table.get(path, summary)` and friends."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.endpoints: list[Endpoint] = []

    def _add(self, method: str, path: str, summary: str, **options: Any) -> Callable:
        def register(handler: Handler) -> Handler:
            self.endpoints.append(Endpoint(method, path, handler, summary, tag=self.tag, **options))
            return handler

        return register

    def get(self, path: str, summary: str, **options: Any) -> Callable:
        return self._add("GET", path, summary, **options)

    def put(self, path: str, summary: str, **options: Any) -> Callable:
        return self._add("PUT", path, summary, **options)

    def post(self, path: str, summary: str, **options: Any) -> Callable:
        return self._add("POST", path, summary, **options)

    def delete(self, path: str, summary: str, **options: Any) -> Callable:
        return self._add("DELETE", path, summary, **options)


def to_response(result: Any) -> Response:
    if isinstance(result, Response):
        return result
    if isinstance(result, Reply):
        if result.body is None:
            return Response(status_code=result.status, headers=dict(result.headers))
        return JSONResponse(result.body, status_code=result.status, headers=dict(result.headers))
    if result is None:
        return Response(status_code=204)
    return JSONResponse(result)


def _without_challenge(request: Request, exc: ApiError) -> dict[str, str]:
    """The console's own requests (`X-Requested-With: XMLHttpRequest`, as RabbitMQ's console
    sends) get their 401 without `WWW-Authenticate`, so the browser shows the console's login
    form instead of its own password dialog."""
    if request.headers.get("x-requested-with", "").lower() != "xmlhttprequest":
        return exc.headers
    return {k: v for k, v in exc.headers.items() if k.lower() != "www-authenticate"}


def as_starlette(state: ManagementState, endpoint: Endpoint) -> Callable:
    """The Starlette endpoint running `endpoint.handler` with auth and error mapping."""

    async def call(request: Request) -> Any:
        user = await authenticate(state.broker, request.headers.get("authorization"), peer(request))
        access = Access(state.broker, user)
        access.require(endpoint.level)
        result = endpoint.handler(Ctx(state, request, access, path_params(request)))
        if inspect.isawaitable(result):
            result = await result
        return result

    async def run(request: Request) -> Response:
        return await guarded(request, call)

    run.__name__ = getattr(endpoint.handler, "__name__", "endpoint")
    return run


def peer(request: Request) -> str | None:
    return request.client.host if request.client is not None else None


def path_params(request: Request) -> dict[str, str]:
    """The path parameters, percent-decoded (vhost "/" arrives as %2F)."""
    return {k: unquote(str(v)) for k, v in request.path_params.items()}


async def guarded(request: Request, call: Callable[[Request], Awaitable[Any]]) -> Response:
    """`call(request)`'s answer, and every failure as a JSON error: `ApiError` as it says, a
    kernel error by its reply code, anything else 500 (logged). A slave's read-only API
    (replica_api.py) answers through this too."""
    try:
        return to_response(await call(request))
    except ApiError as exc:
        return error_response(exc.status, exc.reason, _without_challenge(request, exc))
    except KernelError as exc:
        return error_response(status_of(exc), exc.reply_text)
    except Exception:
        log.exception("management: %s %s failed", request.method, request.url.path)
        return error_response(500, "internal error; see the broker log")

"""Definitions export and import, in RabbitMQ's JSON format.

Export writes `users`, `vhosts`, `permissions`, `exchanges`, `queues`, `bindings` (and empty
`policies` / `parameters` lists, which herald does not have), so RabbitMQ tooling reads it.
Exclusive queues, the default exchange and the `amq.*` exchanges are left out, as RabbitMQ
does. Users carry herald's scrypt hashes (`hashing_algorithm: herald_scrypt`); a user with
RabbitMQ's SHA-256 hash is imported without a password (it cannot log in until one is set),
and the answer says so.

Import applies items in dependency order through the same kernel calls as AMQP; the first
item that fails stops it with a 400 naming that item (what came before stays applied, as in
RabbitMQ).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from herald.core.errors import KernelError
from herald.core.native_codec import from_json_safe
from herald.core.vhost import PREDECLARED
from herald.plugins.management.access import Level
from herald.plugins.management.api_overview import herald_version
from herald.plugins.management.api_users import parse_tags
from herald.plugins.management.endpoints import Ctx, EndpointTable
from herald.plugins.management.errors import bad_request
from herald.plugins.management.shapes import (
    HASHING_ALGORITHM,
    binding_json,
    exchange_json,
    permission_json,
    queue_json,
    user_json,
)

table = EndpointTable("definitions")

_QUEUE_FIELDS = ("name", "vhost", "durable", "auto_delete", "arguments")


def _vhost_definitions(ctx: Ctx, name: str) -> dict[str, list[dict[str, Any]]]:
    vhost = ctx.broker.vhosts[name]
    exchanges = [
        exchange_json(e, name)
        for e in vhost.exchanges.values()
        if e.name and e.name not in PREDECLARED
    ]
    queues = []
    for queue in vhost.queues.values():
        if queue.owner is None:
            drawn = queue_json(queue, ctx.broker, None)
            queues.append({k: drawn[k] for k in _QUEUE_FIELDS})
    bindings = []
    for exchange in vhost.exchanges.values():
        for binding in exchange.bindings():
            drawn = binding_json(binding, name)
            drawn.pop("properties_key")
            owner = getattr(binding.destination, "owner", None)
            if owner is None:
                bindings.append(drawn)
    return {"exchanges": exchanges, "queues": queues, "bindings": bindings}


def export(ctx: Ctx) -> dict[str, Any]:
    users = ctx.broker.users
    out: dict[str, Any] = {
        "product_name": "herald",
        "product_version": herald_version(),
        "rabbit_version": herald_version(),
        "users": [user_json(u) for u in users.users()],
        "vhosts": [{"name": name} for name in sorted(ctx.broker.vhosts)],
        "permissions": [
            permission_json(user, vhost, p)
            for (user, vhost), p in sorted(users.permissions().items())
        ],
        "topic_permissions": [],
        "parameters": [],
        "global_parameters": [],
        "policies": [],
        "queues": [],
        "exchanges": [],
        "bindings": [],
    }
    for name in sorted(ctx.broker.vhosts):
        for kind, items in _vhost_definitions(ctx, name).items():
            out[kind].extend(items)
    return out


@table.get(
    "/api/definitions", "Export every definition (RabbitMQ's format)", level=Level.ADMINISTRATOR
)
async def get_definitions(ctx: Ctx) -> dict[str, Any]:
    return export(ctx)


@table.get(
    "/api/definitions/{vhost}",
    "Export one vhost's exchanges, queues and bindings",
    level=Level.ADMINISTRATOR,
)
async def get_vhost_definitions(ctx: Ctx) -> dict[str, Any]:
    name = ctx.access.vhost(ctx.params["vhost"]).name
    out: dict[str, Any] = {"product_name": "herald", "product_version": herald_version()}
    out.update(_vhost_definitions(ctx, name))
    return out


@table.post(
    "/api/definitions",
    "Import definitions (RabbitMQ's format)",
    level=Level.ADMINISTRATOR,
    body="an export",
)
async def post_definitions(ctx: Ctx) -> dict[str, Any]:
    body = await ctx.json_object()
    return Importer(ctx, None).run(body)


@table.post(
    "/api/definitions/{vhost}",
    "Import exchanges, queues and bindings into one vhost",
    level=Level.ADMINISTRATOR,
    body="an export of one vhost",
)
async def post_vhost_definitions(ctx: Ctx) -> dict[str, Any]:
    name = ctx.access.vhost(ctx.params["vhost"]).name
    body = await ctx.json_object()
    for kind in ("users", "vhosts", "permissions"):
        body.pop(kind, None)
    return Importer(ctx, name).run(body)


def _items(body: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    items = body.get(kind) or []
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise bad_request(f"'{kind}' must be a list of objects")
    return items


def _text(item: dict[str, Any], key: str, default: str | None = None) -> str:
    value = item.get(key, default)
    if not isinstance(value, str):
        raise ValueError(f"'{key}' must be a string")
    return value


class Importer:
    """Applies one definitions document; `vhost` forces every item into that vhost."""

    def __init__(self, ctx: Ctx, vhost: str | None) -> None:
        self.broker = ctx.broker
        self.vhost = vhost
        self.warnings: list[str] = []
        self.counts: dict[str, int] = {}

    def run(self, body: dict[str, Any]) -> dict[str, Any]:
        steps: list[tuple[str, Callable[[dict[str, Any]], None]]] = [
            ("vhosts", self._vhost),
            ("users", self._user),
            ("permissions", self._permission),
            ("exchanges", self._exchange),
            ("queues", self._queue),
            ("bindings", self._binding),
        ]
        for kind, apply in steps:
            for index, item in enumerate(_items(body, kind)):
                try:
                    apply(item)
                except (KernelError, ValueError, KeyError, TypeError) as exc:
                    reason = getattr(exc, "reply_text", None) or str(exc)
                    raise bad_request(
                        f"{kind}[{index}] ({item.get('name', '')}): {reason}"
                    ) from None
                self.counts[kind] = self.counts.get(kind, 0) + 1
        return {"imported": self.counts, "warnings": self.warnings}

    def _in(self, item: dict[str, Any]) -> Any:
        name = self.vhost or _text(item, "vhost", "/")
        vhost = self.broker.vhosts.get(name)
        if vhost is None:
            raise ValueError(f"vhost '{name}' does not exist")
        return vhost

    def _vhost(self, item: dict[str, Any]) -> None:
        self.broker.add_vhost(_text(item, "name"))

    def _user(self, item: dict[str, Any]) -> None:
        users = self.broker.users
        name = _text(item, "name")
        tags = parse_tags(item.get("tags"))
        algorithm = item.get("hashing_algorithm", HASHING_ALGORITHM)
        password_hash = item.get("password_hash") or None
        if algorithm != HASHING_ALGORITHM and password_hash is not None:
            self.warnings.append(
                f"user '{name}': {algorithm} hashes cannot be verified by herald; "
                "imported without a password (set one with PUT /api/users/{name})"
            )
            password_hash = None
        users.import_user(name, password_hash, tags)

    def _permission(self, item: dict[str, Any]) -> None:
        self.broker.users.set_permissions(
            _text(item, "user"),
            _text(item, "vhost"),
            _text(item, "configure"),
            _text(item, "write"),
            _text(item, "read"),
        )

    def _exchange(self, item: dict[str, Any]) -> None:
        self._in(item).declare_exchange(
            _text(item, "name"),
            _text(item, "type", "direct"),
            durable=bool(item.get("durable", True)),
            auto_delete=bool(item.get("auto_delete", False)),
            internal=bool(item.get("internal", False)),
            arguments=from_json_safe(item.get("arguments") or {}),
        )

    def _queue(self, item: dict[str, Any]) -> None:
        self._in(item).declare_queue(
            _text(item, "name"),
            durable=bool(item.get("durable", True)),
            auto_delete=bool(item.get("auto_delete", False)),
            arguments=from_json_safe(item.get("arguments") or {}),
        )

    def _binding(self, item: dict[str, Any]) -> None:
        vhost = self._in(item)
        kind = _text(item, "destination_type", "queue")
        args = (
            _text(item, "destination"),
            _text(item, "source"),
            _text(item, "routing_key", ""),
            from_json_safe(item.get("arguments") or {}),
        )
        if kind == "queue":
            vhost.bind_queue(*args)
        elif kind == "exchange":
            vhost.bind_exchange(*args)
        else:
            raise ValueError(f"destination_type must be 'queue' or 'exchange', not {kind!r}")

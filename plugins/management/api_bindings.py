"""Bindings: list (all, per vhost, per exchange, per queue), create, detail, delete.

As in RabbitMQ, one binding is named in a URL by its source, destination and
`properties_key` (routing key, plus a hash of the arguments when it has some); POST answers
201 with a `Location` holding that key. Binding needs write on the destination and read on
the source, as `queue.bind` / `exchange.bind` do over AMQP.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, unquote

from herald.core.exchange import Binding, Exchange
from herald.core.queue import Queue
from herald.core.vhost import VirtualHost
from herald.plugins.management.access import READ, WRITE
from herald.plugins.management.endpoints import Ctx, EndpointTable, Reply
from herald.plugins.management.errors import bad_request, not_found
from herald.plugins.management.paging import PAGING_QUERY, listing
from herald.plugins.management.shapes import (
    DEFAULT_EXCHANGE_ALIAS,
    binding_json,
    exchange_path_name,
    properties_key,
)

table = EndpointTable("bindings")

_KINDS = {"q": "queue", "e": "exchange"}


def _all_bindings(vhost: VirtualHost) -> list[dict[str, Any]]:
    out = []
    for exchange in vhost.exchanges.values():
        for binding in exchange.bindings():
            out.append(binding_json(binding, vhost.name))
    return out


def _list(ctx: Ctx, items: list[dict[str, Any]]) -> Any:
    return listing(
        ctx,
        items,
        lambda b: b["destination"],
        lambda b: b,
        key_of=lambda b: (b["vhost"], b["source"], b["destination"], b["routing_key"]),
    )


@table.get("/api/bindings", "Bindings of every visible vhost", query=PAGING_QUERY)
async def list_bindings(ctx: Ctx) -> Any:
    return _list(ctx, [b for v in ctx.access.visible_vhosts() for b in _all_bindings(v)])


@table.get("/api/bindings/{vhost}", "Bindings of one vhost", query=PAGING_QUERY)
async def list_vhost_bindings(ctx: Ctx) -> Any:
    return _list(ctx, _all_bindings(ctx.access.vhost(ctx.params["vhost"])))


def _exchange(vhost: VirtualHost, name: str) -> Exchange:
    exchange = vhost.exchanges.get(exchange_path_name(name))
    if exchange is None:
        raise not_found(f"exchange '{name}' in vhost '{vhost.name}'")
    return exchange


def _destination(vhost: VirtualHost, kind: str, name: str) -> Queue | Exchange:
    if kind == "queue":
        queue = vhost.queues.get(name)
        if queue is None:
            raise not_found(f"queue '{name}' in vhost '{vhost.name}'")
        return queue
    return _exchange(vhost, name)


@table.get(
    "/api/exchanges/{vhost}/{exchange}/bindings/source", "Bindings whose source is this exchange"
)
async def exchange_source_bindings(ctx: Ctx) -> Any:
    vhost = ctx.access.vhost(ctx.params["vhost"])
    exchange = _exchange(vhost, ctx.params["exchange"])
    return [binding_json(b, vhost.name) for b in exchange.bindings()]


@table.get(
    "/api/exchanges/{vhost}/{exchange}/bindings/destination",
    "Bindings whose destination is this exchange",
)
async def exchange_destination_bindings(ctx: Ctx) -> Any:
    vhost = ctx.access.vhost(ctx.params["vhost"])
    exchange = _exchange(vhost, ctx.params["exchange"])
    return [b for b in _all_bindings(vhost) if _is(b, "exchange", exchange.name)]


@table.get("/api/queues/{vhost}/{queue}/bindings", "Bindings whose destination is this queue")
async def queue_bindings(ctx: Ctx) -> Any:
    vhost = ctx.access.vhost(ctx.params["vhost"])
    queue = _destination(vhost, "queue", ctx.params["queue"])
    return [b for b in _all_bindings(vhost) if _is(b, "queue", queue.name)]


def _is(binding: dict[str, Any], kind: str, name: str) -> bool:
    return binding["destination_type"] == kind and binding["destination"] == name


def _between(ctx: Ctx) -> tuple[VirtualHost, Exchange, Queue | Exchange, str]:
    kind = _KINDS.get(ctx.params["kind"])
    if kind is None:
        raise not_found(f"binding destination kind '{ctx.params['kind']}' (use q or e)")
    vhost = ctx.access.vhost(ctx.params["vhost"])
    source = _exchange(vhost, ctx.params["source"])
    destination = _destination(vhost, kind, ctx.params["destination"])
    return vhost, source, destination, kind


def _pair(vhost: VirtualHost, source: Exchange, destination: Any) -> list[dict[str, Any]]:
    return [binding_json(b, vhost.name) for b in source.bindings() if b.destination is destination]


_PAIR = "/api/bindings/{vhost}/e/{source}/{kind}/{destination}"


@table.get(_PAIR, "Bindings between an exchange and a queue (q) or exchange (e)")
async def list_pair(ctx: Ctx) -> Any:
    vhost, source, destination, _ = _between(ctx)
    return _pair(vhost, source, destination)


@table.post(
    _PAIR, "Create a binding; 201 with its Location", body='{"routing_key": "", "arguments": {}}'
)
async def create_binding(ctx: Ctx) -> Reply:
    vhost, source, destination, kind = _between(ctx)
    body = await ctx.json_object(required=False)
    routing_key = body.get("routing_key", "")
    arguments = body.get("arguments") or {}
    if not isinstance(routing_key, str):
        raise bad_request("'routing_key' must be a string")
    if not isinstance(arguments, dict):
        raise bad_request("'arguments' must be an object")
    access = ctx.access
    access.check(vhost.name, WRITE, kind, destination.name)
    access.check(vhost.name, READ, "exchange", source.name)
    if kind == "queue":
        vhost.bind_queue(destination.name, source.name, routing_key, arguments)
    else:
        vhost.bind_exchange(destination.name, source.name, routing_key, arguments)
    parts = (vhost.name, source.name or DEFAULT_EXCHANGE_ALIAS, destination.name)
    vhost_q, source_q, destination_q = (quote(part, safe="") for part in parts)
    props = properties_key(routing_key, arguments)
    location = f"/api/bindings/{vhost_q}/e/{source_q}/{ctx.params['kind']}/{destination_q}/{props}"
    return Reply(201, None, {"Location": location})


def _one(ctx: Ctx) -> tuple[VirtualHost, Exchange, Any, str, Binding]:
    """The binding named by the URL's properties key (which arrives percent-decoded)."""
    vhost, source, destination, kind = _between(ctx)
    props = ctx.params["props"]
    for binding in source.bindings():
        if binding.destination is destination:
            key = properties_key(binding.routing_key, binding.arguments)
            if unquote(key) == props:
                return vhost, source, destination, kind, binding
    raise not_found(f"binding '{props}'")


@table.get(_PAIR + "/{props}", "One binding")
async def get_binding(ctx: Ctx) -> dict[str, Any]:
    vhost, *_, binding = _one(ctx)
    return binding_json(binding, vhost.name)


@table.delete(_PAIR + "/{props}", "Delete one binding")
async def delete_binding(ctx: Ctx) -> Reply:
    vhost, source, destination, kind, binding = _one(ctx)
    access = ctx.access
    access.check(vhost.name, WRITE, kind, destination.name)
    access.check(vhost.name, READ, "exchange", source.name)
    if kind == "queue":
        vhost.unbind_queue(destination.name, source.name, binding.routing_key, binding.arguments)
    else:
        vhost.unbind_exchange(destination.name, source.name, binding.routing_key, binding.arguments)
    return Reply(204)

"""Virtual hosts, exchanges and queues: list, detail, declare, delete, purge.

Declarations go through the kernel's own `declare_*` calls, so the API answers like AMQP does:
an inequivalent redeclaration is a 400 with RabbitMQ's wording, a reserved `amq.` name a 403.
"""

from __future__ import annotations

from typing import Any

from herald.core.queue import Queue
from herald.plugins.management.access import CONFIGURE, READ, Level
from herald.plugins.management.endpoints import Ctx, EndpointTable, Reply
from herald.plugins.management.errors import bad_request, not_found
from herald.plugins.management.paging import PAGING_QUERY, listing
from herald.plugins.management.shapes import (
    consumer_json,
    exchange_json,
    exchange_path_name,
    queue_json,
    swap_state,
)

table = EndpointTable("topology")


def _bool(body: dict[str, Any], key: str, default: bool) -> bool:
    value = body.get(key, default)
    if not isinstance(value, bool):
        raise bad_request(f"'{key}' must be true or false")
    return value


def _arguments(body: dict[str, Any]) -> dict[str, Any]:
    arguments = body.get("arguments") or {}
    if not isinstance(arguments, dict):
        raise bad_request("'arguments' must be an object")
    return arguments


# -- vhosts -------------------------------------------------------------------------------------


def _vhost_json(ctx: Ctx, name: str) -> dict[str, Any]:
    vhost = ctx.broker.vhosts[name]
    queues = vhost.queues.values()
    ready = sum(q.ready.count for q in queues)
    unacked = sum(q.unacked_count for q in queues)
    return {
        "name": name,
        "messages": ready + unacked,
        "messages_ready": ready,
        "messages_unacknowledged": unacked,
        "queues": len(vhost.queues),
        "exchanges": len(vhost.exchanges),
        "default": name == ctx.broker.config.broker.default_vhost,
        "tracing": False,
    }


@table.get("/api/vhosts", "Virtual hosts the caller may see", query=PAGING_QUERY)
async def list_vhosts(ctx: Ctx) -> Any:
    names = [v.name for v in ctx.access.visible_vhosts()]
    return listing(ctx, names, str, lambda name: _vhost_json(ctx, name))


@table.get("/api/vhosts/{vhost}", "One virtual host")
async def get_vhost(ctx: Ctx) -> dict[str, Any]:
    return _vhost_json(ctx, ctx.access.vhost(ctx.params["vhost"]).name)


@table.put(
    "/api/vhosts/{vhost}",
    "Create a virtual host (the caller gets full permissions)",
    level=Level.ADMINISTRATOR,
    body="{} (optional)",
)
async def put_vhost(ctx: Ctx) -> Reply:
    await ctx.json(required=False)
    name = ctx.params["vhost"]
    if name in ctx.broker.vhosts:
        return Reply(204)
    ctx.broker.add_vhost(name)
    users = ctx.broker.users
    if users.get_user(ctx.access.user.name) is not None:
        users.set_permissions(ctx.access.user.name, name, ".*", ".*", ".*")
    return Reply(201)


@table.delete(
    "/api/vhosts/{vhost}",
    "Delete a virtual host, its queues and permissions",
    level=Level.ADMINISTRATOR,
)
async def delete_vhost(ctx: Ctx) -> Reply:
    name = ctx.params["vhost"]
    if name not in ctx.broker.vhosts:
        raise not_found(f"vhost '{name}'")
    ctx.broker.delete_vhost(name)
    ctx.broker.users.clear_vhost(name)
    return Reply(204)


# -- exchanges ----------------------------------------------------------------------------------


def _exchanges(ctx: Ctx, vhost_names: list[str]) -> list[tuple[str, Any]]:
    return [
        (name, exchange)
        for name in vhost_names
        for exchange in ctx.broker.vhosts[name].exchanges.values()
    ]


def _list_exchanges(ctx: Ctx, vhost_names: list[str]) -> Any:
    return listing(
        ctx,
        _exchanges(ctx, vhost_names),
        lambda pair: pair[1].name,
        lambda pair: exchange_json(pair[1], pair[0]),
        key_of=lambda pair: (pair[0], pair[1].name),
    )


@table.get("/api/exchanges", "Exchanges of every visible vhost", query=PAGING_QUERY)
async def list_exchanges(ctx: Ctx) -> Any:
    return _list_exchanges(ctx, [v.name for v in ctx.access.visible_vhosts()])


@table.get("/api/exchanges/{vhost}", "Exchanges of one vhost", query=PAGING_QUERY)
async def list_vhost_exchanges(ctx: Ctx) -> Any:
    return _list_exchanges(ctx, [ctx.access.vhost(ctx.params["vhost"]).name])


@table.get("/api/exchanges/{vhost}/{exchange}", "One exchange (the default one is amq.default)")
async def get_exchange(ctx: Ctx) -> dict[str, Any]:
    vhost = ctx.access.vhost(ctx.params["vhost"])
    name = exchange_path_name(ctx.params["exchange"])
    exchange = vhost.exchanges.get(name)
    if exchange is None:
        raise not_found(f"exchange '{ctx.params['exchange']}' in vhost '{vhost.name}'")
    return exchange_json(exchange, vhost.name)


@table.put(
    "/api/exchanges/{vhost}/{exchange}",
    "Declare an exchange",
    body='{"type": "direct", "durable": true, "auto_delete": false, '
    '"internal": false, "arguments": {}}',
)
async def put_exchange(ctx: Ctx) -> Reply:
    vhost = ctx.access.vhost(ctx.params["vhost"])
    name = ctx.params["exchange"]
    body = await ctx.json_object()
    kind = body.get("type")
    if not isinstance(kind, str) or not kind:
        raise bad_request("'type' is required (direct, fanout, topic or headers)")
    ctx.access.check(vhost.name, CONFIGURE, "exchange", name)
    existed = name in vhost.exchanges
    vhost.declare_exchange(
        name,
        kind,
        durable=_bool(body, "durable", True),
        auto_delete=_bool(body, "auto_delete", False),
        internal=_bool(body, "internal", False),
        arguments=_arguments(body),
    )
    return Reply(204 if existed else 201)


@table.delete("/api/exchanges/{vhost}/{exchange}", "Delete an exchange", query=("if-unused",))
async def delete_exchange(ctx: Ctx) -> Reply:
    vhost = ctx.access.vhost(ctx.params["vhost"])
    name = exchange_path_name(ctx.params["exchange"])
    if name not in vhost.exchanges:
        raise not_found(f"exchange '{ctx.params['exchange']}' in vhost '{vhost.name}'")
    ctx.access.check(vhost.name, CONFIGURE, "exchange", name)
    vhost.delete_exchange(name, if_unused=ctx.flag("if-unused"))
    return Reply(204)


# -- queues -------------------------------------------------------------------------------------


def _list_queues(ctx: Ctx, vhost_names: list[str]) -> Any:
    queues = [q for name in vhost_names for q in ctx.broker.vhosts[name].queues.values()]
    rates = ctx.state.rates
    return listing(
        ctx,
        queues,
        lambda q: q.name,
        lambda q: queue_json(q, ctx.broker, rates),
        key_of=lambda q: (q.vhost.name, q.name),
    )


@table.get(
    "/api/queues", "Queues of every visible vhost (use page= for large brokers)", query=PAGING_QUERY
)
async def list_queues(ctx: Ctx) -> Any:
    return _list_queues(ctx, [v.name for v in ctx.access.visible_vhosts()])


@table.get("/api/queues/{vhost}", "Queues of one vhost", query=PAGING_QUERY)
async def list_vhost_queues(ctx: Ctx) -> Any:
    return _list_queues(ctx, [ctx.access.vhost(ctx.params["vhost"]).name])


def find_queue(ctx: Ctx) -> Queue:
    vhost = ctx.access.vhost(ctx.params["vhost"])
    name = ctx.params["queue"]
    queue = vhost.queues.get(name)
    if queue is None:
        raise not_found(f"queue '{name}' in vhost '{vhost.name}'")
    return queue


@table.get("/api/queues/{vhost}/{queue}", "One queue, with its consumers and swap state")
async def get_queue(ctx: Ctx) -> dict[str, Any]:
    queue = find_queue(ctx)
    out = queue_json(queue, ctx.broker, ctx.state.rates)
    out["consumer_details"] = [consumer_json(c, ctx.broker) for c in queue.consumers]
    out["herald_swap"] = swap_state(queue, ranges=100)
    return out


@table.get(
    "/api/queues/{vhost}/{queue}/swap",
    "Swap state: loaded / swapped entries, every swapped range, bytes in memory",
)
async def get_queue_swap(ctx: Ctx) -> dict[str, Any]:
    return swap_state(find_queue(ctx), ranges=None)


@table.put(
    "/api/queues/{vhost}/{queue}",
    "Declare a queue",
    body='{"durable": true, "auto_delete": false, "arguments": {}}',
)
async def put_queue(ctx: Ctx) -> Reply:
    vhost = ctx.access.vhost(ctx.params["vhost"])
    name = ctx.params["queue"]
    body = await ctx.json_object(required=False)
    if body.get("exclusive"):
        raise bad_request("exclusive queues belong to a connection; declare them over AMQP")
    ctx.access.check(vhost.name, CONFIGURE, "queue", name)
    existed = name in vhost.queues
    vhost.declare_queue(
        name,
        durable=_bool(body, "durable", True),
        auto_delete=_bool(body, "auto_delete", False),
        arguments=_arguments(body),
    )
    return Reply(204 if existed else 201)


@table.delete("/api/queues/{vhost}/{queue}", "Delete a queue", query=("if-empty", "if-unused"))
async def delete_queue(ctx: Ctx) -> Reply:
    queue = find_queue(ctx)
    ctx.access.check(queue.vhost.name, CONFIGURE, "queue", queue.name)
    queue.vhost.delete_queue(
        queue.name,
        if_empty=ctx.flag("if-empty"),
        if_unused=ctx.flag("if-unused"),
        owner=queue.owner,
    )
    return Reply(204)


@table.delete("/api/queues/{vhost}/{queue}/contents", "Purge: drop every ready message")
async def purge_queue(ctx: Ctx) -> Reply:
    queue = find_queue(ctx)
    ctx.access.check(queue.vhost.name, READ, "queue", queue.name)
    queue.purge()
    return Reply(204)

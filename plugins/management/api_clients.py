"""Connections, channels and consumers, whatever their protocol.

Connections come from the kernel's registry; closing one asks its protocol to close politely
(AMQP connection.close 320 CONNECTION_FORCED with the reason, MQTT 5 DISCONNECT, STOMP ERROR),
the reason taken from the `X-Reason` header as in RabbitMQ. Channels are what each protocol
reports through `Connection.channels`; consumers are read from the queues.
"""

from __future__ import annotations

from typing import Any

from herald.core.connections import Connection
from herald.plugins.management.endpoints import Ctx, EndpointTable, Reply
from herald.plugins.management.errors import ApiError, not_found
from herald.plugins.management.paging import PAGING_QUERY, listing
from herald.plugins.management.shapes import channel_json, connection_json, consumer_json

table = EndpointTable("clients")

DEFAULT_REASON = "Closed via management plugin"


def _visible(ctx: Ctx, vhost: str | None = None) -> list[Connection]:
    return [
        c
        for c in ctx.broker.connections
        if ctx.access.sees_connection(c) and (vhost is None or c.vhost == vhost)
    ]


def _list_connections(ctx: Ctx, connections: list[Connection]) -> Any:
    return listing(
        ctx,
        connections,
        lambda c: f"{c.id} {c.peer} {c.user or ''}",
        lambda c: connection_json(c, ctx.broker),
        key_of=lambda c: c.id,
    )


@table.get("/api/connections", "Open client connections", query=PAGING_QUERY)
async def list_connections(ctx: Ctx) -> Any:
    return _list_connections(ctx, _visible(ctx))


@table.get("/api/vhosts/{vhost}/connections", "Open connections of one vhost", query=PAGING_QUERY)
async def list_vhost_connections(ctx: Ctx) -> Any:
    vhost = ctx.access.vhost(ctx.params["vhost"])
    return _list_connections(ctx, _visible(ctx, vhost.name))


def _connection(ctx: Ctx) -> Connection:
    name = ctx.params["connection"]
    connection = ctx.broker.connections.get(int(name)) if name.isdigit() else None
    if connection is None or not ctx.access.sees_connection(connection):
        raise not_found(f"connection '{name}'")
    return connection


@table.get("/api/connections/{connection}", "One connection (named by its id)")
async def get_connection(ctx: Ctx) -> dict[str, Any]:
    return connection_json(_connection(ctx), ctx.broker)


@table.delete(
    "/api/connections/{connection}",
    "Close a connection; the X-Reason header is the reason the client is given",
)
async def close_connection(ctx: Ctx) -> Reply:
    connection = _connection(ctx)
    if not ctx.access.may_close(connection):
        raise ApiError(403, "only administrators may close other users' connections")
    reason = ctx.request.headers.get("x-reason") or DEFAULT_REASON
    connection.close(reason)
    return Reply(204)


def _channels(ctx: Ctx, connections: list[Connection]) -> list[dict[str, Any]]:
    out = []
    for connection in connections:
        if connection.channels is not None:
            for channel in connection.channels():
                out.append(channel_json(connection, channel, ctx.broker))
    return out


@table.get(
    "/api/channels",
    "Channels (AMQP) or sessions, as each protocol reports them",
    query=PAGING_QUERY,
)
async def list_channels(ctx: Ctx) -> Any:
    return listing(ctx, _channels(ctx, _visible(ctx)), lambda c: c["name"], lambda c: c)


@table.get("/api/connections/{connection}/channels", "Channels of one connection")
async def connection_channels(ctx: Ctx) -> list[dict[str, Any]]:
    return _channels(ctx, [_connection(ctx)])


@table.get("/api/vhosts/{vhost}/channels", "Channels of one vhost")
async def vhost_channels(ctx: Ctx) -> list[dict[str, Any]]:
    vhost = ctx.access.vhost(ctx.params["vhost"])
    return _channels(ctx, _visible(ctx, vhost.name))


def _consumers(ctx: Ctx, vhost_names: list[str]) -> list[dict[str, Any]]:
    return [
        consumer_json(consumer, ctx.broker)
        for name in vhost_names
        for queue in ctx.broker.vhosts[name].queues.values()
        for consumer in queue.consumers
    ]


@table.get("/api/consumers", "Consumers of every visible vhost's queues")
async def list_consumers(ctx: Ctx) -> list[dict[str, Any]]:
    return _consumers(ctx, [v.name for v in ctx.access.visible_vhosts()])


@table.get("/api/consumers/{vhost}", "Consumers of one vhost's queues")
async def list_vhost_consumers(ctx: Ctx) -> list[dict[str, Any]]:
    return _consumers(ctx, [ctx.access.vhost(ctx.params["vhost"]).name])

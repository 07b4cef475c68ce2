"""Messages: publish, get (consuming), browse (not consuming), search by key, read by position.

Publish and get behave like RabbitMQ's (same bodies, same `ackmode`s). Browse is herald's:
it walks a queue's ready entries in delivery order, reading swapped ones back from the store,
and changes nothing. Search and read-by-position go to the store's index and log, across
vhosts, so they are for administrators.
"""

from __future__ import annotations

from typing import Any

from herald.core.consumer import Consumer
from herald.core.message import NATIVE_PROTOCOL, Message, Properties
from herald.core.publish_result import RouteStatus
from herald.core.queue_entry import QueueEntry
from herald.plugins.management import store_access
from herald.plugins.management.access import READ, WRITE, Level
from herald.plugins.management.api_topology import find_queue
from herald.plugins.management.endpoints import Ctx, EndpointTable
from herald.plugins.management.errors import ApiError, bad_request, not_found
from herald.plugins.management.shapes import (
    decode_payload,
    exchange_path_name,
    expires_in_ms,
    message_json,
)

table = EndpointTable("messages")

_TEXT_PROPERTIES = frozenset(
    {
        "content_type",
        "content_encoding",
        "correlation_id",
        "reply_to",
        "message_id",
        "type",
        "user_id",
        "app_id",
    }
)
_INT_PROPERTIES = frozenset({"delivery_mode", "priority", "timestamp"})
ACK_MODES = ("ack_requeue_true", "ack_requeue_false", "reject_requeue_true", "reject_requeue_false")


def parse_properties(raw: Any) -> Properties:
    """RabbitMQ's publish `properties` object as kernel `Properties`; 400 on a bad field."""
    if raw is None:
        return Properties()
    if not isinstance(raw, dict):
        raise bad_request("'properties' must be an object")
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key in _TEXT_PROPERTIES:
            if not isinstance(value, str):
                raise bad_request(f"property '{key}' must be a string")
        elif key in _INT_PROPERTIES:
            if not isinstance(value, int) or isinstance(value, bool):
                raise bad_request(f"property '{key}' must be an integer")
        elif key == "expiration":
            value = str(value)
            if not value.isdigit():
                raise bad_request("property 'expiration' must be a number of milliseconds")
        elif key == "headers":
            if not isinstance(value, dict):
                raise bad_request("property 'headers' must be an object")
        else:
            raise bad_request(f"unknown property '{key}'")
        values[key] = value
    if values.get("delivery_mode") not in (None, 1, 2):
        raise bad_request("property 'delivery_mode' must be 1 (transient) or 2 (persistent)")
    return Properties(**values)


def _encoding(ctx_value: Any) -> str:
    if ctx_value not in ("auto", "base64"):
        raise bad_request("'encoding' must be 'auto' or 'base64'")
    return ctx_value


@table.post(
    "/api/exchanges/{vhost}/{exchange}/publish",
    "Publish a message",
    body='{"routing_key": "k", "payload": "...", "payload_encoding": "string", "properties": {}}',
)
async def publish(ctx: Ctx) -> dict[str, Any]:
    vhost = ctx.access.vhost(ctx.params["vhost"])
    name = exchange_path_name(ctx.params["exchange"])
    if name not in vhost.exchanges:
        raise not_found(f"exchange '{ctx.params['exchange']}' in vhost '{vhost.name}'")
    body = await ctx.json_object()
    routing_key = body.get("routing_key", "")
    text = body.get("payload")
    if not isinstance(routing_key, str):
        raise bad_request("'routing_key' must be a string")
    if not isinstance(text, str):
        raise bad_request("'payload' is required and must be a string")
    try:
        data = decode_payload(text, body.get("payload_encoding", "string"))
    except ValueError as exc:
        raise bad_request(str(exc)) from None
    properties = parse_properties(body.get("properties"))
    user = ctx.access.user
    if properties.user_id is not None and properties.user_id != user.name:
        raise bad_request(f"user_id property '{properties.user_id}' is not the publisher")
    ctx.access.check(vhost.name, WRITE, "exchange", name)
    if ctx.broker.alarms.blocked:
        alarms = ", ".join(sorted(ctx.broker.alarms.active))
        raise ApiError(503, f"publishing is blocked by resource alarm(s): {alarms}")
    message = Message.native(data, exchange=name, routing_key=routing_key, properties=properties)
    result = vhost.publish(message)
    if result.ticket is not None:
        await ctx.broker.store.wait_durable(result.ticket)
    return {
        "routed": result.queues > 0,
        "herald_status": result.status.value,
        "herald_queues": result.queues,
        "herald_rejected": result.status is RouteStatus.REJECTED,
    }


class _GetSink:
    """The holder of messages taken by a get: never pushed to, settled before we answer."""

    protocol = NATIVE_PROTOCOL  # what it reads: the neutral form (shapes.message_json)

    def deliver(self, consumer: Consumer, entry: QueueEntry) -> None:  # pragma: no cover
        raise AssertionError("a get holder is never delivered to")

    def consumer_cancelled(self, consumer: Consumer) -> None:
        pass


@table.post(
    "/api/queues/{vhost}/{queue}/get",
    "Get (consume) messages, then ack or requeue",
    body='{"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto", "truncate": 50000}',
)
async def get_messages(ctx: Ctx) -> list[dict[str, Any]]:
    queue = find_queue(ctx)
    body = await ctx.json_object()
    count = body.get("count", 1)
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise bad_request("'count' must be a positive integer")
    ackmode = body.get("ackmode", "ack_requeue_true")
    if ackmode not in ACK_MODES:
        raise bad_request(f"'ackmode' must be one of {', '.join(ACK_MODES)}")
    encoding = _encoding(body.get("encoding", "auto"))
    truncate = body.get("truncate")
    if truncate is not None and (not isinstance(truncate, int) or truncate < 0):
        raise bad_request("'truncate' must be a non-negative integer")
    ctx.access.check(queue.vhost.name, READ, "queue", queue.name)
    queue.check_owner(None)
    holder = queue.getter(_GetSink())
    taken: list[QueueEntry] = []
    for _ in range(min(count, ctx.state.config.max_messages)):
        entry = queue.get(holder)
        if entry is None:
            break
        taken.append(entry)
    out = []
    for i, entry in enumerate(taken):
        drawn = message_json(entry.message, ctx.broker, encoding, truncate)
        drawn["redelivered"] = entry.redelivered
        drawn["message_count"] = queue.message_count + len(taken) - i - 1
        out.append(drawn)
    for entry in taken:
        if ackmode == "ack_requeue_false":
            queue.ack(entry)
        else:
            queue.reject(entry, requeue=ackmode.endswith("requeue_true"))
    return out


@table.get(
    "/api/queues/{vhost}/{queue}/messages",
    "Browse ready messages in delivery order without consuming them",
    query=("offset", "limit", "encoding", "truncate"),
)
async def browse(ctx: Ctx) -> dict[str, Any]:
    queue = find_queue(ctx)
    offset = ctx.int_query("offset", 0)
    limit = ctx.int_query("limit", 50, low=1, high=ctx.state.config.max_messages)
    encoding = _encoding(ctx.query.get("encoding", "auto"))
    truncate = ctx.int_query("truncate", -1, low=-1)
    ctx.access.check(queue.vhost.name, READ, "queue", queue.name)
    entries = queue.browse(offset + limit)[offset:]
    items = []
    for entry in entries:
        drawn = message_json(
            entry.message, ctx.broker, encoding, None if truncate < 0 else truncate
        )
        drawn.update(
            queue_offset=entry.offset,
            delivery_count=entry.delivery_count,
            redelivered=entry.redelivered,
            priority=entry.priority,
            expires_in_ms=expires_in_ms(entry.expires_at),
        )
        items.append(drawn)
    return {
        "vhost": queue.vhost.name,
        "queue": queue.name,
        "messages_ready": queue.message_count,
        "offset": offset,
        "limit": limit,
        "items": items,
    }


@table.get(
    "/api/messages",
    "Find stored messages by key (message id) in a store-time range",
    level=Level.ADMINISTRATOR,
    query=("key", "from", "to", "limit", "encoding"),
)
async def search(ctx: Ctx) -> dict[str, Any]:
    key = ctx.query.get("key")
    if not key:
        raise bad_request("query parameter 'key' is required")
    begin = ctx.int_query("from", 0)
    end = ctx.int_query("to", 2**62)
    if end < begin:
        raise bad_request("'to' is before 'from'")
    limit = ctx.int_query("limit", 64, low=1, high=ctx.state.config.max_messages)
    encoding = _encoding(ctx.query.get("encoding", "auto"))
    found = store_access.find_by_key(ctx.broker.store, key, begin, end, limit)
    return {
        "key": key,
        "from": begin,
        "to": end,
        "items": [message_json(m, ctx.broker, encoding) for m in found],
    }


@table.get(
    "/api/messages/{position}",
    "One stored message by its commit-log position",
    level=Level.ADMINISTRATOR,
    query=("encoding",),
)
async def by_position(ctx: Ctx) -> dict[str, Any]:
    text = ctx.params["position"]
    if not text.isdigit():
        raise bad_request("the position must be a non-negative integer")
    encoding = _encoding(ctx.query.get("encoding", "auto"))
    found = store_access.message_at(ctx.broker.store, int(text))
    message = found.pop("message")
    out = message_json(message, ctx.broker, encoding)
    out.update(found)
    out["queues"] = _queues_of(ctx, found.get("targets", []))
    return out


def _queues_of(ctx: Ctx, targets: list[dict[str, int]]) -> list[dict[str, Any]]:
    """Which live queues the stored message was for (durable queues, by store id)."""
    ids = {t["queue_id"]: t["queue_offset"] for t in targets}
    out = []
    for vhost in ctx.broker.vhosts.values():
        for queue in vhost.queues.values():
            if queue.store_id in ids:
                out.append(
                    {"vhost": vhost.name, "name": queue.name, "queue_offset": ids[queue.store_id]}
                )
    return out

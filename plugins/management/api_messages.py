"""Messages: publish, get (consuming), browse (not consuming), search by key, read by position.

Publish and get behave like RabbitMQ's (same bodies, same `ackmode`s). Browse is herald's:
it walks a queue's ready entries in delivery order, reading swapped ones back from the store,
and changes nothing. Search and read-by-position go to the store's index and log, across
vhosts, so they are for administrators; they are stored_messages.py's, which a slave's
read-only API answers them with too.
"""

from __future__ import annotations

from typing import Any

from herald.core.consumer import Consumer
from herald.core.message import NATIVE_PROTOCOL, Message, Properties
from herald.core.publish_result import RouteStatus
from herald.core.queue_entry import QueueEntry
from herald.plugins.management import stored_messages
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
from herald.plugins.management.stored_messages import BrowsePage, StoredMessages, encoding_of

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
    encoding = encoding_of(body.get("encoding", "auto"))
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
        drawn = message_json(entry.message, ctx.broker.codecs, encoding, truncate)
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
    page = BrowsePage.parse(ctx.query, ctx.state.config.max_messages)
    ctx.access.check(queue.vhost.name, READ, "queue", queue.name)
    entries = queue.browse(page.offset + page.limit)[page.offset :]
    items = []
    for entry in entries:
        drawn = message_json(entry.message, ctx.broker.codecs, page.encoding, page.truncate)
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
        "offset": page.offset,
        "limit": page.limit,
        "items": items,
    }


@table.get(
    "/api/messages",
    "Find stored messages by key (message id) in a store-time range",
    level=Level.ADMINISTRATOR,
    query=("key", "from", "to", "limit", "encoding"),
)
async def search(ctx: Ctx) -> dict[str, Any]:
    source = StoredMessages.of_broker(ctx.broker)
    return stored_messages.search(source, ctx.query, ctx.state.config.max_messages)


@table.get(
    "/api/messages/{position}",
    "One stored message by its commit-log position",
    level=Level.ADMINISTRATOR,
    query=("encoding",),
)
async def by_position(ctx: Ctx) -> dict[str, Any]:
    source = StoredMessages.of_broker(ctx.broker)
    return stored_messages.at_position(source, ctx.params["position"], ctx.query)

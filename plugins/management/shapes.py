"""The JSON shapes of kernel objects, as RabbitMQ's management API draws them.

Field names follow RabbitMQ where the concept is the same (so its console, CLIs and client
libraries read them); herald-only facts are under `herald_*` keys. Kernel objects are read,
never changed, here.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import attrs
import trio

from herald.core.native_codec import to_json_safe
from herald.core.queue import Queue

if TYPE_CHECKING:
    from herald.core.auth import Permission, User
    from herald.core.broker import Broker
    from herald.core.connections import Connection
    from herald.core.consumer import Consumer
    from herald.core.exchange import Binding, Exchange
    from herald.core.message import CodecRegistry, Message
    from herald.plugins.management.rates import Rates

DEFAULT_EXCHANGE_ALIAS = "amq.default"
HASHING_ALGORITHM = "herald_scrypt"


def node_name(broker: Broker) -> str:
    return broker.config.broker.node_name


def message_stats(counts: tuple[int, int, int], rates: tuple[float, float, float]) -> dict:
    """RabbitMQ's `message_stats`: publish / deliver_get / ack counts and their rates."""
    out: dict[str, Any] = {}
    for name, count, rate in zip(("publish", "deliver_get", "ack"), counts, rates, strict=True):
        out[name] = count
        out[f"{name}_details"] = {"rate": round(rate, 3)}
    return out


# -- queues -------------------------------------------------------------------------------------


def swap_state(queue: Queue, *, ranges: int | None = 0) -> dict[str, Any]:
    """Apollo's view of a queue: how much is loaded, how much only in the store, in how many
    range nodes. `ranges` > 0 lists up to that many ranges; None lists them all."""
    ready = queue.ready
    nodes = ready.ranges()
    unacked_bytes = sum(c.unacked_bytes for c in queue.consumers)
    out: dict[str, Any] = {
        "enabled": queue.swaps,
        "loaded": ready.count - ready.swapped_count,
        "loaded_bytes": ready.loaded_bytes,
        "swapped": ready.swapped_count,
        "swapped_bytes": ready.swapped_bytes,
        "ranges": len(nodes),
        "unacked_bytes": unacked_bytes,
        "bytes_in_memory": ready.loaded_bytes + unacked_bytes,
    }
    if ranges != 0:
        shown = nodes if ranges is None else nodes[:ranges]
        out["range_list"] = [
            {
                "first_offset": r.offset,
                "last_offset": r.last_offset,
                "count": r.count,
                "bytes": r.size,
            }
            for r in shown
        ]
    return out


def queue_json(queue: Queue, broker: Broker, rates: Rates | None) -> dict[str, Any]:
    stats = queue.statistics()
    counts = (stats.published, stats.delivered, stats.acked)
    per_second = rates.queue_rates(queue) if rates is not None else (0.0, 0.0, 0.0)
    swap = swap_state(queue)
    owner = queue.owner
    out = {
        "name": queue.name,
        "vhost": queue.vhost.name,
        "type": queue.args.queue_type,  # as declared: "quorum" stays "quorum"
        "durable": queue.durable,
        "auto_delete": queue.auto_delete,
        "exclusive": owner is not None,
        "arguments": to_json_safe(dict(queue.arguments)),
        "node": node_name(broker),
        "state": "running",
        "messages": stats.messages_ready + stats.messages_unacknowledged,
        "messages_ready": stats.messages_ready,
        "messages_unacknowledged": stats.messages_unacknowledged,
        "message_bytes_ready": stats.message_bytes_ready,
        "consumers": stats.consumers,
        "memory": swap["bytes_in_memory"],
        "message_stats": message_stats(counts, per_second),
        "herald_expired": stats.expired,
        "herald_dead_lettered": stats.dead_lettered,
        "herald_swap": swap,
    }
    if owner is not None:
        out["owner_pid_details"] = {"name": str(getattr(owner, "id", owner))}
    return out


def consumer_json(consumer: Consumer, broker: Broker) -> dict[str, Any]:
    queue = consumer.queue
    return {
        "consumer_tag": consumer.tag,
        "queue": {"name": queue.name, "vhost": queue.vhost.name},
        "ack_required": not consumer.no_ack,
        "exclusive": consumer.exclusive,
        "prefetch_count": consumer.prefetch_count,
        "active": consumer.active and not consumer.suspended,
        "activity_status": "up" if consumer.active and not consumer.suspended else "waiting",
        "priority": consumer.priority,
        "arguments": to_json_safe(dict(consumer.arguments)),
        "herald_unacked": len(consumer.unacked),
        "herald_unacked_bytes": consumer.unacked_bytes,
    }


# -- exchanges and bindings ---------------------------------------------------------------------


def exchange_path_name(name: str) -> str:
    """The default exchange is named "amq.default" in URLs, as in RabbitMQ."""
    return "" if name == DEFAULT_EXCHANGE_ALIAS else name


def exchange_json(exchange: Exchange, vhost: str) -> dict[str, Any]:
    return {
        "name": exchange.name,
        "vhost": vhost,
        "type": exchange.type,
        "durable": exchange.durable,
        "auto_delete": exchange.auto_delete,
        "internal": exchange.internal,
        "arguments": to_json_safe(dict(exchange.arguments)),
    }


def properties_key(routing_key: str, arguments: Mapping[str, Any]) -> str:
    """RabbitMQ's binding `properties_key`: the routing key ("~" if empty), then "~" and a
    hash of the arguments when there are any. It names one binding in a URL."""
    key = quote(routing_key, safe="") if routing_key else "~"
    if not arguments:
        return key
    text = json.dumps(to_json_safe(dict(arguments)), sort_keys=True, separators=(",", ":"))
    digest = base64.urlsafe_b64encode(hashlib.sha1(text.encode()).digest()[:9]).decode()
    return f"{key}~{digest}"


def binding_json(binding: Binding, vhost: str) -> dict[str, Any]:
    destination = binding.destination
    kind = "queue" if isinstance(destination, Queue) else "exchange"
    return {
        "source": binding.source,
        "vhost": vhost,
        "destination": getattr(destination, "name", str(destination)),
        "destination_type": kind,
        "routing_key": binding.routing_key,
        "arguments": to_json_safe(dict(binding.arguments)),
        "properties_key": properties_key(binding.routing_key, binding.arguments),
    }


# -- connections --------------------------------------------------------------------------------


def connection_json(connection: Connection, broker: Broker) -> dict[str, Any]:
    host, _, port = connection.peer.rpartition(":")
    channels = connection.channels() if connection.channels is not None else []
    return {
        "name": str(connection.id),
        "id": connection.id,
        "node": node_name(broker),
        "protocol": connection.protocol,
        "peer_host": host.strip("[]") if host else connection.peer,
        "peer_port": int(port) if port.isdigit() else None,
        "user": connection.user,
        "vhost": connection.vhost,
        "state": "running",
        "channels": len(channels),
        "connected_at": int(connection.opened_at * 1000),
        "client_properties": {"product": connection.client} if connection.client else {},
    }


def channel_json(connection: Connection, channel: Mapping[str, Any], broker: Broker) -> dict:
    number = channel.get("number", 0)
    out = {
        "name": f"{connection.id} ({number})",
        "number": number,
        "node": node_name(broker),
        "user": connection.user,
        "vhost": connection.vhost,
        "connection_details": {"name": str(connection.id), "peer_host": connection.peer},
    }
    out.update(to_json_safe(dict(channel)))
    return out


# -- users --------------------------------------------------------------------------------------


def user_json(user: User) -> dict[str, Any]:
    return {
        "name": user.name,
        "password_hash": user.password_hash or "",
        "hashing_algorithm": HASHING_ALGORITHM,
        "tags": sorted(user.tags),
    }


def permission_json(user: str, vhost: str, permission: Permission) -> dict[str, Any]:
    return {
        "user": user,
        "vhost": vhost,
        "configure": permission.configure,
        "write": permission.write,
        "read": permission.read,
    }


# -- messages -----------------------------------------------------------------------------------


def payload(body: bytes, encoding: str, truncate: int | None) -> dict[str, Any]:
    """The body as text when `encoding` is "auto" and it is UTF-8, else base64."""
    shown = body if truncate is None else body[:truncate]
    out: dict[str, Any] = {"payload_bytes": len(body)}
    if encoding == "auto":
        try:
            out["payload"] = shown.decode("utf-8")
            out["payload_encoding"] = "string"
            return out
        except UnicodeDecodeError:
            pass
    out["payload"] = base64.b64encode(shown).decode("ascii")
    out["payload_encoding"] = "base64"
    return out


def message_json(
    message: Message, codecs: CodecRegistry, encoding: str = "auto", truncate: int | None = None
) -> dict[str, Any]:
    """A message as RabbitMQ's get answers it: properties, routing, payload (`codecs`: the
    broker's, or a slave's own for its replicated store)."""
    content = message.decoded(codecs)
    props = {
        k: to_json_safe(v)
        for k, v in attrs.asdict(content.properties, recurse=False).items()
        if v is not None
    }
    out = {
        "exchange": message.exchange,
        "routing_key": message.routing_key,
        "properties": props,
        "herald_protocol": message.protocol,
        "herald_timestamp": message.timestamp,
    }
    if message.annotations:
        out["herald_annotations"] = to_json_safe(message.annotations)
    out.update(payload(content.body, encoding, truncate))
    return out


def expires_in_ms(expires_at: float | None) -> int | None:
    if expires_at is None:
        return None
    return max(0, int((expires_at - trio.current_time()) * 1000))


def decode_payload(text: str, encoding: str) -> bytes:
    if encoding == "string":
        return text.encode("utf-8")
    if encoding == "base64":
        try:
            return base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("payload is not valid base64") from None
    raise ValueError(f"payload_encoding must be 'string' or 'base64', not {encoding!r}")

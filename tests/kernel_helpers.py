"""Helpers for the kernel-semantics tests (TTL, DLX, limits, priority, SAC): publish, declare,
take and drain on a virtual host.

The broker is tests/conftest.py's `kernel` fixture (a real embedded one on the memory store,
no protocol plugin) and `vhost` its default virtual host; tests take them as parameters.

Time-dependent tests also take pytest-trio's `autojump_clock`, so TTL and x-expires timers fire
as soon as every task is blocked, and `autojump_clock.jump(s)` moves time without letting any
task run (to observe the kernel before its timers do).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from herald.core.message import Message, Properties
from herald.core.queue import Queue, QueueEntry
from herald.core.vhost import PublishResult, VirtualHost
from tests.sinks import RecordingSink, body

__all__ = ["RecordingSink", "body"]


def publish(
    vhost: VirtualHost,
    data: str | bytes,
    routing_key: str = "",
    exchange: str = "",
    **properties: Any,
) -> PublishResult:
    """Publish a native message; `properties` are `Properties` fields (expiration="100")."""
    payload = data.encode() if isinstance(data, str) else data
    message = Message.native(
        payload, exchange=exchange, routing_key=routing_key, properties=Properties(**properties)
    )
    return vhost.publish(message)


def declare(vhost: VirtualHost, name: str, **arguments: Any) -> Queue:
    """Declare a transient queue with `x-...` arguments given as keywords (x_message_ttl=)."""
    return vhost.declare_queue(name, arguments=x_args(arguments))


def x_args(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """{"x_message_ttl": 5} -> {"x-message-ttl": 5}."""
    return {key.replace("_", "-"): value for key, value in arguments.items()}


def take(queue: Queue) -> QueueEntry:
    """basic.get with ack: the next ready entry, now held (unacked) by a getter."""
    entry = queue.get(queue.getter(RecordingSink()))
    assert entry is not None, f"queue {queue.name!r} has no ready message"
    return entry


def drain(queue: Queue) -> list[bytes]:
    """Take every ready message with no-ack basic.get, in delivery order."""
    out = []
    while (entry := queue.get(None)) is not None:
        out.append(body(entry))
    return out


def ready_bodies(queue: Queue) -> list[bytes]:
    """The ready messages' bodies in delivery order, without consuming them."""
    return [body(entry) for entry in queue.browse()]

"""Shared fixtures and helpers for the kernel-semantics tests (TTL, DLX, limits, priority, SAC).

The broker is a real embedded one (entry points loaded, so the store is the configured backend)
in a temporary data dir. Test modules import the fixtures they use:

    from tests.kernel_helpers import broker_fixture, vhost_fixture  # noqa: F401

Time-dependent tests also take pytest-trio's `autojump_clock`, so TTL and x-expires timers fire
as soon as every task is blocked, and `autojump_clock.jump(s)` moves time without letting any
task run (to observe the kernel before its timers do).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from herald.core.broker import Broker
from herald.core.embedding import embedded
from herald.core.message import Message, Properties
from herald.core.queue import Queue, QueueEntry
from herald.core.vhost import PublishResult, VirtualHost
from herald.storage.memory import MemoryStore
from tests.sinks import RecordingSink, body

__all__ = ["RecordingSink", "body"]


@pytest.fixture(name="broker")
async def broker_fixture(tmp_path: Path) -> AsyncIterator[Broker]:
    """A running broker with every installed plugin's entry point loaded, on the memory store
    (these tests are about queue semantics, not storage)."""
    async with embedded(
        data_dir=tmp_path / "data", load_entrypoints=True, store=MemoryStore(), plugins=[]
    ) as broker:
        yield broker


@pytest.fixture(name="vh")
def vhost_fixture(broker: Broker) -> VirtualHost:
    """The broker's default virtual host, "/"."""
    return broker.default_vhost


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

"""A message in protocol-neutral form: the property set and the body, nothing else.

What a `MessageCodec` (core/message.py) decodes a protocol's bytes into and encodes them back
from. It depends on nothing else in the kernel, so both the messages (core/message.py) and the
kernel's own codec (core/native_codec.py) build on it without importing each other.

`Properties` is AMQP 0-9-1's fourteen basic properties, a superset of what MQTT 5 and STOMP
carry, so conversions lose as little as possible.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import attrs

__all__ = ["EMPTY_PROPERTIES", "Content", "Properties"]


@attrs.frozen
class Properties:
    """Protocol-neutral message properties (the AMQP 0-9-1 basic property set)."""

    content_type: str | None = None
    content_encoding: str | None = None
    headers: Mapping[str, Any] | None = None
    delivery_mode: int | None = None  # 1 transient, 2 persistent
    priority: int | None = None
    correlation_id: str | None = None
    reply_to: str | None = None
    expiration: str | None = None  # per-message TTL in ms, as a string (AMQP's form)
    message_id: str | None = None
    timestamp: int | None = None  # seconds since the epoch
    type: str | None = None
    user_id: str | None = None
    app_id: str | None = None


EMPTY_PROPERTIES = Properties()


class Content(NamedTuple):
    """A message in protocol-neutral form: what converters pass between protocols.

    A NamedTuple rather than an attrs class: it is made once per published native message,
    and a tuple is several times cheaper to create than a frozen attrs instance.
    """

    properties: Properties
    body: bytes

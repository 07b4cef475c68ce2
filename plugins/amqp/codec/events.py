"""What the AMQP codec yields (`next_event`) and accepts (`send`).

Inbound: `ProtocolHeader`, `MethodFrame`, `Message` (a content-bearing method with its header
and body frames assembled), `ContentTooLarge`, `Heartbeat`. Outbound: `MethodFrame`,
`Delivery` (a content-bearing method with properties and body, split into frames by the
codec) and `Heartbeat`. "Need more bytes" is the `NEED_DATA` sentinel, never None.
"""

from __future__ import annotations

import enum
from typing import Literal

import attrs

from herald.plugins.amqp.codec.methods import BasicProperties, Method


class Event:
    """Base of every codec event."""

    __slots__ = ()


class Sentinel(enum.Enum):
    NEED_DATA = "NEED_DATA"

    def __repr__(self) -> str:
        return self.value


NEED_DATA: Literal[Sentinel.NEED_DATA] = Sentinel.NEED_DATA
"""`next_event()` returns this when the buffered bytes don't hold a whole event yet."""


@attrs.frozen(slots=True)
class ProtocolHeader(Event):
    """The client's `AMQP 0 0 9 1` greeting; the server answers with connection.start."""

    major: int = 0
    minor: int = 9
    revision: int = 1


@attrs.frozen(slots=True)
class MethodFrame(Event):
    """A method without content, on `channel` (0 = the connection)."""

    channel: int
    method: Method


@attrs.frozen(slots=True)
class Message(Event):
    """A published message: the content-bearing method (basic.publish) with its content.

    `raw_properties` are the header frame's bytes from the property flags on, exactly as the
    client sent them (the payload minus class-id, weight and body-size), so herald can store
    and re-deliver them untouched; `properties` is their decoded form. Treat it as read-only:
    consecutive messages with the same raw properties share one decoded `BasicProperties`,
    `headers` dict included.
    """

    channel: int
    method: Method
    properties: BasicProperties
    body: bytes
    raw_properties: bytes


@attrs.frozen(slots=True)
class ContentTooLarge(Event):
    """A content header declared a body larger than the codec's `max_message_size`.

    The codec drops that content's body frames as they arrive instead of buffering them; the
    session should close the channel with 406 PRECONDITION_FAILED, as RabbitMQ does.
    """

    channel: int
    method: Method
    body_size: int


@attrs.frozen(slots=True)
class Heartbeat(Event):
    """A heartbeat frame (channel 0, empty payload)."""


@attrs.frozen(slots=True)
class Delivery(Event):
    """Outbound content: basic.deliver, basic.get-ok or basic.return with its message.

    `properties` is either a `BasicProperties` or the raw bytes of a `Message` (flags word
    onwards), which are sent as they are.
    """

    channel: int
    method: Method
    properties: BasicProperties | bytes
    body: bytes

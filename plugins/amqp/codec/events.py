"""What the AMQP codec yields (`next_event`) and accepts (`send`).

Inbound: `ProtocolHeader`, `MethodFrame`, `Message` (a content-bearing method with its header
and body frames assembled), `ContentTooLarge`, `Heartbeat`, and the kit's `ConnectionClosed`
(the client ended the stream between frames). Outbound: `MethodFrame`, `Delivery` (a
content-bearing method with properties and body, split into frames by the codec) and
`Heartbeat`. `Event` and `NEED_DATA` are the codec kit's too (core/codec_kit.py), so every
herald codec means the same by them.
"""

from __future__ import annotations

import attrs

from herald.core.codec_kit import Event
from herald.plugins.amqp.codec.methods import BasicProperties, Method


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

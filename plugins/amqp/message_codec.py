"""AMQP messages as the kernel stores them, and their conversion to and from neutral `Content`.

Stored form (`Message.raw` of protocol "amqp"):

    u32 big-endian  length n of the raw properties
    n bytes         the content header's property flags and property list, exactly as the
                    publisher sent them (the header payload minus class-id, weight, body-size)
    rest            the body

So a message goes back out to an AMQP consumer with the publisher's own property bytes,
without being decoded or re-encoded (Apollo's "persist as-is"), and the kernel's routing facts
(exchange, routing key, headers, persistence, priority, TTL, id) come from the properties the
codec already decoded when the message arrived.

Messages that carry kernel annotations (dead-lettered: `x-death` and friends) are delivered
with their properties re-encoded: the annotations merged into `headers`, and `expiration`
taken from `Message.expiration_ms` (None once dead-lettered, as RabbitMQ removes it).
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from herald.core.errors import InternalError, PreconditionFailed, ProtocolError
from herald.core.message import Content, Message, Properties
from herald.plugins.amqp.codec.fields import Timestamp
from herald.plugins.amqp.codec.methods import BasicProperties
from herald.plugins.amqp.codec.properties import (
    EMPTY_RAW_PROPERTIES,
    decode_properties,
    encode_properties,
)

if TYPE_CHECKING:
    from herald.core.message import CodecRegistry

log = logging.getLogger(__name__)

PROTOCOL = "amqp"
_LENGTH = struct.Struct(">I")
_now = time.time
_NEUTRAL_FIELDS = tuple(f.name for f in attrs.fields(Properties))  # the 13 beside cluster_id
MAX_EXPIRATION = 2**32 - 1  # RabbitMQ's largest per-message TTL (ms), as in STOMP


def pack(raw_properties: bytes, body: bytes) -> bytes:
    """The stored form of a message: length-prefixed raw properties, then the body."""
    return b"".join((_LENGTH.pack(len(raw_properties)), raw_properties, body))


def split(raw: bytes) -> tuple[bytes, bytes]:
    """(raw properties, body) of a stored AMQP message."""
    try:
        (length,) = _LENGTH.unpack_from(raw, 0)
    except struct.error as exc:
        raise InternalError(f"corrupt AMQP message: {exc}") from None
    end = _LENGTH.size + length
    if end > len(raw):
        raise InternalError("corrupt AMQP message: properties longer than the record")
    return raw[_LENGTH.size : end], raw[end:]


def parse_expiration(text: str) -> int:
    """The per-message TTL in ms; RabbitMQ refuses (406) anything but an integer from 0 to
    2^32-1, so no TTL reaches the store that its record cannot hold."""
    if not (text.isascii() and text.isdigit()) or len(text) > 10 or int(text) > MAX_EXPIRATION:
        raise PreconditionFailed(
            f"invalid expiration '{text[:32]}': expected an integer from 0 to {MAX_EXPIRATION} (ms)"
        )
    return int(text)


def kernel_message(
    props: BasicProperties, raw_properties: bytes, body: bytes, exchange: str, routing_key: str
) -> Message:
    """The kernel message for a basic.publish, from properties the codec already decoded."""
    expiration = props.expiration
    # Positional arguments: this runs once per published message.
    return Message(
        PROTOCOL,
        pack(raw_properties, body),
        exchange,
        routing_key,
        len(body),
        props.headers,
        props.delivery_mode == 2,
        props.priority or 0,
        parse_expiration(expiration) if expiration is not None else None,
        props.message_id,
        _now(),
    )


def to_neutral(props: BasicProperties) -> Properties:
    """The 13 neutral properties (cluster_id, deprecated in 0-9-1, has no neutral twin)."""
    return Properties(
        props.content_type,
        props.content_encoding,
        props.headers,
        props.delivery_mode,
        props.priority,
        props.correlation_id,
        props.reply_to,
        props.expiration,
        props.message_id,
        None if props.timestamp is None else int(props.timestamp),
        props.type,
        props.user_id,
        props.app_id,
    )


def from_neutral(props: Properties) -> BasicProperties:
    return BasicProperties(**{name: getattr(props, name) for name in _NEUTRAL_FIELDS})


def merge_annotations(
    props: BasicProperties, annotations: Mapping[str, Any] | None, expiration_ms: int | None
) -> BasicProperties:
    """Properties with the kernel's annotations merged into headers and the kernel's TTL."""
    headers = dict(props.headers or {})
    if annotations:
        headers.update(annotations)
        deaths = annotations.get("x-death")
        if deaths:  # RabbitMQ sends the time of death as an AMQP timestamp
            headers["x-death"] = [_with_timestamp(death) for death in deaths]
    expiration = None if expiration_ms is None else str(expiration_ms)
    return attrs.evolve(props, headers=headers or None, expiration=expiration)


def _with_timestamp(death: Mapping[str, Any]) -> Mapping[str, Any]:
    when = death.get("time")
    if isinstance(when, int) and not isinstance(when, bool | Timestamp):
        return {**death, "time": Timestamp(when)}
    return death


class AMQPMessageCodec:
    """`MessageCodec` for protocol "amqp" (hook `herald_message_codecs`)."""

    protocol = PROTOCOL

    def decode(self, raw: bytes) -> Content:
        raw_properties, body = split(raw)
        try:
            props = decode_properties(raw_properties, 0, len(raw_properties))
        except (ProtocolError, struct.error, IndexError, ValueError) as exc:
            raise InternalError(f"corrupt AMQP message properties: {exc}") from None
        return Content(to_neutral(props), bytes(body))

    def encode(self, content: Content, message: Message | None = None) -> bytes:
        props = from_neutral(content.properties)
        if message is not None and (
            message.annotations or (message.expiration_ms is None and props.expiration)
        ):
            props = merge_annotations(props, message.annotations, message.expiration_ms)
        try:
            raw = encode_properties(props)
        except (ProtocolError, struct.error, UnicodeEncodeError, TypeError) as exc:
            raise InternalError(f"message properties have no AMQP form: {exc}") from None
        return pack(raw, content.body)


def delivery_parts(message: Message, codecs: CodecRegistry) -> tuple[bytes, bytes]:
    """(raw properties, body) to send a message to an AMQP consumer.

    An AMQP message without annotations goes out with its publisher's bytes; others are
    converted once (cached on the message) or re-encoded with their annotations merged.
    """
    if message.protocol == PROTOCOL and message.raw is not None:
        raw_properties, body = split(message.raw)
        if message.annotations is None:
            return raw_properties, body
        try:
            props = decode_properties(raw_properties, 0, len(raw_properties))
            merged = merge_annotations(props, message.annotations, message.expiration_ms)
            return encode_properties(merged), body
        except (ProtocolError, struct.error, IndexError, ValueError, TypeError) as exc:
            log.warning("cannot merge annotations into an AMQP message: %s", exc)
            return raw_properties, body
    try:
        return split(message.raw_for(PROTOCOL, codecs))
    except InternalError as exc:
        log.warning("cannot convert a %s message for AMQP: %s", message.protocol, exc)
        return EMPTY_RAW_PROPERTIES, message.decoded(codecs).body

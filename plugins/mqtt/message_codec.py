"""How herald keeps an MQTT PUBLISH as a kernel message, and converts it for other protocols.

The stored form (`Message.raw` of protocol "mqtt") is compact and reuses the wire's own
property encoding:

    byte 0      flags: bits 0-1 the PUBLISH's QoS, bit 2 its RETAIN flag, bits 3-7 zero
    bytes 1..   an MQTT 5 PUBLISH property block, exactly as on the wire (Variable Byte
                Integer length, then properties); a single 0x00 when there are none. Only
                what belongs to the message is kept: payload format indicator, message
                expiry interval, content type, response topic, correlation data, user
                properties (never a topic alias or subscription identifiers)
    rest        the payload

The topic is not stored: it is the message's routing key (`topics.mqtt_to_amqp`), and the
expiry is also the kernel's `expiration_ms`, so the interval sent on delivery is what is left.

Conversion to the neutral form (RabbitMQ's mapping where it has one): content type ->
content_type, correlation data -> correlation_id (UTF-8) or header `x-correlation-id`
(binary), response topic -> reply_to as an AMQP routing key, user properties -> headers (a
repeated name becomes a list), message expiry interval -> expiration in ms, QoS > 0 ->
delivery_mode 2, and header `x-mqtt-publish-qos`. The other way: delivery_mode 2 (or a
persistent message) is QoS 1, else QoS 0.
"""

from __future__ import annotations

import base64
import functools
import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import attrs

from herald.core.errors import InternalError, LocalProtocolError
from herald.core.message import Content
from herald.core.message import Properties as NeutralProperties
from herald.plugins.mqtt.codec import NO_PROPERTIES, PacketType, Properties
from herald.plugins.mqtt.codec.properties import decode_properties, encode_properties
from herald.plugins.mqtt.codec.topics import TopicError, amqp_to_mqtt, mqtt_to_amqp
from herald.plugins.mqtt.codec.topics import validate_topic_name as _validate_topic_name

if TYPE_CHECKING:
    from herald.core.message import Message

PROTOCOL: Final = "mqtt"
QOS_HEADER: Final = "x-mqtt-publish-qos"
BINARY_CORRELATION_HEADER: Final = "x-correlation-id"
_MAX_TEXT: Final = 65_535


class StoredPublish(NamedTuple):
    """A stored MQTT message, unpacked."""

    qos: int
    retain: bool
    properties: Properties
    payload: bytes


_new_tuple = tuple.__new__


def message_properties(props: Properties) -> Properties:
    """`props` without what belongs to one hop (topic alias, subscription identifiers)."""
    if props is NO_PROPERTIES or (props.topic_alias is None and not props.subscription_identifiers):
        return props
    return attrs.evolve(props, topic_alias=None, subscription_identifiers=())


_PLAIN_HEADERS: Final = tuple(bytes((flags, 0)) for flags in range(8))
"""The first two bytes of a stored message without properties, by flags byte."""


def pack(qos: int, retain: bool, properties: Properties, payload: bytes) -> bytes:
    """The stored form of a message (module docstring)."""
    flags = qos | 4 if retain else qos
    if properties is NO_PROPERTIES:
        return _PLAIN_HEADERS[flags] + payload
    return bytes((flags,)) + encode_properties(properties, PacketType.PUBLISH) + payload


def unpack(raw: bytes) -> StoredPublish:
    """The parts of a stored message; InternalError if the bytes are not one."""
    if len(raw) < 2 or raw[0] & 0xF8 or raw[0] & 3 == 3:
        raise InternalError("corrupt stored MQTT message: bad header")
    flags = raw[0]
    if raw[1] == 0:
        props, pos = NO_PROPERTIES, 2
    else:
        try:
            props, pos = decode_properties(raw, 1, len(raw), PacketType.PUBLISH)
        except LocalProtocolError as exc:
            raise InternalError(f"corrupt stored MQTT message: {exc.text}") from None
    # tuple.__new__ skips the NamedTuple's Python-level __new__: this runs once per delivery
    return _new_tuple(StoredPublish, (flags & 3, flags > 3, props, raw[pos:]))


class Routing:
    """A message being routed, unpacked already: the deliveries made while the kernel routes
    it (one per subscriber whose consumer has room) reuse it instead of parsing and copying it
    again, and plain QoS 0 ones share one PUBLISH packet."""

    __slots__ = ("message", "plain", "stored")

    def __init__(self, message: Message, stored: StoredPublish) -> None:
        self.message = message
        self.stored = stored
        self.plain: Any = None
        """The `Publish` of a QoS 0 delivery without RETAIN or properties, made by the first
        such delivery and sent by the others (the codec encodes it once for them)."""


class MQTTMessageCodec:
    """`herald.core.message.MessageCodec` for protocol "mqtt"."""

    protocol = PROTOCOL

    def decode(self, raw: bytes) -> Content:
        stored = unpack(raw)
        props = stored.properties
        headers: dict[str, Any] = {}
        for name, value in props.user_properties:
            if name in headers:
                old = headers[name]
                headers[name] = [*old, value] if isinstance(old, list) else [old, value]
            else:
                headers[name] = value
        headers[QOS_HEADER] = stored.qos
        correlation_id = None
        if props.correlation_data is not None:
            try:
                correlation_id = props.correlation_data.decode()
            except UnicodeDecodeError:
                headers[BINARY_CORRELATION_HEADER] = props.correlation_data
        expiry = props.message_expiry_interval
        neutral = NeutralProperties(
            content_type=props.content_type,
            headers=headers,
            delivery_mode=2 if stored.qos else 1,
            correlation_id=correlation_id,
            reply_to=mqtt_to_amqp(props.response_topic) if props.response_topic else None,
            expiration=str(expiry * 1000) if expiry is not None else None,
        )
        return Content(neutral, stored.payload)

    def encode(self, content: Content, message: Message) -> bytes:
        neutral = content.properties
        qos = 1 if neutral.delivery_mode == 2 or message.persistent else 0
        headers = neutral.headers or {}
        correlation = None
        if neutral.correlation_id is not None:
            correlation = neutral.correlation_id.encode()[:_MAX_TEXT]
        elif isinstance(headers.get(BINARY_CORRELATION_HEADER), bytes | bytearray):
            correlation = bytes(headers[BINARY_CORRELATION_HEADER])[:_MAX_TEXT]
        response_topic = None
        if neutral.reply_to:
            response_topic = topic_or_none(amqp_to_mqtt(neutral.reply_to))
        props = Properties(
            content_type=text_or_none(neutral.content_type),
            correlation_data=correlation,
            response_topic=response_topic,
            user_properties=tuple(user_properties(headers)),
            message_expiry_interval=_expiry_seconds(neutral.expiration),
        )
        if props == NO_PROPERTIES:
            props = NO_PROPERTIES
        return pack(qos, False, props, content.body)


def user_properties(headers: Mapping[str, Any]) -> Iterable[tuple[str, str]]:
    """Headers as MQTT 5 user properties: scalars as text, lists as repeated names; tables and
    herald's own `x-mqtt-` headers are left out."""
    for name, value in headers.items():
        if name.startswith("x-mqtt-") or name == BINARY_CORRELATION_HEADER:
            continue
        key = text_or_none(name)
        if key is None:
            continue
        for item in value if isinstance(value, list) else (value,):
            text = _scalar_text(item)
            if text is not None:
                yield key, text


def _scalar_text(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return text_or_none(str(value))
    if isinstance(value, bytes | bytearray):
        return text_or_none(bytes(value).decode("utf-8", "replace"))
    return None


def text_or_none(text: str | None) -> str | None:
    """`text` if an MQTT UTF-8 string can hold it, else None."""
    if text is None or "\x00" in text:
        return None
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return None
    return text if size <= _MAX_TEXT else None


def topic_or_none(topic: str) -> str | None:
    try:
        _validate_topic_name(topic)
    except TopicError:
        return None
    return topic


@functools.lru_cache(maxsize=4096)
def routing_key(topic: str) -> str:
    """`mqtt_to_amqp(topic)`, remembered for the topics in use: publishers repeat theirs."""
    return mqtt_to_amqp(topic)


@functools.lru_cache(maxsize=4096)
def delivered_topic(routing_key: str) -> str | None:
    """The MQTT topic name for a routing key, None if it has none (a wildcard, U+0000, too
    long); remembered per key, as every delivery of a topic asks again."""
    return topic_or_none(amqp_to_mqtt(routing_key))


def _expiry_seconds(expiration: str | None) -> int | None:
    if expiration is None:
        return None
    try:
        ms = int(expiration)
    except ValueError:
        return None
    return min(max(math.ceil(ms / 1000), 0), 0xFFFF_FFFF)


# -- properties as JSON, for retained messages kept in store metadata --------------------------

_JSON_FIELDS: Final = (
    "payload_format_indicator",
    "message_expiry_interval",
    "content_type",
    "response_topic",
)


def properties_to_json(props: Properties) -> dict[str, Any]:
    """A message's properties as a JSON-able dict (bytes as base64)."""
    out: dict[str, Any] = {}
    for name in _JSON_FIELDS:
        value = getattr(props, name)
        if value is not None:
            out[name] = value
    if props.correlation_data is not None:
        out["correlation_data"] = base64.b64encode(props.correlation_data).decode("ascii")
    if props.user_properties:
        out["user_properties"] = [list(pair) for pair in props.user_properties]
    return out


def properties_from_json(record: Mapping[str, Any]) -> Properties:
    if not record:
        return NO_PROPERTIES
    values: dict[str, Any] = {name: record[name] for name in _JSON_FIELDS if name in record}
    if "correlation_data" in record:
        values["correlation_data"] = base64.b64decode(record["correlation_data"])
    if "user_properties" in record:
        values["user_properties"] = tuple((k, v) for k, v in record["user_properties"])
    return Properties(**values)

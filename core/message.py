"""Messages as the kernel sees them.

A message keeps the bytes its protocol sent (`raw`) and only the routing facts the kernel needs
(exchange, routing key, headers for the headers exchange, persistence, priority, TTL, id).
The kernel never parses `raw`. A plugin delivering to a consumer of the same protocol sends
`raw` untouched; for a consumer of another protocol the message is converted once, through the
message codecs of both protocols and a protocol-neutral `Content`, and the result is cached on
the message (ActiveMQ Apollo's "persist as-is, convert only when needed").

The neutral form (`Properties`, `Content`) lives in core/content.py and the kernel's own codec
in core/native_codec.py; both are re-exported here, where plugins have always found them.
Neither imports this module, so there is no import cycle to hide behind a lazy import.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import attrs

from herald.core.content import EMPTY_PROPERTIES, Content, Properties
from herald.core.errors import InternalError
from herald.core.native_codec import NATIVE_PROTOCOL, NativeCodec

__all__ = [
    "EMPTY_PROPERTIES",
    "NATIVE_PROTOCOL",
    "CodecRegistry",
    "Content",
    "Message",
    "MessageCodec",
    "Properties",
]

_now = time.time


class MessageCodec(Protocol):
    """Turns one protocol's stored bytes into neutral `Content` and back.

    Each protocol plugin provides one (hook `herald_message_codecs`); the kernel provides the
    codec of `NATIVE_PROTOCOL`. Both directions must be pure functions of their input.
    """

    protocol: str

    def decode(self, raw: bytes) -> Content: ...

    def encode(self, content: Content, message: Message) -> bytes: ...


@attrs.define(slots=True, eq=False)
class Message:
    """One published message, shared (not copied) by every queue it was routed to.

    Treat it as immutable once published: queues, the store and other protocols' consumers
    hold the same object. Dead-lettering makes a new message with `with_route`.
    """

    protocol: str
    raw: bytes | None
    exchange: str
    routing_key: str
    body_size: int
    headers: Mapping[str, Any] | None = None
    persistent: bool = False
    priority: int = 0
    expiration_ms: int | None = None
    message_id: str | None = None
    timestamp: float = attrs.field(factory=time.time)
    # Kernel-added facts that a protocol merges into what it sends (e.g. AMQP x-death headers).
    annotations: dict[str, Any] | None = None
    # The decoded neutral form, when known (always for native messages).
    content: Content | None = None
    # Conversions made for other protocols, by protocol id.
    _converted: dict[str, bytes] | None = None

    @classmethod
    def native(
        cls,
        body: bytes,
        *,
        exchange: str = "",
        routing_key: str = "",
        properties: Properties = EMPTY_PROPERTIES,
    ) -> Message:
        """A message made through the Python API: the routing facts come from `properties`."""
        expiration = properties.expiration
        # Positional arguments: this runs once per message published through the Python API.
        return cls(
            NATIVE_PROTOCOL,
            None,
            exchange,
            routing_key,
            len(body),
            properties.headers,
            properties.delivery_mode == 2,
            properties.priority or 0,
            int(expiration) if expiration is not None else None,
            properties.message_id,
            _now(),
            None,
            Content(properties, body),
        )

    def with_route(
        self, exchange: str, routing_key: str, annotations: dict[str, Any] | None
    ) -> Message:
        """A copy for re-publishing (dead-lettering): new route, annotations, and no TTL.

        A protocol's raw bytes stay as the publisher sent them; a protocol delivering a message
        that carries annotations re-encodes its properties from them and from `expiration_ms`
        (None here), as RabbitMQ removes the expiration of a dead-lettered message. Native
        messages have no raw bytes to keep, so their neutral content drops the expiration.
        """
        content, raw = self.content, self.raw
        native = self.protocol == NATIVE_PROTOCOL
        if native and content is not None and content.properties.expiration is not None:
            properties = attrs.evolve(content.properties, expiration=None)
            content, raw = Content(properties, content.body), None
        return attrs.evolve(
            self,
            raw=raw,
            content=content,
            exchange=exchange,
            routing_key=routing_key,
            expiration_ms=None,
            annotations=annotations,
            converted=None,
            timestamp=_now(),  # born again: TTLs in its new queue count from now
        )

    def raw_for(self, protocol: str, codecs: CodecRegistry) -> bytes:
        """The bytes to send to a consumer speaking `protocol`, converting at most once."""
        if protocol == self.protocol and self.raw is not None:
            return self.raw
        converted = self._converted
        if converted is None:
            converted = self._converted = {}
        else:
            cached = converted.get(protocol)
            if cached is not None:
                return cached
        data = codecs.encode(protocol, self.decoded(codecs), self)
        converted[protocol] = data
        return data

    def decoded(self, codecs: CodecRegistry) -> Content:
        """The neutral form, decoded from `raw` on first use."""
        content = self.content
        if content is None:
            assert self.raw is not None
            content = self.content = codecs.decode(self.protocol, self.raw)
        return content

    def stored_bytes(self, codecs: CodecRegistry) -> bytes:
        """The bytes the store keeps: `raw`, encoded first for native messages."""
        raw = self.raw
        if raw is None:
            raw = self.raw = codecs.encode(self.protocol, self.decoded(codecs), self)
        return raw


Converter = Callable[[Message, str], "bytes | None"]


class CodecRegistry:
    """The message codecs of every loaded protocol, and the converter hook in front of them."""

    def __init__(self, converter: Converter | None = None) -> None:
        self._codecs: dict[str, MessageCodec] = {NATIVE_PROTOCOL: NativeCodec()}
        self._converter = converter

    def register(self, codec: MessageCodec) -> None:
        self._codecs[codec.protocol] = codec

    def get(self, protocol: str) -> MessageCodec:
        try:
            return self._codecs[protocol]
        except KeyError:
            raise InternalError(f"no message codec for protocol {protocol!r}") from None

    def decode(self, protocol: str, raw: bytes) -> Content:
        return self.get(protocol).decode(raw)

    def encode(self, protocol: str, content: Content, message: Message) -> bytes:
        if self._converter is not None and protocol != message.protocol:
            data = self._converter(message, protocol)
            if data is not None:
                return data
        return self.get(protocol).encode(content, message)

    @property
    def protocols(self) -> frozenset[str]:
        return frozenset(self._codecs)

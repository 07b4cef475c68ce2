"""STOMP messages as the kernel stores them, and their conversion to and from neutral `Content`.

Stored form (`Message.raw` of protocol "stomp"):

    u32 big-endian  length n of the header block
    n bytes         UTF-8 lines `name:value\\n`, one per header the message keeps, in the
                    order the publisher sent them, names and values escaped as in STOMP 1.2
                    (backslash, LF, colon and CR as `\\\\`, `\\n`, `\\c`, `\\r`)
    rest            the body, as sent (it may hold NULs: the length prefix frames it)

A message keeps every header of its SEND frame except those that belong to the frame rather
than the message: `destination`, `receipt`, `transaction` and `content-length`. A STOMP
consumer gets those headers back in the same order in its MESSAGE frame, after the ones the
server sets (`subscription`, `destination`, `message-id`, `redelivered`, `ack`), which a
stored header of the same name never overrides.

Conversion follows RabbitMQ's STOMP plugin, so AMQP and MQTT clients see what they would see
there: `content-type`, `content-encoding`, `persistent` (delivery mode 2), `priority`,
`correlation-id`, `reply-to`, `expiration`, `amqp-message-id` (or a SEND's own `message-id`),
`timestamp`, `type`, `user-id` and `app-id` are properties; every other header is an
application header with a string value. A `reply-to` of `/reply-queue/q` is the queue name q
for other protocols, and a foreign reply-to that is no STOMP destination becomes
`/reply-queue/<it>`. Application headers of other types are written as text (numbers in
decimal, booleans as true/false, bytes as UTF-8, tables and arrays as JSON), and so are the
kernel's annotations (`x-death` and friends) when a dead-lettered message is delivered.
"""

from __future__ import annotations

import json
import logging
import struct
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

from herald.core.errors import InternalError, LocalProtocolError
from herald.core.message import Content, Message, Properties
from herald.core.native_codec import to_json_safe
from herald.plugins.stomp.codec import escape, unescape
from herald.plugins.stomp.destinations import PREFIXES, Kind
from herald.plugins.stomp.errors import FrameError

if TYPE_CHECKING:
    from herald.core.message import CodecRegistry

log = logging.getLogger(__name__)

PROTOCOL: Final = "stomp"
_LENGTH = struct.Struct(">I")
_EMPTY_BLOCK: Final = _LENGTH.pack(0)
_now = time.time
MAX_PRIORITY: Final = 255
MAX_EXPIRATION: Final = 2**32 - 1
"""RabbitMQ's bound on per-message TTLs (ms); larger values are a precondition failure."""

FRAME_HEADERS: Final = frozenset({"destination", "receipt", "transaction", "content-length"})
"""SEND headers that describe the frame, not the message: never stored."""
SERVER_HEADERS: Final = frozenset(
    {"subscription", "destination", "message-id", "redelivered", "ack", "content-length"}
)
"""MESSAGE headers the server sets; a stored header of one of these names is not delivered."""
PROPERTY_HEADERS: Final = (
    ("content-type", "content_type"),
    ("content-encoding", "content_encoding"),
    ("persistent", "delivery_mode"),
    ("priority", "priority"),
    ("correlation-id", "correlation_id"),
    ("reply-to", "reply_to"),
    ("expiration", "expiration"),
    ("amqp-message-id", "message_id"),
    ("timestamp", "timestamp"),
    ("type", "type"),
    ("user-id", "user_id"),
    ("app-id", "app_id"),
)
_PROPERTY_NAMES: Final = frozenset(name for name, _ in PROPERTY_HEADERS)
_REPLY_QUEUE: Final = Kind.REPLY_QUEUE.value

Headers = tuple[tuple[str, str], ...]


# -- the stored form --------------------------------------------------------------------------


def pack(headers: Iterable[tuple[str, str]], body: bytes) -> bytes:
    """The stored form of a message: the length-prefixed header block, then the body."""
    pairs = headers if type(headers) is tuple else tuple(headers)
    block = "".join([f"{name}:{value}\n" for name, value in pairs])
    # Escaping is needed only if a name or value holds a backslash, CR, LF or colon: then the
    # block has more colons or LFs than headers. Most blocks need none and skip the replaces.
    count = len(pairs)
    if "\\" in block or "\r" in block or block.count(":") != count or block.count("\n") != count:
        block = "".join(
            [f"{escape(name, '1.2')}:{escape(value, '1.2')}\n" for name, value in pairs]
        )
    encoded = block.encode("utf-8")
    return b"".join((_LENGTH.pack(len(encoded)), encoded, body))


def split(raw: bytes) -> tuple[Headers, bytes]:
    """(headers, body) of a stored STOMP message; InternalError if it is corrupt."""
    try:
        (length,) = _LENGTH.unpack_from(raw, 0)
        end = _LENGTH.size + length
        if end > len(raw):
            raise ValueError("header block longer than the record")
        text = bytes(raw[_LENGTH.size : end]).decode("utf-8")
        if text and not text.endswith("\n"):
            raise ValueError("header block does not end with a line feed")
        headers = []
        for line in text.split("\n")[:-1]:
            name, colon, value = line.partition(":")
            if not colon:
                raise ValueError(f"header line without a colon: {line!r}")
            headers.append((unescape(name, "1.2"), unescape(value, "1.2")))
    except (struct.error, ValueError, LocalProtocolError) as exc:  # bad UTF-8, bad escape
        raise InternalError(f"corrupt STOMP message: {exc}") from None
    return tuple(headers), bytes(raw[end:])


# -- SEND frames to kernel messages -----------------------------------------------------------


def first_values(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Header names to values, the first of repeated headers winning (STOMP 1.2)."""
    values: dict[str, str] = {}
    for name, value in headers:
        values.setdefault(name, value)
    return values


def parse_expiration(text: str) -> int:
    """A per-message TTL in ms: an integer from 0 to 2^32-1, as RabbitMQ accepts.

    Anything else is the client's mistake, refused here rather than by the store (which
    cannot hold it) as an internal error.
    """
    if not (text.isascii() and text.isdigit()) or len(text) > 10 or int(text) > MAX_EXPIRATION:
        raise FrameError(
            "Invalid header",
            f"invalid expiration '{text}': expected an integer from 0 to {MAX_EXPIRATION} (ms)",
        )
    return int(text)


def parse_priority(text: str) -> int:
    """A message priority: an integer from 0 to 255 (AMQP's octet, what queues rank by)."""
    try:
        priority = int(text)
    except ValueError:
        priority = -1
    if not 0 <= priority <= MAX_PRIORITY:
        raise FrameError(
            "Invalid header",
            f"invalid priority '{text}': expected an integer from 0 to {MAX_PRIORITY}",
        )
    return priority


def kernel_message(headers: Headers, body: bytes, exchange: str, routing_key: str) -> Message:
    """The kernel message for a SEND whose stored headers are `headers`."""
    if not headers:  # the defaults of everything below
        raw = _EMPTY_BLOCK + body
        return Message(
            PROTOCOL, raw, exchange, routing_key, len(body), None, False, 0, None, None, _now()
        )
    values = first_values(headers)
    text = values.get("priority")
    priority = parse_priority(text) if text is not None else 0
    expiration = values.get("expiration")
    application = {k: v for k, v in values.items() if k not in _PROPERTY_NAMES}
    return Message(
        PROTOCOL,
        pack(headers, body),
        exchange,
        routing_key,
        len(body),
        application or None,
        values.get("persistent", "").lower() == "true",
        priority,
        parse_expiration(expiration) if expiration is not None else None,
        values.get("amqp-message-id", values.get("message-id")),
        _now(),
    )


# -- conversion -------------------------------------------------------------------------------


def header_text(value: Any) -> str:
    """A neutral header value as STOMP header text."""
    if isinstance(value, str):
        text = value
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, int | float):
        text = str(value)
    elif isinstance(value, bytes | bytearray | memoryview):
        text = bytes(value).decode("utf-8", "replace")
    elif value is None:
        text = ""
    elif isinstance(value, list | tuple | dict):
        text = json.dumps(to_json_safe(value), separators=(",", ":"), default=str)
    else:
        text = str(value)
    return text.replace("\x00", "") if "\x00" in text else text


def to_properties(headers: Headers) -> Properties:
    """The neutral properties of a STOMP message's stored headers."""
    values = first_values(headers)
    message_id = values.get("amqp-message-id")
    used_message_id = message_id is None and "message-id" in values
    if used_message_id:
        message_id = values["message-id"]
    application = {
        name: value
        for name, value in values.items()
        if name not in _PROPERTY_NAMES and not (used_message_id and name == "message-id")
    }
    reply_to = values.get("reply-to")
    if reply_to is not None and reply_to.startswith(_REPLY_QUEUE):
        reply_to = reply_to[len(_REPLY_QUEUE) :]
    return Properties(
        content_type=values.get("content-type"),
        content_encoding=values.get("content-encoding"),
        headers=application or None,
        delivery_mode=2 if values.get("persistent", "").lower() == "true" else None,
        priority=_integer(values.get("priority")),
        correlation_id=values.get("correlation-id"),
        reply_to=reply_to,
        expiration=values.get("expiration"),
        message_id=message_id,
        timestamp=_integer(values.get("timestamp")),
        type=values.get("type"),
        user_id=values.get("user-id"),
        app_id=values.get("app-id"),
    )


def _integer(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def from_properties(properties: Properties) -> list[tuple[str, str]]:
    """STOMP headers for neutral properties (the inverse of `to_properties`)."""
    headers: list[tuple[str, str]] = []
    for name, field in PROPERTY_HEADERS:
        value = getattr(properties, field)
        if value is None:
            continue
        if field == "delivery_mode":
            if value == 2:
                headers.append((name, "true"))
            continue
        if field == "reply_to" and not str(value).startswith(PREFIXES):
            value = _REPLY_QUEUE + str(value)
        headers.append((name, header_text(value)))
    for name, value in (properties.headers or {}).items():
        if name not in _PROPERTY_NAMES:
            headers.append((str(name), header_text(value)))
    return headers


def merge_annotations(
    headers: Iterable[tuple[str, str]],
    annotations: Mapping[str, Any] | None,
    expiration_ms: int | None,
) -> list[tuple[str, str]]:
    """Headers with the kernel's annotations in place of same-named ones, and the kernel's TTL
    (None once dead-lettered, which removes `expiration`, as RabbitMQ does)."""
    replaced = set(annotations or ())
    replaced.add("expiration")
    merged = [(name, value) for name, value in headers if name not in replaced]
    if expiration_ms is not None:
        merged.append(("expiration", str(expiration_ms)))
    for name, value in (annotations or {}).items():
        merged.append((name, header_text(value)))
    return merged


class StompMessageCodec:
    """`MessageCodec` for protocol "stomp" (hook `herald_message_codecs`)."""

    protocol = PROTOCOL

    def decode(self, raw: bytes) -> Content:
        headers, body = split(raw)
        return Content(to_properties(headers), body)

    def encode(self, content: Content, message: Message | None = None) -> bytes:
        headers: Iterable[tuple[str, str]] = from_properties(content.properties)
        if message is not None and (
            message.annotations or (message.expiration_ms is None and content.properties.expiration)
        ):
            headers = merge_annotations(headers, message.annotations, message.expiration_ms)
        return pack(headers, content.body)


_VERBATIM_CACHE_SIZE: Final = 1024
_VERBATIM_MAX: Final = 1024  # bytes: longer blocks are checked every time, never kept
_verbatim: dict[bytes, bool] = {}
"""Whether a stored header block can be forwarded as it is, by block (blocks repeat)."""


def stored_block(message: Message, version: str) -> tuple[bytes, bytes] | None:
    """(header lines, body) of a STOMP message, the lines exactly as the MESSAGE frame of a
    `version` consumer carries them; None when `delivery_parts` must parse the headers.

    The stored block is STOMP 1.2's escaped form, so a 1.2 frame takes it as it is when it is
    in the form `pack` writes and holds no header the server sets. So do 1.1 frames without an
    escaped CR (1.1 writes CR unescaped) and 1.0 frames without any escape.
    """
    raw = message.raw
    if message.protocol != PROTOCOL or raw is None or message.annotations is not None:
        return None
    if len(raw) < _LENGTH.size:
        return None
    (length,) = _LENGTH.unpack_from(raw, 0)
    if not length:
        return b"", raw[_LENGTH.size :]
    end = _LENGTH.size + length
    block = bytes(raw[_LENGTH.size : end])
    if len(block) != length:
        return None
    if version != "1.2" and (b"\\" in block if version == "1.0" else b"\\r" in block):
        return None
    verbatim = _verbatim.get(block)
    if verbatim is None:
        verbatim = _is_verbatim(block)
        if length <= _VERBATIM_MAX:
            if len(_verbatim) >= _VERBATIM_CACHE_SIZE:
                _verbatim.clear()
            _verbatim[block] = verbatim
    return (block, raw[end:]) if verbatim else None


def _is_verbatim(block: bytes) -> bool:
    """Whether `block` is what `pack` writes for headers a MESSAGE frame forwards."""
    try:
        headers, _ = split(_LENGTH.pack(len(block)) + block)
    except InternalError:
        return False
    for name, value in headers:
        if not name or name in SERVER_HEADERS or "\x00" in name or "\x00" in value:
            return False
    return pack(headers, b"") == _LENGTH.pack(len(block)) + block


def delivery_parts(message: Message, codecs: CodecRegistry) -> tuple[Headers, bytes]:
    """(stored headers, body) to send a message to a STOMP consumer.

    A STOMP message goes out with its publisher's headers (annotations merged in when it was
    dead-lettered); other protocols' messages are converted once (cached on the message).
    """
    if message.protocol == PROTOCOL and message.raw is not None:
        headers, body = split(message.raw)
        if message.annotations is not None:
            headers = tuple(merge_annotations(headers, message.annotations, message.expiration_ms))
        return headers, body
    try:
        return split(message.raw_for(PROTOCOL, codecs))
    except InternalError as exc:
        log.warning("cannot convert a %s message for STOMP: %s", message.protocol, exc)
        return (), message.decoded(codecs).body

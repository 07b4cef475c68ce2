"""MESSAGE frames built from cached pieces: the delivery fast path.

A MESSAGE frame is the server's headers (`subscription`, `destination`, `message-id`,
`redelivered`, `ack`), then the headers the message was stored with, then `content-length`
and the body. Encoding it as a `Frame` parses the stored header block, builds a header tuple
and escapes every name and value, once per delivery. Here the pieces that repeat are encoded
once: the `subscription` line per subscription, the `destination` line per (version, exchange,
routing key), and the stored block of a STOMP message, which is already in STOMP 1.2's escaped
form, is copied as it is (`message_codec.stored_block` says when that is exact).

The bytes are exactly what `encode_frame` makes of the same frame. Whatever the fast path
cannot vouch for (a message of another protocol or with annotations, a header this version
cannot write) returns None, and the caller builds the `Frame` as before.
"""

from __future__ import annotations

from typing import Final

from herald.core.errors import LocalProtocolError
from herald.plugins.stomp.codec import header_line
from herald.plugins.stomp.destinations import format_destination

_CACHE_SIZE: Final = 4096
_CACHED_MAX: Final = 256  # characters of exchange and routing key: longer ones are not kept
_destination_lines: dict[tuple[str, str, str], bytes | None] = {}
"""`destination` header lines by (version, exchange, routing key); None: not writable."""


def subscription_prefix(header: str | None, version: str) -> bytes | None:
    """A MESSAGE frame's command line and its `subscription` header line (none for a 1.0
    subscription without an id); None when the header cannot be written in `version`."""
    if header is None:
        return b"MESSAGE\n"
    try:
        return b"MESSAGE\n" + header_line("MESSAGE", "subscription", header, version)
    except LocalProtocolError:
        return None


def destination_line(exchange: str, routing_key: str, version: str) -> bytes | None:
    """The `destination` header line of a message published to (exchange, routing key)."""
    key = (version, exchange, routing_key)
    try:
        return _destination_lines[key]
    except KeyError:
        pass
    line: bytes | None
    try:
        line = header_line(
            "MESSAGE", "destination", format_destination(exchange, routing_key), version
        )
    except LocalProtocolError:
        line = None
    if len(exchange) + len(routing_key) <= _CACHED_MAX:
        if len(_destination_lines) >= _CACHE_SIZE:
            _destination_lines.clear()
        _destination_lines[key] = line
    return line


def message_frame(
    prefix: bytes,
    destination: bytes,
    message_id: str,
    redelivered: bool,
    ack: bool,
    block: bytes,
    body: bytes,
) -> bytes:
    """A whole MESSAGE frame: `prefix` and `destination` from the functions above, `block` the
    stored header lines to forward, `ack` whether to repeat the message id as `ack` (1.2).

    `message_id` must need no escaping in any version (the session's ids are URL-safe)."""
    mid = message_id.encode()
    parts = [prefix, destination, b"message-id:", mid, b"\n"]
    if redelivered:
        parts.append(b"redelivered:true\n")
    if ack:
        parts += (b"ack:", mid, b"\n")
    parts.append(block)
    parts.append(b"content-length:%d\n\n" % len(body) if body else b"\n")
    parts.append(body)
    parts.append(b"\x00")
    return b"".join(parts)

"""The encoding of messages made through the kernel's own APIs (protocol id "herald").

A native message is stored as: 4-byte big-endian length of a JSON object holding the non-empty
properties, that JSON, then the body. JSON keeps stored records readable by other tools (the
Spark pipeline); bytes, which JSON lacks, are tagged as {"$bytes": base64}.

This module builds on the neutral form (core/content.py) only; core/message.py imports it (every
`CodecRegistry` starts with a `NativeCodec`), never the other way round.
"""

from __future__ import annotations

import base64
import json
import struct
from typing import Any

import attrs

from herald.core.content import Content, Properties
from herald.core.errors import InternalError

NATIVE_PROTOCOL = "herald"
"""The protocol id of messages made through the kernel's Python API or the management API."""

_LENGTH = struct.Struct(">I")
_FIELDS = tuple(f.name for f in attrs.fields(Properties))


def to_json_safe(value: Any) -> Any:
    """A JSON-able copy of a header/argument value (bytes tagged, unknown types as text)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, dict):
        return {str(k): to_json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json_safe(v) for v in value]
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return str(value)


def from_json_safe(value: Any) -> Any:
    if isinstance(value, dict):
        if len(value) == 1 and "$bytes" in value:
            return base64.b64decode(value["$bytes"])
        return {k: from_json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_json_safe(v) for v in value]
    return value


class NativeCodec:
    """`MessageCodec` for `NATIVE_PROTOCOL`."""

    protocol = NATIVE_PROTOCOL

    def __init__(self) -> None:
        # Publishers tend to reuse one Properties object: remember the last encoding.
        self._last: tuple[Properties, bytes] | None = None

    def encode(self, content: Content, message: object = None) -> bytes:
        """The stored bytes of `content`; `message` (the `MessageCodec` signature) is unused:
        a native message's properties are all in its content."""
        properties = content.properties
        last = self._last
        if last is not None and last[0] is properties:
            return last[1] + content.body
        props = {
            name: to_json_safe(value)
            for name in _FIELDS
            if (value := getattr(properties, name)) is not None
        }
        header = json.dumps(props, separators=(",", ":")).encode() if props else b""
        prefix = _LENGTH.pack(len(header)) + header
        self._last = (properties, prefix)
        return prefix + content.body

    def decode(self, raw: bytes) -> Content:
        try:
            (length,) = _LENGTH.unpack_from(raw, 0)
            end = _LENGTH.size + length
            if end > len(raw):
                raise ValueError("header longer than the record")
            props = json.loads(raw[_LENGTH.size : end]) if length else {}
            if not isinstance(props, dict) or not set(props) <= set(_FIELDS):
                raise ValueError("unknown property")
            return Content(Properties(**from_json_safe(props)), bytes(raw[end:]))
        except (struct.error, ValueError, TypeError) as exc:
            raise InternalError(f"corrupt native message: {exc}") from exc

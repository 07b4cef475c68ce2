"""Headers and protocol properties as the reader's `MAP<STRING,STRING>` columns.

Headers come from the record's headers and annotations JSON (record.py's `from_json`); the
protocol's own properties (content type, correlation id, ...) only exist in the stored bytes,
so with the `decodeProperties` option they are decoded by that protocol's message codec, the
same pure function the broker uses to convert a message for another protocol.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import attrs

from herald.storage.record import RecordError, from_json

log = logging.getLogger(__name__)

_CODECS: dict[str, Any] | None = None


def header_text(value: Any) -> str:
    """A header value as map text: strings as they are, bytes as UTF-8, the rest as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    return json.dumps(value, separators=(",", ":"), default=str)


def header_pairs(headers: bytes | None, annotations: bytes | None) -> list[tuple[str, str]] | None:
    """The map entries of a record's headers, then its annotations (x-death and friends)."""
    merged: dict[str, Any] = {}
    try:
        for part in (headers, annotations):
            if part is not None:
                merged.update(from_json(part) or {})
    except RecordError as exc:
        log.warning("unreadable headers in a record: %s", exc)
        return None
    return [(str(k), header_text(v)) for k, v in merged.items()] or None


def property_pairs(protocol: str, raw: bytes) -> list[tuple[str, str]] | None:
    """The non-empty neutral properties of a stored message (headers left to `headers`)."""
    global _CODECS
    if _CODECS is None:
        _CODECS = _load_codecs()
    codec = _CODECS.get(protocol)
    if codec is None:
        return None
    try:
        props = codec.decode(raw).properties
    except Exception as exc:  # the codec's error for bytes it cannot read
        log.warning("cannot decode the %s properties of a record: %s", protocol, exc)
        return None
    out = [
        (field.name, header_text(value))
        for field in attrs.fields(type(props))
        if field.name != "headers" and (value := getattr(props, field.name)) is not None
    ]
    return out or None


def _load_codecs() -> dict[str, Any]:
    """Each installed protocol's message codec, by protocol id."""
    import importlib

    from herald.core.native_codec import NativeCodec

    found: dict[str, Any] = {"herald": NativeCodec()}
    for module, name in (
        ("herald.plugins.amqp.message_codec", "AMQPMessageCodec"),
        ("herald.plugins.mqtt.message_codec", "MQTTMessageCodec"),
        ("herald.plugins.stomp.message_codec", "StompMessageCodec"),
    ):
        try:
            codec = getattr(importlib.import_module(module), name)()
        except (ImportError, AttributeError) as exc:
            log.warning("no message codec from %s: %s", module, exc)
            continue
        found[codec.protocol] = codec
    return found

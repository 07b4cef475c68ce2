"""herald's MQTT plugin: the hooks (entry point `mqtt = "herald.plugins.mqtt.plugin"`).

Serves MQTT 3.1, 3.1.1 and 5.0 over TCP and WebSocket (`server.serve`), declares the `[mqtt]`
config section and the message codec that converts MQTT messages for other protocols.
"""

from __future__ import annotations

from typing import Final

from herald.core.hookspecs import hookimpl
from herald.core.message import MessageCodec
from herald.core.plugin_types import ConfigSection, PluginInfo, ProtocolSpec
from herald.plugins.mqtt.config import MQTTConfig
from herald.plugins.mqtt.message_codec import MQTTMessageCodec
from herald.plugins.mqtt.server import PROTOCOL, serve

_NAMES: Final = (b"\x00\x04MQTT", b"\x00\x06MQIsdp")
SNIFF_BYTES: Final = 1 + 4 + 8  # CONNECT type, the longest remaining length, "\0\6MQIsdp"


def sniff(prefix: bytes) -> bool | None:
    """Whether a connection's first bytes are an MQTT CONNECT (ActiveMQ Apollo's test):
    0x10, a remaining length, then the protocol name "MQTT" (3.1.1, 5.0) or "MQIsdp" (3.1)."""
    if not prefix:
        return None
    if prefix[0] != 0x10:
        return False
    pos = 1
    while True:  # the remaining length: 1 to 4 bytes, the last without the high bit
        if pos >= len(prefix):
            return None
        if not prefix[pos] & 0x80:
            break
        if pos == 4:
            return False
        pos += 1
    rest = prefix[pos + 1 :]
    for name in _NAMES:
        if rest[: len(name)] == name[: len(rest)]:
            return True if len(rest) >= len(name) else None
    return False


@hookimpl
def herald_plugin_info() -> PluginInfo:
    return PluginInfo(PROTOCOL, "MQTT 3.1, 3.1.1 and 5.0 over TCP and WebSocket", "0.1")


@hookimpl
def herald_config_sections() -> list[ConfigSection]:
    return [ConfigSection(PROTOCOL, MQTTConfig)]


@hookimpl
def herald_protocols() -> list[ProtocolSpec]:
    return [
        ProtocolSpec(
            name=PROTOCOL,
            description="MQTT 3.1 / 3.1.1 / 5.0 (TCP and WebSocket)",
            serve=serve,
            sniff=sniff,
            sniff_bytes=SNIFF_BYTES,
        )
    ]


@hookimpl
def herald_message_codecs() -> list[MessageCodec]:
    return [MQTTMessageCodec()]

"""herald's AMQP 0-9-1 protocol plugin: the hooks herald calls.

Registered through the `herald` entry-point group as `amqp = "herald.plugins.amqp.plugin"`.
"""

from __future__ import annotations

from herald.core import hookimpl
from herald.core.message import MessageCodec
from herald.core.plugin_types import ConfigSection, PluginInfo, ProtocolSpec
from herald.plugins.amqp.codec.constants import PROTOCOL_HEADER
from herald.plugins.amqp.config import AMQPConfig
from herald.plugins.amqp.message_codec import PROTOCOL, AMQPMessageCodec
from herald.plugins.amqp.server import serve

_MAGIC = PROTOCOL_HEADER[:4]  # b"AMQP"


def sniff(prefix: bytes) -> bool | None:
    """True for a connection that starts with b"AMQP"; None until 4 bytes arrived."""
    if len(prefix) < len(_MAGIC):
        return None if _MAGIC.startswith(prefix) else False
    return prefix.startswith(_MAGIC)


@hookimpl
def herald_plugin_info() -> PluginInfo:
    return PluginInfo("amqp", "AMQP 0-9-1 (RabbitMQ-compatible)", "")


@hookimpl
def herald_config_sections() -> list[ConfigSection]:
    return [ConfigSection("amqp", AMQPConfig)]


@hookimpl
def herald_protocols() -> list[ProtocolSpec]:
    return [
        ProtocolSpec(
            name=PROTOCOL,
            description="AMQP 0-9-1, as RabbitMQ speaks it",
            serve=serve,
            sniff=sniff,
            sniff_bytes=len(_MAGIC),
        )
    ]


@hookimpl
def herald_message_codecs() -> list[MessageCodec]:
    return [AMQPMessageCodec()]

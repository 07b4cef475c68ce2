"""herald's sans-IO AMQP 0-9-1 codec, server side.

No sockets, no event loop: `AMQPConnection.receive_data(bytes)` (b"" = end of stream),
`next_event()` -> event or `NEED_DATA`, `send(event)`, `data_to_send()` -> bytes, and
`error_reply()` after a RemoteProtocolError: the codec kit's API (core/codec_kit.py). Methods
and the basic properties are generated from tools/amqp_spec.py into `methods.py`.
"""

from __future__ import annotations

from herald.core.codec_kit import NEED_DATA, ConnectionClosed, Event
from herald.plugins.amqp.codec.connection import DEFAULT_MAX_MESSAGE_SIZE, AMQPConnection
from herald.plugins.amqp.codec.constants import PROTOCOL_HEADER, FrameType, ReplyCode
from herald.plugins.amqp.codec.events import (
    ContentTooLarge,
    Delivery,
    Heartbeat,
    Message,
    MethodFrame,
    ProtocolHeader,
)
from herald.plugins.amqp.codec.fields import Timestamp, decode_table, encode_table
from herald.plugins.amqp.codec.methods import METHODS, BasicProperties, Method
from herald.plugins.amqp.codec.state import ConnectionState

__all__ = [
    "DEFAULT_MAX_MESSAGE_SIZE",
    "METHODS",
    "NEED_DATA",
    "PROTOCOL_HEADER",
    "AMQPConnection",
    "BasicProperties",
    "ConnectionClosed",
    "ConnectionState",
    "ContentTooLarge",
    "Delivery",
    "Event",
    "FrameType",
    "Heartbeat",
    "Message",
    "Method",
    "MethodFrame",
    "ProtocolHeader",
    "ReplyCode",
    "Timestamp",
    "decode_table",
    "encode_table",
]

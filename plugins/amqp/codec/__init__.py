"""herald's sans-IO AMQP 0-9-1 codec, server side.

No sockets, no event loop: `AMQPConnection.receive_data(bytes)`, `next_event()` ->
event or `NEED_DATA`, `send(event)`, `data_to_send()` -> bytes. Methods and the basic
properties are generated from tools/amqp_spec.py into `methods.py`.
"""

from __future__ import annotations

from herald.plugins.amqp.codec.connection import DEFAULT_MAX_MESSAGE_SIZE, AMQPConnection
from herald.plugins.amqp.codec.constants import PROTOCOL_HEADER, FrameType, ReplyCode
from herald.plugins.amqp.codec.events import (
    NEED_DATA,
    ContentTooLarge,
    Delivery,
    Event,
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

"""herald's MQTT 3.1 / 3.1.1 / 5.0 codec, server side, sans-IO: no sockets, no Trio, no kernel.

    conn = MQTTConnection(max_packet_size=1 << 20)
    conn.receive_data(chunk)     # b"" at the end of the stream
    while (packet := conn.next_event()) is not NEED_DATA:
        if type(packet) is ConnectionClosed: ...   # ended between two packets: stop
        ...                      # Connect, Publish, Subscribe, ...; conn.send(ConnAck(...))
    stream.send_all(conn.data_to_send())

`NEED_DATA`, `ConnectionClosed` and the error types are core/codec_kit.py's, the same in
every codec. On `RemoteProtocolError` (`.code`
= MQTT 5 reason code) send `conn.error_reply()` if it is not None, then close.
`encode_packet`/`PacketReader` work on any packet, in either direction.
"""

from herald.core.codec_kit import NEED_DATA, ConnectionClosed
from herald.plugins.mqtt.codec.connection import MQTTConnection
from herald.plugins.mqtt.codec.encode import encode_packet
from herald.plugins.mqtt.codec.packets import (
    PACKET_CLASSES,
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    Packet,
    PingReq,
    PingResp,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    Subscription,
    SubscriptionOptions,
    UnsubAck,
    Unsubscribe,
    Will,
)
from herald.plugins.mqtt.codec.properties import NO_PROPERTIES, Properties
from herald.plugins.mqtt.codec.reader import DEFAULT_MAX_PACKET_SIZE, MAX_PACKET_SIZE, PacketReader
from herald.plugins.mqtt.codec.reasons import (
    PacketType,
    ProtocolVersion,
    ReasonCode,
    RetainHandling,
)
from herald.plugins.mqtt.codec.state import ConnectionState

__all__ = [
    "DEFAULT_MAX_PACKET_SIZE",
    "MAX_PACKET_SIZE",
    "NEED_DATA",
    "NO_PROPERTIES",
    "PACKET_CLASSES",
    "Auth",
    "ConnAck",
    "Connect",
    "ConnectionClosed",
    "ConnectionState",
    "Disconnect",
    "MQTTConnection",
    "Packet",
    "PacketReader",
    "PacketType",
    "PingReq",
    "PingResp",
    "Properties",
    "ProtocolVersion",
    "PubAck",
    "PubComp",
    "PubRec",
    "PubRel",
    "Publish",
    "ReasonCode",
    "RetainHandling",
    "SubAck",
    "Subscribe",
    "Subscription",
    "SubscriptionOptions",
    "UnsubAck",
    "Unsubscribe",
    "Will",
    "encode_packet",
]

"""Building MQTT inputs for the codec tests: a frame factory and a connected server codec."""

from __future__ import annotations

from herald.plugins.mqtt.codec import (
    DEFAULT_MAX_PACKET_SIZE,
    NEED_DATA,
    ConnAck,
    Connect,
    MQTTConnection,
    Packet,
    PacketReader,
    Properties,
    encode_packet,
)


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def frame(first_byte: int, body: bytes) -> bytes:
    """A packet with a correct remaining length around `body`."""
    return bytes((first_byte,)) + varint(len(body)) + body


def string(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return len(raw).to_bytes(2, "big") + raw


def connect_bytes(version: int, client_id: str = "cid") -> bytes:
    return encode_packet(Connect(client_id, version), version)


def connected(
    version: int,
    *,
    topic_alias_maximum: int | None = None,
    max_packet_size: int = DEFAULT_MAX_PACKET_SIZE,
) -> MQTTConnection:
    """A server codec that has read a CONNECT at `version` and accepted it."""
    conn = MQTTConnection(max_packet_size=max_packet_size)
    conn.receive_data(connect_bytes(version))
    assert isinstance(conn.next_event(), Connect)
    conn.send(ConnAck(properties=Properties(topic_alias_maximum=topic_alias_maximum)))
    conn.data_to_send()
    return conn


def drain(conn: MQTTConnection) -> list[Packet]:
    """Every packet `conn` has whole (the stream must not have ended)."""
    events = []
    while (event := conn.next_event()) is not NEED_DATA:
        assert isinstance(event, Packet), event
        events.append(event)
    return events


def read_all(data: bytes, version: int | None) -> list[Packet]:
    reader = PacketReader()
    reader.receive_data(data)
    packets = []
    while (packet := reader.next_packet(version)) is not NEED_DATA:
        assert isinstance(packet, Packet), packet
        packets.append(packet)
    return packets

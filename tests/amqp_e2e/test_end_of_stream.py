"""A client that ends its stream (shuts its sending side) while the broker reads: cut inside a
frame or a message it gets connection.close 501 on the side still open; cut between frames the
broker just hangs up. A pika connection beside it carries on (raw sockets)."""

from __future__ import annotations

import socket

import pika
from pika.adapters.blocking_connection import BlockingChannel

from herald.plugins.amqp.codec import PROTOCOL_HEADER, MethodFrame
from herald.plugins.amqp.codec.methods import (
    BasicPublish,
    ConnectionClose,
    ConnectionStart,
    ConnectionStartOk,
)
from tests.amqp.helpers import ClientReader, header_frame, method_frame
from tests.amqp_e2e.conftest import BrokerThread
from tests.amqp_e2e.raw import RawClient

START_OK = method_frame(0, ConnectionStartOk({}, "PLAIN", b"\0guest\0guest", "en_US"))


def _ended(client: RawClient, data: bytes) -> bytes:
    """Send `data`, shut our sending side, and read everything until the broker closes."""
    client.send(data)
    client.sock.shutdown(socket.SHUT_WR)
    received = b""
    while chunk := client.receive():
        received += chunk
    return received


def _connections(broker: BrokerThread) -> int:
    running = broker.broker
    assert running is not None
    return broker.call(lambda: len(running.connections))


def _carries_on(channel: BlockingChannel, queue: str) -> None:
    channel.basic_publish("", queue, b"still here")
    _, _, body = channel.basic_get(queue, auto_ack=True)
    assert body == b"still here"


def test_a_frame_cut_by_the_end_of_the_stream_is_answered_with_a_501(
    broker: BrokerThread, connection: pika.BlockingConnection
) -> None:
    channel = connection.channel()
    queue = channel.queue_declare("", exclusive=True).method.queue
    client = RawClient(broker.port)
    try:
        received = _ended(client, PROTOCOL_HEADER + START_OK[:10])
    finally:
        client.close()
    text = "FRAME_ERROR - the peer closed the connection in the middle of a frame (10 bytes)"
    goodbye = method_frame(0, ConnectionClose(501, text, 0, 0))
    start, close = ClientReader().feed(received)
    assert isinstance(start, MethodFrame) and isinstance(start.method, ConnectionStart)
    assert close == MethodFrame(0, ConnectionClose(501, text, 0, 0))
    assert received.endswith(goodbye)  # the last bytes, exactly
    _carries_on(channel, queue)
    assert _connections(broker) == 1  # pika's


def test_a_message_cut_by_the_end_of_the_stream_is_a_501_and_not_enqueued(
    broker: BrokerThread, connection: pika.BlockingConnection
) -> None:
    channel = connection.channel()
    queue = channel.queue_declare("end-of-stream").method.queue
    client = RawClient(broker.port)
    try:
        client.handshake()
        publish = method_frame(1, BasicPublish(routing_key=queue))
        received = _ended(client, publish + header_frame(1, 100, b"\x00\x00"))
    finally:
        client.close()
    text = "FRAME_ERROR - the peer closed the connection in the middle of a message on channel 1"
    assert received == method_frame(0, ConnectionClose(501, text, 0, 0))
    assert channel.queue_declare(queue, passive=True).method.message_count == 0
    _carries_on(channel, queue)


def test_the_end_of_the_stream_between_frames_is_a_plain_hang_up(
    broker: BrokerThread, connection: pika.BlockingConnection
) -> None:
    channel = connection.channel()
    queue = channel.queue_declare("", exclusive=True).method.queue
    client = RawClient(broker.port)
    try:
        client.send(PROTOCOL_HEADER)
        client.next_method(ConnectionStart)
        assert _ended(client, b"") == b""  # nothing cut, nothing to say
    finally:
        client.close()
    _carries_on(channel, queue)
    assert _connections(broker) == 1

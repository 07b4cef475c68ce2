"""Closing a connection that still has input in flight: the server lingers (raw sockets).

A client library that multiplexes channels may write connection.close on channel 0 before the
publishes it buffered for channel 1 (amqplib does), or its close-ok between publishes. If the
server closed its socket with that input unread, the kernel would answer with a reset: the
client's next write fails with EPIPE and it may never read the close-ok. So after its last
frame the server shuts its sending side and reads and drops whatever still comes, until the
client closes or `amqp.close_linger` passes, without processing any of it.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

from herald.plugins.amqp.codec.methods import (
    BasicPublish,
    ConnectionClose,
    ConnectionCloseOk,
    QueueDeclare,
    QueueDeclareOk,
)
from tests.amqp.helpers import body_frame, header_frame, method_frame
from tests.amqp_e2e.conftest import CLIENT_TIMEOUT, BrokerThread
from tests.amqp_e2e.raw import RawClient

BODY = b"x" * 4096
PUBLISH = (
    method_frame(1, BasicPublish(routing_key="q"))
    + header_frame(1, len(BODY), b"\x00\x00")
    + body_frame(1, BODY)
)
BURST = PUBLISH * 1024  # about 4 MiB: far more than the server reads at once


def _ready(broker: BrokerThread) -> RawClient:
    client = RawClient(broker.port)
    client.handshake()
    client.send_method(1, QueueDeclare(queue="q"))
    client.next_method(QueueDeclareOk)
    return client


def _message_count(broker: BrokerThread) -> int:
    return broker.call(lambda: broker.broker.default_vhost.queues["q"].message_count)


def _finish(client: RawClient) -> None:
    """Shut our sending side; the server's side must end with a FIN, not a reset."""
    client.sock.shutdown(socket.SHUT_WR)
    assert client.read_until_closed() == []


def test_close_before_buffered_publishes_gets_close_ok_and_a_clean_end(
    broker: BrokerThread,
) -> None:
    client = _ready(broker)
    try:
        client.send(method_frame(0, ConnectionClose(200, "bye", 0, 0)) + BURST)
        client.next_method(ConnectionCloseOk)
        client.send(BURST)  # still accepted (and dropped) after close-ok
        _finish(client)
    finally:
        client.close()
    assert _message_count(broker) == 0  # nothing after connection.close was processed


def test_close_ok_between_publishes_after_a_server_close_gets_a_clean_end(
    broker: BrokerThread,
) -> None:
    client = _ready(broker)
    try:
        closing = broker.call(lambda: list(broker.broker.connections))
        broker.call(closing[0].close, "closed by the test")
        close = client.expect(ConnectionClose)
        assert close.reply_code == 320
        client.send(BURST + method_frame(0, ConnectionCloseOk()) + BURST)
        client.send(BURST)
        _finish(client)
    finally:
        client.close()
    assert _message_count(broker) == 0  # ignored while closing, dropped after close-ok


def test_unparsable_frame_before_more_input_still_delivers_the_501(broker: BrokerThread) -> None:
    client = _ready(broker)
    try:
        client.send(b"\x01\x00\x01\x00\x00\x00\x04abcd\x00" + BURST)  # frame-end is not 0xCE
        close = client.expect(ConnectionClose)
        assert close.reply_code == 501
        client.send(BURST)
        _finish(client)
    finally:
        client.close()


def test_the_linger_ends_after_close_linger_if_the_client_keeps_sending(tmp_path: Path) -> None:
    with BrokerThread(tmp_path, settings=["amqp.close_linger=0.2"]) as broker:
        client = _ready(broker)
        try:
            client.send_method(0, ConnectionClose(200, "bye", 0, 0))
            client.next_method(ConnectionCloseOk)
            assert client.read_until_closed() == []  # the server's FIN
            deadline = time.monotonic() + CLIENT_TIMEOUT  # a guard, not a measurement
            refused: OSError | None = None
            while refused is None and time.monotonic() < deadline:
                try:
                    client.send(PUBLISH)
                except OSError as exc:  # the socket is gone: a reset, then EPIPE
                    refused = exc
            assert isinstance(refused, BrokenPipeError | ConnectionResetError)
        finally:
            client.close()

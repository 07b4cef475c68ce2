"""Connections: login, vhosts, heartbeats, protocol errors, blocking, shutdown (pika + raw)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from herald.plugins.amqp.codec import PROTOCOL_HEADER, Heartbeat, MethodFrame
from herald.plugins.amqp.codec.fields import encode_table
from herald.plugins.amqp.codec.methods import (
    ConnectionClose,
    ConnectionStart,
    ConnectionStartOk,
    ConnectionTune,
)
from herald.plugins.amqp.session import Session
from tests.amqp_e2e.conftest import CLIENT_TIMEOUT, BrokerThread
from tests.amqp_e2e.raw import RawClient


def session_of(broker: BrokerThread, client: str | None = None) -> Session:
    """The server-side Session of the one AMQP connection open (for negotiated values)."""
    connections = broker.call(lambda: list(broker.broker.connections))
    (connection,) = connections
    session = getattr(connection.closer, "__self__", None)  # Session.close_from_broker
    assert isinstance(session, Session)
    return session


def test_login_reports_rabbitmq_capabilities(connection: pika.BlockingConnection) -> None:
    properties = connection._impl.server_properties
    assert properties["product"] == b"herald" or properties["product"] == "herald"
    capabilities = properties["capabilities"]
    for name in (
        "publisher_confirms",
        "basic.nack",
        "consumer_cancel_notify",
        "connection.blocked",
        "exchange_exchange_bindings",
        "authentication_failure_close",
        "per_consumer_qos",
        "direct_reply_to",
    ):
        assert capabilities[name] is True, name


@pytest.mark.parametrize("user,password", [("guest", "wrong"), ("nobody", "guest")])
def test_bad_credentials_are_refused_with_403(
    broker: BrokerThread, user: str, password: str
) -> None:
    with pytest.raises(pika.exceptions.ProbableAuthenticationError, match="ACCESS_REFUSED"):
        broker.connect(credentials=pika.PlainCredentials(user, password))


def test_amqplain_login(broker: BrokerThread) -> None:
    client = RawClient(broker.port)
    try:
        client.send(PROTOCOL_HEADER)
        start = client.expect(ConnectionStart)
        assert b"AMQPLAIN" in start.mechanisms.split()
        response = encode_table({"LOGIN": "guest", "PASSWORD": "guest"})[4:]
        client.send_method(0, ConnectionStartOk({}, "AMQPLAIN", response, "en_US"))
        assert isinstance(client.next_method(ConnectionTune).method, ConnectionTune)
    finally:
        client.close()


def test_unknown_vhost_is_530(broker: BrokerThread) -> None:
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError, match="NOT_ALLOWED"):
        broker.connect(virtual_host="missing")


def test_vhost_without_permission_is_530(broker: BrokerThread) -> None:
    broker.call(broker.broker.add_vhost, "other")
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError, match="refused for user"):
        broker.connect(virtual_host="other")


def test_heartbeat_is_what_the_client_asks(broker: BrokerThread) -> None:
    conn = broker.connect(heartbeat=7)
    try:
        assert session_of(broker).heartbeat == 7
    finally:
        conn.close()


def test_server_sends_heartbeats_and_drops_a_silent_peer(broker: BrokerThread) -> None:
    client = RawClient(broker.port)
    try:
        client.handshake(heartbeat=1)
        events = client.read_until_closed()  # we never send: the server gives up on us
        assert any(isinstance(e, Heartbeat) for e in events)
        assert not any(isinstance(e, MethodFrame) for e in events)  # RabbitMQ just closes
    finally:
        client.close()


def test_malformed_frame_closes_only_that_connection_with_501(channel: BlockingChannel) -> None:
    broker_port = channel.connection._impl.params.port
    client = RawClient(broker_port)
    try:
        client.handshake()
        client.send(b"\x01\x00\x01\x00\x00\x00\x04abcd\x00")  # frame-end octet is not 0xCE
        events = client.read_until_closed()
        closes = [e.method for e in events if isinstance(e, MethodFrame)]
        assert isinstance(closes[-1], ConnectionClose)
        assert closes[-1].reply_code == 501
    finally:
        client.close()
    queue = channel.queue_declare("").method.queue
    channel.basic_publish("", queue, b"still here")
    assert channel.basic_get(queue, auto_ack=True)[2] == b"still here"


def test_wrong_protocol_header_is_answered_with_ours(broker: BrokerThread) -> None:
    client = RawClient(broker.port)
    try:
        client.send(b"AMQP\x01\x01\x00\x0a")
        received = b""
        while data := client.receive():
            received += data
        assert received == PROTOCOL_HEADER
    finally:
        client.close()


def test_handshake_timeout_closes_the_socket(tmp_path: Path) -> None:
    with BrokerThread(tmp_path, settings=["amqp.handshake_timeout=0.2"]) as broker:
        client = RawClient(broker.port)
        try:
            assert client.receive() == b""
        finally:
            client.close()


def test_channel_error_closes_only_the_channel(connection: pika.BlockingConnection) -> None:
    channel = connection.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as caught:
        channel.queue_declare("missing", passive=True)
    assert caught.value.reply_code == 404
    assert "NOT_FOUND" in caught.value.reply_text
    assert channel.is_closed and connection.is_open
    other = connection.channel()
    assert other.queue_declare("fine").method.queue == "fine"


def test_unknown_exchange_type_closes_only_the_channel(connection: pika.BlockingConnection) -> None:
    channel = connection.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as caught:
        channel.exchange_declare("e", exchange_type="nonsense")
    assert caught.value.reply_code == 406  # RabbitMQ since 3.12.x; 503 before
    assert connection.is_open


def test_exclusive_queue_is_locked_then_deleted_with_its_connection(broker: BrokerThread) -> None:
    owner = broker.connect()
    other = broker.connect()
    try:
        owner.channel().queue_declare("mine", exclusive=True)
        channel = other.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as caught:
            channel.queue_declare("mine", passive=True)
        assert caught.value.reply_code == 405
        channel = other.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as caught:
            channel.basic_consume("mine", lambda *a: None)
        assert caught.value.reply_code == 405
        owner.close()
        channel = other.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as caught:
            channel.queue_declare("mine", passive=True)
        assert caught.value.reply_code == 404
    finally:
        for conn in (owner, other):
            if conn.is_open:
                conn.close()


def test_connection_blocked_and_unblocked(tmp_path: Path) -> None:
    with BrokerThread(tmp_path, settings=["memory.check_interval=3600"]) as broker:
        conn = broker.connect()
        try:
            seen: list[str] = []
            conn.add_on_connection_blocked_callback(lambda c, m: seen.append(m.method.NAME))
            conn.add_on_connection_unblocked_callback(lambda c, m: seen.append(m.method.NAME))
            alarms = broker.broker.alarms
            broker.call(alarms.set, "memory", True)
            _process_until(conn, lambda: len(seen) == 1)
            broker.call(alarms.set, "memory", False)
            _process_until(conn, lambda: len(seen) == 2)
            assert seen == ["Connection.Blocked", "Connection.Unblocked"]
        finally:
            conn.close()


def test_broker_shutdown_closes_connections_with_320(tmp_path: Path) -> None:
    with BrokerThread(tmp_path) as broker:
        conn = broker.connect()
        broker.call(broker.broker.stop)
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as caught:
            _process_until(conn, lambda: False)
        assert caught.value.reply_code == 320


def _process_until(
    conn: pika.BlockingConnection, done: Callable[[], bool], limit: float = CLIENT_TIMEOUT
) -> None:
    import time

    deadline = time.monotonic() + limit
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        conn.process_data_events(time_limit=0.05)


def test_server_generates_consumer_tags(broker: BrokerThread) -> None:
    from herald.plugins.amqp.codec.methods import BasicConsume, BasicConsumeOk, QueueDeclare

    client = RawClient(broker.port)
    try:
        client.handshake()
        client.send_method(1, QueueDeclare(queue="tagged"))
        client.send_method(1, BasicConsume(queue="tagged", consumer_tag=""))
        consume_ok = client.expect(BasicConsumeOk)
        assert consume_ok.consumer_tag.startswith("amq.ctag-")
    finally:
        client.close()


def test_channel_flow_pauses_and_resumes_deliveries(broker: BrokerThread) -> None:
    from herald.plugins.amqp.codec import Delivery
    from herald.plugins.amqp.codec.methods import (
        BasicConsume,
        BasicConsumeOk,
        BasicPublish,
        ChannelFlow,
        ChannelFlowOk,
        QueueDeclare,
        QueueDeclareOk,
    )
    from tests.amqp.helpers import body_frame, header_frame, method_frame

    client = RawClient(broker.port)
    try:
        client.handshake()
        client.send_method(1, QueueDeclare(queue="flowing"))
        client.next_method(QueueDeclareOk)
        client.send_method(1, ChannelFlow(False))
        assert client.expect(ChannelFlowOk).active is False
        client.send_method(1, BasicConsume(queue="flowing", consumer_tag="c"))
        client.next_method(BasicConsumeOk)
        publish = method_frame(1, BasicPublish(routing_key="flowing"))
        client.send(publish + header_frame(1, 2, b"\x00\x00") + body_frame(1, b"hi"))
        client.send_method(1, QueueDeclare(queue="flowing", passive=True))
        declare_ok = client.next_method(QueueDeclareOk).method
        assert declare_ok.message_count == 1  # type: ignore[attr-defined]  # held back
        client.send_method(1, ChannelFlow(True))
        while not any(isinstance(e, Delivery) for e in client.events):
            client.events.extend(client.reader.feed(client.receive()))
        (delivery,) = [e for e in client.events if isinstance(e, Delivery)]
        assert delivery.body == b"hi"
    finally:
        client.close()


def test_pika_over_the_any_protocol_port(tmp_path: Path) -> None:
    """AMQP is served by the shared adapter, so the any-protocol port (core/any_protocol.py)
    serves it too, told by its protocol header."""
    settings = ["broker.any_host=127.0.0.1", "broker.any_port=0"]
    with BrokerThread(tmp_path, settings=settings) as broker:
        listeners = broker.call(lambda: list(broker.broker.listeners))
        any_port = next(lst.port for lst in listeners if lst.protocol == "any")
        conn = broker.connect(port=any_port)
        try:
            channel = conn.channel()
            channel.queue_declare("anywhere")
            channel.basic_publish("", "anywhere", b"over the any-protocol port")
            assert channel.basic_get("anywhere", auto_ack=True)[2] == b"over the any-protocol port"
        finally:
            conn.close()

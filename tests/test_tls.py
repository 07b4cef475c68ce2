"""TLS listeners: real clients over TLS on 127.0.0.1, client certificates, bad handshakes.

Certificates come from `trustme` (a throwaway CA made for tests). The broker runs in the
test's Trio loop with the AMQP and STOMP plugins; the blocking clients (pika, stomp.py) run
in worker threads, and trio-websocket is the WebSocket client. Each bad handshake must close
only its own connection: a good client is served afterwards.
"""

from __future__ import annotations

import queue
import ssl
import threading
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pika
import pytest
import stomp
import trio
import trio_websocket
import trustme
from paho.mqtt.enums import CallbackAPIVersion

from herald.core.broker import Broker
from herald.core.config import InvalidValue
from herald.core.embedding import embedded
from herald.core.errors import ConfigError
from herald.core.tls import TLSSection, server_context

WAIT = 10.0
BASE = [
    "amqp.host=127.0.0.1",
    "amqp.port=0",
    "amqp.tls_port=0",
    "stomp.host=127.0.0.1",
    "stomp.port=0",
    "stomp.tls_port=0",
    "stomp.ws_host=127.0.0.1",
    "stomp.ws_port=0",
    "stomp.wss_port=0",
    "mqtt.host=127.0.0.1",
    "mqtt.port=0",
    "mqtt.tls_port=0",
    "mqtt.ws_host=127.0.0.1",
    "mqtt.ws_port=0",
    "mqtt.wss_port=0",
]


class PKI:
    """A CA, the broker's certificate for 127.0.0.1, and files for the config."""

    def __init__(self, directory: Path) -> None:
        self.ca = trustme.CA()
        self.other_ca = trustme.CA()
        server = self.ca.issue_cert("127.0.0.1", "localhost")
        self.certfile = directory / "server.pem"
        self.keyfile = directory / "server.key"
        self.cafile = directory / "ca.pem"
        server.cert_chain_pems[0].write_to_path(str(self.certfile))
        for pem in server.cert_chain_pems[1:]:
            pem.write_to_path(str(self.certfile), append=True)
        server.private_key_pem.write_to_path(str(self.keyfile))
        self.ca.cert_pem.write_to_path(str(self.cafile))

    def settings(self, *extra: str) -> list[str]:
        return [
            *BASE,
            f'tls.certfile="{self.certfile}"',
            f'tls.keyfile="{self.keyfile}"',
            f'tls.cafile="{self.cafile}"',
            *extra,
        ]

    def client_context(self, cert_from: trustme.CA | None = None) -> ssl.SSLContext:
        """A client context trusting our CA, presenting a certificate of `cert_from`."""
        context = ssl.create_default_context()
        self.ca.configure_trust(context)
        if cert_from is not None:
            cert_from.issue_cert("client@example.com", common_name="app-client").configure_cert(
                context
            )
        return context


@pytest.fixture
def pki(tmp_path: Path) -> PKI:
    return PKI(tmp_path)


@asynccontextmanager
async def tls_broker(tmp_path: Path, settings: Sequence[str]) -> AsyncIterator[Broker]:
    async with embedded(
        plugins=["amqp", "stomp", "mqtt"], settings=settings, data_dir=tmp_path / "data"
    ) as broker:
        yield broker


def port(broker: Broker, protocol: str, transport: str) -> int:
    return next(
        lst.port
        for lst in broker.listeners
        if lst.protocol == protocol and lst.transport == transport
    )


def amqp_round_trip(port: int, context: ssl.SSLContext, queue: str) -> bytes:
    """Declare, publish with confirms and get one message back over AMQPS with pika."""
    parameters = pika.ConnectionParameters(
        "127.0.0.1",
        port,
        credentials=pika.PlainCredentials("guest", "guest"),
        ssl_options=pika.SSLOptions(context, "127.0.0.1"),
        socket_timeout=WAIT,
        connection_attempts=1,
    )
    connection = pika.BlockingConnection(parameters)
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare(queue)
        channel.basic_publish("", queue, b"over tls", mandatory=True)
        _, _, body = channel.basic_get(queue, auto_ack=True)
        return body
    finally:
        connection.close()


def stomp_round_trip(port: int, cafile: Path) -> bytes:
    """Send to a queue and receive it back over STOMP+TLS with stomp.py (which verifies the
    broker's certificate against `cafile`)."""
    connection = stomp.Connection12([("127.0.0.1", port)], vhost="/", timeout=WAIT)
    connection.set_ssl([("127.0.0.1", port)], ca_certs=str(cafile))
    listener = stomp.listener.TestListener()
    connection.set_listener("test", listener)
    connection.connect("guest", "guest", wait=True)
    try:
        connection.subscribe("/queue/tls", id="1", ack="auto")
        connection.send("/queue/tls", "over stomp+tls")
        listener.wait_for_message()
        frame = listener.get_latest_message()
        assert frame is not None
        body = frame[1]
        return body.encode() if isinstance(body, str) else body
    finally:
        connection.disconnect()


async def test_amqp_and_stomp_over_tls(tmp_path: Path, pki: PKI) -> None:
    async with tls_broker(tmp_path, pki.settings()) as broker:
        transports = {(lst.protocol, lst.transport) for lst in broker.listeners}
        assert {("amqp", "tcp"), ("amqp", "tls"), ("stomp", "tls"), ("stomp", "wss")} <= (
            transports
        )
        context = pki.client_context()
        with trio.fail_after(WAIT):
            body = await trio.to_thread.run_sync(
                amqp_round_trip, port(broker, "amqp", "tls"), context, "tls-q"
            )
        assert body == b"over tls"
        with trio.fail_after(WAIT):
            body = await trio.to_thread.run_sync(
                stomp_round_trip, port(broker, "stomp", "tls"), pki.cafile
            )
        assert body == b"over stomp+tls"


def mqtt_round_trip(port: int, context: ssl.SSLContext, transport: str) -> bytes:
    """Subscribe and publish (QoS 1) over MQTTS (or MQTT over wss) with paho."""
    received: queue.Queue[bytes] = queue.Queue()
    subscribed = threading.Event()
    client = mqtt.Client(
        callback_api_version=CallbackAPIVersion.VERSION2,
        client_id=f"tls-{transport}",
        transport=transport,  # type: ignore[arg-type]
    )
    client.username_pw_set("guest", "guest")
    client.tls_set_context(context)
    if transport == "websockets":
        client.ws_set_options(path="/mqtt")
    client.on_message = lambda c, u, message: received.put(message.payload)
    client.on_subscribe = lambda *args: subscribed.set()
    client.connect("127.0.0.1", port, keepalive=30)
    client.loop_start()
    try:
        client.subscribe("tls/test", qos=1)
        assert subscribed.wait(WAIT)
        client.publish("tls/test", b"over mqtts", qos=1).wait_for_publish(WAIT)
        return received.get(timeout=WAIT)
    finally:
        client.disconnect()
        client.loop_stop()


async def test_mqtt_over_tls_and_wss(tmp_path: Path, pki: PKI) -> None:
    async with tls_broker(tmp_path, pki.settings()) as broker:
        transports = {lst.transport for lst in broker.listeners if lst.protocol == "mqtt"}
        assert transports == {"tcp", "tls", "ws", "wss"}
        for transport, paho_transport in (("tls", "tcp"), ("wss", "websockets")):
            with trio.fail_after(WAIT):
                body = await trio.to_thread.run_sync(
                    mqtt_round_trip,
                    port(broker, "mqtt", transport),
                    pki.client_context(),
                    paho_transport,
                )
            assert body == b"over mqtts"


async def test_web_stomp_over_wss(tmp_path: Path, pki: PKI) -> None:
    async with tls_broker(tmp_path, pki.settings()) as broker:
        with trio.fail_after(WAIT):
            async with trio_websocket.open_websocket(
                "127.0.0.1",
                port(broker, "stomp", "wss"),
                "/ws",
                use_ssl=pki.client_context(),
                subprotocols=["v12.stomp"],
            ) as ws:
                await ws.send_message(
                    "CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:guest\n\n\0"
                )
                reply = await ws.get_message()
        assert str(reply).startswith("CONNECTED\n")


async def test_client_certificates_are_verified(tmp_path: Path, pki: PKI) -> None:
    settings = pki.settings('tls.verify="peer"', "tls.fail_if_no_peer_cert=true")
    async with tls_broker(tmp_path, settings) as broker:
        amqps = port(broker, "amqp", "tls")
        for refused in (pki.client_context(), pki.client_context(cert_from=pki.other_ca)):
            with pytest.raises(pika.exceptions.AMQPConnectionError), trio.fail_after(WAIT):
                await trio.to_thread.run_sync(amqp_round_trip, amqps, refused, "never")
        with trio.fail_after(WAIT):
            body = await trio.to_thread.run_sync(
                amqp_round_trip, amqps, pki.client_context(cert_from=pki.ca), "certified"
            )
        assert body == b"over tls"


async def test_bad_handshakes_close_only_their_connection(tmp_path: Path, pki: PKI) -> None:
    settings = pki.settings("amqp.handshake_timeout=0.5", "stomp.handshake_timeout=0.5")
    async with tls_broker(tmp_path, settings) as broker:
        amqps = port(broker, "amqp", "tls")
        with trio.fail_after(WAIT):
            # Plain AMQP to the TLS port: the handshake fails and the socket closes.
            plain = await trio.open_tcp_stream("127.0.0.1", amqps)
            await plain.send_all(b"AMQP\x00\x00\x09\x01")
            assert await _closed(plain)
            # A client that connects and says nothing is dropped at the handshake deadline.
            for transport in ("tls", "wss"):
                protocol = "amqp" if transport == "tls" else "stomp"
                silent = await trio.open_tcp_stream("127.0.0.1", port(broker, protocol, transport))
                assert await _closed(silent)
            # A TLS client that stops after the TLS handshake is dropped too.
            stalled = trio.SSLStream(
                await trio.open_tcp_stream("127.0.0.1", amqps),
                pki.client_context(),
                server_hostname="127.0.0.1",
            )
            await stalled.do_handshake()
            assert await _closed(stalled)
            body = await trio.to_thread.run_sync(
                amqp_round_trip, amqps, pki.client_context(), "still-served"
            )
        assert body == b"over tls"


async def _closed(stream: Any) -> bool:
    """Read until the broker closes the stream; True once it has."""
    try:
        while await stream.receive_some(4096):
            pass
    except trio.BrokenResourceError:
        pass
    return True


def test_tls_configuration_errors_name_the_key(pki: PKI, tmp_path: Path) -> None:
    assert server_context(TLSSection()) is None
    with pytest.raises(ConfigError, match=r"tls\.certfile"):
        server_context(TLSSection(certfile=str(tmp_path / "missing.pem")))
    with pytest.raises(ConfigError, match=r"tls\.cafile"):
        server_context(
            TLSSection(certfile=str(pki.certfile), keyfile=str(pki.keyfile), verify="peer")
        )
    with pytest.raises(ConfigError, match=r"tls\.fail_if_no_peer_cert"):
        server_context(
            TLSSection(
                certfile=str(pki.certfile), keyfile=str(pki.keyfile), fail_if_no_peer_cert=True
            )
        )
    with pytest.raises(ConfigError, match=r"tls\.ciphers"):
        server_context(
            TLSSection(certfile=str(pki.certfile), keyfile=str(pki.keyfile), ciphers="NOPE")
        )
    with pytest.raises(InvalidValue, match="verify"):
        TLSSection(verify="sometimes")
    with pytest.raises(InvalidValue, match="min_version"):
        TLSSection(min_version="1.0")
    context = server_context(
        TLSSection(certfile=str(pki.certfile), keyfile=str(pki.keyfile), min_version="1.3")
    )
    assert context is not None and context.minimum_version is ssl.TLSVersion.TLSv1_3

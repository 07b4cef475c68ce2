"""Shared by the TLS tests (test_tls.py, test_cert_login.py): a throwaway PKI from `trustme`,
a broker with every protocol's TLS listeners on 127.0.0.1 port 0, its ports, and one round
trip per protocol with a real client (blocking: run them in a worker thread).

The `pki` fixture (tests/conftest.py) makes a `PKI` in the test's tmp_path.
"""

from __future__ import annotations

import queue
import ssl
import threading
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import paho.mqtt.client as mqtt
import pika
import stomp
import trustme
from paho.mqtt.enums import CallbackAPIVersion

from herald.core.broker import Broker
from herald.core.embedding import embedded
from herald.core.testing import listener_port

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
        self.directory = directory
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

    def client_cert(
        self, common_name: str = "app-client", cert_from: trustme.CA | None = None
    ) -> trustme.LeafCert:
        """A client certificate for `common_name` from `cert_from` (default: our CA)."""
        issuer = self.ca if cert_from is None else cert_from
        return issuer.issue_cert("client@example.com", common_name=common_name)

    def client_context(
        self, cert_from: trustme.CA | None = None, common_name: str = "app-client"
    ) -> ssl.SSLContext:
        """A client context trusting our CA, presenting a certificate of `cert_from` (none
        when None) for `common_name`."""
        context = ssl.create_default_context()
        self.ca.configure_trust(context)
        if cert_from is not None:
            self.client_cert(common_name, cert_from).configure_cert(context)
        return context

    def client_files(self, common_name: str) -> tuple[Path, Path]:
        """(certificate, key) PEM files of a client certificate of our CA for `common_name`,
        for clients that take files (stomp.py)."""
        leaf = self.client_cert(common_name)
        certfile = self.directory / f"client-{common_name}.pem"
        keyfile = self.directory / f"client-{common_name}.key"
        leaf.cert_chain_pems[0].write_to_path(str(certfile))
        leaf.private_key_pem.write_to_path(str(keyfile))
        return certfile, keyfile


@asynccontextmanager
async def tls_broker(tmp_path: Path, settings: Sequence[str]) -> AsyncIterator[Broker]:
    async with embedded(
        plugins=["amqp", "stomp", "mqtt"], settings=settings, data_dir=tmp_path / "data"
    ) as broker:
        yield broker


port = listener_port  # port(broker, "amqp", "tls"): the TLS tests span every protocol


def amqp_round_trip(
    port: int,
    context: ssl.SSLContext | None,
    queue: str,
    credentials: Any = None,
    body: bytes = b"over tls",
) -> bytes:
    """Declare, publish with confirms and get one message back over AMQPS with pika (plain
    AMQP when `context` is None), logged in with `credentials` (default guest/guest)."""
    parameters = pika.ConnectionParameters(
        "127.0.0.1",
        port,
        credentials=credentials or pika.PlainCredentials("guest", "guest"),
        ssl_options=None if context is None else pika.SSLOptions(context, "127.0.0.1"),
        socket_timeout=WAIT,
        connection_attempts=1,
    )
    connection = pika.BlockingConnection(parameters)
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare(queue)
        channel.basic_publish("", queue, body, mandatory=True)
        _, _, body = channel.basic_get(queue, auto_ack=True)
        return body
    finally:
        connection.close()


def stomp_round_trip(
    port: int,
    cafile: Path | None,
    credentials: tuple[str, str] | None = ("guest", "guest"),
    client_files: tuple[Path, Path] | None = None,
    body: str = "over stomp+tls",
) -> bytes:
    """Send to a queue and receive it back over STOMP+TLS with stomp.py (which verifies the
    broker's certificate against `cafile`; None: plain STOMP); `credentials` None: a CONNECT
    without login; `client_files`: the (certificate, key) it presents."""
    connection = stomp.Connection12([("127.0.0.1", port)], vhost="/", timeout=WAIT)
    if cafile is not None:
        cert_file, key_file = client_files or (None, None)
        connection.set_ssl(
            [("127.0.0.1", port)],
            ca_certs=str(cafile),
            cert_file=cert_file and str(cert_file),
            key_file=key_file and str(key_file),
        )
    listener = stomp.listener.TestListener()
    connection.set_listener("test", listener)
    login, passcode = credentials or (None, None)
    connection.connect(login, passcode, wait=True)
    try:
        connection.subscribe("/queue/tls", id="1", ack="auto")
        connection.send("/queue/tls", body)
        listener.wait_for_message()
        frame = listener.get_latest_message()
        assert frame is not None
        body = frame[1]
        return body.encode() if isinstance(body, str) else body
    finally:
        connection.disconnect()


PahoTransport = Literal["tcp", "websockets"]
"""paho's name for MQTTS ("tcp") and MQTT over wss ("websockets")."""
MQTT_TLS_TRANSPORTS: tuple[tuple[str, PahoTransport], ...] = (("tls", "tcp"), ("wss", "websockets"))
"""Each TLS listener of MQTT (its `Listener.transport`) with the paho transport that reaches it."""


def mqtt_client(
    context: ssl.SSLContext | None,
    transport: PahoTransport,
    credentials: tuple[str, str] | None = ("guest", "guest"),
    client_id: str = "",
) -> mqtt.Client:
    """A paho client for MQTTS (`transport` "tcp") or MQTT over wss ("websockets"), not yet
    connected; `credentials` None: a CONNECT without user name and password."""
    client = mqtt.Client(
        callback_api_version=CallbackAPIVersion.VERSION2,
        client_id=client_id or f"tls-{transport}",
        transport=transport,
    )
    if credentials is not None:
        client.username_pw_set(*credentials)
    if context is not None:
        client.tls_set_context(context)
    if transport == "websockets":
        client.ws_set_options(path="/mqtt")
    return client


def mqtt_round_trip(
    port: int,
    context: ssl.SSLContext | None,
    transport: PahoTransport,
    credentials: tuple[str, str] | None = ("guest", "guest"),
    payload: bytes = b"over mqtts",
) -> bytes:
    """Subscribe and publish (QoS 1) over MQTTS (or MQTT over wss) with paho; plain MQTT
    (or ws) when `context` is None."""
    received: queue.Queue[bytes] = queue.Queue()
    subscribed = threading.Event()
    client = mqtt_client(context, transport, credentials)
    client.on_message = lambda c, u, message: received.put(bytes(message.payload))
    client.on_subscribe = lambda *args: subscribed.set()
    client.connect("127.0.0.1", port, keepalive=30)
    client.loop_start()
    try:
        client.subscribe("tls/test", qos=1)
        assert subscribed.wait(WAIT)
        client.publish("tls/test", payload, qos=1).wait_for_publish(WAIT)
        return received.get(timeout=WAIT)
    finally:
        client.disconnect()
        client.loop_stop()

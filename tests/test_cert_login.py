"""Client-certificate login (core/cert_login.py): real clients over real TLS on 127.0.0.1.

With `tls.verify = "peer"` and `tls.cert_login = true`, a client certificate from our CA logs
in as the user its common name (or distinguished name) names, without a password: pika with
EXTERNAL, paho and stomp.py without credentials, trio-websocket over wss. The user must exist
and have a permission on the virtual host; each refusal is the protocol's usual one (AMQP 403
or 530, CONNACK "not authorized", an ERROR frame) and leaves the other connections served.
Certificates come from `trustme` (tests/tls_helpers.py, shared with test_tls.py).
"""

from __future__ import annotations

import ssl
import threading
from pathlib import Path

import pika
import pytest
import stomp
import trio
import trio_websocket
from cryptography import x509

from herald.core import cert_login
from herald.core.auth import AccessControl
from herald.core.broker import Broker
from herald.core.cert_login import common_name, distinguished_name
from herald.core.embedding import embedded
from herald.core.errors import AccessRefused, ConfigError, InvalidValue
from herald.core.tls import TLSSection, server_context
from tests.tls_helpers import (
    MQTT_TLS_TRANSPORTS,
    PKI,
    WAIT,
    amqp_round_trip,
    mqtt_client,
    mqtt_round_trip,
    port,
    stomp_round_trip,
    tls_broker,
)

CERT_LOGIN = ('tls.verify="peer"', "tls.cert_login=true")
APP = "app-client"  # a user with full access to "/" and no password
STRANGER = "stranger"  # no such user
LOCKED = "locked-out"  # a user without a permission on "/"


def add_users(broker: Broker) -> None:
    broker.users.add_user(APP, None)
    broker.users.set_permissions(APP, "/", ".*", ".*", ".*")
    broker.users.add_user(LOCKED, None)


# -- configuration and names -----------------------------------------------------------------
def test_configuration_errors_name_the_key(pki: PKI) -> None:
    assert TLSSection().cert_login is False
    with pytest.raises(InvalidValue, match="cert_login_from"):
        TLSSection(cert_login_from="email")
    with pytest.raises(ConfigError, match=r"tls\.cert_login"):
        server_context(
            TLSSection(certfile=str(pki.certfile), keyfile=str(pki.keyfile), cert_login=True)
        )


async def test_a_bad_setting_stops_the_broker_naming_the_key(pki: PKI, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"tls\.cert_login_from"):
        async with embedded(plugins=[], settings=['tls.cert_login_from="cn"'], data_dir=tmp_path):
            pass
    with pytest.raises(ConfigError, match=r"tls\.cert_login"):
        async with tls_broker(tmp_path, pki.settings("tls.cert_login=true")):
            pass


def test_names_follow_rabbitmq_and_rfc_4514() -> None:
    # Subjects as `ssl` gives them: most general first, each RDN a tuple of (long name, value).
    subject = (
        (("countryName", "NL"),),
        (("organizationName", "Example, Inc"),),
        (("organizationalUnitName", "dev"),),
        (("commonName", APP),),
    )
    assert common_name(subject) == APP
    assert distinguished_name(subject) == f"CN={APP},OU=dev,O=Example\\, Inc,C=NL"
    tricky = ((("commonName", " #a+b "),), (("countryName", "NL"), ("commonName", "x")))
    assert distinguished_name(tricky) == "C=NL+CN=x,CN=\\ #a\\+b\\ "  # RFC 4514 2.4
    assert distinguished_name(((("commonName", '#"<;>\\\0'),),)) == 'CN=\\#\\"\\<\\;\\>\\\\\\00'
    assert common_name(tricky) == " #a+b ,x"  # several: joined with "," as RabbitMQ does
    assert common_name(((("organizationName", "no CN"),),)) is None
    assert distinguished_name(((("emailAddress", "a@b"),),)) == "emailAddress=a@b"


def test_the_user_must_exist_and_loopback_users_stay_local() -> None:
    users = AccessControl()
    users.add_user("guest", None)
    users.add_user(APP, None)
    assert cert_login.login(users, APP, "10.1.2.3").name == APP
    assert cert_login.login(users, "guest", "127.0.0.1").name == "guest"
    for name, peer in ((STRANGER, "127.0.0.1"), ("guest", "10.1.2.3")):
        with pytest.raises(AccessRefused, match="mechanism EXTERNAL"):
            cert_login.login(users, name, peer)


# -- AMQP ------------------------------------------------------------------------------------
async def offered_mechanisms(amqps: int, context: ssl.SSLContext) -> list[bytes]:
    """The mechanisms of connection.start, read off a raw TLS connection."""
    tcp = await trio.open_tcp_stream("127.0.0.1", amqps)
    stream = trio.SSLStream(tcp, context, server_hostname="127.0.0.1")
    await stream.send_all(b"AMQP\x00\x00\x09\x01")
    data = b""
    while len(data) < 7 or len(data) < 8 + int.from_bytes(data[3:7], "big"):
        chunk = await stream.receive_some(4096)
        assert chunk, "closed before connection.start"
        data += chunk
    await stream.aclose()
    payload = data[7:]
    assert payload[:4] == b"\x00\x0a\x00\x0a"  # connection.start
    offset = 6 + 4 + int.from_bytes(payload[6:10], "big")  # past the versions and properties
    size = int.from_bytes(payload[offset : offset + 4], "big")
    return payload[offset + 4 : offset + 4 + size].split()


async def test_external_is_offered_only_with_a_certificate_and_cert_login(
    tmp_path: Path, pki: PKI
) -> None:
    with_cert = pki.client_context(cert_from=pki.ca, common_name=APP)
    with trio.fail_after(WAIT):
        async with tls_broker(tmp_path, pki.settings(*CERT_LOGIN)) as broker:
            amqps = port(broker, "amqp", "tls")
            assert await offered_mechanisms(amqps, with_cert) == [
                b"EXTERNAL",
                b"PLAIN",
                b"AMQPLAIN",
            ]
            assert await offered_mechanisms(amqps, pki.client_context()) == [b"PLAIN", b"AMQPLAIN"]
        async with tls_broker(tmp_path, pki.settings('tls.verify="peer"')) as broker:
            amqps = port(broker, "amqp", "tls")
            assert await offered_mechanisms(amqps, with_cert) == [b"PLAIN", b"AMQPLAIN"]
            with pytest.raises(pika.exceptions.AMQPConnectionError):
                await trio.to_thread.run_sync(
                    amqp_round_trip, amqps, with_cert, "q", pika.credentials.ExternalCredentials()
                )


async def test_amqp_external_login(tmp_path: Path, pki: PKI) -> None:
    external = pika.credentials.ExternalCredentials()
    with trio.fail_after(WAIT):
        async with tls_broker(tmp_path, pki.settings(*CERT_LOGIN)) as broker:
            add_users(broker)
            amqps = port(broker, "amqp", "tls")
            survivor = await trio.to_thread.run_sync(open_channel, amqps, pki)
            app = pki.client_context(cert_from=pki.ca, common_name=APP)
            body = await trio.to_thread.run_sync(amqp_round_trip, amqps, app, "cert-q", external)
            assert body == b"over tls"
            stranger = pki.client_context(cert_from=pki.ca, common_name=STRANGER)
            with pytest.raises(pika.exceptions.ProbableAuthenticationError, match="EXTERNAL"):
                await trio.to_thread.run_sync(amqp_round_trip, amqps, stranger, "q", external)
            locked = pki.client_context(cert_from=pki.ca, common_name=LOCKED)
            with pytest.raises(pika.exceptions.ProbableAccessDeniedError, match=LOCKED):
                await trio.to_thread.run_sync(amqp_round_trip, amqps, locked, "q", external)
            # PLAIN still works on a connection that has a certificate.
            body = await trio.to_thread.run_sync(amqp_round_trip, amqps, stranger, "plain-q")
            assert body == b"over tls"
            assert await trio.to_thread.run_sync(publish_and_get, survivor) == b"still here"
            await trio.to_thread.run_sync(survivor.connection.close)


def open_channel(amqps: int, pki: PKI) -> pika.adapters.blocking_connection.BlockingChannel:
    parameters = pika.ConnectionParameters(
        "127.0.0.1",
        amqps,
        credentials=pika.PlainCredentials("guest", "guest"),
        ssl_options=pika.SSLOptions(pki.client_context(), "127.0.0.1"),
        socket_timeout=WAIT,
        connection_attempts=1,
    )
    channel = pika.BlockingConnection(parameters).channel()
    channel.queue_declare("survivor")
    return channel


def publish_and_get(channel: pika.adapters.blocking_connection.BlockingChannel) -> bytes:
    channel.basic_publish("", "survivor", b"still here")
    _, _, body = channel.basic_get("survivor", auto_ack=True)
    return body


# -- MQTT ------------------------------------------------------------------------------------
def mqtt_connack(mqtts: int, context: ssl.SSLContext, client_id: str) -> object:
    """The reason code of the CONNACK a paho CONNECT without credentials gets."""
    answered = threading.Event()
    codes = []
    client = mqtt_client(context, "tcp", credentials=None, client_id=client_id)

    def on_connect(
        _client: object, _data: object, _flags: object, code: object, *_: object
    ) -> None:
        codes.append(code)
        answered.set()

    client.on_connect = on_connect
    client.connect("127.0.0.1", mqtts, keepalive=30)
    client.loop_start()
    try:
        assert answered.wait(WAIT)
        return codes[0]
    finally:
        client.disconnect()
        client.loop_stop()


async def test_mqtt_certificate_login(tmp_path: Path, pki: PKI) -> None:
    app = pki.client_context(cert_from=pki.ca, common_name=APP)
    with trio.fail_after(WAIT):
        async with tls_broker(tmp_path, pki.settings(*CERT_LOGIN)) as broker:
            add_users(broker)
            survivor = mqtt_client(pki.client_context(), "tcp", client_id="survivor")
            mqtts = port(broker, "mqtt", "tls")
            await trio.to_thread.run_sync(survivor.connect, "127.0.0.1", mqtts)
            survivor.loop_start()
            try:
                for transport, paho_transport in MQTT_TLS_TRANSPORTS:
                    listener = port(broker, "mqtt", transport)
                    body = await trio.to_thread.run_sync(
                        mqtt_round_trip, listener, app, paho_transport, None
                    )
                    assert body == b"over mqtts"
                for name in (STRANGER, LOCKED):
                    context = pki.client_context(cert_from=pki.ca, common_name=name)
                    code = await trio.to_thread.run_sync(mqtt_connack, mqtts, context, name)
                    assert code == "Not authorized", name
                published = survivor.publish("alive", b"x", qos=1)
                await trio.to_thread.run_sync(published.wait_for_publish, WAIT)
                assert published.is_published()
            finally:
                await trio.to_thread.run_sync(survivor.disconnect)
                survivor.loop_stop()


async def test_mqtt_credentials_take_priority_over_the_certificate(
    tmp_path: Path, pki: PKI
) -> None:
    stranger = pki.client_context(cert_from=pki.ca, common_name=STRANGER)
    with trio.fail_after(WAIT):
        async with tls_broker(tmp_path, pki.settings(*CERT_LOGIN)) as broker:
            mqtts = port(broker, "mqtt", "tls")
            body = await trio.to_thread.run_sync(mqtt_round_trip, mqtts, stranger, "tcp")
            assert body == b"over mqtts"  # guest/guest, whatever the certificate says


# -- STOMP -----------------------------------------------------------------------------------
async def stomp_raw_connect(stomps: int, context: ssl.SSLContext, headers: str = "") -> bytes:
    """The first frame the broker answers a CONNECT (plus `headers`) with."""
    tcp = await trio.open_tcp_stream("127.0.0.1", stomps)
    stream = trio.SSLStream(tcp, context, server_hostname="127.0.0.1")
    await stream.send_all(f"CONNECT\naccept-version:1.2\nhost:/\n{headers}\n\0".encode())
    data = b""
    while b"\0" not in data:
        chunk = await stream.receive_some(4096)
        assert chunk, f"closed after {data!r}"
        data += chunk
    await trio.aclose_forcefully(stream)
    return data.partition(b"\0")[0]


async def test_stomp_certificate_login(tmp_path: Path, pki: PKI) -> None:
    with trio.fail_after(WAIT):
        async with tls_broker(tmp_path, pki.settings(*CERT_LOGIN)) as broker:
            add_users(broker)
            stomps = port(broker, "stomp", "tls")
            survivor = stomp.Connection12([("127.0.0.1", stomps)], vhost="/", timeout=WAIT)
            survivor.set_ssl([("127.0.0.1", stomps)], ca_certs=str(pki.cafile))
            await trio.to_thread.run_sync(lambda: survivor.connect("guest", "guest", wait=True))
            try:
                files = pki.client_files(APP)
                body = await trio.to_thread.run_sync(
                    stomp_round_trip, stomps, pki.cafile, None, files
                )
                assert body == b"over stomp+tls"
                for name in (STRANGER, LOCKED):
                    context = pki.client_context(cert_from=pki.ca, common_name=name)
                    answer = await stomp_raw_connect(stomps, context)
                    assert answer.startswith(b"ERROR\n"), answer
                    assert b"message:Access refused\n" in answer
                    assert name.encode() in answer
                # A login header takes priority over the certificate (RabbitMQ's rule).
                stranger = pki.client_context(cert_from=pki.ca, common_name=STRANGER)
                answer = await stomp_raw_connect(stomps, stranger, "login:guest\npasscode:guest\n")
                assert answer.startswith(b"CONNECTED\n")
                listener = stomp.listener.TestListener(receipt="alive")
                survivor.set_listener("test", listener)
                survivor.send("/queue/alive", "x", receipt="alive")
                await trio.to_thread.run_sync(listener.wait_on_receipt, abandon_on_cancel=True)
            finally:
                await trio.to_thread.run_sync(survivor.disconnect)


async def test_web_stomp_over_wss_and_the_distinguished_name(tmp_path: Path, pki: PKI) -> None:
    leaf = pki.client_cert(APP)
    dn = x509.load_pem_x509_certificate(leaf.cert_chain_pems[0].bytes()).subject.rfc4514_string()
    context = pki.client_context()
    leaf.configure_cert(context)
    settings = pki.settings(*CERT_LOGIN, 'tls.cert_login_from="distinguished_name"')

    async def connect(wss: int) -> str:
        async with trio_websocket.open_websocket(
            "127.0.0.1", wss, "/ws", use_ssl=context, subprotocols=["v12.stomp"]
        ) as ws:
            await ws.send_message("CONNECT\naccept-version:1.2\nhost:/\n\n\0")
            return str(await ws.get_message())

    with trio.fail_after(WAIT):
        async with tls_broker(tmp_path, settings) as broker:
            add_users(broker)  # APP is not the user name now: the distinguished name is
            wss = port(broker, "stomp", "wss")
            assert (await connect(wss)).startswith("ERROR\n")
            broker.users.add_user(dn, None)
            broker.users.set_permissions(dn, "/", ".*", ".*", ".*")
            assert (await connect(wss)).startswith("CONNECTED\n")
            assert dn.startswith(f"CN={APP},OU=")

"""TLS listeners: real clients over TLS on 127.0.0.1, client certificates, bad handshakes.

Certificates come from `trustme` (a throwaway CA made for tests; tests/tls_helpers.py, shared
with test_cert_login.py). The broker runs in the test's Trio loop with the AMQP and STOMP
plugins; the blocking clients (pika, stomp.py) run in worker threads, and trio-websocket is
the WebSocket client. Each bad handshake must close only its own connection: a good client
is served afterwards.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import pika
import pytest
import trio
import trio_websocket

from herald.core.config import InvalidValue
from herald.core.errors import ConfigError
from herald.core.tls import TLSSection, server_context
from tests.tls_helpers import (
    MQTT_TLS_TRANSPORTS,
    PKI,
    WAIT,
    amqp_round_trip,
    mqtt_round_trip,
    port,
    stomp_round_trip,
    tls_broker,
)


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


async def test_mqtt_over_tls_and_wss(tmp_path: Path, pki: PKI) -> None:
    async with tls_broker(tmp_path, pki.settings()) as broker:
        transports = {lst.transport for lst in broker.listeners if lst.protocol == "mqtt"}
        assert transports == {"tcp", "tls", "ws", "wss"}
        for transport, paho_transport in MQTT_TLS_TRANSPORTS:
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

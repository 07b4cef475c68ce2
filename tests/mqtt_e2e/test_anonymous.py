"""Anonymous MQTT by default: a CONNECT without a user name acts as `mqtt.anonymous_user`.

paho-mqtt and Mosquitto's `mosquitto_pub` / `mosquitto_sub` send no credentials unless told
to, so with the defaults (`allow_anonymous = true`, `anonymous_user = "guest"`) they work from
this machine. `guest` is a loopback-only user (`auth.loopback_users`), so the same CONNECT
from another host is refused with NOT_AUTHORIZED. `mqtt.allow_anonymous = false` refuses every
CONNECT without a user name (tests/mqtt_e2e/test_pubsub.py).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import trio

from herald.core.broker import Broker
from herald.plugins.mqtt.codec import ConnAck, Connect, ReasonCode, encode_packet
from herald.plugins.mqtt.config import MQTTConfig
from herald.plugins.mqtt.context import MQTTContext
from herald.plugins.mqtt.session import Session
from tests.mqtt.helpers import read_all
from tests.mqtt_e2e.helpers import Paho, mqtt_broker, port

MOSQUITTO_CLIENTS_INSTALL = "apt-get install -y mosquitto-clients"


@pytest.mark.parametrize("version", [3, 4, 5])
async def test_paho_without_credentials_publishes_and_subscribes(
    tmp_path: Path, version: int
) -> None:
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:  # default settings
            client = Paho(broker, version=version, client_id="anon-paho", username=None)
            assert (await client.connect()).reason_code == 0
            await client.subscribe("anon/paho", 1)
            await client.publish("anon/paho", b"no password needed", 1)
            assert (await client.message()).payload == b"no password needed"
            await client.disconnect()


def mosquitto_client(name: str) -> str:
    """The path of a Debian `mosquitto-clients` program; the test fails (never skips) without
    it, naming the package to install."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: run `{MOSQUITTO_CLIENTS_INSTALL}`")
    return path


@pytest.mark.parametrize("version", ["mqttv311", "mqttv5"])
async def test_mosquitto_clients_without_credentials(tmp_path: Path, version: str) -> None:
    sub, pub = mosquitto_client("mosquitto_sub"), mosquitto_client("mosquitto_pub")
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            where = ["-h", "127.0.0.1", "-p", str(port(broker)), "-V", version, "-t", "anon/mosq"]
            received: list[subprocess.CompletedProcess[bytes]] = []

            async def subscribe() -> None:
                received.append(
                    await trio.run_process(
                        [sub, *where, "-i", "anon-sub", "-q", "1", "-C", "1"],
                        capture_stdout=True,
                        capture_stderr=True,
                        check=False,
                    )
                )

            async with trio.open_nursery() as nursery:
                nursery.start_soon(subscribe)
                # Subscribed once its queue exists (declared and bound before the SUBACK).
                while "mqtt-subscription-anon-sub" not in broker.default_vhost.queues:
                    if received:
                        pytest.fail(f"mosquitto_sub ended: {received[0].stderr!r}")
                    await trio.sleep(0.01)
                published = await trio.run_process(
                    [pub, *where, "-q", "1", "-m", "from mosquitto_pub"],
                    capture_stdout=True,
                    capture_stderr=True,
                    check=False,
                )
                assert published.returncode == 0, published.stderr
            (result,) = received
            assert result.returncode == 0, result.stderr
            assert result.stdout == b"from mosquitto_pub\n"


async def anonymous_connack(broker: Broker, peer_host: str, version: int) -> bytes:
    """herald's answer to an anonymous CONNECT from `peer_host`, through the session's login
    path with the default `[mqtt]` settings. The listener takes `peer_host` from the socket;
    tests may dial only loopback, so a remote peer is given here, as tests/test_auth.py gives
    one to `authenticate`."""
    context = MQTTContext(broker, MQTTConfig())
    connection = broker.connections.open("mqtt", f"{peer_host}:50000")
    session = Session(context, connection, peer_host)
    try:
        await session.receive(encode_packet(Connect("anon", version), version))
        return session.data_to_send()
    finally:
        session.connection_lost("test over")
        broker.connections.close(connection)


@pytest.mark.parametrize("remote", ["10.1.2.3", "2001:db8::1", "192.0.2.7"])
async def test_anonymous_guest_is_refused_from_a_remote_peer(tmp_path: Path, remote: str) -> None:
    async with mqtt_broker(tmp_path) as broker:
        assert await anonymous_connack(broker, remote, 4) == b"\x20\x02\x00\x05"
        (refusal,) = read_all(await anonymous_connack(broker, remote, 5), 5)
        assert isinstance(refusal, ConnAck)
        assert refusal.reason_code == ReasonCode.NOT_AUTHORIZED  # 0x87
        # The same path from loopback accepts the anonymous client as guest.
        assert await anonymous_connack(broker, "127.0.0.1", 4) == b"\x20\x02\x00\x00"
        (accepted,) = read_all(await anonymous_connack(broker, "::1", 5), 5)
        assert isinstance(accepted, ConnAck) and accepted.reason_code == ReasonCode.SUCCESS

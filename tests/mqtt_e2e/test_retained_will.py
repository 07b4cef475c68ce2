"""Retained messages, wills, keep alive."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from herald.plugins.mqtt.codec import (
    ConnAck,
    Connect,
    Disconnect,
    Properties,
    ReasonCode,
    Will,
)
from herald.storage.memory import MemoryStoreData
from tests.mqtt_e2e.helpers import LOGIN, Paho, PahoTransport, RawClient, mqtt_broker, props5


@pytest.mark.parametrize("version", [4, 5])
async def test_retained_set_received_and_cleared(tmp_path: Path, version: int) -> None:
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            publisher = Paho(broker, version=version)
            await publisher.connect()
            await publisher.publish("status/door", b"open", 1, retain=True)
            await publisher.publish("status/window", b"shut", 0, retain=True)
            await publisher.publish("status/door", b"closed", 1, retain=True)  # replaces

            late = Paho(broker, version=version)
            await late.connect()
            await late.subscribe("status/+", 1)
            first, second = await late.message(), await late.message()
            assert [(m.topic, m.payload, m.retain, m.qos) for m in (first, second)] == [
                ("status/door", b"closed", True, 1),
                ("status/window", b"shut", True, 0),
            ]
            # A live subscriber gets later retained publishes without the retain flag.
            await publisher.publish("status/door", b"ajar", 1, retain=True)
            live = await late.message()
            assert (live.payload, live.retain) == (b"ajar", False)

            await publisher.publish("status/door", b"", 1, retain=True)  # clears
            await publisher.publish("status/window", b"", 1, retain=True)
            later = Paho(broker, version=version)
            await later.connect()
            await later.subscribe("status/#", 1)
            await publisher.publish("status/end", b"end", 1)
            assert [m.payload for m in await later.messages_until(b"end")] == [b"end"]


async def test_retained_messages_survive_a_restart(tmp_path: Path) -> None:
    data = MemoryStoreData()
    with trio.fail_after(30):
        async with mqtt_broker(tmp_path, data) as broker:
            publisher = Paho(broker, version=5)
            await publisher.connect()
            properties = props5(ContentType="text/plain", UserProperty=[("unit", "C")])
            await publisher.publish("config/temp", b"21", 1, retain=True, properties=properties)
            await publisher.disconnect()
        async with mqtt_broker(tmp_path, data) as broker:
            subscriber = Paho(broker, version=5)
            await subscriber.connect()
            await subscriber.subscribe("config/#", 1)
            message = await subscriber.message()
            assert (message.topic, message.payload, message.retain) == ("config/temp", b"21", True)
            assert message.properties is not None
            assert message.properties.ContentType == "text/plain"  # type: ignore[attr-defined]  # paho sets Properties attributes at run time
            assert message.properties.UserProperty == [("unit", "C")]  # type: ignore[attr-defined]  # paho sets Properties attributes at run time


async def test_retain_handling_and_retain_as_published(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            publisher = Paho(broker, version=5)
            await publisher.connect()
            await publisher.publish("rh/t", b"retained", 1, retain=True)
            client = Paho(broker, version=5)
            await client.connect()
            await client.subscribe("rh/t", 1, retainHandling=2, retainAsPublished=True)
            await publisher.publish("rh/t", b"live", 1, retain=True)
            message = await client.message()
            # Retain handling 2: no retained message on subscribing; retain-as-published: the
            # live message keeps its RETAIN flag.
            assert (message.payload, message.retain) == (b"live", True)
            await client.subscribe("rh/t", 1, retainHandling=1)  # not new: nothing sent
            await client.subscribe("rh/#", 1, retainHandling=1)  # new: sent
            message = await client.message()
            assert (message.payload, message.retain) == (b"live", True)


@pytest.mark.parametrize("transport", ["tcp", "websockets"])
async def test_will_is_published_when_the_connection_drops(
    tmp_path: Path, transport: PahoTransport
) -> None:
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            watcher = Paho(broker, version=5)
            await watcher.connect()
            await watcher.subscribe("wills/#", 1)
            doomed = Paho(broker, version=4, transport=transport, client_id="doomed")
            doomed.client.will_set("wills/doomed", b"offline", 1, retain=True)
            await doomed.connect()
            doomed.drop()  # no DISCONNECT
            message = await watcher.message()
            assert (message.topic, message.payload, message.qos) == ("wills/doomed", b"offline", 1)
            late = Paho(broker, version=5)
            await late.connect()
            await late.subscribe("wills/doomed", 1)
            assert (await late.message()).payload == b"offline"  # the will was retained


async def test_no_will_after_a_normal_disconnect(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            watcher = Paho(broker, version=5)
            await watcher.connect()
            await watcher.subscribe("wills/#", 1)
            polite = Paho(broker, version=5, client_id="polite")
            polite.client.will_set("wills/polite", b"offline", 1)
            await polite.connect()
            await polite.disconnect()
            await watcher.publish("wills/end", b"end", 1)
            assert [m.payload for m in await watcher.messages_until(b"end")] == [b"end"]


async def test_keepalive_expiry_closes_the_connection_and_publishes_the_will(
    tmp_path: Path,
) -> None:
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            watcher = Paho(broker, version=5)
            await watcher.connect()
            await watcher.subscribe("wills/#", 1)
            silent = await RawClient.open(broker, version=5)
            will = Will("wills/silent", b"timed out", 1)
            await silent.send(Connect("silent", 5, keepalive=1, will=will, **LOGIN))
            connack = await silent.receive()
            assert isinstance(connack, ConnAck) and connack.reason_code == 0
            # Say nothing: after 1.5 x keep alive the broker says why and hangs up.
            packets = await silent.until_closed()
            assert len(packets) == 1 and isinstance(packets[0], Disconnect)
            assert packets[0].reason_code == ReasonCode.KEEP_ALIVE_TIMEOUT
            message = await watcher.message()
            assert (message.topic, message.payload) == ("wills/silent", b"timed out")


@pytest.mark.parametrize("reconnect", [False, True])
async def test_will_delay(tmp_path: Path, reconnect: bool) -> None:
    """A delayed will is published when its delay passes, not if the session resumes first."""
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            watcher = Paho(broker, version=5)
            await watcher.connect()
            await watcher.subscribe("wills/#", 1)
            will = Will("wills/flaky", b"gone", 1, properties=Properties(will_delay_interval=1))
            session = Properties(session_expiry_interval=600)
            flaky = await RawClient.open(broker, version=5)
            connect = Connect("flaky", 5, clean_start=False, will=will, properties=session, **LOGIN)
            await flaky.send(connect)
            assert isinstance(await flaky.receive(), ConnAck)
            await flaky.aclose()  # dropped: the will waits 1 s
            if reconnect:
                flaky = await RawClient.open(broker, version=5)
                await flaky.send(
                    Connect("flaky", 5, clean_start=False, properties=session, **LOGIN)
                )
                connack = await flaky.receive()
                assert isinstance(connack, ConnAck) and connack.session_present
            await trio.sleep(1.5)  # past the will delay
            await watcher.publish("wills/end", b"end", 1)
            received = [m.payload for m in await watcher.messages_until(b"end")]
            assert received == ([b"end"] if reconnect else [b"gone", b"end"])


@pytest.mark.parametrize(
    ("version", "old_session", "new_clean", "will_published"),
    [
        pytest.param(4, "persistent", False, False, id="3.1.1-session-continues"),
        pytest.param(4, "persistent", True, True, id="3.1.1-clean-takeover"),
        pytest.param(4, "clean", False, True, id="3.1.1-old-session-was-clean"),
        pytest.param(5, "persistent", False, False, id="5-session-continues"),
        pytest.param(5, "persistent", True, True, id="5-clean-start-takeover"),
        pytest.param(5, "clean", False, True, id="5-old-session-expiry-0"),
    ],
)
async def test_will_on_takeover_only_when_the_old_session_ends(
    tmp_path: Path, version: int, old_session: str, new_clean: bool, will_published: bool
) -> None:
    """[MQTT-3.1.2-8]: a session continued by a new connection with the same client id (clean
    start 0, session kept) does not publish the old connection's will; one that ends (the old
    session was clean, or the new connection starts clean) does. Mosquitto decides the same way
    for 3.1.1 and 5.0 (connect__on_authorised)."""
    persistent = old_session == "persistent"
    expiry = Properties(session_expiry_interval=600) if version == 5 else Properties()
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            watcher = Paho(broker, version=5)
            await watcher.connect()
            await watcher.subscribe("wills/#", 1)
            old = await RawClient.open(broker, version=version)
            will = Will("wills/twin", b"old one gone", 1)
            props = expiry if persistent else Properties()
            await old.send(
                Connect(
                    "twin",
                    version,
                    clean_start=not persistent,
                    will=will,
                    properties=props,
                    **LOGIN,
                )
            )
            assert isinstance(await old.receive(), ConnAck)
            new = await RawClient.open(broker, version=version)
            await new.send(
                Connect("twin", version, clean_start=new_clean, properties=expiry, **LOGIN)
            )
            connack = await new.receive()
            assert isinstance(connack, ConnAck) and connack.reason_code == 0
            assert connack.session_present == (persistent and not new_clean)
            taken = [Disconnect(ReasonCode.SESSION_TAKEN_OVER)] if version == 5 else []
            assert await old.until_closed() == taken
            await watcher.publish("wills/end", b"end", 1)
            received = [m.payload for m in await watcher.messages_until(b"end")]
            assert received == ([b"old one gone", b"end"] if will_published else [b"end"])
            await new.aclose()

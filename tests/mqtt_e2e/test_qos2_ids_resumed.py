"""QoS 2 packet ids of a resumed session: its id sets are made on first use (registry.py
`SessionState`), also by a session read back after a broker restart or resumed by a
reconnect, and exactly once holds the same as for a fresh one."""

from __future__ import annotations

from pathlib import Path

import trio

from herald.core.broker import Broker
from herald.plugins.mqtt.codec import (
    ConnAck,
    Connect,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    Subscription,
    SubscriptionOptions,
)
from herald.storage.memory import MemoryStoreData
from tests.mqtt_e2e.helpers import LOGIN, Paho, RawClient, mqtt_broker


async def resume(broker: Broker, client_id: str, present: bool) -> RawClient:
    """A 3.1.1 client with a persistent session (clean session 0)."""
    raw = await RawClient.open(broker)
    await raw.send(Connect(client_id, 4, clean_start=False, **LOGIN))
    assert await raw.receive() == ConnAck(0, present)
    return raw


async def test_inbound_qos2_after_restart_and_reconnect(tmp_path: Path) -> None:
    data = MemoryStoreData()
    with trio.fail_after(30):
        async with mqtt_broker(tmp_path, data) as broker:
            raw = await resume(broker, "q2-in", present=False)
            await raw.aclose()
        async with mqtt_broker(tmp_path, data) as broker:  # the session is read back
            subscriber = Paho(broker)
            await subscriber.connect()
            await subscriber.subscribe("q2/in", 1)
            for attempt in range(2):  # after the restart, then after a reconnect
                raw = await resume(broker, "q2-in", present=True)
                payload = f"once {attempt}".encode()
                await raw.send(Publish("q2/in", payload, qos=2, packet_id=7))
                assert await raw.receive() == PubRec(7)
                await raw.send(Publish("q2/in", payload, qos=2, packet_id=7, dup=True))
                assert await raw.receive() == PubRec(7)  # a resend: not routed again
                await raw.send(PubRel(7))
                assert await raw.receive() == PubComp(7)
                await raw.send(Publish("q2/in", b"end"))
                got = [m.payload for m in await subscriber.messages_until(b"end")]
                assert got == [payload, b"end"]
                await raw.aclose()


async def test_outbound_pubrel_is_resent_after_reconnect(tmp_path: Path) -> None:
    data = MemoryStoreData()
    with trio.fail_after(30):
        async with mqtt_broker(tmp_path, data) as broker:
            raw = await resume(broker, "q2-out", present=False)
            subscribe = Subscribe(1, [Subscription("q2/out", SubscriptionOptions(qos=2))])
            await raw.send(subscribe)
            assert await raw.receive() == SubAck(1, [2])
            await raw.aclose()
        async with mqtt_broker(tmp_path, data) as broker:  # the session is read back
            publisher = Paho(broker)
            await publisher.connect()
            raw = await resume(broker, "q2-out", present=True)
            await publisher.publish("q2/out", b"exactly once", 2)
            delivery = await raw.receive()
            assert isinstance(delivery, Publish) and delivery.qos == 2, delivery
            assert delivery.payload == b"exactly once"
            packet_id = delivery.packet_id
            assert packet_id is not None
            await raw.send(PubRec(packet_id))
            assert await raw.receive() == PubRel(packet_id)
            await raw.aclose()  # gone before PUBCOMP
            raw = await resume(broker, "q2-out", present=True)
            assert await raw.receive() == PubRel(packet_id)  # resent on reconnect
            await raw.send(PubComp(packet_id))
            await raw.ping()
            await raw.aclose()
            raw = await resume(broker, "q2-out", present=True)
            await raw.ping()  # nothing resent: the exchange is complete
            await raw.aclose()

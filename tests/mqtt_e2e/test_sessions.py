"""Sessions: persistence across reconnects and broker restarts, takeover, redelivery with DUP,
exactly-once inbound QoS 2, shared subscriptions."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from herald.core.broker import Broker
from herald.plugins.mqtt.codec import (
    ConnAck,
    Connect,
    PubAck,
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
from tests.mqtt_e2e.helpers import Paho, RawClient, connect_props5, mqtt_broker


async def persistent_client(broker: Broker, version: int, client_id: str) -> tuple[Paho, bool]:
    client = Paho(broker, version=version, client_id=client_id, clean=False)
    if version == 5:
        connected = await client.connect(
            clean_start=False, properties=connect_props5(SessionExpiryInterval=3600)
        )
    else:
        connected = await client.connect()
    assert connected.reason_code == 0
    return client, connected.session_present


@pytest.mark.parametrize("version", [4, 5])
async def test_persistent_session_gets_what_was_published_while_away(
    tmp_path: Path, version: int
) -> None:
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            client, present = await persistent_client(broker, version, "keeper")
            assert not present
            await client.subscribe("away/t", 1)
            await client.disconnect()
            publisher = Paho(broker, version=version)
            await publisher.connect()
            for n in range(3):
                await publisher.publish("away/t", f"m{n}".encode(), 1)
            client, present = await persistent_client(broker, version, "keeper")
            assert present
            received = [await client.message() for _ in range(3)]
            assert [(m.payload, m.qos) for m in received] == [(b"m0", 1), (b"m1", 1), (b"m2", 1)]
            await client.disconnect()


@pytest.mark.parametrize("version", [4, 5])
async def test_clean_session_forgets_subscriptions(tmp_path: Path, version: int) -> None:
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            client, _ = await persistent_client(broker, version, "forgetful")
            await client.subscribe("clean/t", 1)
            await client.disconnect()
            client = Paho(broker, version=version, client_id="forgetful", clean=True)
            assert not (await client.connect(clean_start=True)).session_present
            await client.subscribe("clean/end", 1)
            await client.publish("clean/t", b"old subscription", 1)
            await client.publish("clean/end", b"end", 1)
            assert [m.payload for m in await client.messages_until(b"end")] == [b"end"]


async def test_persistent_session_survives_a_broker_restart(tmp_path: Path) -> None:
    data = MemoryStoreData()
    with trio.fail_after(30):
        async with mqtt_broker(tmp_path, data) as broker:
            client, _ = await persistent_client(broker, 5, "survivor")
            await client.subscribe("restart/#", 1)
            await client.disconnect()
            publisher = Paho(broker, version=5)
            await publisher.connect()
            await publisher.publish("restart/a", b"kept 1", 1)
            await publisher.publish("restart/b", b"transient", 0)  # QoS 0: not persistent
            await publisher.publish("restart/c", b"kept 2", 1)
            await publisher.disconnect()
        async with mqtt_broker(tmp_path, data) as broker:
            client, present = await persistent_client(broker, 5, "survivor")
            assert present
            first, second = await client.message(), await client.message()
            assert [(m.topic, m.payload) for m in (first, second)] == [
                ("restart/a", b"kept 1"),
                ("restart/c", b"kept 2"),
            ]
            publisher = Paho(broker, version=5)
            await publisher.connect()
            await publisher.publish("restart/new", b"after restart", 1)
            assert (await client.message()).payload == b"after restart"  # still subscribed


@pytest.mark.parametrize("version", [4, 5])
async def test_session_takeover(tmp_path: Path, version: int) -> None:
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            first = Paho(broker, version=version, client_id="twin")
            await first.connect()
            second = Paho(broker, version=version, client_id="twin")
            assert (await second.connect()).reason_code == 0
            rc = await first.wait_gone()
            if version == 5:
                assert rc.value == 0x8E  # session taken over
            await second.subscribe("twin/t", 1)
            await second.publish("twin/t", b"mine now", 1)
            assert (await second.message()).payload == b"mine now"


async def test_unacked_message_is_redelivered_with_dup_and_its_packet_id(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            raw = await RawClient.open(broker)
            await raw.send(
                Connect("dupper", 4, clean_start=False, username="guest", password=b"guest")
            )
            assert await raw.receive() == ConnAck()
            await raw.send(Subscribe(1, [Subscription("dup/t", SubscriptionOptions(1))]))
            assert await raw.receive() == SubAck(1, [1])
            publisher = Paho(broker)
            await publisher.connect()
            await publisher.publish("dup/t", b"needs ack", 1)
            first = await raw.receive()
            assert isinstance(first, Publish) and not first.dup
            await raw.aclose()  # gone without PUBACK

            raw = await RawClient.open(broker)
            await raw.send(
                Connect("dupper", 4, clean_start=False, username="guest", password=b"guest")
            )
            assert await raw.receive() == ConnAck(session_present=True)
            again = await raw.receive()
            assert isinstance(again, Publish)
            assert (again.payload, again.dup, again.packet_id) == (
                b"needs ack",
                True,
                first.packet_id,
            )
            assert again.packet_id is not None  # QoS 1
            await raw.send(PubAck(again.packet_id))
            await publisher.publish("dup/t", b"next", 1)
            following = await raw.receive()
            assert isinstance(following, Publish)
            assert (following.payload, following.dup) == (b"next", False)
            await raw.aclose()


async def test_inbound_qos2_is_routed_exactly_once(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            subscriber = Paho(broker)
            await subscriber.connect()
            await subscriber.subscribe("q2/t", 1)  # paho hands QoS 2 messages over at PUBREL
            raw = await RawClient.open(broker)
            await raw.send(Connect("q2-publisher", 4, username="guest", password=b"guest"))
            assert await raw.receive() == ConnAck()
            await raw.send(Publish("q2/t", b"once", qos=2, packet_id=7))
            assert await raw.receive() == PubRec(7)
            await raw.send(Publish("q2/t", b"once", qos=2, packet_id=7, dup=True))  # a resend
            assert await raw.receive() == PubRec(7)
            await raw.send(PubRel(7))
            assert await raw.receive() == PubComp(7)
            await raw.send(Publish("q2/t", b"end"))
            assert [m.payload for m in await subscriber.messages_until(b"end")] == [b"once", b"end"]
            await raw.aclose()


async def test_shared_subscription_balances_between_members(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            members = [Paho(broker, version=5), Paho(broker, version=4)]
            for member in members:
                await member.connect()
                (granted,) = await member.subscribe("$share/workers/jobs/#", 1)
                assert granted.value == 1
            publisher = Paho(broker, version=5)
            await publisher.connect()
            sent = [f"job {n}".encode() for n in range(10)]
            for payload in sent:
                await publisher.publish("jobs/build", payload, 1)
            got: list[list[bytes | bytearray]] = [[], []]  # MQTTMessage.payload's type
            while sum(map(len, got)) < len(sent):
                for member, bucket in zip(members, got, strict=True):
                    while not member.messages.empty():
                        bucket.append(member.messages.get_nowait().payload)
                await trio.sleep(0.01)
            assert sorted(got[0] + got[1]) == sorted(sent)  # each message once
            assert got[0] and got[1]  # both members took a share


async def test_resuming_with_expiry_0_delivers_the_backlog_then_ends_the_session(
    tmp_path: Path,
) -> None:
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            client, _ = await persistent_client(broker, 5, "last-visit")
            await client.subscribe("visit/t", 1)
            await client.disconnect()
            publisher = Paho(broker, version=5)
            await publisher.connect()
            await publisher.publish("visit/t", b"waiting", 1)
            client = Paho(broker, version=5, client_id="last-visit")
            assert (await client.connect(clean_start=False)).session_present  # expiry now 0
            assert (await client.message()).payload == b"waiting"
            await client.disconnect()
            await publisher.publish("visit/t", b"nobody", 1)  # the session ends at disconnect
            client = Paho(broker, version=5, client_id="last-visit")
            assert not (await client.connect(clean_start=False)).session_present
            assert "mqtt-subscription-last-visit" not in broker.default_vhost.queues or (
                broker.default_vhost.queues["mqtt-subscription-last-visit"].message_count == 0
            )

"""Random packets and garbage from many clients: each ends only its own connection, and no
handler ever fails with an exception (which serve_tcp would log as an error)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import trio

from herald.plugins.mqtt.codec import (
    Connect,
    Packet,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    Subscribe,
    Subscription,
    SubscriptionOptions,
    Unsubscribe,
    encode_packet,
)
from tests.mqtt_e2e.helpers import LOGIN, Paho, RawClient, mqtt_broker, no_errors_logged

WORDS = ["a", "b", "+", "#", "$SYS", "", "$share", "g", "x.y"]


def random_filter(rng: random.Random) -> str:
    return "/".join(rng.choice(WORDS) for _ in range(rng.randint(1, 4))) or "a"


def random_packet(rng: random.Random, version: int) -> bytes:
    packet_id = rng.randint(1, 5)
    choice = rng.randrange(8)
    packet: Packet
    if choice == 0:
        topic = "/".join(
            rng.choice(["a", "b", "$SYS", "", "c.d"]) for _ in range(rng.randint(1, 3))
        )
        qos = rng.randint(0, 2)
        packet = Publish(
            topic or "a", b"p", qos, rng.random() < 0.3, False, packet_id if qos else None
        )
    elif choice == 1:
        options = SubscriptionOptions(
            rng.randint(0, 2), False, rng.random() < 0.5, rng.randint(0, 2)
        )
        packet = Subscribe(packet_id, [Subscription(random_filter(rng), options)])
    elif choice == 2:
        packet = Unsubscribe(packet_id, [random_filter(rng)])
    elif choice == 3:
        packet = PubAck(packet_id)
    elif choice == 4:
        packet = PubRec(packet_id)
    elif choice == 5:
        packet = PubRel(packet_id)
    elif choice == 6:
        packet = PubComp(packet_id)
    else:
        return rng.randbytes(rng.randint(1, 12))  # garbage
    try:
        return encode_packet(packet, version)
    except Exception:
        return b""  # a combination the encoder refuses (e.g. an invalid filter is fine, QoS not)


@pytest.mark.parametrize("version", [4, 5])
async def test_random_traffic_never_breaks_a_handler(
    tmp_path: Path, version: int, caplog: pytest.LogCaptureFixture
) -> None:
    rng = random.Random(version)
    with trio.fail_after(60):
        async with mqtt_broker(tmp_path) as broker:
            bystander = Paho(broker, version=5)
            await bystander.connect()
            await bystander.subscribe("a/#", 1)
            for n in range(40):
                raw = await RawClient.open(broker, version=version)
                await raw.send(Connect(f"fuzz-{n % 3}", version, clean_start=n % 2 == 0, **LOGIN))
                data = b"".join(random_packet(rng, version) for _ in range(rng.randint(1, 12)))
                await raw.send_bytes(data)
                await raw.stream.send_eof()
                await raw.until_closed()
                await raw.aclose()
            await bystander.publish("a/end", b"end", 1)
            assert (await bystander.messages_until(b"end"))[-1].payload == b"end"
    no_errors_logged(caplog)

"""Hostile connections at the live MQTT port, while real paho clients work beside them.

Each hostile connection (tests/socket_fuzz.py sends it and reads until the broker closes) must
be closed by the broker, with what fuzz_cases.py says it earned: a CONNACK refusal or MQTT 5
DISCONNECT with the right reason code, or a plain close (3.1.1, or before the version is
known). Meanwhile two paho clients (3.1.1 over TCP, 5.0 over WebSocket) publish QoS 1 messages
to themselves and must receive every one, in order; a persistent session's queue filled
before the attack, and a retained message, must still be whole afterwards; no hostile
connection may be left open; and no handler may crash (serve_tcp logs a handler's exception
as an ERROR record, and there must be none).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path

import pytest
import trio

from herald.core.broker import Broker
from tests.mqtt_e2e.fuzz_cases import (
    MAX_PACKET_SIZE,
    SETTINGS,
    Case,
    check,
    connect,
    hand_made,
    random_cases,
)
from tests.mqtt_e2e.helpers import Paho, PahoTransport, mqtt_broker, no_errors_logged, port
from tests.socket_fuzz import (
    Outcome,
    attack,
    websocket_frame,
    websocket_messages,
    websocket_upgrade,
)

ATTACK_TIMEOUT = 10.0  # far above every timeout a case waits for: still open is a failure
STORED = 30  # QoS 1 messages queued for an offline persistent session before the attack
BYSTANDER_MIN = 10  # messages each paho client exchanges at least (and on while attacks last)


async def run_attacks(broker_port: int, cases: Sequence[Case], parallel: int) -> list[Outcome]:
    outcomes: list[Outcome | None] = [None] * len(cases)
    limiter = trio.CapacityLimiter(parallel)

    async def one(index: int, case: Case) -> None:
        async with limiter:
            outcomes[index] = await attack(
                broker_port,
                case.chunks,
                pause=case.pause,
                timeout=ATTACK_TIMEOUT,
                half_close=case.half_close,
            )

    async with trio.open_nursery() as nursery:
        for index, case in enumerate(cases):
            nursery.start_soon(one, index, case)
    return [outcome for outcome in outcomes if outcome is not None]


class Bystander:
    """A paho client publishing QoS 1 messages to its own subscription."""

    def __init__(self, broker: Broker, version: int, transport: PahoTransport) -> None:
        self.client = Paho(broker, version=version, transport=transport)
        self.topic = f"calm/{version}"
        self.sent: list[bytes] = []

    async def start(self) -> None:
        await self.client.connect()
        await self.client.subscribe(self.topic, 1)

    async def exchange_one(self) -> None:
        body = b"bystander %d" % len(self.sent)
        await self.client.publish(self.topic, body, 1)  # waits for the PUBACK
        self.sent.append(body)

    async def received(self) -> list[bytes | bytearray]:  # MQTTMessage.payload's type
        bodies = []
        for _ in self.sent:
            bodies.append((await self.client.message()).payload)
        await self.client.disconnect()
        return bodies


async def fill_persistent_session(broker: Broker) -> None:
    keeper = Paho(broker, client_id="keeper", clean=False)
    await keeper.connect()
    await keeper.subscribe("keep/t", 1)
    await keeper.disconnect()
    filler = Paho(broker, version=5)
    await filler.connect()
    for number in range(STORED):
        await filler.publish("keep/t", b"%d" % number, 1)
    await filler.publish("keep/retained", b"retained", 1, retain=True)
    await filler.disconnect()


async def check_stored(broker: Broker) -> None:
    keeper = Paho(broker, client_id="keeper", clean=False)
    assert (await keeper.connect()).session_present
    bodies = [(await keeper.message()).payload for _ in range(STORED)]
    assert bodies == [b"%d" % number for number in range(STORED)]
    await keeper.subscribe("keep/retained", 1)
    retained = await keeper.message()
    assert (retained.payload, retained.retain) == (b"retained", True)
    await keeper.disconnect()


async def fuzz(tmp_path: Path, cases: Sequence[Case], parallel: int) -> None:
    """Attack with `cases` while two bystanders work; check outcomes, bystanders, the store."""
    async with mqtt_broker(tmp_path, settings=SETTINGS) as broker:
        await fill_persistent_session(broker)
        bystanders = [Bystander(broker, 4, "tcp"), Bystander(broker, 5, "websockets")]
        for bystander in bystanders:
            await bystander.start()
        results: list[list[Outcome]] = []

        async def attacks() -> None:
            results.append(await run_attacks(port(broker), cases, parallel))

        async def keep_talking(bystander: Bystander) -> None:
            while not results or len(bystander.sent) < BYSTANDER_MIN:
                await bystander.exchange_one()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(attacks)
            for bystander in bystanders:
                nursery.start_soon(keep_talking, bystander)
        (outcomes,) = results
        assert len(outcomes) == len(cases)
        for case, outcome in zip(cases, outcomes, strict=True):
            check(case, outcome)
        for bystander in bystanders:
            assert await bystander.received() == bystander.sent
        await check_stored(broker)
        with trio.fail_after(5):  # the last closes may still be settling
            while len(broker.connections):
                await trio.sleep(0.05)


@pytest.mark.parametrize("version", [4, 5])
async def test_hostile_connections_get_their_reason_codes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, version: int
) -> None:
    """Every hand-made case of one framing, all at once on one broker."""
    cases = hand_made(version, "solo")
    with trio.fail_after(ATTACK_TIMEOUT + 10):
        async with mqtt_broker(tmp_path, settings=SETTINGS) as broker:
            outcomes = await run_attacks(port(broker), cases, len(cases))
    failures = []
    for case, outcome in zip(cases, outcomes, strict=True):
        try:
            check(case, outcome)
        except AssertionError as exc:
            failures.append(f"{case.name}: {exc} (got {outcome})")
    assert failures == []
    no_errors_logged(caplog)


async def test_hostile_connections_leave_paho_clients_untouched(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Every hand-made case of both framings and random ones at once, next to bystanders."""
    tag = uuid.uuid4().hex[:6]
    cases = [*hand_made(4, tag), *hand_made(5, tag), *random_cases(seed=1, count=80)]
    with trio.fail_after(60):
        await fuzz(tmp_path, cases, parallel=16)
    no_errors_logged(caplog)


UPGRADE = websocket_upgrade("/mqtt", ["mqtt"])
WS_CASES = {  # each never answers the server's Close; herald must close the socket anyway
    "oversized message": ([UPGRADE, websocket_frame(b"x" * (2 * MAX_PACKET_SIZE + 1))], 1009),
    "oversized after CONNECT": (
        [
            UPGRADE,
            websocket_frame(connect(4, "ws-big")),
            websocket_frame(b"\0" * 3 * MAX_PACKET_SIZE),
        ],
        1009,
    ),
    "wrong path": ([websocket_upgrade("/nope", ["mqtt"])], None),
}


@pytest.mark.parametrize("name", WS_CASES)
async def test_websocket_client_that_never_answers_close_is_closed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, name: str
) -> None:
    chunks, close_code = WS_CASES[name]
    with trio.fail_after(ATTACK_TIMEOUT + 20):
        async with mqtt_broker(tmp_path, settings=SETTINGS) as broker:
            bystander = Bystander(broker, 5, "websockets")
            await bystander.start()
            outcome = await attack(
                port(broker, "ws"), chunks, timeout=ATTACK_TIMEOUT, handshake=b"\r\n\r\n"
            )
            assert outcome.closed, outcome
            head, messages = websocket_messages(outcome.received)
            if close_code is None:
                assert head.startswith(b"HTTP/1.1 404"), head
            else:
                assert head.startswith(b"HTTP/1.1 101"), head
                assert messages[-1][0] == 8, messages  # a Close frame...
                assert int.from_bytes(messages[-1][1][:2], "big") == close_code  # ...1009
            for _ in range(3):
                await bystander.exchange_one()
            assert await bystander.received() == bystander.sent
            with trio.fail_after(5):
                while len(broker.connections):
                    await trio.sleep(0.05)
    no_errors_logged(caplog)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(5))
async def test_thousands_of_random_hostile_connections(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, seed: int
) -> None:
    with trio.fail_after(600):
        await fuzz(tmp_path, random_cases(seed=100 + seed, count=1000), parallel=32)
    no_errors_logged(caplog)

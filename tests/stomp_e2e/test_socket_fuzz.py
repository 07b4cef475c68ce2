"""Hostile connections at the live STOMP port, while real stomp.py clients work beside them.

Each hostile connection (tests/socket_fuzz.py sends it and reads until the broker closes) must
be closed by the broker, and what it got back must be whole server frames: at most one ERROR,
last, with a `message` header. Hand-made cases name the ERROR they must get (or that they get
none: a timeout, a client that went away between frames); for random ones the sans-IO
codec, already proven byte for byte, is the oracle: bytes it refuses, stream end included,
must have earned an ERROR.
Meanwhile two stomp.py clients (TCP and WebSocket) publish persistent messages with receipts
and consume them: they must see every receipt and every message, in order; messages stored
before the attack must all still be there; afterwards no connection and no connection-owned
queue is left. No handler may crash: serve_tcp logs a handler's exception as an ERROR record,
and there must be none.
"""

from __future__ import annotations

import logging
import random
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from herald.core.broker import Broker
from herald.core.embedding import embedded
from herald.core.errors import RemoteProtocolError
from herald.plugins.stomp.codec import (
    NEED_DATA,
    SERVER_COMMANDS,
    ConnectionClosed,
    Frame,
    FrameReader,
    StompConnection,
    StompLimits,
)
from herald.plugins.stomp.handshake import negotiate_version
from tests.socket_fuzz import (
    Outcome,
    attack,
    dribble,
    hostile_inputs,
    mangle,
    websocket_messages,
)
from tests.stomp_e2e.fuzz_cases import (
    CONNECT,
    HAND_MADE,
    HANDSHAKE_TIMEOUT,
    KEEP,
    LIMITS,
    OPEN_FRAMES,
    SCRIPT,
    Case,
    connect,
    mutated,
)
from tests.stomp_e2e.helpers import Client, no_connections, port

ATTACK_TIMEOUT = 10.0  # far above every timeout a case waits for: still open is a failure
STORED = 30  # persistent messages in a durable queue before the attack
BYSTANDER_MIN = 10  # messages each stomp.py client exchanges at least
SETTINGS = [
    "stomp.host=127.0.0.1",
    "stomp.port=0",
    "stomp.ws_host=127.0.0.1",
    "stomp.ws_port=0",
    f"stomp.handshake_timeout={HANDSHAKE_TIMEOUT}",
    "stomp.close_timeout=3",  # the default: time for an attacker still sending to read its ERROR
    f"stomp.max_frame_size={LIMITS.max_frame_size}",
    f"stomp.max_headers={LIMITS.max_headers}",
    f"stomp.max_header_line={LIMITS.max_header_line}",
    "stomp.strict_host=true",  # an unknown virtual host is one more refusal to attack
    "store.backend=commitlog",  # the store whose record format bounds what a message may hold
    "commitlog.segment_size=1048576",
]


@asynccontextmanager
async def fuzz_broker(data_dir: Path) -> AsyncIterator[Broker]:
    """The STOMP plugin and the commit-log store, both found through their entry points."""
    async with embedded(plugins=["stomp"], settings=SETTINGS, data_dir=data_dir) as broker:
        yield broker


# -- what the broker answered ---------------------------------------------------------------


def server_frames(received: bytes) -> tuple[list[Frame], int]:
    """The frames the broker sent, and how many bytes were left over (none: it wrote whole
    frames). Frames after CONNECTED are read in the version it agreed."""
    reader = FrameReader(StompLimits(max_frame_size=64 * 1024 * 1024), SERVER_COMMANDS, "server")
    reader.feed(received)
    frames: list[Frame] = []
    version = "1.0"
    while (event := reader.next_event(version)) is not NEED_DATA:
        if isinstance(event, Frame):
            frames.append(event)
            if event.command == "CONNECTED":
                version = event.get("version", "1.0") or "1.0"
    return frames, reader.buffered


def codec_refuses(data: bytes, ended: bool = False) -> bool:
    """Whether the sans-IO codec finds a protocol error in `data`, read as the session would;
    `ended`: the client then ended its stream, so a frame it cut short is one too."""
    conn = StompConnection(limits=LIMITS)
    if data:
        conn.receive_data(data)
    if ended:
        conn.receive_data(b"")
    try:
        while (event := conn.next_event()) is not NEED_DATA:
            if type(event) is ConnectionClosed:
                return False
            if not isinstance(event, Frame):
                continue
            if event.command in ("CONNECT", "STOMP"):
                version = negotiate_version(event.get("accept-version"))
                if version is None:
                    return True  # Version mismatch
                conn.version = version
                conn.send(Frame("CONNECTED", (("version", version),)))
            elif event.command == "DISCONNECT":
                return False  # the session reads nothing after it
    except RemoteProtocolError:
        return True
    return False


def check(case: Case, outcome: Outcome) -> None:
    assert outcome.closed, f"{case.name}: the broker did not close the connection"
    received = outcome.received
    if case.websocket:
        head, messages = websocket_messages(received)
        assert head.startswith(b"HTTP/1.1 %d " % case.status), (case.name, head)
        received = b"".join(payload for opcode, payload in messages if opcode in (1, 2))
        closes = [payload for opcode, payload in messages if opcode == 8]
        if case.close_code is not None:
            assert [close[:2] for close in closes] == [case.close_code.to_bytes(2, "big")]
    frames, rest = server_frames(received)
    assert rest == 0, (case.name, outcome.received[-200:])
    commands = [frame.command for frame in frames]
    errors = [frame for frame in frames if frame.command == "ERROR"]
    assert commands.count("CONNECTED") <= 1 and "CONNECTED" not in commands[1:], commands
    assert len(errors) <= 1 and (not errors or frames[-1] is errors[0]), (case.name, commands)
    if errors:
        assert errors[0].get("message"), (case.name, errors[0])
    data = b"".join(case.chunks)
    expected = case.error
    if expected is None:
        assert not errors, (case.name, errors)
    elif expected == "":  # random: where the codec refuses the bytes, an ERROR is due
        if codec_refuses(data, ended=case.half_close):
            assert errors, (case.name, commands, data[-300:])
    else:
        assert errors, (case.name, commands)
        text = f"{errors[0].get('message')}\n{errors[0].body.decode(errors='replace')}"
        assert expected in text, (case.name, text)


# -- random cases ---------------------------------------------------------------------------


def random_cases(seed: int, count: int, dribbled: float = 0.0) -> list[Case]:
    """`count` damaged inputs at each stage of a connection, sent whole or in pieces (a share
    `dribbled` of them one byte at a time)."""
    rng = random.Random(seed)
    cases = []
    for number in range(count):
        version = rng.choice(["1.0", "1.1", "1.2"])
        opening = connect(version)
        stage = rng.randrange(4)
        script = opening + b"".join(SCRIPT[: rng.randrange(len(SCRIPT) + 1)])
        if stage == 0:  # the CONNECT frame damaged, or garbage instead of it
            data = next(hostile_inputs(rng, [opening], 1))
        elif stage == 1:  # an open connection: a damaged frame or garbage
            data = script + mangle(rng, rng.choice(OPEN_FRAMES))
        elif stage == 2:  # an open connection: a frame with hostile headers
            data = script + mutated(rng, rng.choice(OPEN_FRAMES))
        else:  # several of them in a row
            data = script + b"".join(mutated(rng, rng.choice(OPEN_FRAMES)) for _ in range(3))
        cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randrange(4))))
        chunks = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
        if stage and rng.random() < dribbled:  # after a whole CONNECT: no handshake timeout
            chunks = [opening, *dribble(data[len(opening) :])]
        cases.append(Case(f"random #{number} (seed {seed})", chunks, "", half_close=True))
    return cases


# -- the bystanders -------------------------------------------------------------------------


class Bystander:
    """A stomp.py client sending persistent messages with receipts to its own queue."""

    def __init__(self, client: Client, name: str) -> None:
        self.client = client
        self.queue = f"/queue/bystander-{name}"
        self.name = name
        self.sent: list[str] = []

    @classmethod
    async def start(cls, broker: Broker, name: str, websocket: bool) -> Bystander:
        client = await Client.connect(broker, websocket=websocket)
        bystander = cls(client, name)
        await client.call(client.conn.subscribe, bystander.queue, name, receipt=f"{name}-sub")
        await client.receipt(f"{name}-sub")
        return bystander

    async def exchange_one(self) -> None:
        body = f"{self.name} {len(self.sent)}"
        await self.client.send(self.queue, body, receipt=body, persistent="true")
        self.sent.append(body)

    async def keep_going(self, stop: trio.Event) -> None:
        while not stop.is_set() or len(self.sent) < BYSTANDER_MIN:
            await self.exchange_one()

    async def finish(self) -> None:
        frames = self.client.frames
        await self.client.wait(lambda: set(self.sent) <= set(frames.receipts))
        messages = await self.client.messages(len(self.sent))
        assert [message.body for message in messages] == self.sent
        assert frames.errors == [] and not frames.disconnected
        await self.client.disconnect("bye")


# -- the attack -----------------------------------------------------------------------------


async def run_attacks(broker: Broker, cases: Sequence[Case], parallel: int) -> list[Outcome]:
    outcomes: list[Outcome | None] = [None] * len(cases)
    limiter = trio.CapacityLimiter(parallel)
    ports = {False: port(broker, "tcp"), True: port(broker, "ws")}

    async def one(index: int, case: Case) -> None:
        async with limiter:
            outcomes[index] = await attack(
                ports[case.websocket],
                case.chunks,
                pause=case.pause,
                timeout=ATTACK_TIMEOUT,
                half_close=case.half_close,
                handshake=b"\r\n\r\n" if case.websocket else None,
            )

    async with trio.open_nursery() as nursery:
        for index, case in enumerate(cases):
            nursery.start_soon(one, index, case)
    return [outcome for outcome in outcomes if outcome is not None]


async def store_some(broker: Broker) -> None:
    client = await Client.connect(broker)
    for number in range(STORED):
        await client.send(f"/queue/{KEEP}", str(number), persistent="true")
    await client.disconnect("stored")
    await client.receipt("stored")


async def read_stored(broker: Broker) -> None:
    assert broker.default_vhost.queues[KEEP].message_count == STORED
    client = await Client.connect(broker)
    await client.subscribe(f"/queue/{KEEP}", "keep")
    messages = await client.messages(STORED)
    assert [message.body for message in messages] == [str(n) for n in range(STORED)]
    await client.disconnect("read")
    await client.receipt("read")


async def fuzz(tmp_path: Path, cases: Sequence[Case], parallel: int, limit: float) -> None:
    """Attack with `cases` while two stomp.py clients work; check everything afterwards."""
    with trio.fail_after(limit):
        async with fuzz_broker(tmp_path / "data") as broker:
            await store_some(broker)
            bystanders = [
                await Bystander.start(broker, "tcp", websocket=False),
                await Bystander.start(broker, "ws", websocket=True),
            ]
            stop = trio.Event()
            outcomes: list[Outcome] = []
            async with trio.open_nursery() as nursery:
                for bystander in bystanders:
                    nursery.start_soon(bystander.keep_going, stop)
                outcomes = await run_attacks(broker, cases, parallel)
                stop.set()
            assert len(outcomes) == len(cases)
            for case, outcome in zip(cases, outcomes, strict=True):
                check(case, outcome)
            for bystander in bystanders:
                await bystander.finish()
            await read_stored(broker)
            await no_connections(broker)
            owned = [name for name in broker.default_vhost.queues if name.startswith("amq.gen-")]
            assert owned == [], "queues of closed connections were left behind"


def no_errors_logged(caplog: pytest.LogCaptureFixture) -> None:
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], "\n".join(logging.Formatter().format(r) for r in errors)


async def test_each_hostile_connection_gets_its_error_and_is_closed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    await fuzz(tmp_path, HAND_MADE, parallel=16, limit=60)
    no_errors_logged(caplog)


async def test_random_hostile_connections_leave_stomp_py_clients_untouched(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    await fuzz(tmp_path, random_cases(seed=1, count=150), parallel=16, limit=60)
    no_errors_logged(caplog)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(2, 7))
async def test_thousands_of_random_hostile_connections(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, seed: int
) -> None:
    cases = [*HAND_MADE, *random_cases(seed=seed, count=4000, dribbled=0.05)]
    await fuzz(tmp_path, cases, parallel=32, limit=600)
    no_errors_logged(caplog)


def test_the_oracle_agrees_with_the_hand_made_cases() -> None:
    """The codec refuses exactly the hand-made inputs whose ERROR it is meant to produce."""
    for case in HAND_MADE:
        if case.codec:
            assert codec_refuses(b"".join(case.chunks), ended=case.half_close), case.name
    assert not codec_refuses(CONNECT + b"".join(SCRIPT))


async def stop_mid_attack(data_dir: Path, seed: int, after: float) -> None:
    """Stop the broker while hostile connections come and go and stomp.py sends."""
    async with fuzz_broker(data_dir) as broker:
        bystander = await Bystander.start(broker, "tcp", websocket=False)
        with trio.move_on_after(after):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(bystander.keep_going, trio.Event())
                await run_attacks(broker, random_cases(seed, count=400), parallel=16)
    frames = bystander.client.frames
    await bystander.client.wait(lambda: frames.disconnected)
    assert [error.headers["message"] for error in frames.errors] in (
        [],  # the socket closed before stomp.py read the ERROR
        ["Connection closed by the broker"],
    )


async def test_stopping_the_broker_mid_attack_crashes_no_handler(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Each connection gets its goodbye ERROR, or is found gone: no handler dies either way."""
    with trio.fail_after(60):
        for round in range(3):
            await stop_mid_attack(tmp_path / f"data-{round}", seed=7, after=0.1 + 0.2 * round)
    no_errors_logged(caplog)


@pytest.mark.slow
async def test_stopping_the_broker_mid_attack_again_and_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with trio.fail_after(600):
        for round in range(20):
            await stop_mid_attack(tmp_path / f"data-{round}", seed=round, after=0.05 * round)
    no_errors_logged(caplog)

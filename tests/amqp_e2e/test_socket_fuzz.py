"""Hostile connections at the live AMQP port, while a real pika client works next to them.

Each hostile connection (tests/socket_fuzz.py sends it and reads until the broker closes) must
be closed by the broker, and any connection.close it got must carry the protocol's code for
what it sent: exactly the expected one for the hand-made cases, one of the codes a peer can
cause for the random ones. Meanwhile a pika connection publishes persistent messages with
confirms and consumes them; it must see every one, in order, and messages stored before the
attack must all still be there. No handler may crash (no ERROR log records): serve_tcp logs a
handler's exception as an error, and the session logs its own bugs (541) as one.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Iterator, Sequence
from decimal import Decimal
from pathlib import Path

import attrs
import pika
import pytest
import trio
from pika.adapters.blocking_connection import BlockingChannel
from pika.spec import Basic
from pika.spec import BasicProperties as PikaProperties

from herald.plugins.amqp.codec import (
    PROTOCOL_HEADER,
    BasicProperties,
    Event,
    MethodFrame,
    Timestamp,
)
from herald.plugins.amqp.codec.constants import FrameType
from herald.plugins.amqp.codec.frames import frame
from herald.plugins.amqp.codec.methods import (
    BasicAck,
    BasicConsume,
    BasicDeliver,
    BasicGet,
    BasicPublish,
    BasicQos,
    ChannelClose,
    ChannelFlow,
    ChannelOpen,
    ConfirmSelect,
    ConnectionClose,
    ConnectionOpen,
    ConnectionStart,
    ConnectionStartOk,
    ConnectionTuneOk,
    ExchangeDeclare,
    QueueBind,
    QueueDeclare,
    QueueDelete,
    TxSelect,
)
from tests.amqp.helpers import ClientReader, body_frame, header_frame, method_frame
from tests.amqp_e2e.conftest import CLIENT_TIMEOUT, BrokerThread
from tests.socket_fuzz import Outcome, attack, dribble, hostile_inputs, mangle

HANDSHAKE_TIMEOUT = 1.0
HEARTBEAT = 1  # what the "then silence" cases negotiate: dropped after two silent intervals
ATTACK_TIMEOUT = 10.0  # well above both, so a connection left open is a failure, not a race
FRAME_MAX = 131072  # the plugin's default offer, which pipelined tune-oks may accept
STORED = 50  # persistent messages in a durable queue before the attack
BYSTANDER_MIN = 20  # messages the pika client exchanges at least (and on while attacks last)

# Connection-level codes a peer's bytes can cause (541 would be a herald bug; 320 is shutdown).
CONNECTION_CODES = {403, 501, 502, 503, 504, 505, 530, 540}
CHANNEL_CODES = {403, 404, 405, 406}


def handshake(heartbeat: int = 0, frame_max: int = FRAME_MAX) -> bytes:
    """A whole client handshake, pipelined: header, start-ok, tune-ok, open, channel 1."""
    return b"".join(
        (
            PROTOCOL_HEADER,
            method_frame(0, ConnectionStartOk({}, "PLAIN", b"\0guest\0guest", "en_US")),
            method_frame(0, ConnectionTuneOk(2047, frame_max, heartbeat)),
            method_frame(0, ConnectionOpen("/")),
            method_frame(1, ChannelOpen()),
        )
    )


def _publish(routing_key: str, body: bytes) -> bytes:
    return (
        method_frame(1, BasicPublish(routing_key=routing_key))
        + header_frame(1, len(body), b"\x00\x00")
        + body_frame(1, body)
    )


HANDSHAKE_FRAMES = [
    method_frame(0, ConnectionStartOk({"product": "fuzz"}, "PLAIN", b"\0guest\0guest", "en_US")),
    method_frame(0, ConnectionTuneOk(2047, FRAME_MAX, 0)),
    method_frame(0, ConnectionOpen("/")),
]
FULL_PROPERTIES = BasicProperties(
    content_type="text/plain",
    content_encoding="utf-8",
    headers={"h": 1, "n": {"x": [1, "two", 3.0]}, "t": Timestamp(0), "d": Decimal("1.5")},
    delivery_mode=2,
    priority=3,
    correlation_id="c",
    reply_to="fuzz-q",
    expiration="60000",
    message_id="m",
    timestamp=1,
    type="t",
    user_id="guest",
    app_id="a",
)
QUEUE_ARGUMENTS = {
    "x-message-ttl": 60000,
    "x-expires": 60000,
    "x-max-length": 10,
    "x-max-length-bytes": 10000,
    "x-overflow": "reject-publish",
    "x-dead-letter-exchange": "fuzz-x",
    "x-dead-letter-routing-key": "a.b",
    "x-max-priority": 5,
    "x-single-active-consumer": True,
    "x-queue-type": "classic",
}
OPEN_FRAMES = [
    method_frame(1, QueueDeclare(queue="fuzz-q", arguments={"x-max-length": 10})),
    method_frame(1, QueueDeclare(queue="fuzz-args", arguments=QUEUE_ARGUMENTS)),
    method_frame(
        1, ExchangeDeclare(exchange="fuzz-h", type="headers", arguments={"alternate-exchange": "x"})
    ),
    method_frame(
        1, QueueBind(queue="fuzz-args", exchange="fuzz-h", arguments={"x-match": "any", "h": 1})
    ),
    method_frame(1, BasicConsume(queue="fuzz-args", arguments={"x-priority": 3})),
    method_frame(1, BasicPublish(exchange="fuzz-h", mandatory=True))
    + header_frame(1, 3, FULL_PROPERTIES)
    + body_frame(1, b"abc"),
    method_frame(1, ExchangeDeclare(exchange="fuzz-x", type="topic")),
    method_frame(1, QueueBind(queue="fuzz-q", exchange="fuzz-x", routing_key="a.#")),
    method_frame(1, BasicQos(prefetch_count=5)),
    method_frame(1, BasicConsume(queue="fuzz-q", consumer_tag="fuzz")),
    method_frame(1, BasicGet(queue="fuzz-q")),
    method_frame(1, BasicAck(delivery_tag=1)),
    method_frame(1, ConfirmSelect()),
    method_frame(1, TxSelect()),
    method_frame(1, ChannelFlow(active=False)),
    method_frame(1, QueueDelete(queue="fuzz-q")),
    method_frame(2, ChannelOpen()),
    method_frame(1, ChannelClose(200, "bye", 0, 0)),
    method_frame(1, BasicPublish(routing_key="fuzz-q")),
    header_frame(1, 5, b"\x00\x00"),
    body_frame(1, b"hello"),
    _publish("fuzz-q", b"fuzz body"),
    frame(FrameType.HEARTBEAT, 0, b""),
]


@attrs.frozen
class Case:
    """One hostile connection and what the broker must answer it with."""

    name: str
    chunks: Sequence[bytes]
    code: int | None = None  # the connection.close reply code expected; None: no close frame
    answer: bytes | None = None  # the exact bytes expected instead of frames
    pause: float = 0.0
    half_close: bool = False


def _method_payload(key: int, rest: bytes = b"") -> bytes:
    return frame(FrameType.METHOD, 1, key.to_bytes(4, "big") + rest)


HAND_MADE = [
    Case(
        "http request instead of AMQP",
        [b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"],
        answer=PROTOCOL_HEADER,
    ),
    Case("AMQP 1.0 header", [b"AMQP\x00\x01\x00\x00"], answer=PROTOCOL_HEADER),
    Case("garbage after the protocol header", [PROTOCOL_HEADER + b"hello world, garbage!"], 501),
    Case("bad frame-end octet", [handshake() + method_frame(1, BasicQos())[:-1] + b"\x00"], 501),
    Case("huge frame-size prefix", [handshake() + b"\x01\x00\x01\xff\xff\xff\xff"], 501),
    Case(
        "start-ok over initial_frame_max", [PROTOCOL_HEADER + b"\x01\x00\x00\x00\x00\x40\x01"], 501
    ),
    Case(
        "body frame over the negotiated frame_max",
        [
            handshake(frame_max=4096)
            + method_frame(1, BasicPublish(routing_key="fuzz-q"))
            + header_frame(1, 5000, b"\x00\x00")
            + body_frame(1, b"x" * 5000)
        ],
        501,
    ),
    Case("unknown frame type", [handshake() + frame(7, 1, b"abc")], 501),
    Case("heartbeat with a payload", [handshake() + frame(FrameType.HEARTBEAT, 0, b"x")], 501),
    Case("method frame too short", [handshake() + frame(FrameType.METHOD, 1, b"\x00\x32")], 501),
    Case("unknown class and method", [handshake() + _method_payload((99 << 16) | 7)], 540),
    Case("unknown method of a known class", [handshake() + _method_payload((60 << 16) | 99)], 540),
    Case(
        "truncated method arguments", [handshake() + _method_payload((50 << 16) | 10, b"\x00")], 501
    ),
    Case(
        "unknown field-table value type",
        [
            handshake()
            + _method_payload((50 << 16) | 10, b"\x00\x00\x01q\x00\x00\x00\x00\x03\x01aZ")
        ],
        502,
    ),
    Case("server-only method", [handshake() + method_frame(1, BasicDeliver("t", 1))], 503),
    Case(
        "connection method on channel 1", [handshake() + method_frame(1, ConnectionOpen("/"))], 503
    ),
    Case("basic method on channel 0", [handshake() + method_frame(0, BasicQos())], 504),
    Case("channel frame before open", [PROTOCOL_HEADER + method_frame(1, ChannelOpen())], 505),
    Case("content header without a method", [handshake() + header_frame(1, 1, b"\x00\x00")], 505),
    Case("body without a header", [handshake() + body_frame(1, b"x")], 505),
    Case(
        "method in the middle of a content",
        [handshake() + method_frame(1, BasicPublish()) + method_frame(1, BasicQos())],
        505,
    ),
    Case("tune-ok below the minimum frame_max", [handshake(frame_max=1024)], 530),
    Case(
        "truncated frame, then EOF",
        [handshake() + method_frame(1, BasicQos())[:-3]],
        half_close=True,
    ),
]
STALLED = [  # closed by the handshake timeout or the heartbeat timeout, without a frame
    Case("truncated protocol header, then silence", [PROTOCOL_HEADER[:5]]),
    Case("truncated start-ok, then silence", [PROTOCOL_HEADER + HANDSHAKE_FRAMES[0][:-3]]),
    Case(
        "truncated frame after open, then silence",
        [handshake(heartbeat=HEARTBEAT) + method_frame(1, QueueDeclare(queue="fuzz-q"))[:-4]],
    ),
    Case(
        "slowloris handshake",
        dribble(PROTOCOL_HEADER + HANDSHAKE_FRAMES[0]),
        pause=HANDSHAKE_TIMEOUT / 20,  # the header is in on time, start-ok is not
    ),
]


def _frames_of(data: bytes) -> list[bytes]:
    """The frames of a well-formed byte string (a publish is three)."""
    frames = []
    while data:
        size = 8 + int.from_bytes(data[3:7], "big")
        frames.append(data[:size])
        data = data[size:]
    return frames


def reframed(rng: random.Random, data: bytes) -> bytes:
    """A frame whose payload is damaged inside a correct envelope (type, channel, size, end),
    so the damage reaches the method and property decoders and the session behind them."""
    frames = _frames_of(data)
    at = rng.randrange(len(frames))
    original = frames[at]
    payload = bytearray(original[7:-1])
    keep = 4 if original[0] == FrameType.METHOD else 0  # keep the class and method ids
    if len(payload) > keep and rng.random() < 0.8:
        for _ in range(rng.randint(1, 3)):
            payload[rng.randrange(keep, len(payload))] ^= 1 << rng.randrange(8)
    else:
        payload = payload[: rng.randrange(keep, len(payload) + 1)] + rng.randbytes(rng.randrange(4))
    frames[at] = frame(original[0], int.from_bytes(original[1:3], "big"), bytes(payload))
    return b"".join(frames)


def random_cases(seed: int, count: int) -> list[Case]:
    """`count` damaged inputs at each stage of a connection, sent whole or in pieces."""
    rng = random.Random(seed)
    cases = []
    for number in range(count):
        stage = rng.randrange(4)
        if stage == 0:  # the protocol header itself
            data = mangle(rng, PROTOCOL_HEADER + HANDSHAKE_FRAMES[0])
        elif stage == 1:  # the handshake
            data = PROTOCOL_HEADER + next(hostile_inputs(rng, HANDSHAKE_FRAMES, 1))
        elif stage == 2:  # an open connection: damaged frames and garbage
            data = handshake() + next(hostile_inputs(rng, OPEN_FRAMES, 1))
        else:  # an open connection: valid frames, then one decodable but wrong
            valid = b"".join(rng.choice(OPEN_FRAMES) for _ in range(rng.randint(0, 3)))
            data = handshake() + valid + reframed(rng, rng.choice(OPEN_FRAMES))
        cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randrange(4))))
        chunks = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
        cases.append(Case(f"random #{number} (seed {seed})", chunks, half_close=True))
    return cases


def server_frames(received: bytes) -> list[Event]:
    """What the broker sent, as frames (a half-read frame at the end is left out)."""
    return ClientReader().feed(received)


def check(case: Case, outcome: Outcome) -> None:
    assert outcome.closed, f"{case.name}: the broker did not close the connection"
    if case.answer is not None:
        assert outcome.received == case.answer, case.name
        return
    if outcome.received.startswith(b"AMQP"):  # a mangled header: answered with ours
        assert outcome.received == PROTOCOL_HEADER, case.name
        return
    methods = [e.method for e in server_frames(outcome.received) if isinstance(e, MethodFrame)]
    closes = [m for m in methods if isinstance(m, ConnectionClose)]
    codes = [m.reply_code for m in closes]
    channel_codes = [m.reply_code for m in methods if isinstance(m, ChannelClose)]
    if case.half_close:
        assert len(closes) <= 1 and set(codes) <= CONNECTION_CODES, (case.name, closes)
        assert set(channel_codes) <= CHANNEL_CODES, (case.name, methods)
    else:
        assert codes == ([] if case.code is None else [case.code]), (case.name, methods)
        if case.code is None and methods:  # dropped by a timeout, not refused
            assert isinstance(methods[0], ConnectionStart), (case.name, methods)


async def run_attacks(port: int, cases: Sequence[Case], parallel: int) -> list[Outcome]:
    outcomes: list[Outcome | None] = [None] * len(cases)
    limiter = trio.CapacityLimiter(parallel)

    async def one(index: int, case: Case) -> None:
        async with limiter:
            outcomes[index] = await attack(
                port,
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
    """A pika connection that keeps publishing (persistent, confirmed) and consuming."""

    def __init__(self, broker: BrokerThread) -> None:
        self.connection = broker.connect()
        self.channel = self.connection.channel()
        self.channel.confirm_delivery()
        self.queue = self.channel.queue_declare("", exclusive=True).method.queue
        self.sent: list[bytes] = []
        self.received: list[bytes] = []
        self.channel.basic_consume(self.queue, self._on_message)

    def _on_message(
        self,
        channel: BlockingChannel,
        method: Basic.Deliver,
        properties: PikaProperties,
        body: bytes,
    ) -> None:
        self.received.append(body)
        channel.basic_ack(method.delivery_tag)

    def exchange_one(self) -> None:
        body = b"bystander %d" % len(self.sent)
        # mandatory + confirms: raises if herald returns or nacks it
        self.channel.basic_publish(
            "", self.queue, body, pika.BasicProperties(delivery_mode=2), mandatory=True
        )
        self.sent.append(body)
        self.connection.process_data_events(time_limit=0)

    def drain(self) -> None:
        deadline = time.monotonic() + CLIENT_TIMEOUT
        while len(self.received) < len(self.sent) and time.monotonic() < deadline:
            self.connection.process_data_events(time_limit=0.05)
        self.connection.close()


def fuzz(broker: BrokerThread, cases: Sequence[Case], parallel: int) -> None:
    """Attack with `cases` while a bystander works; check the outcomes and the bystander."""
    setup = broker.connect()
    stored = setup.channel()
    stored.queue_declare("fuzz-stored", durable=True)
    for number in range(STORED):
        stored.basic_publish(
            "", "fuzz-stored", b"%d" % number, pika.BasicProperties(delivery_mode=2)
        )
    bystander = Bystander(broker)
    results: list[list[Outcome]] = []
    errors: list[BaseException] = []

    def attacks() -> None:
        try:
            results.append(trio.run(run_attacks, broker.port, cases, parallel))
        except BaseException as exc:  # reported below, in the test thread
            errors.append(exc)

    thread = threading.Thread(target=attacks, name="fuzz-attacks")
    thread.start()
    while thread.is_alive() or len(bystander.sent) < BYSTANDER_MIN:
        bystander.exchange_one()
    thread.join()
    bystander.drain()
    if errors:
        raise errors[0]
    (outcomes,) = results
    assert len(outcomes) == len(cases)
    for case, outcome in zip(cases, outcomes, strict=True):
        check(case, outcome)
    assert bystander.received == bystander.sent
    assert stored.queue_declare("fuzz-stored", passive=True).method.message_count == STORED
    bodies = [stored.basic_get("fuzz-stored", auto_ack=True)[2] for _ in range(STORED)]
    assert bodies == [b"%d" % number for number in range(STORED)]
    setup.close()


def fuzz_broker(data_dir: Path) -> BrokerThread:
    return BrokerThread(data_dir, settings=[f"amqp.handshake_timeout={HANDSHAKE_TIMEOUT}"])


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    with fuzz_broker(tmp_path_factory.mktemp("fuzz")) as running:
        yield running


def no_errors_logged(caplog: pytest.LogCaptureFixture) -> None:
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]


@pytest.mark.parametrize("case", HAND_MADE, ids=[case.name for case in HAND_MADE])
def test_hostile_connection_gets_its_code(
    shared_broker: BrokerThread, caplog: pytest.LogCaptureFixture, case: Case
) -> None:
    (outcome,) = trio.run(run_attacks, shared_broker.port, [case], 1)
    check(case, outcome)
    no_errors_logged(caplog)


def test_hostile_connections_leave_a_pika_client_untouched(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Every hand-made case, the stalled ones and random ones at once, next to a bystander."""
    caplog.set_level(logging.INFO, logger="herald.plugins.amqp")
    with fuzz_broker(tmp_path) as broker:
        fuzz(broker, [*HAND_MADE, *STALLED, *random_cases(seed=1, count=60)], parallel=16)
    no_errors_logged(caplog)
    # the broker thread's records do reach caplog, so "no ERROR" above means something
    assert any("amqp protocol error" in r.getMessage() for r in caplog.records)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(5))
def test_thousands_of_random_hostile_connections(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, seed: int
) -> None:
    with fuzz_broker(tmp_path) as broker:
        fuzz(broker, random_cases(seed=seed, count=1000), parallel=32)
    no_errors_logged(caplog)

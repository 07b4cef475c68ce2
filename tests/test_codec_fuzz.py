"""Mutation fuzzing of the AMQP, MQTT and STOMP server codecs (tests/codec_fuzz.py): the
default tier feeds each 3,000 inputs, `-m slow` a million each and prints the rate.

`HERALD_FUZZ_SEED` replays a run; a failure names the seed and the input.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from types import UnionType

import pytest

from herald.core.codec_kit import NEED_DATA, CodecConnection, ConnectionClosed
from herald.core.errors import RemoteProtocolError
from herald.plugins.amqp.codec import ConnectionState, Event
from herald.plugins.mqtt.codec import (
    Packet,
    Properties,
    PubAck,
    Publish,
    Subscribe,
    Subscription,
    SubscriptionOptions,
    Unsubscribe,
    encode_packet,
)
from herald.plugins.stomp.codec import Frame, Heartbeat
from tests.amqp.helpers import PROTOCOL_HEADER, server_in
from tests.amqp.test_golden import CLIENT_CASES
from tests.codec_fuzz import run_fuzz
from tests.mqtt.helpers import connect_bytes, connected
from tests.stomp.codec_helpers import opened

DEFAULT_INPUTS = 3_000
SLOW_INPUTS = 1_000_000
AMQP_CODES = {None, 501, 502, 503, 504, 505, 530, 540}


def fuzz_seed() -> int:
    return int(os.environ.get("HERALD_FUZZ_SEED") or random.randrange(2**31))


# -- AMQP ---------------------------------------------------------------------------------------
AMQP_OPEN = [case.wire for case in CLIENT_CASES if case.state is ConnectionState.OPEN]
AMQP_CORPUS = [*AMQP_OPEN, b"".join(AMQP_OPEN[:6]), PROTOCOL_HEADER]


def feed_then_end(conn: CodecConnection, pieces: list[bytes], events: type | UnionType) -> None:
    """Feed each piece (skipping empty ones: b"" ends the stream), taking the events as they
    come, then end the stream. Garbage must yield only `events`, then ConnectionClosed at the
    end, or raise RemoteProtocolError (which the fuzzer counts as a clean refusal)."""
    for piece in pieces:
        if piece:
            conn.receive_data(piece)
            while (event := conn.next_event()) is not NEED_DATA:
                assert isinstance(event, events) and not isinstance(event, ConnectionClosed), event
    conn.receive_data(b"")
    while (event := conn.next_event()) is not NEED_DATA:
        if isinstance(event, ConnectionClosed):
            return
        assert isinstance(event, events), event
    raise AssertionError("the end of the stream gave neither ConnectionClosed nor an error")


def amqp_check(pieces: list[bytes]) -> None:
    feed_then_end(server_in(ConnectionState.OPEN), pieces, Event)


def amqp_error(exc: BaseException) -> bool:
    return isinstance(exc, RemoteProtocolError) and exc.code in AMQP_CODES


# -- MQTT ---------------------------------------------------------------------------------------
def mqtt_corpus(version: int) -> list[bytes]:
    options = SubscriptionOptions(qos=1)
    packets: list[Packet] = [
        Publish("a/b", b"payload", qos=0),
        Publish("sensors/1", b"x" * 40, qos=1, packet_id=7),
        Publish("t", b"", qos=2, packet_id=9, retain=True),
        Subscribe(3, (Subscription("a/+", options), Subscription("#", options))),
        Unsubscribe(4, ("a/+",)),
        PubAck(7),
    ]
    if version == 5:
        props = Properties(content_type="text/plain", user_properties=(("k", "v"),))
        packets.append(Publish("p", b"5", qos=1, packet_id=11, properties=props))
    wire = [encode_packet(p, version) for p in packets]
    return [*wire, b"".join(wire), connect_bytes(version)]


MQTT_CORPUS = {version: mqtt_corpus(version) for version in (4, 5)}


def mqtt_check(version: int) -> Callable[[list[bytes]], None]:
    def check(pieces: list[bytes]) -> None:
        feed_then_end(connected(version), pieces, Packet)

    return check


def mqtt_error(exc: BaseException) -> bool:
    return isinstance(exc, RemoteProtocolError) and isinstance(exc.code, int)


# -- STOMP --------------------------------------------------------------------------------------
STOMP_CORPUS = [
    b"SEND\ndestination:/queue/a\ncontent-type:text/plain\n\nhello\x00",
    b"SEND\ndestination:/topic/t\ncontent-length:5\nreceipt:r1\n\nab\x00cd\x00",
    b"SUBSCRIBE\ndestination:/queue/a\nid:1\nack:client-individual\nprefetch-count:10\n\n\x00",
    b"ACK\nid:m-1\n\n\x00NACK\nid:m-2\n\n\x00",
    b"BEGIN\ntransaction:tx\n\n\x00COMMIT\ntransaction:tx\n\n\x00",
    b"UNSUBSCRIBE\nid:1\n\n\x00\n\r\n",
    b"SEND\ndestination:/queue/a\nx-escaped:a\\cb\\nc\\\\d\\re\n\n\x00",
    b"DISCONNECT\nreceipt:bye\n\n\x00",
]


def stomp_check(pieces: list[bytes]) -> None:
    feed_then_end(opened(), pieces, Frame | Heartbeat)


def stomp_error(exc: BaseException) -> bool:
    return isinstance(exc, RemoteProtocolError)


CODECS = {
    "amqp": (AMQP_CORPUS, amqp_check, amqp_error),
    "mqtt-3.1.1": (MQTT_CORPUS[4], mqtt_check(4), mqtt_error),
    "mqtt-5": (MQTT_CORPUS[5], mqtt_check(5), mqtt_error),
    "stomp": (STOMP_CORPUS, stomp_check, stomp_error),
}


def fuzz(name: str, inputs: int) -> str:
    corpus, check, is_error = CODECS[name]
    for data in corpus:  # the seeds themselves are accepted (or end in a protocol error)
        try:
            check([data])
        except BaseException as exc:
            assert is_error(exc), f"{name}: a corpus seed broke the property: {exc!r}"
    seed = fuzz_seed()
    report = run_fuzz(corpus, check, inputs, seed, is_error)
    return (
        f"{name}: seed {seed}, {report.inputs:,} inputs in {report.seconds:.1f} s"
        f" ({report.rate:,.0f}/s), {report.protocol_errors:,} protocol errors, no other outcome"
    )


@pytest.mark.parametrize("name", sorted(CODECS))
def test_mutated_inputs_yield_events_or_protocol_errors(name: str) -> None:
    print(fuzz(name, DEFAULT_INPUTS))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CODECS))
def test_a_million_mutated_inputs(name: str) -> None:
    print(fuzz(name, SLOW_INPUTS))

"""The hostile MQTT connections of test_socket_fuzz.py, and how to judge what the broker did.

Hand-made cases name what they must get back: the CONNACK code (if any) and, for MQTT 5, the
DISCONNECT reason code (if any); every case is built for 3.1.1 and for 5.0 framing. Random
cases damage valid packets at each stage of a connection (tests/socket_fuzz.py `mangle`,
`hostile_inputs`) and half-close; for them the sans-IO codec, already proven byte for byte,
is the oracle: the error it finds in the same bytes is the DISCONNECT code the broker must
send, unless the session ended the connection earlier for a reason of its own.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from typing import Any

import attrs

from herald.core.errors import LocalProtocolError, RemoteProtocolError
from herald.plugins.mqtt.codec import (
    NEED_DATA,
    ConnAck,
    Connect,
    ConnectionClosed,
    Disconnect,
    MQTTConnection,
    Packet,
    PacketReader,
    Properties,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    ReasonCode,
    Subscribe,
    Subscription,
    SubscriptionOptions,
    Unsubscribe,
    Will,
    encode_packet,
)
from herald.plugins.mqtt.codec.decode import connect_level
from tests.mqtt.helpers import frame, string
from tests.mqtt_e2e.helpers import LOGIN
from tests.socket_fuzz import Outcome, dribble, hostile_inputs, mangle

HANDSHAKE_TIMEOUT = 1.0
KEEPALIVE = 1  # what the "then silence" cases ask for: closed after 1.5 s
MAX_PACKET_SIZE = 4096
MAX_INFLIGHT = 8
TOPIC_ALIAS_MAXIMUM = 4
SETTINGS = (
    f"mqtt.handshake_timeout={HANDSHAKE_TIMEOUT}",
    f"mqtt.max_packet_size={MAX_PACKET_SIZE}",
    f"mqtt.max_inflight={MAX_INFLIGHT}",
    f"mqtt.topic_alias_maximum={TOPIC_ALIAS_MAXIMUM}",
    "mqtt.close_timeout=0.5",
)
R = ReasonCode

# DISCONNECT codes the session (not the codec) may end a hostile connection with: AUTH or a
# packet it does not expect (0x82), too many QoS 2 publishes awaiting PUBREL (0x93), and a
# later connection taking over the client id (0x8E: a bit flip can turn "fuzz-12" into
# "fuzz-13").
SESSION_CODES = {R.PROTOCOL_ERROR, R.RECEIVE_MAXIMUM_EXCEEDED, R.SESSION_TAKEN_OVER}


@attrs.frozen
class Case:
    """One hostile connection and what the broker must answer it with."""

    name: str
    version: int  # the framing the answer is read in
    chunks: Sequence[bytes]
    connack: int | None = None  # the CONNACK reason code expected (MQTT 5 numbering); None: none
    disconnect: int | None = None  # the DISCONNECT reason code expected (MQTT 5); None: none
    pause: float = 0.0
    half_close: bool = False
    random: bool = False  # judged by the codec oracle instead of `connack` / `disconnect`


def connect(version: int, client_id: str, **kwargs: Any) -> bytes:
    return encode_packet(attrs.evolve(Connect(client_id, version, **LOGIN), **kwargs), version)


def _raw_connect(version: int, client_id: bytes, flags: int = 0xC2) -> bytes:
    """A CONNECT written by hand (for what the encoder refuses: bad UTF-8, reserved flags)."""
    props = b"\x00" if version == 5 else b""
    body = string("MQTT") + bytes((version, flags)) + b"\x00\x3c" + props + string(client_id)
    return frame(0x10, body + string("guest") + string("guest"))


def _publish(
    version: int, topic: bytes, qos: int = 0, props: bytes = b"\x00", payload: bytes = b"payload"
) -> bytes:
    body = string(topic) + (b"\x00\x01" if qos else b"") + (props if version == 5 else b"")
    return frame(0x30 | qos << 1, body + payload)


def hand_made(version: int, tag: str) -> list[Case]:
    """The cases for one framing; `tag` keeps client ids apart between test runs."""
    v5 = version == 5
    ids = itertools.count()

    def new_id() -> str:  # one client id per case: no case takes over another's session
        return f"hand-{tag}-{version}-{next(ids)}"

    def hello(**kwargs: object) -> bytes:  # answered with CONNACK 0
        return connect(version, new_id(), **kwargs)

    def after_connect(name: str, data: bytes, code: int, **kwargs: Any) -> Case:
        """Connected, then `data`: MQTT 5 gets DISCONNECT `code`, 3.1.1 a plain close."""
        return Case(
            name,
            version,
            [hello() + data],
            R.SUCCESS,
            code if v5 else None,
            **kwargs,
        )

    cases = [
        # Before CONNECT: the version is unknown, so every failure is a plain close.
        Case("garbage", version, [b"this is not MQTT at all\r\n\r\n"]),
        Case("PINGREQ before CONNECT", version, [b"\xc0\x00"]),
        Case("PUBLISH before CONNECT", version, [_publish(version, b"a/b")]),
        Case("SUBSCRIBE before CONNECT", version, [b"\x82\x08\x00\x01\x00\x03a/b\x00"]),
        Case("remaining length 0xFF 0xFF 0xFF 0xFF", version, [b"\x10\xff\xff\xff\xff\x01"]),
        Case("CONNECT larger than the limit", version, [b"\x10\xff\xff\xff\x7f" + hello()[2:]]),
        Case("truncated CONNECT, then silence", version, [hello()[:-3]]),
        Case("truncated CONNECT, then EOF", version, [hello()[:-3]], half_close=True),
        Case(
            "slowloris CONNECT",
            version,
            dribble(hello()),
            pause=2 * HANDSHAKE_TIMEOUT / 30,  # all of it arrives only after the timeout
        ),
        # CONNECT itself: MQTT 5 gets a refusing CONNACK, 3.1.1 only where it has a code.
        Case(
            "CONNECT client id not UTF-8",
            version,
            [_raw_connect(version, b"bad\xff\xfeid")],
            R.MALFORMED_PACKET if v5 else None,
        ),
        Case(
            "CONNECT reserved flag",
            version,
            [_raw_connect(version, new_id().encode(), flags=0xC3)],
            R.MALFORMED_PACKET if v5 else None,
        ),
        Case(
            "CONNECT will topic with a wildcard",
            version,
            [hello(will=Will("a/b", b"w")).replace(b"\x00\x03a/b", b"\x00\x03a/#")],
            R.PROTOCOL_ERROR if v5 else None,
        ),
        Case(
            "CONNECT with a bad password",
            version,
            [hello(password=b"wrong")],
            R.BAD_USER_NAME_OR_PASSWORD,
        ),
        # After CONNACK: MQTT 5 gets DISCONNECT with the reason, 3.1.1 a plain close.
        after_connect("second CONNECT", hello(), R.PROTOCOL_ERROR),
        after_connect(
            "PUBLISH topic not UTF-8", _publish(version, b"a/\xc3\x28"), R.MALFORMED_PACKET
        ),
        after_connect("PUBLISH topic with a wildcard", _publish(version, b"a/+"), R.PROTOCOL_ERROR),
        after_connect("PUBLISH QoS 3", b"\x36\x05\x00\x01a\x00\x01", R.MALFORMED_PACKET),
        after_connect(
            "PUBLISH QoS 1 packet id 0",
            _publish(version, b"a", qos=1).replace(b"a\x00\x01", b"a\x00\x00"),
            R.PROTOCOL_ERROR,
        ),
        after_connect(
            "remaining length 0xFF 0xFF 0xFF 0xFF after CONNACK",
            b"\x30\xff\xff\xff\xff\x01",
            R.MALFORMED_PACKET,
        ),
        after_connect(
            "remaining length over the limit", b"\x30\xff\xff\xff\x7f", R.PACKET_TOO_LARGE
        ),
        after_connect(
            "PUBLISH over the limit",
            _publish(version, b"big", payload=b"x" * MAX_PACKET_SIZE),
            R.PACKET_TOO_LARGE,
        ),
        after_connect(
            "SUBSCRIBE reserved flags", b"\x80\x08\x00\x01\x00\x03a/b\x00", R.MALFORMED_PACKET
        ),
        after_connect(
            "SUBSCRIBE without filters",
            b"\x82\x03\x00\x01\x00" if v5 else b"\x82\x02\x00\x01",
            R.PROTOCOL_ERROR,
        ),
        after_connect("packet type 0", b"\x00\x00", R.MALFORMED_PACKET),
        after_connect("CONNACK from the client", b"\x20\x02\x00\x00", R.PROTOCOL_ERROR),
        after_connect(
            "QoS 2 publishes beyond the receive maximum",
            b"".join(
                encode_packet(Publish("fuzz/q2", b"x", 2, packet_id=n), version)
                for n in range(1, MAX_INFLIGHT + 2)
            ),
            R.RECEIVE_MAXIMUM_EXCEEDED,
        ),
        Case(  # the close must not turn into a reset that destroys the DISCONNECT unread
            "QoS 2 publishes beyond the receive maximum, still sending after the close",
            version,
            [
                hello()
                + b"".join(
                    encode_packet(Publish("fuzz/q2", b"x", 2, packet_id=n), version)
                    for n in range(1, MAX_INFLIGHT + 2)
                )
            ]
            + [b"\xc0\x00" * 100] * 3,
            R.SUCCESS,
            R.RECEIVE_MAXIMUM_EXCEEDED if v5 else None,
            pause=0.1,
        ),
        Case(
            "truncated packet after CONNACK, then silence",
            version,
            [hello(keepalive=KEEPALIVE) + _publish(version, b"a/b")[:-2]],
            R.SUCCESS,
            R.KEEP_ALIVE_TIMEOUT if v5 else None,
        ),
        Case(
            "truncated packet after CONNACK, then EOF",
            version,
            [hello() + _publish(version, b"a/b")[:-2]],
            R.SUCCESS,
            R.MALFORMED_PACKET if v5 else None,  # a packet cut by EOF is malformed
            half_close=True,
        ),
    ]
    if v5:
        alias = b"\x03\x23\x00"  # property 0x23 topic alias, then the alias (one more byte)
        cases += [
            after_connect(
                "topic alias 0", _publish(5, b"a", props=alias + b"\x00"), R.TOPIC_ALIAS_INVALID
            ),
            after_connect(
                "topic alias over the maximum",
                _publish(5, b"a", props=alias + bytes((TOPIC_ALIAS_MAXIMUM + 1,))),
                R.TOPIC_ALIAS_INVALID,
            ),
            after_connect(
                "topic alias never set", _publish(5, b"", props=alias + b"\x01"), R.PROTOCOL_ERROR
            ),
            after_connect("AUTH", b"\xf0\x00", R.PROTOCOL_ERROR),
            after_connect(
                "property not allowed in PUBLISH",
                _publish(5, b"a", props=b"\x05\x11\x00\x00\x00\x01"),  # session expiry
                R.MALFORMED_PACKET,  # section 2.2.2.2: an identifier not valid for the packet
            ),
            after_connect(
                "property length past the packet",
                _publish(5, b"a", props=b"\x7f"),
                R.MALFORMED_PACKET,
            ),
        ]
    else:
        cases += [
            Case(
                "empty client id without clean session",
                version,
                [connect(version, "", clean_start=False)],
                R.CLIENT_IDENTIFIER_NOT_VALID,
            ),
            after_connect("AUTH in 3.1.1", b"\xf0\x00", R.MALFORMED_PACKET),
        ]
    if version == 4:
        cases.append(
            Case(
                "unsupported protocol level",
                4,
                [b"\x10\x0d\x00\x04MQTT\x06\x02\x00\x3c\x00\x01x"],
                R.UNSUPPORTED_PROTOCOL_VERSION,
            )
        )
    return cases


# -- random cases ---------------------------------------------------------------------------


def _open_packets(version: int) -> list[bytes]:
    """Valid packets for an open connection (topics under fuzz/, away from the bystanders)."""
    props5 = Properties(user_properties=[("k", "v")], content_type="t", message_expiry_interval=60)
    packets: list[Packet] = [
        Publish("fuzz/a", b"hello", 0),
        Publish(
            "fuzz/b", b"hello", 1, packet_id=2, properties=props5 if version == 5 else Properties()
        ),
        Publish("fuzz/c", b"hello", 2, retain=True, packet_id=3),
        Subscribe(
            4, [Subscription("fuzz/#", SubscriptionOptions(2)), Subscription("$share/g/fuzz/+")]
        ),
        Unsubscribe(5, ["fuzz/#"]),
        PubAck(1),
        PubRec(1),
        PubRel(3),
        PubComp(1),
    ]
    if version == 5:
        packets.append(
            Publish("fuzz/alias", b"a", 1, packet_id=6, properties=Properties(topic_alias=1))
        )
    return [encode_packet(p, version) for p in packets] + [b"\xc0\x00"]


def random_cases(seed: int, count: int) -> list[Case]:
    """`count` damaged inputs at each stage of a connection, sent in pieces, then EOF."""
    rng = random.Random(seed)
    cases = []
    for number in range(count):
        version = rng.choice((4, 5))
        cid = f"fuzz-{seed}-{number}"
        will = Will("fuzz/will", b"gone", 1) if rng.random() < 0.3 else None
        hello = connect(version, cid, clean_start=rng.random() < 0.7, will=will)
        stage = rng.randrange(3)
        if stage == 0:  # the CONNECT itself
            data = mangle(rng, hello)
        elif stage == 1:  # an open connection: valid packets, then a damaged one or garbage
            data = hello + next(hostile_inputs(rng, _open_packets(version), 1))
        else:  # valid packets only, some repeated (receive maximum, DISCONNECT mid-stream)
            extra = [b"\xe0\x00"] if rng.random() < 0.1 else []
            pool = _open_packets(version) + extra
            data = hello + b"".join(rng.choice(pool) for _ in range(rng.randint(1, 20)))
        cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randrange(4))))
        chunks = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
        cases.append(
            Case(f"random #{number} (seed {seed})", version, chunks, half_close=True, random=True)
        )
    return cases


# -- judging the outcome --------------------------------------------------------------------


def server_packets(received: bytes, version: int) -> list[Packet]:
    """What the broker sent, decoded; every byte must belong to a whole packet."""
    reader = PacketReader()
    reader.receive_data(received)
    packets: list[Packet] = []
    while isinstance(packet := reader.next_packet(version), Packet):
        packets.append(packet)
    assert not reader.buffered, f"{reader.buffered} bytes of a partial packet at the end"
    return packets


@attrs.frozen
class Verdict:
    """What the codec makes of a hostile connection's bytes."""

    version: int  # the framing the broker answers in
    connected: bool  # CONNECT decoded (the broker may still refuse the login)
    error: int | None  # the codec's reason code, if it found the bytes broken
    stopped: bool  # a DISCONNECT came before any error: the broker reads no further


def codec_verdict(data: bytes) -> Verdict:
    """What the codec makes of `data` and then EOF (every random case half-closes)."""
    conn = MQTTConnection(max_packet_size=MAX_PACKET_SIZE)
    conn.receive_data(data)
    conn.receive_data(b"")
    level = None
    reader = PacketReader(MAX_PACKET_SIZE)
    reader.receive_data(data)
    try:
        first = reader.next_frame()
        if first is not None and first[0] >> 4 == 1:
            level = connect_level(reader.buffer, first[1], first[2])
    except LocalProtocolError:
        pass  # a broken fixed header: no level to answer in
    version = 5 if level == 5 else 4
    connected = False
    try:
        while (packet := conn.next_event()) is not NEED_DATA:
            if isinstance(packet, Connect):
                connected = True
                version = packet.protocol_level if packet.protocol_level == 5 else 4
                props = (
                    Properties(topic_alias_maximum=TOPIC_ALIAS_MAXIMUM)
                    if version == 5
                    else Properties()
                )
                conn.send(ConnAck(properties=props))
            elif isinstance(packet, Disconnect):
                return Verdict(version, connected, None, True)
            elif isinstance(packet, ConnectionClosed):
                break
    except RemoteProtocolError as exc:
        return Verdict(version, connected, exc.code, False)
    return Verdict(version, connected, None, False)


def check(case: Case, outcome: Outcome) -> None:
    assert outcome.closed, f"{case.name}: the broker did not close the connection"
    data = b"".join(case.chunks)
    verdict = codec_verdict(data) if case.random else None
    version = verdict.version if verdict is not None else case.version
    packets = server_packets(outcome.received, version)
    connacks = [p for p in packets if isinstance(p, ConnAck)]
    disconnects = [p for p in packets if isinstance(p, Disconnect)]
    assert len(connacks) <= 1 and packets[: len(connacks)] == connacks, (case.name, packets)
    assert len(disconnects) <= 1 and packets[len(packets) - len(disconnects) :] == disconnects, (
        case.name,
        packets,
    )
    if version != 5:
        assert not disconnects, (case.name, packets)
    if connacks and connacks[0].reason_code:
        assert packets == connacks, (case.name, packets)  # a refusal is the last word
    if verdict is None:
        assert [c.reason_code for c in connacks] == (
            [] if case.connack is None else [case.connack]
        ), (
            case.name,
            packets,
        )
        expected = [] if case.disconnect is None else [case.disconnect]
        assert [d.reason_code for d in disconnects] == expected, (case.name, packets)
        return
    _check_random(case, verdict, connacks, disconnects)


def _check_random(
    case: Case, verdict: Verdict, connacks: list[ConnAck], disconnects: list[Disconnect]
) -> None:
    what = (case.name, verdict, connacks, disconnects)
    if not verdict.connected:
        assert not disconnects, what
        if connacks:  # a CONNECT that failed to decode: refused with the codec's reason
            assert verdict.error is not None and connacks[0].reason_code >= 0x80, what
            if verdict.version == 5:
                assert connacks[0].reason_code in (verdict.error, R.UNSPECIFIED_ERROR), what
        return
    assert connacks, what  # a decodable CONNECT is always answered
    if connacks[0].reason_code:
        return  # login refused (a damaged user name or password): nothing else was read
    if disconnects:
        code = disconnects[0].reason_code
        assert code == verdict.error or code in SESSION_CODES, what
    elif verdict.version == 5 and verdict.error is not None:
        raise AssertionError(f"no DISCONNECT for a codec error: {what}")

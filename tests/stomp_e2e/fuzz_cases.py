"""The inputs of the STOMP socket fuzzer (test_socket_fuzz.py): hand-made hostile connections
with the answer each must get, valid frames to damage, and hostile header values.

Frames are written as raw bytes (`wire`): headers exactly as given, nothing escaped, so a case
can hold what no client library would send.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import attrs

from herald.plugins.stomp.codec import StompLimits
from tests.socket_fuzz import dribble, websocket_frame, websocket_upgrade

HANDSHAKE_TIMEOUT = 1.0
LIMITS = StompLimits(max_frame_size=65536, max_headers=64, max_header_line=2048)
KEEP = "keep-7f3a"  # the queue of stored messages; no hostile frame names it


def wire(command: str, *headers: str, body: bytes = b"") -> bytes:
    """A frame as raw bytes (surrogate escapes stand for non-UTF-8 bytes)."""
    head = "\n".join([command, *headers]).encode("utf-8", "surrogateescape")
    return head + b"\n\n" + body + b"\x00"


def connect(version: str | None = "1.2", *headers: str, login: str = "login:guest") -> bytes:
    """A CONNECT that logs in as guest; `version` None sends no accept-version (STOMP 1.0)."""
    offered = [f"accept-version:{version}"] if version else []
    return wire("CONNECT", *offered, "host:/", login, "passcode:guest", *headers)


CONNECT = connect()
CONNECT_11 = connect("1.1")
CONNECT_10 = connect(None)


@attrs.frozen
class Case:
    """One hostile connection and what the broker must answer."""

    name: str
    chunks: Sequence[bytes]
    error: str | None
    """Text the ERROR frame must hold (message header or body); None: no ERROR may come (a
    timeout, a client that went away); "": random input, judged by the codec oracle."""
    pause: float = 0.0
    half_close: bool = False
    codec: bool = False
    """The sans-IO codec itself refuses these bytes (checked against the oracle)."""
    websocket: bool = False
    """Sent to the Web-STOMP port; the first chunk is the HTTP request."""
    status: int = 101
    """The HTTP status a WebSocket case must get."""
    close_code: int | None = None
    """The WebSocket close code it must get, if it matters."""


def codec_case(name: str, data: bytes | Sequence[bytes], error: str) -> Case:
    chunks = [data] if isinstance(data, bytes) else data
    return Case(name, chunks, error, codec=True)


def frame_case(name: str, data: bytes, error: str) -> Case:
    return Case(name, [data], error)


def quiet_case(name: str, chunks: Sequence[bytes], pause: float = 0.0, eof: bool = False) -> Case:
    return Case(name, chunks, None, pause=pause, half_close=eof)


BIG = LIMITS.max_frame_size + 1
CUT = "middle of a frame"  # a frame cut by the end of the stream (core/codec_kit.py)
SEND = "SEND"
DEST = "destination:/queue/fq"

BEFORE_CONNECT = [
    codec_case("TLS ClientHello", bytes.fromhex("16030100a5010000a10303"), "unknown command"),
    codec_case("HTTP request", b"GET /ws HTTP/1.1\r\nHost: x\r\n\r\n", "unknown command"),
    codec_case("NUL bytes", b"\x00" * 8, "unknown command"),
    codec_case("CR without LF", b"\r\r", "CR between frames"),
    codec_case("SEND before CONNECT", wire(SEND, DEST, body=b"hi"), "a CONNECT or STOMP frame"),
    codec_case("DISCONNECT before CONNECT", wire("DISCONNECT"), "a CONNECT or STOMP frame first"),
    codec_case("CONNECTED from a client", wire("CONNECTED"), "may not send a CONNECTED frame"),
    codec_case(
        "CONNECT with an oversized header line",
        connect("1.2", "x-pad:" + "x" * LIMITS.max_header_line),
        f"header line exceeds the limit of {LIMITS.max_header_line} bytes (stomp.max_header_line)",
    ),
    codec_case(
        "CONNECT with too many headers",
        connect("1.2", *[f"h{i}:v" for i in range(LIMITS.max_headers)]),
        f"frame exceeds the limit of {LIMITS.max_headers} header lines (stomp.max_headers)",
    ),
    codec_case(
        "CONNECT with a content-length over the maximum",
        [connect("1.2", f"content-length:{BIG}")[:-1], b"x" * BIG],
        f"frame body of {BIG} bytes exceeds the limit of {LIMITS.max_frame_size} bytes"
        " (stomp.max_frame_size)",
    ),
    codec_case(
        "CONNECT with an endless body",
        [connect("1.2")[:-1], b"x" * BIG],
        f"frame exceeds the limit of {LIMITS.max_frame_size} bytes (stomp.max_frame_size)",
    ),
    codec_case("CONNECT headers not UTF-8", connect("1.2", "x:\udcff\udcfe"), "not valid UTF-8"),
    frame_case("no common version", connect("2.0"), "Version mismatch"),
    frame_case("malformed heart-beat", connect("1.2", "heart-beat:fast"), "Invalid header"),
    frame_case("wrong password", connect("1.2", login="login:nobody"), "Access refused"),
    frame_case("no login", wire("CONNECT", "accept-version:1.2", "host:/"), "Access refused"),
    frame_case(
        "unknown virtual host",
        wire("CONNECT", "accept-version:1.2", "host:nowhere", "login:guest", "passcode:guest"),
        "Bad CONNECT",
    ),
]

CODEC_AFTER_CONNECT = [
    codec_case("unknown command", CONNECT + b"FLY\n\n\x00", "unknown command"),
    codec_case("lowercase command", CONNECT + wire("send", DEST), "unknown command"),
    codec_case("a second CONNECT", CONNECT + CONNECT, "already connected"),
    codec_case("STOMP after CONNECT", CONNECT + wire("STOMP"), "already connected"),
    codec_case("MESSAGE from a client", CONNECT + wire("MESSAGE"), "may not send a MESSAGE"),
    codec_case("escape \\t in 1.2", CONNECT + wire(SEND, DEST, "x:a\\tb"), "undefined escape"),
    codec_case("lone backslash in 1.2", CONNECT + wire(SEND, DEST, "x:ab\\"), "lone backslash"),
    codec_case("escape \\r in 1.1", CONNECT_11 + wire(SEND, DEST, "x:a\\rb"), "sequence \\r"),
    codec_case("bad escape in a name", CONNECT_11 + wire(SEND, DEST, "a\\qb:c"), "undefined"),
    codec_case("bare CR in a 1.2 header", CONNECT + wire(SEND, DEST, "x:a\rb"), "bare CR"),
    codec_case("NUL in the headers", CONNECT + b"SEND\n" + DEST.encode() + b"\n\x00", "NUL in"),
    codec_case(
        "invalid content-length",
        CONNECT + wire(SEND, DEST, "content-length:ten"),
        "invalid content-length",
    ),
    codec_case(
        "body longer than its content-length",
        CONNECT + wire(SEND, DEST, "content-length:2", body=b"abcd"),
        "not followed by a NUL",
    ),
    codec_case(
        "content-length over the maximum",
        [CONNECT + wire(SEND, DEST, f"content-length:{BIG}")[:-1], b"y" * BIG],
        f"frame body of {BIG} bytes exceeds the limit of {LIMITS.max_frame_size} bytes"
        " (stomp.max_frame_size)",
    ),
    codec_case(
        "oversized body without content-length",
        [CONNECT + wire(SEND, DEST)[:-1], b"y" * BIG],
        f"frame exceeds the limit of {LIMITS.max_frame_size} bytes (stomp.max_frame_size)",
    ),
    codec_case(
        "too many headers",
        CONNECT + wire(SEND, DEST, *[f"h{i}:v" for i in range(LIMITS.max_headers)]),
        f"frame exceeds the limit of {LIMITS.max_headers} header lines (stomp.max_headers)",
    ),
    codec_case(
        "header line too long",
        CONNECT + wire(SEND, DEST, "x-pad:" + "x" * LIMITS.max_header_line),
        f"header line exceeds the limit of {LIMITS.max_header_line} bytes (stomp.max_header_line)",
    ),
    codec_case("header names not UTF-8", CONNECT + wire(SEND, DEST, "\udcff:x"), "not valid UTF"),
    codec_case(
        "binary body without content-length",
        CONNECT + wire(SEND, DEST, body=b"ab\x00cd"),
        "unknown command",
    ),
]


def _open(*frames: bytes, version: bytes = CONNECT) -> bytes:
    return version + b"".join(frames)


SUB = "SUBSCRIBE"
FRAME_ERRORS = [
    frame_case("SEND without destination", _open(wire(SEND, "receipt:r")), "Missing destination"),
    frame_case("SUBSCRIBE without destination", _open(wire(SUB, "id:1")), "Missing destination"),
    frame_case("SUBSCRIBE without id", _open(wire(SUB, DEST)), "Missing header"),
    frame_case("UNSUBSCRIBE without id", _open(wire("UNSUBSCRIBE", DEST)), "Missing header"),
    frame_case("ACK without id", _open(wire("ACK", "subscription:1")), "Missing header"),
    frame_case("NACK without id", _open(wire("NACK")), "Missing header"),
    frame_case(
        "1.1 ACK without message-id",
        _open(wire("ACK", "subscription:1"), version=CONNECT_11),
        "Missing header",
    ),
    frame_case(
        "1.0 UNSUBSCRIBE without id or destination",
        _open(wire("UNSUBSCRIBE"), version=CONNECT_10),
        "Missing destination or id",
    ),
    frame_case("BEGIN without transaction", _open(wire("BEGIN")), "Missing transaction"),
    frame_case("COMMIT without transaction", _open(wire("COMMIT")), "Missing transaction"),
    frame_case("ABORT without transaction", _open(wire("ABORT")), "Missing transaction"),
    frame_case(
        "unknown destination type", _open(wire(SEND, "destination:/x/y")), "Unknown destination"
    ),
    frame_case("empty queue name", _open(wire(SEND, "destination:/queue/")), "Invalid dest"),
    frame_case("SEND to a temp queue", _open(wire(SEND, "destination:/temp-queue/t")), "Invalid"),
    frame_case(
        "SUBSCRIBE to a missing /amq/queue/",
        _open(wire(SUB, "id:1", "destination:/amq/queue/missing", "receipt:r-7")),
        "Not found",
    ),
    frame_case(
        "a subscription id used twice",
        _open(wire(SUB, "id:1", DEST), wire(SUB, "id:1", "destination:/queue/fq2")),
        "Duplicated subscription identifier",
    ),
    frame_case("UNSUBSCRIBE unknown", _open(wire("UNSUBSCRIBE", "id:9")), "No subscription found"),
    frame_case("ACK of an unknown message", _open(wire("ACK", "id:nope")), "Message not found"),
    frame_case(
        "COMMIT of an unknown transaction",
        _open(wire("COMMIT", "transaction:t9")),
        "Bad transaction",
    ),
    frame_case(
        "BEGIN twice",
        _open(wire("BEGIN", "transaction:t"), wire("BEGIN", "transaction:t")),
        "Bad transaction",
    ),
    frame_case(
        "seventeen transactions",
        _open(*[wire("BEGIN", f"transaction:t{n}") for n in range(17)]),
        "Transaction limit exceeded",
    ),
    frame_case("ack mode unknown", _open(wire(SUB, "id:1", DEST, "ack:never")), "Invalid header"),
    frame_case(
        "negative prefetch-count",
        _open(wire(SUB, "id:1", DEST, "prefetch-count:-1")),
        "Invalid header",
    ),
    frame_case("durable: maybe", _open(wire(SEND, DEST, "durable:maybe")), "Invalid header"),
    frame_case(
        "x-max-length not a number",
        _open(wire(SEND, DEST, "x-max-length:many")),
        "Invalid header",
    ),
    frame_case(
        "priority beyond an octet",
        _open(wire(SEND, "destination:/queue/fq-p", "persistent:true", "priority:99999999999")),
        "Invalid header",
    ),
    frame_case(
        "expiration beyond 2^32-1 ms",
        _open(wire(SEND, "destination:/queue/fq-p", "persistent:true", "expiration:" + "9" * 25)),
        "Invalid header",
    ),
    frame_case(
        "x-max-priority beyond 255",
        _open(wire(SEND, "destination:/queue/fq-prio", "x-max-priority:1000")),
        "Precondition failed",
    ),
    frame_case(
        "a queue redeclared differently",
        _open(
            wire(SEND, "destination:/queue/fq-d", "durable:true"),
            wire(SEND, "destination:/queue/fq-d", "durable:false"),
        ),
        "Precondition failed",
    ),
]

QUIET = [
    quiet_case("slowloris CONNECT", dribble(CONNECT), pause=HANDSHAKE_TIMEOUT / 4),
    quiet_case("heart-beats only, never CONNECT", [b"\n"] * 40, pause=HANDSHAKE_TIMEOUT / 8),
    quiet_case("truncated CONNECT, then silence", [CONNECT[:-5]]),
    Case("truncated CONNECT, then EOF", [CONNECT[:-5]], CUT, codec=True, half_close=True),
    quiet_case("a command prefix, then silence", [b"SUBSCR"]),
    quiet_case("connect and EOF", [], eof=True),
    quiet_case("silent past the heart-beat it promised", [connect("1.2", "heart-beat:1000,0")]),
    Case(
        "truncated SEND, then EOF",
        [CONNECT + wire(SEND, DEST)[:-3]],
        CUT,
        codec=True,
        half_close=True,
    ),
    quiet_case("frames after DISCONNECT", [CONNECT + wire("DISCONNECT", "receipt:b") + b"FLY\n"]),
    quiet_case(
        "1.0 takes backslashes literally",
        [CONNECT_10 + wire(SEND, DEST, "x:a\\tb", "receipt:r") + wire("DISCONNECT")],
    ),
]


def ws_case(
    name: str,
    chunks: Sequence[bytes],
    error: str | None = None,
    status: int = 101,
    close_code: int | None = None,
) -> Case:
    return Case(name, chunks, error, websocket=True, status=status, close_code=close_code)


UPGRADE = websocket_upgrade("/ws", ["v12.stomp"])
WS = websocket_frame
WEBSOCKET = [
    ws_case("WebSocket: not HTTP", [b"\x16\x03\x01garbage\r\n\r\n"], status=400),
    ws_case("WebSocket: GET without upgrade", [b"GET /ws HTTP/1.1\r\nHost: x\r\n\r\n"], status=400),
    ws_case("WebSocket: wrong path", [UPGRADE.replace(b"/ws", b"/no")], status=404),
    ws_case("WebSocket: unknown command", [UPGRADE, WS(b"FLY\n\n\x00")], "unknown command"),
    ws_case("WebSocket: SEND before CONNECT", [UPGRADE, WS(wire(SEND, DEST))], "CONNECT or STOMP"),
    ws_case(
        "WebSocket: SEND without destination",
        [UPGRADE, WS(CONNECT), WS(wire(SEND, "receipt:r"))],
        "Missing destination",
    ),
    ws_case(
        "WebSocket: a bad escape in a frame split over messages",
        [UPGRADE, WS(CONNECT + b"SEND\ndesti"), WS(b"nation:/queue/fq\nx:\\t\n\n\x00")],
        "undefined escape",
    ),
    ws_case(
        "WebSocket: a frame over the maximum size",
        [UPGRADE, WS(CONNECT), WS(wire(SEND, DEST, body=b"x" * BIG))],
        f"exceeds the limit of {LIMITS.max_frame_size} bytes (stomp.max_frame_size)",
    ),
    ws_case(
        "WebSocket: a message over the WebSocket limit",
        [UPGRADE, WS(CONNECT), WS(b"x" * (2 * LIMITS.max_frame_size + 1))],
        close_code=1009,
    ),
    ws_case("WebSocket: text not UTF-8", [UPGRADE, WS(b"\xff\xfe", opcode=1)]),
    ws_case("WebSocket: upgrade, then silence", [UPGRADE]),
]

HAND_MADE = [*BEFORE_CONNECT, *CODEC_AFTER_CONNECT, *FRAME_ERRORS, *QUIET, *WEBSOCKET]

# -- material for random cases ----------------------------------------------------------------

SCRIPT = [
    wire(SUB, "id:s1", DEST, "ack:client-individual", "prefetch-count:5", "receipt:r1"),
    wire(SEND, DEST, "receipt:s1", body=b"hello"),
    wire(
        SEND,
        "destination:/queue/fq-args",
        "persistent:true",
        "priority:3",
        "expiration:60000",
        "x-max-length:10",
        "x-overflow:reject-publish",
        "x-dead-letter-exchange:amq.fanout",
        "content-type:text/plain",
        "content-length:3",
        body=b"a\x00b",
    ),
    wire(SUB, "id:s2", "destination:/topic/ft.#", "ack:client"),
    wire(SEND, "destination:/topic/ft.a", "reply-to:/temp-queue/t", body=b"ask"),
    wire(SEND, "destination:/exchange/amq.fanout/k", "x-custom:\\c\\n"),
    wire(SUB, "id:s3", "destination:/topic/fd", "durable:true", "auto-delete:false"),
    wire(SUB, "id:s4", "destination:/exchange/amq.direct/k", "x-priority:2"),
    b"\n",
    wire("BEGIN", "transaction:tx1"),
    wire(SEND, DEST, "transaction:tx1", body=b"in tx"),
    wire("COMMIT", "transaction:tx1", "receipt:c1"),
    wire("UNSUBSCRIBE", "id:s2"),
]
"""Frames that all succeed in this order, on any version: a random case sends a prefix of
them before its hostile frame, so the damage meets a session with state."""
OPEN_FRAMES = [
    *SCRIPT,
    wire("ACK", "id:session-x@@1"),
    wire("NACK", "id:session-x@@1", "requeue:false"),
    wire("ABORT", "transaction:tx1"),
    wire("DISCONNECT", "receipt:bye"),
]
"""What a hostile frame is made from."""

HEADER_NAMES = [
    "destination",
    "id",
    "ack",
    "receipt",
    "transaction",
    "prefetch-count",
    "persistent",
    "priority",
    "expiration",
    "durable",
    "auto-delete",
    "exclusive",
    "x-queue-name",
    "x-max-length",
    "x-max-length-bytes",
    "x-message-ttl",
    "x-expires",
    "x-max-priority",
    "x-overflow",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-single-active-consumer",
    "x-queue-type",
    "x-delivery-limit",
    "x-priority",
    "reply-to",
    "requeue",
    "message-id",
    "amqp-message-id",
    "subscription",
    "content-length",
    "content-type",
    "heart-beat",
]
HOSTILE_VALUES = [
    "",
    " ",
    "-1",
    "0",
    "1e3",
    "99999999999999999999999",
    "4294967296",
    "256",
    "nan",
    "true",
    "maybe",
    "/",
    "/queue/",
    "/topic/",
    "/exchange/",
    "/exchange/amq.topic/a/b",
    "/exchange/nope/k",
    "/amq/queue/nope",
    "/temp-queue/t",
    "/temp-queue/",
    "/reply-queue/",
    "/reply-queue/nope",
    "%",
    "%zz",
    "%2F",
    "auto",
    "client",
    "client-individual",
    "drop-head",
    "reject-publish-dlx",
    "quorum",
    "amq.gen-xyz",
    "amq.topic",
    "é",
    "\\c",
    "x" * 300,
    "s1",
    "tx1",
]


def mutated(rng: random.Random, frame: bytes) -> bytes:
    """A valid frame with hostile headers: one dropped, replaced, added, or its command swapped."""
    head, _, rest = frame.partition(b"\n\n")
    if not rest:  # a heart-beat
        return frame
    command, *lines = head.decode().split("\n")
    choice = rng.randrange(4)
    if choice == 0 and lines:
        del lines[rng.randrange(len(lines))]
    elif choice == 1 and lines:
        at = rng.randrange(len(lines))
        lines[at] = lines[at].partition(":")[0] + ":" + rng.choice(HOSTILE_VALUES)
    elif choice == 2:
        lines.insert(0, f"{rng.choice(HEADER_NAMES)}:{rng.choice(HOSTILE_VALUES)}")
    else:
        command = rng.choice(["SEND", SUB, "UNSUBSCRIBE", "ACK", "NACK", "BEGIN", "COMMIT"])
    return "\n".join([command, *lines]).encode() + b"\n\n" + rest

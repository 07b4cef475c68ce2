"""One golden table of (event, exact bytes) drives both directions of the codec (h11 test_io).

Each client case is decoded by the server codec whole, byte by byte and with trailing bytes,
and our encoders must produce its bytes; each server case is sent by the server codec and must
produce exactly its bytes, which a client-side reader decodes back whole, byte by byte and
with trailing bytes. The bytes were produced by pika's encoder (an independent
implementation), then frozen here as literals.
"""

from __future__ import annotations

import decimal

import attrs
import pytest

from herald.plugins.amqp.codec import (
    NEED_DATA,
    BasicProperties,
    ConnectionState,
    Delivery,
    Event,
    Heartbeat,
    Message,
    MethodFrame,
    Timestamp,
)
from herald.plugins.amqp.codec.methods import (
    BasicAck,
    BasicDeliver,
    BasicNack,
    BasicPublish,
    ChannelOpen,
    ChannelOpenOk,
    ConnectionClose,
    ConnectionOpen,
    ConnectionOpenOk,
    ConnectionStart,
    ConnectionStartOk,
    ConnectionTune,
    ConnectionTuneOk,
    QueueDeclare,
)
from herald.plugins.amqp.codec.properties import encode_properties
from tests.amqp.helpers import (
    ClientReader,
    body_frame,
    feed,
    header_frame,
    method_frame,
    server_in,
)

H = bytes.fromhex
S = ConnectionState

START = H(
    "01 0000 0000007e"  # method frame, channel 0, 126 bytes
    " 000a 000a 00 09"  # connection.start, version 0-9
    " 00000059 07 70726f64756374 53 00000006 686572616c64"  # {"product": "herald",
    " 07 76657273696f6e 53 00000005 302e312e30"  # "version": "0.1.0",
    " 0c 6361706162696c6974696573 46 00000022"  # "capabilities": {
    " 12 7075626c69736865725f636f6e6669726d73 74 01"  # "publisher_confirms": True,
    " 0a 62617369632e6e61636b 74 01"  # "basic.nack": True}}
    " 0000000e 504c41494e20414d51504c41494e"  # mechanisms "PLAIN AMQPLAIN"
    " 00000005 656e5f5553 ce"  # locales "en_US", frame end
)
START_OK = H(
    "01 0000 00000054 000a 000b"
    " 00000030 07 70726f64756374 53 00000004 70696b61"  # {"product": "pika",
    " 0c 6361706162696c6974696573 46 0000000d 0a 62617369632e6e61636b 74 01"  # capabilities
    " 05 504c41494e"  # mechanism "PLAIN"
    " 0000000c 00 6775657374 00 6775657374"  # PLAIN response \0guest\0guest
    " 05 656e5f5553 ce"
)
TUNE = H("01 0000 0000000c 000a 001e 07ff 00020000 003c ce")
TUNE_OK = H("01 0000 0000000c 000a 001f 07ff 00020000 003c ce")
OPEN = H("01 0000 00000008 000a 0028 01 2f 00 00 ce")  # vhost "/", capabilities "", insist 0
OPEN_OK = H("01 0000 00000005 000a 0029 00 ce")
CHANNEL_OPEN = H("01 0001 00000005 0014 000a 00 ce")
CHANNEL_OPEN_OK = H("01 0001 00000008 0014 000b 00000000 ce")
QUEUE_DECLARE = H(
    "01 0001 000000a9 0032 000a 0000 02 7131"  # queue.declare ticket 0, queue "q1"
    " 02"  # bits: passive 0, durable 1, exclusive 0, auto-delete 0, nowait 0
    " 0000009b"  # arguments, 155 bytes
    " 0d 782d6d6573736167652d74746c 49 0000ea60"  # "x-message-ttl": I 60000
    " 16 782d646561642d6c65747465722d65786368616e6765 53 00000003 646c78"  # S "dlx"
    " 06 6e6573746564 46 0000001d"  # "nested": F {
    " 01 61 49 00000001"  # "a": I 1,
    " 01 62 41 0000000f 49 00000001 53 00000003 74776f 74 01"  # "b": A [1, "two", True]}
    " 05 7072696365 44 02 000004d2"  # "price": D 12.34
    " 02 6174 54 000000006553f100"  # "at": T 1700000000
    " 07 6e6f7468696e67 56"  # "nothing": V
    " 04 666c6167 74 00"  # "flag": t False
    " 03 626967 6c 0000010000000000"  # "big": l 2**40
    " 03 726177 78 00000002 00ff"  # "raw": x b"\x00\xff"
    " ce"
)
PUBLISH_RAW_PROPERTIES = H(
    "b8c0"  # content-type, headers, delivery-mode, priority, message-id, timestamp
    " 10 6170706c69636174696f6e2f6a736f6e"  # "application/json"
    " 00000008 01 68 53 00000001 76"  # {"h": "v"}
    " 02 05 03 6d2d31 000000006553f100"  # 2, 5, "m-1", 1700000000
)
PUBLISH = (
    H("01 0001 00000015 003c 0028 0000 09 616d712e746f706963 03 612e62 01 ce")  # mandatory
    + H("02 0001 00000039 003c 0000 000000000000001e")  # header: basic, weight 0, 30 bytes
    + PUBLISH_RAW_PROPERTIES
    + H("ce")
    + H("03 0001 00000010 30313233343536373839303132333435 ce")  # 16 bytes of body
    + H("03 0001 0000000e 3637383930313233343536373839 ce")  # the other 14
)
DELIVER = H(
    "01 0001 00000020 003c 003c 04 63746167 000000000000002a 01"  # "ctag", 42, redelivered
    " 09 616d712e746f706963 03 612e62 ce"  # "amq.topic", "a.b"
    " 02 0001 0000001a 003c 0000 0000000000000005"  # header, 5-byte body
    " 9000 0a 746578742f706c61696e 02 ce"  # content-type "text/plain", delivery-mode 2
    " 03 0001 00000005 68656c6c6f ce"  # "hello"
)
ACK_MULTIPLE = H("01 0001 0000000d 003c 0050 000000000000002a 01 ce")
NACK_REQUEUE = H("01 0001 0000000d 003c 0078 0000000000000007 02 ce")  # multiple 0, requeue 1
CLOSE = H(
    "01 0000 00000027 000a 0032 0140"  # connection.close 320
    " 1c 434f4e4e454354494f4e5f464f52434544202d2073687574646f776e"  # reply text
    " 0000 0000 ce"
)
HEARTBEAT = H("08 0000 00000000 ce")
TRAILING = H("08 0000 0000")  # the first 7 bytes of a heartbeat frame


@attrs.frozen
class Case:
    id: str
    event: Event
    wire: bytes
    state: ConnectionState  # where the server codec is when the event goes through
    after: ConnectionState | None = None  # the state it leads to, if it changes


PUBLISH_PROPERTIES = BasicProperties(
    content_type="application/json",
    headers={"h": "v"},
    delivery_mode=2,
    priority=5,
    message_id="m-1",
    timestamp=1700000000,
)
CLIENT_CASES = [
    Case(
        "start-ok",
        MethodFrame(
            0,
            ConnectionStartOk(
                {"product": "pika", "capabilities": {"basic.nack": True}},
                "PLAIN",
                b"\x00guest\x00guest",
                "en_US",
            ),
        ),
        START_OK,
        S.HANDSHAKE,
    ),
    Case(
        "tune-ok",
        MethodFrame(0, ConnectionTuneOk(2047, 131072, 60)),
        TUNE_OK,
        S.HANDSHAKE,
        S.TUNED,
    ),
    Case("open", MethodFrame(0, ConnectionOpen("/")), OPEN, S.TUNED, S.OPEN),
    Case("channel.open", MethodFrame(1, ChannelOpen()), CHANNEL_OPEN, S.OPEN),
    Case(
        "queue.declare",
        MethodFrame(
            1,
            QueueDeclare(
                queue="q1",
                durable=True,
                arguments={
                    "x-message-ttl": 60000,
                    "x-dead-letter-exchange": "dlx",
                    "nested": {"a": 1, "b": [1, "two", True]},
                    "price": decimal.Decimal("12.34"),
                    "at": Timestamp(1700000000),
                    "nothing": None,
                    "flag": False,
                    "big": 2**40,
                    "raw": b"\x00\xff",
                },
            ),
        ),
        QUEUE_DECLARE,
        S.OPEN,
    ),
    Case(
        "publish-2-body-frames",
        Message(
            1,
            BasicPublish(exchange="amq.topic", routing_key="a.b", mandatory=True),
            PUBLISH_PROPERTIES,
            b"012345678901234567890123456789",
            PUBLISH_RAW_PROPERTIES,
        ),
        PUBLISH,
        S.OPEN,
    ),
    Case("ack-multiple", MethodFrame(1, BasicAck(42, multiple=True)), ACK_MULTIPLE, S.OPEN),
    Case("nack-requeue", MethodFrame(1, BasicNack(7, False, True)), NACK_REQUEUE, S.OPEN),
    Case(
        "close",
        MethodFrame(0, ConnectionClose(320, "CONNECTION_FORCED - shutdown", 0, 0)),
        CLOSE,
        S.OPEN,
        S.CLOSING,
    ),
    Case("heartbeat", Heartbeat(), HEARTBEAT, S.OPEN),
]
SERVER_CASES = [
    Case(
        "start",
        MethodFrame(
            0,
            ConnectionStart(
                0,
                9,
                {
                    "product": "herald",
                    "version": "0.1.0",
                    "capabilities": {"publisher_confirms": True, "basic.nack": True},
                },
                b"PLAIN AMQPLAIN",
                b"en_US",
            ),
        ),
        START,
        S.HANDSHAKE,
    ),
    Case("tune", MethodFrame(0, ConnectionTune(2047, 131072, 60)), TUNE, S.HANDSHAKE),
    Case("open-ok", MethodFrame(0, ConnectionOpenOk()), OPEN_OK, S.OPEN),
    Case("channel.open-ok", MethodFrame(1, ChannelOpenOk()), CHANNEL_OPEN_OK, S.OPEN),
    Case(
        "deliver",
        Delivery(
            1,
            BasicDeliver("ctag", 42, True, "amq.topic", "a.b"),
            BasicProperties(content_type="text/plain", delivery_mode=2),
            b"hello",
        ),
        DELIVER,
        S.OPEN,
    ),
    Case("ack-confirm", MethodFrame(1, BasicAck(42, multiple=True)), ACK_MULTIPLE, S.OPEN),
    Case("nack-confirm", MethodFrame(1, BasicNack(7, False, True)), NACK_REQUEUE, S.OPEN),
    Case("heartbeat", Heartbeat(), HEARTBEAT, S.OPEN),
]


def ids(cases: list[Case]) -> list[str]:
    return [case.id for case in cases]


# -- client -> server: the server codec decodes, our encoders reproduce the bytes ------------


@pytest.mark.parametrize("case", CLIENT_CASES, ids=ids(CLIENT_CASES))
def test_client_case_decodes_whole(case: Case) -> None:
    conn = server_in(case.state)
    assert feed(conn, case.wire) == [case.event]
    assert conn.state is (case.after or case.state)


@pytest.mark.parametrize("case", CLIENT_CASES, ids=ids(CLIENT_CASES))
def test_client_case_decodes_byte_by_byte(case: Case) -> None:
    conn = server_in(case.state)
    for index in range(len(case.wire) - 1):
        assert feed(conn, case.wire[index : index + 1]) == []
    assert feed(conn, case.wire[-1:]) == [case.event]


@pytest.mark.parametrize("case", CLIENT_CASES, ids=ids(CLIENT_CASES))
def test_client_case_decodes_with_trailing_bytes(case: Case) -> None:
    conn = server_in(case.state)
    assert feed(conn, case.wire + TRAILING) == [case.event]
    assert conn.next_event() is NEED_DATA
    assert feed(conn, HEARTBEAT[len(TRAILING) :]) == [Heartbeat()]  # the trailing bytes were kept


@pytest.mark.parametrize("case", CLIENT_CASES, ids=ids(CLIENT_CASES))
def test_client_case_encodes_to_its_bytes(case: Case) -> None:
    event = case.event
    if isinstance(event, MethodFrame):
        assert method_frame(event.channel, event.method) == case.wire
    elif isinstance(event, Message):
        assert encode_properties(event.properties) == event.raw_properties
        body = event.body
        wire = (
            method_frame(event.channel, event.method)
            + header_frame(event.channel, len(body), event.properties)
            + body_frame(event.channel, body[:16])
            + body_frame(event.channel, body[16:])
        )
        assert wire == case.wire
    else:
        assert event == Heartbeat()
        assert case.wire == HEARTBEAT


# -- server -> client: the server codec encodes, a client-side reader decodes ----------------


@pytest.mark.parametrize("case", SERVER_CASES, ids=ids(SERVER_CASES))
def test_server_case_encodes_to_its_bytes(case: Case) -> None:
    conn = server_in(case.state)
    conn.send(case.event)
    assert conn.data_to_send() == case.wire
    assert conn.data_to_send() == b""


def test_delivery_with_raw_properties_sends_them_unchanged() -> None:
    (case,) = [case for case in SERVER_CASES if case.id == "deliver"]
    assert isinstance(case.event, Delivery)
    assert isinstance(case.event.properties, BasicProperties)
    raw = encode_properties(case.event.properties)
    conn = server_in(S.OPEN)
    conn.send(attrs.evolve(case.event, properties=raw))
    assert conn.data_to_send() == case.wire


@pytest.mark.parametrize("case", SERVER_CASES, ids=ids(SERVER_CASES))
def test_server_case_decodes_whole(case: Case) -> None:
    assert ClientReader().feed(case.wire) == [case.event]


@pytest.mark.parametrize("case", SERVER_CASES, ids=ids(SERVER_CASES))
def test_server_case_decodes_byte_by_byte(case: Case) -> None:
    reader = ClientReader()
    events: list[Event] = []
    for index in range(len(case.wire)):
        events += reader.feed(case.wire[index : index + 1])
        assert events == ([] if index < len(case.wire) - 1 else [case.event])


@pytest.mark.parametrize("case", SERVER_CASES, ids=ids(SERVER_CASES))
def test_server_case_decodes_with_trailing_bytes(case: Case) -> None:
    reader = ClientReader()
    assert reader.feed(case.wire + TRAILING) == [case.event]
    assert reader.feed(HEARTBEAT[len(TRAILING) :]) == [Heartbeat()]

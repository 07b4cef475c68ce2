"""The codec's per-message shortcuts give exactly what the general paths give: `send_deliver`
against `send(Delivery(...))`, and whole buffered publishes against frame-by-frame input."""

from __future__ import annotations

import pytest

from herald.core.errors import LocalProtocolError
from herald.plugins.amqp.codec import BasicProperties, ConnectionState, Delivery, Message
from herald.plugins.amqp.codec.methods import BasicDeliver, BasicPublish
from tests.amqp.helpers import body_frame, header_frame, messages, method_frame, server_in

S = ConnectionState
RAW = b"\x90\x00\x0atext/plain\x02"  # content-type, delivery-mode 2

DELIVERIES = [
    (1, "amq.ctag-a", 1, False, "", "q", RAW, b"x" * 100),
    (1, "amq.ctag-a", 2, True, "", "q", RAW, b""),
    (2, "amq.ctag-b", 3, False, "ex", "rk", b"", b"y"),
    (1, "amq.ctag-a", 4, False, "ex", "rk", RAW, b"z" * 4088),
    (1, "amq.ctag-a", 5, False, "ex", "rk", RAW, b"z" * 4089),  # two body frames
    (1, "é" * 10, 2**64 - 1, False, "ëx", "r" * 255, RAW, b"w"),
]


@pytest.mark.parametrize("rounds", [1, 2, 3])
def test_send_deliver_writes_the_same_bytes_as_a_delivery_event(rounds: int) -> None:
    fast, general = server_in(S.OPEN, frame_max=4096), server_in(S.OPEN, frame_max=4096)
    for channel, tag, dtag, redelivered, exchange, key, raw, body in DELIVERIES * rounds:
        fast.send_deliver(channel, tag, dtag, redelivered, exchange, key, raw, body)
        method = BasicDeliver(tag, dtag, redelivered, exchange, key)
        general.send(Delivery(channel, method, raw, body))
        assert fast.data_to_send() == general.data_to_send()


@pytest.mark.parametrize(
    "state, args",
    [
        (S.OPEN, (1, "c" * 256, 1, False, "", "q", RAW, b"")),
        (S.OPEN, (1, "c", 1, False, "e" * 256, "q", RAW, b"")),
        (S.OPEN, (1, "c", -1, False, "", "q", RAW, b"")),
        (S.OPEN, (1, "c", 2**64, False, "", "q", RAW, b"")),
        (S.OPEN, (0, "c", 1, False, "", "q", RAW, b"")),
        (S.TUNED, (1, "c", 1, False, "", "q", RAW, b"")),
    ],
)
def test_send_deliver_refuses_what_send_refuses(state: ConnectionState, args: tuple) -> None:
    conn = server_in(state)
    if state is S.OPEN:
        conn.send_deliver(1, "c", 1, False, "", "q", RAW, b"")  # the caches are warm
        conn.data_to_send()
    with pytest.raises(LocalProtocolError):
        conn.send_deliver(*args)
    assert conn.data_to_send() == b""


PUBLISH = BasicPublish(exchange="ex", routing_key="rk")
OTHER = BasicPublish(exchange="ex", routing_key="other", mandatory=True)
PROPS = BasicProperties(content_type="text/plain", delivery_mode=2)


def _publishes() -> bytes:
    return b"".join(
        (
            method_frame(1, PUBLISH) + header_frame(1, 3, PROPS) + body_frame(1, b"one"),
            method_frame(1, PUBLISH) + header_frame(1, 0, PROPS),
            method_frame(1, OTHER) + header_frame(1, 3, RAW) + body_frame(1, b"two"),
            method_frame(1, PUBLISH) + header_frame(1, 5, PROPS),
            body_frame(1, b"th") + body_frame(1, b"ree"),
            method_frame(1, PUBLISH) + header_frame(1, 4, PROPS) + body_frame(1, b"four"),
        )
    )


EXPECTED = [
    (PUBLISH, "text/plain", b"one"),
    (PUBLISH, "text/plain", b""),
    (OTHER, "text/plain", b"two"),
    (PUBLISH, "text/plain", b"three"),
    (PUBLISH, "text/plain", b"four"),
]


@pytest.mark.parametrize("chunk", [1, 7, 30, 10_000])
def test_publishes_decode_alike_whole_or_in_pieces(chunk: int) -> None:
    conn = server_in(S.OPEN)
    data = _publishes()
    events: list[Message] = []
    for start in range(0, len(data), chunk):
        events += messages(conn, data[start : start + chunk])
    assert [(m.method, m.properties.content_type, m.body) for m in events] == EXPECTED
    assert all(type(m) is Message and m.channel == 1 for m in events)

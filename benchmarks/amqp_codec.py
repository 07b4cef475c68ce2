"""AMQP codec micro-benchmark: decoding publishes and encoding deliveries, no sockets.

    python benchmarks/amqp_codec.py [--messages 50000] [--repeat 5]

Prints one JSON object; figures are medians of `repeat` runs in one process on one core.
- decode: basic.publish + content header (content-type, delivery-mode, a small headers table)
  + a 100-byte body, fed in 64 KiB chunks as a socket would deliver them; the rate is in
  messages/s and frames/s (3 frames per message) and includes building each `Message`;
- encode: `send(Delivery(...))` of basic.deliver with the raw properties a publish carried
  and a 100-byte body, `data_to_send()` once per 100 deliveries (one socket write).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time

from herald.plugins.amqp.codec import (
    NEED_DATA,
    AMQPConnection,
    BasicProperties,
    Delivery,
    Message,
    MethodFrame,
)
from herald.plugins.amqp.codec.constants import PROTOCOL_HEADER, FrameType
from herald.plugins.amqp.codec.frames import frame
from herald.plugins.amqp.codec.methods import (
    BasicDeliver,
    BasicPublish,
    ChannelOpen,
    ConnectionOpen,
    ConnectionStartOk,
    ConnectionTune,
    ConnectionTuneOk,
)
from herald.plugins.amqp.codec.properties import encode_content_header, encode_properties

CHUNK = 64 * 1024
BODY = b"x" * 100
PROPERTIES = BasicProperties(content_type="text/plain", delivery_mode=2, headers={"k": "v"})


def open_connection() -> AMQPConnection:
    """A server codec past the handshake, with channel 1 open."""
    conn = AMQPConnection()
    conn.receive_data(PROTOCOL_HEADER)
    conn.next_event()
    conn.receive_data(frame(FrameType.METHOD, 0, ConnectionStartOk(response=b"\0u\0p").encode()))
    conn.next_event()
    conn.send(MethodFrame(0, ConnectionTune(2047, 131072, 60)))
    for channel, method in (
        (0, ConnectionTuneOk(2047, 131072, 60)),
        (0, ConnectionOpen()),
        (1, ChannelOpen()),
    ):
        conn.receive_data(frame(FrameType.METHOD, channel, method.encode()))
        conn.next_event()
    conn.data_to_send()
    return conn


def publish_bytes(count: int) -> bytes:
    one = b"".join(
        (
            frame(
                FrameType.METHOD, 1, BasicPublish(exchange="amq.direct", routing_key="rk").encode()
            ),
            frame(FrameType.HEADER, 1, encode_content_header(60, len(BODY), PROPERTIES)),
            frame(FrameType.BODY, 1, BODY),
        )
    )
    return one * count


def decode_rate(data: bytes, count: int) -> float:
    conn = open_connection()
    chunks = [data[i : i + CHUNK] for i in range(0, len(data), CHUNK)]
    seen = 0
    start = time.perf_counter()
    for chunk in chunks:
        conn.receive_data(chunk)
        while (event := conn.next_event()) is not NEED_DATA:
            seen += 1
    elapsed = time.perf_counter() - start
    assert seen == count and isinstance(event, type(NEED_DATA)), seen
    return count / elapsed


def encode_rate(count: int) -> float:
    conn = open_connection()
    raw = encode_properties(PROPERTIES)
    written = 0
    start = time.perf_counter()
    for tag in range(1, count + 1):
        deliver = BasicDeliver("ctag-1", tag, False, "amq.direct", "rk")
        conn.send(Delivery(1, deliver, raw, BODY))
        if tag % 100 == 0:
            written += len(conn.data_to_send())
    written += len(conn.data_to_send())
    elapsed = time.perf_counter() - start
    assert written > count * len(BODY)
    return count / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    data = publish_bytes(args.messages)
    check = open_connection()
    check.receive_data(data[: len(data) // args.messages])
    assert isinstance(check.next_event(), Message)
    decode = statistics.median(decode_rate(data, args.messages) for _ in range(args.repeat))
    encode = statistics.median(encode_rate(args.messages) for _ in range(args.repeat))
    result = {
        "python": platform.python_version(),
        "messages": args.messages,
        "repeat": args.repeat,
        "decode_publish_msgs_per_s": round(decode),
        "decode_publish_frames_per_s": round(decode * 3),
        "decode_publish_us_per_msg": round(1e6 / decode, 2),
        "encode_deliver_msgs_per_s": round(encode),
        "encode_deliver_frames_per_s": round(encode * 3),
        "encode_deliver_us_per_msg": round(1e6 / encode, 2),
    }
    json.dump(result, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()

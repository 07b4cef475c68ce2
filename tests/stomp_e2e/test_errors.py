"""Broken clients get an ERROR frame and a closed socket; other connections carry on."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import trio

from herald.core.broker import Broker
from tests.stomp_e2e.helpers import WAIT, Client, RawClient, no_connections, stomp_broker

CONNECT = b"CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:guest\n\n\x00"


async def assert_still_served(broker: Broker, client: Client, tag: str) -> None:
    """`client`, connected before the failure, still round-trips a message."""
    await client.send("/queue/survivor", tag, receipt=f"r-{tag}")
    await client.receipt(f"r-{tag}")
    await client.wait(lambda: any(m.body == tag for m in client.frames.messages))


CASES = [
    ("unknown command", CONNECT + b"FLY\n\n\x00", "unknown command 'FLY'"),
    (
        "SEND without destination",
        CONNECT + b"SEND\nreceipt:s1\n\nbody\x00",
        "Missing destination",
    ),
    (
        "an undefined escape (1.2)",
        CONNECT + b"SEND\ndestination:/queue/x\nbad:tab\\there\n\n\x00",
        "undefined escape",
    ),
    (
        "a frame before CONNECT",
        b"SEND\ndestination:/queue/x\n\nhi\x00",
        "expected a CONNECT or STOMP frame first",
    ),
    (
        "an unknown destination",
        CONNECT + b"SUBSCRIBE\nid:1\ndestination:/nowhere/x\n\n\x00",
        "Unknown destination",
    ),
    ("ACK of an unknown message", CONNECT + b"ACK\nid:nope\n\n\x00", "Message not found"),
    (
        "COMMIT of an unknown transaction",
        CONNECT + b"COMMIT\ntransaction:t9\n\n\x00",
        "Bad transaction",
    ),
    (
        "SUBSCRIBE without id (1.2)",
        CONNECT + b"SUBSCRIBE\ndestination:/queue/x\n\n\x00",
        "Missing header",
    ),
    (
        "a second CONNECT",
        CONNECT + CONNECT,
        "CONNECT frame received on a connection that is already connected",
    ),
]


@pytest.mark.parametrize(("case", "data", "expected"), CASES, ids=[c[0] for c in CASES])
async def test_protocol_errors_close_only_the_offending_connection(
    tmp_path: Path, case: str, data: bytes, expected: str
) -> None:
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path) as broker:
            bystander = await Client.connect(broker)
            await bystander.subscribe("/queue/survivor", "s")
            raw = await RawClient.open(broker)
            await raw.send(data)
            frames = await raw.until_closed()
            error = frames[-1]
            assert error.command == "ERROR", case
            assert expected in error.get("message", "") + error.body.decode(), error
            assert [f.command for f in frames[:-1]] in ([], ["CONNECTED"])
            await assert_still_served(broker, bystander, case)
            await bystander.disconnect("bye")
            await no_connections(broker)


async def test_an_error_names_the_receipt_of_the_frame_that_caused_it(tmp_path: Path) -> None:
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path) as broker:
            raw = await RawClient.open(broker)
            await raw.send(
                CONNECT + b"SUBSCRIBE\nid:1\ndestination:/amq/queue/missing\nreceipt:r-7\n\n\x00"
            )
            connected, error = await raw.until_closed()
            assert connected.command == "CONNECTED"
            assert error.get("message") == "Not found"
            assert error.get("receipt-id") == "r-7"
            assert b"missing" in error.body


async def test_an_oversized_frame_is_refused_before_it_is_buffered(tmp_path: Path) -> None:
    settings = ["stomp.max_frame_size=65536"]
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path, settings=settings) as broker:
            bystander = await Client.connect(broker)
            await bystander.subscribe("/queue/survivor", "s")
            raw = await RawClient.open(broker)
            await raw.connect()
            body = b"x" * (1024 * 1024)
            header = b"SEND\ndestination:/queue/big\ncontent-length:%d\n\n" % len(body)

            async def push() -> None:
                with contextlib.suppress(trio.BrokenResourceError):  # it hangs up mid-frame
                    await raw.send(header + body + b"\x00")

            async with trio.open_nursery() as nursery:
                nursery.start_soon(push)
                frames = await raw.until_closed()
            (error,) = frames
            assert error.command == "ERROR"
            expected = (
                "frame body of 1048576 bytes exceeds the limit of 65536 bytes"
                " (stomp.max_frame_size)"
            )
            assert error.get("message") == expected
            assert error.body == expected.encode()
            assert "big" not in broker.default_vhost.queues
            await assert_still_served(broker, bystander, "after-oversized")
            await bystander.disconnect("bye")


BIG = b"SEND\ndestination:/queue/big\ncontent-length:65500\n\n"
# (what the client sends after CONNECT, the ERROR's message header)
LIMIT_CASES = {
    "content-length beyond the frame limit": (
        BIG,
        f"frame of {len(BIG) + 65500} bytes exceeds the limit of 65536 bytes"
        " (stomp.max_frame_size)",
    ),
    "a body without content-length beyond the frame limit": (
        b"SEND\ndestination:/queue/big\n\n" + b"x" * 65536,
        "frame exceeds the limit of 65536 bytes (stomp.max_frame_size)",
    ),
    "too many headers": (
        b"SEND\ndestination:/queue/big\n" + b"".join(b"h%d:v\n" % i for i in range(8)) + b"\n\x00",
        "frame exceeds the limit of 8 header lines (stomp.max_headers)",
    ),
    "a header line too long": (
        b"SEND\ndestination:/queue/big\nx:" + b"y" * 255 + b"\n\n\x00",
        "header line exceeds the limit of 256 bytes (stomp.max_header_line)",
    ),
}


@pytest.mark.parametrize(("data", "expected"), LIMIT_CASES.values(), ids=LIMIT_CASES.keys())
async def test_a_limit_error_names_the_limit_and_the_setting_that_raises_it(
    tmp_path: Path, data: bytes, expected: str
) -> None:
    settings = ["stomp.max_frame_size=65536", "stomp.max_headers=8", "stomp.max_header_line=256"]
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path, settings=settings) as broker:
            raw = await RawClient.open(broker)
            await raw.connect()

            async def push() -> None:
                with contextlib.suppress(trio.BrokenResourceError):  # it may hang up first
                    await raw.send(data)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(push)
                (error,) = await raw.until_closed()
            assert error.command == "ERROR"
            assert error.get("message") == expected
            assert error.body == expected.encode()
            assert "big" not in broker.default_vhost.queues


async def test_a_full_queue_with_reject_publish_answers_a_receipted_send_with_error(
    tmp_path: Path,
) -> None:
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path) as broker:
            client = await Client.connect(broker)
            limits = {"x-max-length": "1", "x-overflow": "reject-publish"}
            await client.send("/queue/small", "one", receipt="r1", **limits)
            await client.receipt("r1")
            await client.send("/queue/small", "two")  # no receipt asked: dropped quietly
            await client.send("/queue/small", "three", receipt="r3")
            await client.wait(lambda: bool(client.frames.errors))
            (error,) = client.frames.errors
            assert error.headers["message"] == "Message rejected"
            assert error.headers["receipt-id"] == "r3"
            assert broker.default_vhost.queues["small"].message_count == 1


async def test_declaring_an_existing_queue_differently_is_refused(tmp_path: Path) -> None:
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path) as broker:
            broker.default_vhost.declare_queue("transient", durable=False)
            client = await Client.connect(broker)
            await client.send("/queue/transient", "ok without headers", receipt="r1")
            await client.receipt("r1")
            await client.send("/queue/transient", "asks for durable", durable="true")
            await client.wait(lambda: bool(client.frames.errors))
            assert client.frames.errors[0].headers["message"] == "Precondition failed"
            assert "durable" in client.frames.errors[0].body

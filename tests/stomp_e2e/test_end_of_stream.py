"""A client that ends its stream (shutdown of its write side) goes through the codec: between
frames it is a quiet close, inside one an ERROR on the read side it still has open."""

from __future__ import annotations

import socket
from pathlib import Path

import trio

from tests.stomp_e2e.helpers import WAIT, Client, RawClient, no_connections, stomp_broker

WHOLE = b"SEND\ndestination:/queue/eos\n\nwhole\x00"
HALF = b"SEND\ndestination:/queue/eos\ncontent-length:10\n\nhalf"


def shut_write(raw: RawClient) -> None:
    """End the client's stream as a half-close, the socket's read side left open."""
    raw.stream.socket.shutdown(socket.SHUT_WR)


async def test_a_frame_cut_by_the_end_of_the_stream_is_answered_with_an_error(
    tmp_path: Path,
) -> None:
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path) as broker:
            bystander = await Client.connect(broker)
            await bystander.subscribe("/queue/eos", "s")
            raw = await RawClient.open(broker)
            await raw.connect()
            await raw.send(WHOLE + HALF)
            shut_write(raw)
            (error,) = await raw.until_closed()
            text = f"the peer closed the connection in the middle of a frame ({len(HALF)} bytes)"
            assert error.command == "ERROR"
            assert error.get("message") == text
            assert error.body == text.encode()
            await raw.aclose()
            # The whole frame before it was delivered; nothing of the half one ever is (it
            # would have been routed before the ERROR, so before this message).
            await bystander.send("/queue/eos", "after", receipt="r-after")
            await bystander.receipt("r-after")
            messages = await bystander.messages(2)
            assert [m.body for m in messages] == ["whole", "after"]
            await bystander.disconnect("bye")
            await bystander.receipt("bye")


async def test_the_end_of_the_stream_between_frames_closes_quietly(tmp_path: Path) -> None:
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path) as broker:
            raw = await RawClient.open(broker)
            await raw.connect()
            await raw.send(WHOLE + b"\n")  # a heart-beat EOL is a whole event too
            shut_write(raw)
            assert await raw.until_closed() == []
            await raw.aclose()
            await no_connections(broker)
            assert broker.default_vhost.queues["eos"].message_count == 1

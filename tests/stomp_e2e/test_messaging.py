"""Messaging through stomp.py: destinations, acknowledgement modes, prefetch, replies."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from herald.plugins.stomp.codec import Frame
from tests.stomp_e2e.helpers import WAIT, Client, RawClient, stomp_broker


async def test_queue_round_trip_keeps_every_header(tmp_path: Path) -> None:
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path) as broker:
            client = await Client.connect(broker)
            await client.subscribe("/queue/orders", "s1")
            await client.send(
                "/queue/orders",
                "payload",
                receipt="r",
                **{
                    "content-type": "application/json",
                    "correlation-id": "c-42",
                    "x-colon": "a:b",
                    "x-newline": "line1\nline2",
                    "x-backslash": "back\\slash",
                    "priority": "3",
                },
            )
            (message,) = await client.messages(1)
            headers = message.headers
            assert message.body == "payload"
            assert headers["subscription"] == "s1"
            assert headers["destination"] == "/queue/orders"
            assert headers["content-type"] == "application/json"
            assert headers["correlation-id"] == "c-42"
            assert headers["x-colon"] == "a:b"
            assert headers["x-newline"] == "line1\nline2"
            assert headers["x-backslash"] == "back\\slash"
            assert headers["priority"] == "3"
            assert "receipt" not in headers and "redelivered" not in headers
            queue = broker.default_vhost.queues["orders"]
            assert queue.durable  # /queue/ destinations declare durable queues
            await client.disconnect("bye")


async def test_binary_bodies_with_nul_arrive_whole(tmp_path: Path) -> None:
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path) as broker:
            client = await Client.connect(broker)
            client.conn.transport._BaseTransport__auto_decode = False  # keep bytes
            await client.subscribe("/queue/bin", "s")
            await client.send("/queue/bin", b"\x00\x01\xffbinary\x00")
            (message,) = await client.messages(1)
            assert message.body == b"\x00\x01\xffbinary\x00"
            assert message.headers["content-length"] == "10"
            await client.disconnect("bye")


async def test_client_individual_acks_one_message_and_the_rest_is_redelivered(
    tmp_path: Path,
) -> None:
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path) as broker:
            client = await Client.connect(broker)
            await client.subscribe("/queue/ind", "s", ack="client-individual")
            for n in range(3):
                await client.send("/queue/ind", f"m{n}")
            messages = await client.messages(3)
            await client.call(client.conn.ack, messages[1].headers["ack"], receipt="a")
            await client.receipt("a")
            await client.close_socket()
            again = await Client.connect(broker)
            await again.subscribe("/queue/ind", "s", ack="client-individual")
            redelivered = await again.messages(2)
            assert [m.body for m in redelivered] == ["m0", "m2"]
            assert all(m.headers["redelivered"] == "true" for m in redelivered)
            await again.disconnect("bye")


async def test_client_mode_acks_cumulatively(tmp_path: Path) -> None:
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path) as broker:
            client = await Client.connect(broker)
            await client.subscribe("/queue/cum", "s", ack="client")
            for n in range(3):
                await client.send("/queue/cum", f"m{n}")
            messages = await client.messages(3)
            await client.call(client.conn.ack, messages[1].headers["ack"], receipt="a")
            await client.receipt("a")
            queue = broker.default_vhost.queues["cum"]
            assert queue.statistics().messages_unacknowledged == 1
            await client.close_socket()
            again = await Client.connect(broker)
            await again.subscribe("/queue/cum", "s", ack="client")
            (last,) = await again.messages(1)
            assert last.body == "m2" and last.headers["redelivered"] == "true"
            await again.disconnect("bye")


async def test_auto_ack_messages_are_gone_once_sent(tmp_path: Path) -> None:
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path) as broker:
            client = await Client.connect(broker)
            await client.subscribe("/queue/auto", "s")
            await client.send("/queue/auto", "once")
            await client.messages(1)
            await client.close_socket()
            queue = broker.default_vhost.queues["auto"]
            assert queue.message_count == 0 and queue.statistics().messages_unacknowledged == 0


async def test_nack_requeues_by_default_and_dead_letters_with_requeue_false(tmp_path: Path) -> None:
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path) as broker:
            client = await Client.connect(broker)
            await client.subscribe("/queue/dlq", "dead")
            args = {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}
            await client.subscribe("/queue/work", "w", ack="client-individual", **args)
            await client.send("/queue/work", "job")
            (first,) = await client.messages(1)
            await client.call(client.conn.nack, first.headers["ack"])
            await client.wait(lambda: len(client.frames.messages) == 2)
            second = client.frames.messages[1]
            assert second.body == "job" and second.headers["redelivered"] == "true"
            await client.call(client.conn.nack, second.headers["ack"], requeue="false")
            await client.wait(lambda: len(client.frames.messages) == 3)
            dead = client.frames.messages[2]
            assert dead.headers["subscription"] == "dead"
            assert dead.headers["x-first-death-reason"] == "rejected"
            assert dead.headers["x-first-death-queue"] == "work"
            assert (
                broker.default_vhost.queues["work"].arguments["x-dead-letter-routing-key"] == "dlq"
            )
            await client.disconnect("bye")


async def test_prefetch_count_caps_unacknowledged_messages(tmp_path: Path) -> None:
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path) as broker:
            publisher = await Client.connect(broker)
            for n in range(5):
                await publisher.send("/queue/pf", f"m{n}", receipt=f"r{n}")
            await publisher.receipt("r4")
            client = await Client.connect(broker)
            await client.call(
                client.conn.subscribe,
                "/queue/pf",
                "s",
                ack="client-individual",
                headers={"prefetch-count": "2"},
                receipt="subbed",
            )
            await client.receipt("subbed")
            messages = await client.messages(2)
            stats = broker.default_vhost.queues["pf"].statistics()
            assert (stats.messages_unacknowledged, stats.messages_ready) == (2, 3)
            assert len(client.frames.messages) == 2
            await client.call(client.conn.ack, messages[0].headers["ack"])
            third = await client.messages(3)
            assert third[2].body == "m2"
            await client.disconnect("bye")
            await publisher.disconnect("bye")


async def test_topic_messages_fan_out_to_every_subscriber(tmp_path: Path) -> None:
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path) as broker:
            one = await Client.connect(broker)
            two = await Client.connect(broker, "1.1")
            await one.subscribe("/topic/prices.nyse", "a")
            await two.call(two.conn.subscribe, "/topic/prices.*", "b", receipt="subbed")
            await two.receipt("subbed")
            await one.send("/topic/prices.nyse", "42", receipt="sent")
            await one.receipt("sent")
            (mine,) = await one.messages(1)
            (theirs,) = await two.messages(1)
            assert mine.body == theirs.body == "42"
            assert (
                mine.headers["destination"] == theirs.headers["destination"] == "/topic/prices.nyse"
            )
            private = [
                q for q in broker.default_vhost.queues.values() if q.name.startswith("amq.gen-")
            ]
            assert len(private) == 2 and all(q.owner is not None for q in private)
            await two.call(two.conn.unsubscribe, "b", receipt="gone")
            await two.receipt("gone")  # the private queue went with its subscription
            assert len([q for q in broker.default_vhost.queues if q.startswith("amq.gen-")]) == 1
            await one.disconnect("bye")
            await two.disconnect("bye")


async def test_durable_topic_subscription_outlives_its_connection(tmp_path: Path) -> None:
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path) as broker:
            subscriber = await Client.connect(broker)
            await subscriber.call(
                subscriber.conn.subscribe,
                "/topic/news",
                "d1",
                headers={"durable": "true"},
                receipt="s",
            )
            await subscriber.receipt("s")
            await subscriber.disconnect("bye")
            publisher = await Client.connect(broker)
            await publisher.send("/topic/news", "while you were away", receipt="p")
            await publisher.receipt("p")
            back = await Client.connect(broker)
            await back.subscribe("/topic/news", "d1", durable="true")
            (message,) = await back.messages(1)
            assert message.body == "while you were away"
            durable = [
                q for q in broker.default_vhost.queues if q.startswith("stomp-subscription-")
            ]
            assert len(durable) == 1
            await back.call(back.conn.unsubscribe, "d1", headers={"durable": "true"}, receipt="u")
            await back.receipt("u")
            assert not [
                q for q in broker.default_vhost.queues if q.startswith("stomp-subscription-")
            ]
            await back.disconnect("bye")
            await publisher.disconnect("bye")


async def test_a_durable_resubscription_gets_its_receipt_before_the_waiting_messages(
    tmp_path: Path,
) -> None:
    subscribe = b"SUBSCRIBE\nid:d1\ndestination:/topic/news\ndurable:true\nreceipt:s\n\n\x00"
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path) as broker:
            first = await RawClient.open(broker)
            await first.connect()
            await first.send(subscribe + b"DISCONNECT\nreceipt:bye\n\n\x00")
            assert [f.get("receipt-id") for f in await first.until_closed()] == ["s", "bye"]
            publisher = await RawClient.open(broker)
            await publisher.connect()
            await publisher.send(
                b"SEND\ndestination:/topic/news\n\none\x00"
                b"SEND\ndestination:/topic/news\nreceipt:p\n\ntwo\x00"
            )
            assert await publisher.frame() == Frame("RECEIPT", (("receipt-id", "p"),))
            back = await RawClient.open(broker)
            await back.connect()
            await back.send(subscribe)
            assert await back.frame() == Frame("RECEIPT", (("receipt-id", "s"),))
            await publisher.send(b"SEND\ndestination:/topic/news\n\nthree\x00")
            messages = [await back.frame() for _ in range(3)]
            assert [(m.command, m.get("subscription"), m.body) for m in messages] == [
                ("MESSAGE", "d1", b"one"),
                ("MESSAGE", "d1", b"two"),
                ("MESSAGE", "d1", b"three"),
            ]


@pytest.mark.parametrize("ack", ["auto", "client", "client-individual"])
async def test_a_receipted_subscribe_to_a_queue_gets_its_receipt_before_the_waiting_messages(
    tmp_path: Path, ack: str
) -> None:
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path) as broker:
            publisher = await RawClient.open(broker)
            await publisher.connect()
            await publisher.send(
                b"SEND\ndestination:/queue/waiting\n\none\x00"
                b"SEND\ndestination:/queue/waiting\nreceipt:p\n\ntwo\x00"
            )
            assert await publisher.frame() == Frame("RECEIPT", (("receipt-id", "p"),))
            consumer = await RawClient.open(broker)
            await consumer.connect()
            await consumer.send(
                b"SUBSCRIBE\nid:s\ndestination:/queue/waiting\nack:%s\nreceipt:r\n\n\x00"
                % ack.encode()
            )
            assert await consumer.frame() == Frame("RECEIPT", (("receipt-id", "r"),))
            await publisher.send(b"SEND\ndestination:/queue/waiting\n\nthree\x00")
            messages = [await consumer.frame() for _ in range(3)]
            assert [(m.command, m.get("subscription"), m.body) for m in messages] == [
                ("MESSAGE", "s", b"one"),
                ("MESSAGE", "s", b"two"),
                ("MESSAGE", "s", b"three"),
            ]
            if ack != "auto":
                assert all(m.get("ack") == m.get("message-id") for m in messages)
                for message in messages:
                    await consumer.send(f"ACK\nid:{message.get('ack')}\n\n\x00".encode())
                await consumer.send(b"DISCONNECT\nreceipt:bye\n\n\x00")
                assert [f.get("receipt-id") for f in await consumer.until_closed()] == ["bye"]
                assert broker.default_vhost.queues["waiting"].message_count == 0


async def test_exchange_destinations(tmp_path: Path) -> None:
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path) as broker:
            client = await Client.connect(broker)
            await client.subscribe("/exchange/amq.direct/green", "g")
            await client.send("/exchange/amq.direct/red", "not for us")
            await client.send("/exchange/amq.direct/green", "for us", receipt="r")
            await client.receipt("r")
            (message,) = await client.messages(1)
            assert message.body == "for us"
            assert message.headers["destination"] == "/exchange/amq.direct/green"
            await client.disconnect("bye")


async def test_amq_queue_destinations_use_existing_queues_only(tmp_path: Path) -> None:
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path) as broker:
            broker.default_vhost.declare_queue("made-elsewhere", durable=False)
            client = await Client.connect(broker)
            await client.subscribe("/amq/queue/made-elsewhere", "s")
            await client.send("/amq/queue/made-elsewhere", "hi", receipt="r")
            (message,) = await client.messages(1)
            assert message.body == "hi"
            assert message.headers["destination"] == "/queue/made-elsewhere"
            assert not broker.default_vhost.queues["made-elsewhere"].durable
            await client.subscribe("/amq/queue/never-made", "t")
            await client.wait(lambda: bool(client.frames.errors))
            assert client.frames.errors[0].headers["message"] == "Not found"


async def test_temp_queue_reply_to_round_trip(tmp_path: Path) -> None:
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path) as broker:
            server = await Client.connect(broker)
            await server.call(server.conn.subscribe, "/queue/rpc", "requests", receipt="ready")
            await server.receipt("ready")
            requester = await Client.connect(broker)
            await requester.send("/queue/rpc", "ping", **{"reply-to": "/temp-queue/answers"})
            (request,) = await server.messages(1)
            reply_to = request.headers["reply-to"]
            assert reply_to.startswith("/reply-queue/amq.gen-")
            await server.send(reply_to, "pong", **{"correlation-id": "1"})
            (reply,) = await requester.messages(1)
            assert reply.body == "pong"
            assert reply.headers["subscription"] == "/temp-queue/answers"
            assert reply.headers["correlation-id"] == "1"
            name = reply_to.removeprefix("/reply-queue/")
            assert broker.default_vhost.queues[name].owner is not None
            await requester.disconnect("bye")
            await server.receipt("ready")
            while name in broker.default_vhost.queues:  # exclusive: gone with its connection
                await trio.sleep(0.01)
            await server.disconnect("bye")


async def test_transactions_commit_abort_and_transactional_acks(tmp_path: Path) -> None:
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path) as broker:
            client = await Client.connect(broker)
            await client.subscribe("/queue/tx", "s", ack="client-individual")
            await client.call(client.conn.begin, "t1")
            await client.send("/queue/tx", "committed", transaction="t1")
            await client.call(client.conn.begin, "t2")
            await client.send("/queue/tx", "aborted", transaction="t2")
            await client.call(client.conn.abort, "t2")
            queue = broker.default_vhost.queues["tx"]
            await client.call(client.conn.commit, "t1", receipt="c1")
            await client.receipt("c1")
            (message,) = await client.messages(1)
            assert message.body == "committed"
            await client.call(client.conn.begin, "t3")
            await client.call(
                client.conn.ack, message.headers["ack"], transaction="t3", receipt="a"
            )
            await client.receipt("a")
            assert queue.statistics().messages_unacknowledged == 1  # held until COMMIT
            await client.call(client.conn.commit, "t3", receipt="c3")
            await client.receipt("c3")
            assert queue.statistics().messages_unacknowledged == 0
            await client.send("/queue/tx", "last", receipt="l")
            await client.receipt("l")
            assert [m.body for m in client.frames.messages] == ["committed", "last"]
            await client.disconnect("bye")


async def test_messages_of_an_unsubscribed_subscription_can_still_be_acked(tmp_path: Path) -> None:
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path) as broker:
            client = await Client.connect(broker)
            await client.subscribe("/queue/late", "s", ack="client-individual")
            await client.send("/queue/late", "m")
            (message,) = await client.messages(1)
            await client.call(client.conn.unsubscribe, "s")
            await client.call(client.conn.ack, message.headers["ack"], receipt="a")
            await client.receipt("a")
            queue = broker.default_vhost.queues["late"]
            assert queue.message_count == 0 and queue.statistics().messages_unacknowledged == 0
            await client.disconnect("bye")

"""STOMP messages meet the kernel's other users: queues bound to amq.topic, native messages."""

from __future__ import annotations

from pathlib import Path

import trio

from herald.core.message import Message, Properties
from tests.sinks import RecordingSink
from tests.stomp_e2e.helpers import WAIT, Client, stomp_broker


async def test_a_stomp_topic_send_reaches_a_kernel_queue_bound_to_amq_topic(tmp_path: Path) -> None:
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path) as broker:
            vhost = broker.default_vhost
            vhost.declare_queue("audit")
            vhost.bind_queue("audit", "amq.topic", "a.*")
            sink = RecordingSink()
            vhost.queues["audit"].add_consumer("kernel", sink)
            client = await Client.connect(broker)
            await client.send(
                "/topic/a.b",
                "hello",
                receipt="r",
                **{"content-type": "text/plain", "correlation-id": "c", "x-app": "v"},
            )
            await client.receipt("r")
            (entry,) = sink.entries
            message = entry.message
            assert (message.protocol, message.exchange, message.routing_key) == (
                "stomp",
                "amq.topic",
                "a.b",
            )
            properties, body = message.decoded(broker.codecs)
            assert body == b"hello"
            assert properties.content_type == "text/plain"
            assert properties.correlation_id == "c"
            assert properties.headers == {"x-app": "v"}
            await client.disconnect("bye")


async def test_a_native_message_reaches_a_stomp_subscriber_with_its_properties(
    tmp_path: Path,
) -> None:
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path) as broker:
            client = await Client.connect(broker)
            await client.call(client.conn.subscribe, "/topic/native.#", "s", receipt="ready")
            await client.receipt("ready")
            properties = Properties(
                content_type="application/json",
                headers={"count": 5, "ok": True},
                delivery_mode=2,
                priority=2,
                correlation_id="corr",
                reply_to="amq.gen-replies",
                message_id="m-1",
                timestamp=1700000000,
            )
            broker.default_vhost.publish(
                Message.native(
                    b'{"n":5}', exchange="amq.topic", routing_key="native.x", properties=properties
                )
            )
            (message,) = await client.messages(1)
            headers = message.headers
            assert message.body == '{"n":5}'
            assert headers["destination"] == "/topic/native.x"
            assert headers["content-type"] == "application/json"
            assert headers["persistent"] == "true"
            assert headers["priority"] == "2"
            assert headers["correlation-id"] == "corr"
            assert headers["reply-to"] == "/reply-queue/amq.gen-replies"
            assert headers["amqp-message-id"] == "m-1"
            assert headers["timestamp"] == "1700000000"
            assert headers["count"] == "5" and headers["ok"] == "true"
            assert headers["message-id"] != "m-1"  # the delivery's own id
            await client.disconnect("bye")

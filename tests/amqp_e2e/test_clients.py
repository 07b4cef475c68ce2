"""kombu (py-amqp underneath, AMQPLAIN login) and aio-pika (aiormq, asyncio) unmodified."""

from __future__ import annotations

import asyncio

import aio_pika
import kombu

from tests.amqp_e2e.conftest import CLIENT_TIMEOUT, BrokerThread


def test_kombu_publish_and_consume(broker: BrokerThread) -> None:
    url = f"amqp://guest:guest@127.0.0.1:{broker.port}//"
    exchange = kombu.Exchange("tasks", type="direct", durable=True)
    queue = kombu.Queue("tasks", exchange, routing_key="tasks", durable=True)
    received: list[tuple[object, dict[str, object]]] = []
    with kombu.Connection(url, connect_timeout=CLIENT_TIMEOUT) as conn:
        producer = conn.Producer(serializer="json")
        for n in range(3):
            producer.publish(
                {"n": n},
                exchange=exchange,
                routing_key="tasks",
                declare=[queue],
                headers={"attempt": n},
                retry=False,
            )

        def on_message(body: object, message: kombu.Message) -> None:
            received.append((body, dict(message.headers)))
            message.ack()

        with conn.Consumer(queue, callbacks=[on_message], accept=["json"]):
            while len(received) < 3:
                conn.drain_events(timeout=CLIENT_TIMEOUT)
    assert received == [({"n": n}, {"attempt": n}) for n in range(3)]


def test_kombu_simple_queue_get(broker: BrokerThread) -> None:
    url = f"amqp://guest:guest@127.0.0.1:{broker.port}//"
    with kombu.Connection(url, connect_timeout=CLIENT_TIMEOUT) as conn:
        simple = conn.SimpleQueue("simple")
        simple.put("hello")
        message = simple.get(timeout=CLIENT_TIMEOUT)
        assert message.payload == "hello"
        message.ack()
        simple.close()


def test_aio_pika_publish_with_confirms_and_consume(broker: BrokerThread) -> None:
    url = f"amqp://guest:guest@127.0.0.1:{broker.port}/"

    async def main() -> list[bytes]:
        connection = await aio_pika.connect_robust(url, timeout=CLIENT_TIMEOUT)
        async with connection:
            channel = await connection.channel(publisher_confirms=True)
            await channel.set_qos(prefetch_count=5)
            exchange = await channel.declare_exchange("aio", aio_pika.ExchangeType.TOPIC)
            queue = await channel.declare_queue("aio-q", durable=True)
            await queue.bind(exchange, "k.#")
            for n in range(10):
                confirmation = await exchange.publish(
                    aio_pika.Message(
                        str(n).encode(), delivery_mode=aio_pika.DeliveryMode.PERSISTENT
                    ),
                    routing_key=f"k.{n}",
                )
                assert confirmation is not None
            bodies = []
            async with queue.iterator() as messages:
                async for message in messages:
                    async with message.process():
                        bodies.append(message.body)
                    if len(bodies) == 10:
                        break
            return bodies

    async def bounded() -> list[bytes]:
        return await asyncio.wait_for(main(), CLIENT_TIMEOUT * 2)

    assert asyncio.run(bounded()) == [str(n).encode() for n in range(10)]


def test_aio_pika_rpc_over_direct_reply_to(broker: BrokerThread) -> None:
    url = f"amqp://guest:guest@127.0.0.1:{broker.port}/"

    async def main() -> bytes:
        connection = await aio_pika.connect(url, timeout=CLIENT_TIMEOUT)
        async with connection:
            channel = await connection.channel()
            requests = await channel.declare_queue("requests")

            async def serve(message: aio_pika.abc.AbstractIncomingMessage) -> None:
                async with message.process():
                    assert message.reply_to is not None
                    await channel.default_exchange.publish(
                        aio_pika.Message(
                            b"re: " + message.body, correlation_id=message.correlation_id
                        ),
                        routing_key=message.reply_to,
                    )

            await requests.consume(serve)
            replies = await channel.get_queue("amq.rabbitmq.reply-to", ensure=False)
            future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

            async def on_reply(message: aio_pika.abc.AbstractIncomingMessage) -> None:
                future.set_result(message.body)

            await replies.consume(on_reply, no_ack=True)
            await channel.default_exchange.publish(
                aio_pika.Message(b"ping", reply_to="amq.rabbitmq.reply-to", correlation_id="1"),
                routing_key="requests",
            )
            return await future

    async def bounded() -> bytes:
        return await asyncio.wait_for(main(), CLIENT_TIMEOUT * 2)

    assert asyncio.run(bounded()) == b"re: ping"

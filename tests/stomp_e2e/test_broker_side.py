"""The broker's side of a STOMP connection: durability, alarms, permissions, closing."""

from __future__ import annotations

from pathlib import Path

import trio
import trio.testing

from herald.plugins.stomp.plugin import sniff
from herald.storage.memory import MemoryStore, MemoryStoreData
from tests.stomp_e2e.helpers import WAIT, Client, RawClient, no_connections, stomp_broker


class HeldStore(MemoryStore):
    """A memory store whose writes become durable only when the test says `flush()`."""

    def __init__(self, data: MemoryStoreData) -> None:
        super().__init__(data)
        self.flushed = 0
        self._flushed = trio.Event()

    @property
    def durable_ticket(self) -> int:
        return self.flushed

    async def wait_durable(self, ticket: int) -> None:
        while self.flushed < ticket:
            await self._flushed.wait()

    def flush(self) -> None:
        self.flushed = self.data.ticket
        self._flushed.set()
        self._flushed = trio.Event()


async def test_receipts_of_persistent_messages_wait_for_the_store_and_keep_their_order(
    tmp_path: Path,
) -> None:
    store = HeldStore(MemoryStoreData())
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path, store=store) as broker:
            store.flush()  # the definitions written at start
            raw = await RawClient.open(broker)
            await raw.connect()
            await raw.send(
                b"SEND\ndestination:/queue/d\npersistent:true\nreceipt:p\n\nstored\x00"
                b"SEND\ndestination:/queue/d\nreceipt:t\n\ntransient\x00"
            )
            while broker.default_vhost.queues.get("d") is None or (
                broker.default_vhost.queues["d"].message_count < 2
            ):
                await trio.sleep(0.01)
            await trio.testing.wait_all_tasks_blocked()
            with trio.move_on_after(0.2):
                early = await raw.frame()
                raise AssertionError(f"a receipt before the store was durable: {early}")
            store.flush()
            first, second = await raw.frame(), await raw.frame()
            assert [first.get("receipt-id"), second.get("receipt-id")] == ["p", "t"]


async def test_a_subscribe_receipt_waiting_behind_the_store_still_precedes_the_messages(
    tmp_path: Path,
) -> None:
    store = HeldStore(MemoryStoreData())
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path, store=store) as broker:
            store.flush()  # the definitions written at start
            publisher = await RawClient.open(broker)
            await publisher.connect()
            await publisher.send(b"SEND\ndestination:/queue/w\nreceipt:w\n\nwaiting\x00")
            assert (await publisher.frame()).get("receipt-id") == "w"  # transient: at once
            raw = await RawClient.open(broker)
            await raw.connect()
            await raw.send(
                b"SEND\ndestination:/queue/d\npersistent:true\nreceipt:p\n\nstored\x00"
                b"SUBSCRIBE\nid:s\ndestination:/queue/w\nack:client\nreceipt:s\n\n\x00"
            )
            queue = broker.default_vhost.queues["w"]
            while not queue.statistics().consumers:
                await trio.sleep(0.01)
            await trio.testing.wait_all_tasks_blocked()
            store.flush()  # the SEND's receipt can go: the SUBSCRIBE's and its message follow
            frames = [await raw.frame() for _ in range(3)]
            assert [(f.command, f.get("receipt-id"), f.body) for f in frames] == [
                ("RECEIPT", "p", b""),
                ("RECEIPT", "s", b""),
                ("MESSAGE", None, b"waiting"),
            ]
            await publisher.send(b"SEND\ndestination:/queue/w\n\nlater\x00")
            assert (await raw.frame()).body == b"later"


async def test_a_publisher_stops_being_read_while_a_resource_alarm_is_on(tmp_path: Path) -> None:
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path) as broker:
            client = await Client.connect(broker)
            await client.send("/queue/flow", "before", receipt="r1")
            await client.receipt("r1")
            broker.alarms.set("memory", True)
            await client.send("/queue/flow", "during", receipt="r2")
            await trio.sleep(0.2)
            assert broker.default_vhost.queues["flow"].message_count == 1
            assert client.frames.receipts == ["r1"]
            broker.alarms.set("memory", False)
            await client.receipt("r2")
            assert broker.default_vhost.queues["flow"].message_count == 2
            await client.disconnect("bye")


async def test_permissions_are_checked_per_destination(tmp_path: Path) -> None:
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path) as broker:
            broker.users.add_user("reader", "secret")
            broker.users.set_permissions("reader", "/", "", "", ".*")
            broker.users.loopback_users = frozenset()
            client = await Client.connect(broker, login="reader", passcode="secret")
            await client.send("/topic/anything", "no write permission")
            await client.wait(lambda: bool(client.frames.errors))
            error = client.frames.errors[0]
            assert error.headers["message"] == "Access refused"
            assert "exchange 'amq.topic'" in error.body


async def test_the_broker_closes_a_connection_with_an_error_frame(tmp_path: Path) -> None:
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path) as broker:
            raw = await RawClient.open(broker)
            await raw.connect()
            for connection in broker.connections:
                connection.close("maintenance window")
            (error,) = await raw.until_closed()
            assert error.get("message") == "Connection closed by the broker"
            assert error.body == b"maintenance window"
            await no_connections(broker)


async def test_deleting_a_subscribed_queue_tells_the_client(tmp_path: Path) -> None:
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path) as broker:
            client = await Client.connect(broker)
            await client.call(client.conn.subscribe, "/queue/doomed", "s", receipt="r")
            await client.receipt("r")
            broker.default_vhost.delete_queue("doomed")
            await client.wait(lambda: bool(client.frames.errors))
            error = client.frames.errors[0]
            assert error.headers["message"] == "Server cancelled subscription"
            assert "doomed" in error.body


async def test_stomp_1_0_subscriptions_without_id_are_named_by_destination(tmp_path: Path) -> None:
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path) as broker:
            client = await Client.connect(broker, "1.0")
            await client.call(client.conn.subscribe, "/queue/old", ack="client", receipt="s")
            await client.receipt("s")
            await client.send("/queue/old", "classic")
            (message,) = await client.messages(1)
            assert "subscription" not in message.headers
            await client.call(client.conn.ack, message.headers["message-id"], receipt="a")
            await client.call(client.conn.unsubscribe, destination="/queue/old", receipt="u")
            await client.receipt("u")
            queue = broker.default_vhost.queues["old"]
            assert not queue.consumers and queue.message_count == 0
            await client.disconnect("bye")


def test_the_sniffer_recognises_connect_and_stomp_frames() -> None:
    assert sniff(b"CONNECT\n") is True
    assert sniff(b"STOMP\naccept") is True
    assert sniff(b"CONN") is None
    assert sniff(b"") is None
    assert sniff(b"AMQP") is False
    assert sniff(b"GET / HTTP/1.1") is False


async def test_a_stomp_1_0_subscriber_gets_messages_without_headers_it_cannot_carry(
    tmp_path: Path,
) -> None:
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path) as broker:
            old = await Client.connect(broker, "1.0")
            await old.call(old.conn.subscribe, "/queue/mixed", id="s", receipt="s")
            await old.receipt("s")
            new = await Client.connect(broker, "1.2")
            await new.send("/queue/mixed", "hi", **{"x-multi": "two\nlines", "x-plain": "ok"})
            (message,) = await old.messages(1)
            assert message.body == "hi"
            assert message.headers["x-plain"] == "ok"
            assert message.headers["subscription"] == "s"
            assert "x-multi" not in message.headers
            await old.disconnect("bye")
            await new.disconnect("bye")

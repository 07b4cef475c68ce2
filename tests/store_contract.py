"""The contract every `herald.core.store.Store` backend passes.

A backend's test module subclasses `StoreContract` and provides `make_store`: build an unopened
store on `path`, or, given `reopen_from` (a closed store), one that sees what it left behind
(the memory store: a new store on the same data object; the commit-log store: the same
directory). The contract opens, closes and "restarts" stores itself, through `StoreHarness`.

What a restart must bring back, for every un-acked (queue, offset): the offset, the delivery
count, and the message's protocol, stored bytes, exchange, routing key, headers, persistence,
priority, expiration, message id, annotations, body size and timestamp (to the millisecond).
"""

from __future__ import annotations

import math
import random
import tempfile
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from herald.core.message import CodecRegistry, Message, Properties
from herald.core.store import Store
from tests.store_model import (
    FOREIGN,
    OPERATIONS,
    StoreModel,
    message,
    targets,
)

__all__ = ["FOREIGN", "StoreContract", "StoreHarness", "message", "targets"]

HEADERS = {
    "text": "héllo",
    "count": 7,
    "ratio": 0.25,
    "flag": True,
    "blob": b"\x00\x01\xfe\xff",
    "nested": {"list": [1, "two", b"3"], "deep": {"x": -1}},
}


def recovered(store: Store, queue_id: int) -> list[tuple[int, str | None]]:
    """(offset, message id) of each entry `recover_queue` yields, in its order."""
    return [(e.queue_offset, e.message.message_id) for e in store.recover_queue(queue_id)]


def totals(store: Store) -> tuple[int, int]:
    """(messages, bytes) from the store's statistics."""
    stats = store.statistics()
    return stats.messages, stats.bytes


def assert_same_message(got: Message, want: Message, codecs: CodecRegistry) -> None:
    """Everything a restart must preserve about a message."""
    assert got.protocol == want.protocol
    assert got.stored_bytes(codecs) == want.stored_bytes(codecs)
    for name in ("exchange", "routing_key", "persistent", "priority", "expiration_ms"):
        assert getattr(got, name) == getattr(want, name), name
    assert got.message_id == want.message_id
    assert got.headers == want.headers
    assert got.annotations == want.annotations
    assert got.body_size == want.body_size
    assert math.isclose(got.timestamp, want.timestamp, abs_tol=0.001)


@attrs.define
class StoreHarness:
    """The store under test, opened with `codecs`, and the means to restart it."""

    contract: StoreContract
    path: Path
    codecs: CodecRegistry
    store: Store = attrs.field(init=False)
    is_open: bool = False

    async def start(self) -> Store:
        self.store = self.contract.make_store(self.path)
        await self.store.open(self.codecs)
        self.is_open = True
        return self.store

    async def restart(self) -> Store:
        """Close the store cleanly and open a new one on what it left."""
        old = self.store
        self.is_open = False
        await old.close()
        self.store = self.contract.make_store(self.path, reopen_from=old)
        await self.store.open(self.codecs)
        self.is_open = True
        return self.store

    async def stop(self) -> None:
        if self.is_open:
            self.is_open = False
            await self.store.close()


class StoreContract:
    """Tests every store backend passes; subclass it and implement `make_store`."""

    def make_store(self, path: Path, *, reopen_from: Store | None = None) -> Store:
        """An unopened store on `path`; with `reopen_from`, one on what that store left."""
        raise NotImplementedError

    @asynccontextmanager
    async def harness_on(self, path: Path) -> AsyncIterator[StoreHarness]:
        harness = StoreHarness(self, path, CodecRegistry())
        await harness.start()
        try:
            yield harness
        finally:
            await harness.stop()

    @pytest.fixture
    async def harness(self, tmp_path: Path) -> AsyncIterator[StoreHarness]:
        async with self.harness_on(tmp_path) as harness:
            yield harness

    # -- messages and acks -----------------------------------------------------------------
    async def test_recover_in_offset_order_across_queues(self, harness: StoreHarness) -> None:
        store = harness.store
        expected: dict[int, list[tuple[int, str | None]]] = {1: [], 2: [], 3: []}
        for n in range(30):
            queues = [q for q in (1, 2, 3) if n % q == 0]
            where = [(q, len(expected[q])) for q in queues]
            store.append(message(n), targets(*where))
            for q, offset in where:
                expected[q].append((offset, f"m{n}"))
        for offset in (1, 5, 9, 13):
            store.ack(1, offset)
        store.ack(2, 0)
        expected[1] = [e for e in expected[1] if e[0] not in (1, 5, 9, 13)]
        expected[2] = expected[2][1:]
        store.append(message(99), targets((4, 0)))
        store.ack(4, 0)

        store = await harness.restart()
        for q in (1, 2, 3):
            assert recovered(store, q) == expected[q]
        assert recovered(store, 4) == []
        assert recovered(store, 5) == []

    async def test_message_for_three_queues_acked_in_two_stays_for_third(
        self, harness: StoreHarness
    ) -> None:
        store = harness.store
        store.append(message(1), targets((1, 0), (2, 0), (3, 0)))
        store.ack(1, 0)
        store.ack(3, 0)
        assert store.statistics().messages == 1

        store = await harness.restart()
        assert recovered(store, 1) == []
        assert recovered(store, 2) == [(0, "m1")]
        assert recovered(store, 3) == []
        assert store.statistics().messages == 1
        store.ack(2, 0)
        assert totals(store) == (0, 0)

    async def test_out_of_order_acks(self, harness: StoreHarness) -> None:
        store = harness.store
        for n in range(10):
            store.append(message(n), targets((7, n)))
        for offset in (5, 2, 9):
            store.ack(7, offset)

        store = await harness.restart()
        assert recovered(store, 7) == [(n, f"m{n}") for n in (0, 1, 3, 4, 6, 7, 8)]

    async def test_acks_and_appends_after_a_restart_persist(self, harness: StoreHarness) -> None:
        store = harness.store
        for n in range(4):
            store.append(message(n), targets((1, n)))
        store = await harness.restart()
        store.ack(1, 0)
        store.append(message(4), targets((1, 4)))
        store = await harness.restart()
        assert recovered(store, 1) == [(n, f"m{n}") for n in (1, 2, 3, 4)]

    async def test_delivery_counts_recovered(self, harness: StoreHarness) -> None:
        store = harness.store
        store.append(message(0), targets((1, 0), (2, 0)))
        store.append(message(1), targets((1, 1)))
        store.note_delivery(1, 0, 1)
        store.note_delivery(1, 0, 3)
        store.note_delivery(1, 1, 2)

        store = await harness.restart()
        counts = {e.queue_offset: e.delivery_count for e in store.recover_queue(1)}
        assert counts == {0: 3, 1: 2}
        assert [e.delivery_count for e in store.recover_queue(2)] == [0]
        store.note_delivery(2, 0, 5)
        store = await harness.restart()
        assert [e.delivery_count for e in store.recover_queue(2)] == [5]

    async def test_delete_queue(self, harness: StoreHarness) -> None:
        store = harness.store
        shared, only_1, only_2 = message(0), message(1), message(2)
        store.append(shared, targets((1, 0), (2, 0)))
        store.append(only_1, targets((1, 1)))
        store.append(only_2, targets((2, 1)))
        assert store.queue_ids() == [1, 2]
        store.delete_queue(1)
        store.delete_queue(42)  # unknown: nothing happens
        store.ack(1, 0)  # an ack racing the delete
        assert store.queue_ids() == [2]
        sizes = len(shared.stored_bytes(harness.codecs)) + len(only_2.stored_bytes(harness.codecs))
        assert totals(store) == (2, sizes)

        store = await harness.restart()
        assert store.queue_ids() == [2]
        assert recovered(store, 1) == []
        assert recovered(store, 2) == [(0, "m0"), (1, "m2")]
        # The queue id may be used again, from offset 0, with nothing of the old queue in it.
        store.append(message(3), targets((1, 0)))
        store = await harness.restart()
        assert recovered(store, 1) == [(0, "m3")]

    async def test_ack_of_unknown_entry_is_a_no_op(self, harness: StoreHarness) -> None:
        store = harness.store
        store.append(message(0), targets((1, 0)))
        store.append(message(1), targets((1, 1)))
        before = totals(store)
        store.ack(99, 0)
        store.ack(1, 12345)
        store.note_delivery(99, 0, 4)
        store.note_delivery(1, 12345, 4)
        assert totals(store) == before
        store.ack(1, 0)
        store.ack(1, 0)
        assert store.statistics().messages == 1

        store = await harness.restart()
        assert recovered(store, 1) == [(1, "m1")]

    # -- tickets and durability ------------------------------------------------------------
    async def test_tickets_increase_and_become_durable(self, harness: StoreHarness) -> None:
        store = harness.store
        tickets = []
        for n in range(10):
            tickets.append(store.append(message(n), targets((1, n))))
            tickets.append(store.put_metadata("thing", f"k{n}", {"n": n}))
        tickets.append(store.put_metadata("thing", "k0", None))
        assert tickets == sorted(set(tickets))
        for ticket in tickets:
            with trio.testing.assert_checkpoints():
                await store.wait_durable(ticket)
            assert store.durable_ticket >= ticket
        with trio.testing.assert_checkpoints():
            await store.wait_durable(tickets[0])  # long durable: still a checkpoint

    async def test_concurrent_waiters_all_return(self, harness: StoreHarness) -> None:
        store = harness.store
        tickets = [store.append(message(n), targets((1, n))) for n in range(50)]
        async with trio.open_nursery() as nursery:
            for ticket in reversed(tickets):
                nursery.start_soon(store.wait_durable, ticket)
        assert store.durable_ticket >= tickets[-1]

        store = await harness.restart()
        later = [store.append(message(n), targets((1, n))) for n in range(50, 53)]
        assert later == sorted(set(later))
        await store.wait_durable(later[-1])
        assert store.durable_ticket >= later[-1]

    async def test_statistics(self, harness: StoreHarness) -> None:
        store = harness.store
        assert totals(store) == (0, 0)
        first, second = message(1), message(2, b"x" * 100)
        store.append(first, targets((1, 0), (2, 0)))
        ticket = store.append(second, targets((1, 1)))
        size_1 = len(first.stored_bytes(harness.codecs))
        size_2 = len(second.stored_bytes(harness.codecs))
        assert totals(store) == (2, size_1 + size_2)
        assert store.statistics().appended_ticket == ticket
        await store.wait_durable(ticket)
        assert store.statistics().durable_ticket >= ticket
        store.ack(1, 0)
        assert totals(store) == (2, size_1 + size_2)
        store.ack(2, 0)
        assert totals(store) == (1, size_2)

        store = await harness.restart()
        assert totals(store) == (1, size_2)

    # -- what a message keeps --------------------------------------------------------------
    async def test_foreign_message_round_trips(self, harness: StoreHarness) -> None:
        store = harness.store
        original = message(
            1,
            exchange="amq.headers",
            routing_key="a.b.c",
            persistent=False,
            priority=9,
            expiration_ms=60_000,
            headers=HEADERS,
            annotations={"x-death": [{"queue": "q", "reason": "expired", "count": 2}]},
        )
        store.append(original, targets((1, 0)))
        store = await harness.restart()
        [entry] = store.recover_queue(1)
        assert_same_message(entry.message, original, harness.codecs)

    async def test_native_message_round_trips(self, harness: StoreHarness) -> None:
        codecs = harness.codecs
        properties = Properties(
            content_type="application/json",
            content_encoding="utf-8",
            headers=HEADERS,
            delivery_mode=2,
            priority=3,
            correlation_id="c-1",
            reply_to="replies",
            expiration="1500",
            message_id="native-1",
            timestamp=1_700_000_000,
            type="order",
            user_id="guest",
            app_id="shop",
        )
        original = Message.native(
            b'{"a": 1}\x00\xff', exchange="amq.topic", routing_key="o.1", properties=properties
        )
        store = harness.store
        store.append(original, targets((1, 0)))
        assert original.raw is not None  # encoded when stored
        store = await harness.restart()
        [entry] = store.recover_queue(1)
        got = entry.message
        assert_same_message(got, original, codecs)
        assert got.decoded(codecs) == original.decoded(codecs)
        assert got.decoded(codecs).body == b'{"a": 1}\x00\xff'

    async def test_large_message_round_trips(self, harness: StoreHarness) -> None:
        body = random.Random(7).randbytes(1 << 20)
        original = message(1, body)
        harness.store.append(original, targets((1, 0)))
        store = await harness.restart()
        [entry] = store.recover_queue(1)
        assert_same_message(entry.message, original, harness.codecs)
        assert entry.message.stored_bytes(harness.codecs)[3:] == body

    async def test_ten_thousand_messages_recover_in_order(self, harness: StoreHarness) -> None:
        store = harness.store
        for n in range(10_000):
            store.append(message(n), targets((1, n), (2, n)) if n % 2 else targets((1, n)))
        store = await harness.restart()
        assert recovered(store, 1) == [(n, f"m{n}") for n in range(10_000)]
        assert recovered(store, 2) == [(n, f"m{n}") for n in range(1, 10_000, 2)]
        assert store.statistics().messages == 10_000

    # -- metadata --------------------------------------------------------------------------
    async def test_metadata_put_replace_delete_recover(self, harness: StoreHarness) -> None:
        store = harness.store
        queue = {"durable": True, "arguments": {"x-max-length": 10, "x-ratio": 0.5}}
        store.put_metadata("vhost", "/", {"name": "/", "tags": ["a", "b"], "limit": None})
        store.put_metadata("queue", "/|orders", queue)
        store.put_metadata("queue", "/|orders", {**queue, "durable": False})
        store.put_metadata("queue", "/|gone", {"durable": True})
        store.put_metadata("queue", "/|gone", None)
        store.put_metadata("user", "ünï", {"hash": "…"})
        store.put_metadata("user", "ünï", None)
        store.put_metadata("user", "never-there", None)
        expected = {
            "vhost": {"/": {"name": "/", "tags": ["a", "b"], "limit": None}},
            "queue": {"/|orders": {**queue, "durable": False}},
        }
        assert store.load_metadata() == expected
        store = await harness.restart()
        assert store.load_metadata() == expected

    async def test_load_metadata_is_a_copy(self, harness: StoreHarness) -> None:
        store = harness.store
        store.put_metadata("kind", "key", {"list": [1], "map": {"a": 1}})
        loaded = store.load_metadata()
        with suppress(TypeError, AttributeError):
            loaded["kind"]["key"]["list"].append(2)
        with suppress(TypeError, AttributeError):
            loaded["kind"]["key"]["map"]["b"] = 2
        with suppress(TypeError, AttributeError):
            loaded["kind"]["other"] = {}  # type: ignore[index]  # writing to it is the test
        assert store.load_metadata() == {"kind": {"key": {"list": [1], "map": {"a": 1}}}}

    @pytest.mark.parametrize(
        "value",
        [
            {"blob": b"bytes"},
            {"set": {1, 2}},
            {"thing": object()},
            {"nested": {1: "int key"}},
            {"nan": float("nan")},
            {"list": [1, float("inf")]},
            ["not", "a", "mapping"],
        ],
        ids=["bytes", "set", "object", "int-key", "nan", "inf", "list"],
    )
    async def test_metadata_rejects_what_json_cannot_hold(
        self, harness: StoreHarness, value: Any
    ) -> None:
        store = harness.store
        store.put_metadata("queue", "/|q", {"ok": True})
        with pytest.raises(TypeError) as raised:
            store.put_metadata("queue", "/|q", value)
        assert "queue" in str(raised.value)
        assert "/|q" in str(raised.value)  # the message names the record
        assert store.load_metadata() == {"queue": {"/|q": {"ok": True}}}
        store = await harness.restart()
        assert store.load_metadata() == {"queue": {"/|q": {"ok": True}}}

    # -- any sequence of operations --------------------------------------------------------
    @settings(
        max_examples=40,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(ops=st.lists(OPERATIONS, max_size=40))
    async def test_matches_a_model(self, tmp_path: Path, ops: Sequence[tuple[Any, ...]]) -> None:
        path = Path(tempfile.mkdtemp(dir=tmp_path))
        async with self.harness_on(path) as harness:
            model = StoreModel()
            for op in ops:
                if op[0] == "restart":
                    await harness.restart()
                else:
                    model.apply(harness.store, op, harness.codecs)
            store = await harness.restart()
            for q in (1, 2, 3):
                entries = store.recover_queue(q)
                got = [(e.queue_offset, e.message.message_id, e.delivery_count) for e in entries]
                assert got == model.expected(q)
            assert totals(store) == model.totals()

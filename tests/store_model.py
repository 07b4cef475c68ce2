"""A reference model of a store, and the message helpers the store contract uses.

`StoreModel` says what a store must hold after any sequence of appends, acks, delivery
counts, queue deletions and restarts; the contract's hypothesis test compares a backend with
it. Kept apart from tests/store_contract.py so that each stays readable in one sitting.
"""

from __future__ import annotations

from typing import Any

import attrs
from hypothesis import strategies as st

from herald.core.message import CodecRegistry, Message
from herald.core.store import QueueTarget, Store

FOREIGN = "contract-proto"
"""A protocol with no codec in the registry: the store must keep its bytes without decoding."""


def message(n: int, body: bytes | None = None, **fields: Any) -> Message:
    """A message of a protocol the registry does not know, with id `m<n>`."""
    body = body if body is not None else f"body {n}".encode()
    values: dict[str, Any] = {
        "exchange": "ex",
        "routing_key": f"key.{n}",
        "persistent": True,
        "message_id": f"m{n}",
    }
    values.update(fields)
    return Message(protocol=FOREIGN, raw=b"HDR" + body, body_size=len(body), **values)


def targets(*pairs: tuple[int, int]) -> list[QueueTarget]:
    return [QueueTarget(q, o) for q, o in pairs]


OPERATIONS = st.one_of(
    st.tuples(st.just("append"), st.sets(st.integers(1, 3), min_size=1)),
    st.tuples(st.just("ack"), st.integers(1, 3), st.integers(0, 12)),
    st.tuples(st.just("deliver"), st.integers(1, 3), st.integers(0, 12), st.integers(1, 5)),
    st.tuples(st.just("delete"), st.integers(1, 3)),
    st.tuples(st.just("restart")),
)
"""Store operations on queues 1-3; ack/deliver pick a live entry by index, or an unknown one."""


@attrs.define
class StoreModel:
    """What a store should hold after a sequence of operations: {queue: {offset: [n, count]}}."""

    queues: dict[int, dict[int, list[int]]] = attrs.field(factory=dict)
    next_offset: dict[int, int] = attrs.field(factory=dict)
    sizes: dict[int, int] = attrs.field(factory=dict)

    def apply(self, store: Store, op: tuple[Any, ...], codecs: CodecRegistry) -> None:
        kind, *args = op
        if kind == "append":
            n = len(self.sizes)
            msg = message(n, b"z" * (n % 7 * 10))
            where = []
            for q in sorted(args[0]):
                offset = self.next_offset.get(q, 0)
                self.next_offset[q] = offset + 1
                self.queues.setdefault(q, {})[offset] = [n, 0]
                where.append((q, offset))
            store.append(msg, targets(*where))
            self.sizes[n] = len(msg.stored_bytes(codecs))
        elif kind == "delete":
            store.delete_queue(args[0])
            self.queues.pop(args[0], None)
            self.next_offset.pop(args[0], None)
        else:
            q, index = args[0], args[1]
            live = sorted(self.queues.get(q, {}))
            offset = live[index] if index < len(live) else self.next_offset.get(q, 0) + index
            if kind == "ack":
                store.ack(q, offset)
                self.queues.get(q, {}).pop(offset, None)
            else:
                store.note_delivery(q, offset, args[2])
                if offset in self.queues.get(q, {}):
                    self.queues[q][offset][1] = args[2]

    def expected(self, q: int) -> list[tuple[int, str, int]]:
        entries = sorted(self.queues.get(q, {}).items())
        return [(offset, f"m{n}", count) for offset, (n, count) in entries]

    def totals(self) -> tuple[int, int]:
        live = {n for entries in self.queues.values() for n, _ in entries.values()}
        return len(live), sum(self.sizes[n] for n in live)

"""An idle MQTT connection on the shared adapter (core/adapter.py): after CONNECT it is one
task, the reader, with no nursery of its own; the writer runs only while there is output.
That shape is what keeps 10,000 idle MQTT connections within the memory target
(PERFORMANCE.md). The mechanisms themselves are tested in core: tests/test_adapter.py (the
writer on demand, crash isolation, the bounded close, lingering), tests/test_transports.py
(the direct socket read) and tests/test_connection_deadlines.py (the deadline heap)."""

from __future__ import annotations

from pathlib import Path
from types import MethodType

import pytest
import trio

from herald.core import adapter
from herald.plugins.mqtt.session import Session
from tests.mqtt_e2e.helpers import mqtt_broker, port

WRITER_NAME = "mqtt connection writer"


def connect_packet(client_id: str) -> bytes:
    def text(value: str) -> bytes:
        return len(value).to_bytes(2, "big") + value.encode()

    variable = text("MQTT") + bytes([4, 0xC2]) + (600).to_bytes(2, "big")
    body = variable + text(client_id) + text("guest") + text("guest")
    return bytes([0x10, len(body)]) + body


def all_tasks() -> list[trio.lowlevel.Task]:
    root = trio.lowlevel.current_root_task()
    assert root is not None
    tasks, pending = [], [root]
    while pending:
        task = pending.pop()
        tasks.append(task)
        pending.extend(child for n in task.child_nurseries for child in n.child_tasks)
    return tasks


async def test_an_idle_connection_is_one_task_without_a_nursery(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(adapter, "WRITER_IDLE_S", 0.01)
    async with mqtt_broker(tmp_path) as broker:
        with trio.fail_after(10):
            client = await trio.open_tcp_stream("127.0.0.1", port(broker))
            await client.send_all(connect_packet("idle"))
            assert await client.receive_some(4) == b"\x20\x02\x00\x00"  # CONNACK, accepted
            while any(t.name == WRITER_NAME for t in all_tasks()):
                await trio.sleep(0.01)  # the writer ends once idle
            (task,) = [t for t in all_tasks() if t.name == "mqtt connection"]
            assert task.child_nurseries == []
            (connection,) = broker.connections
            closer = connection.closer  # the session's bound close_from_broker
            assert isinstance(closer, MethodType)
            session = closer.__self__
            assert isinstance(session, Session)
            assert session.link is not None and session.link.writing is None
            assert session.timer_at is not None  # keep alive: an entry in the kernel's heap
            await client.send_all(b"\xc0\x00")  # PINGREQ: a writer starts again
            assert await client.receive_some(2) == b"\xd0\x00"
            await client.aclose()
            while len(broker.connections):
                await trio.sleep(0.01)

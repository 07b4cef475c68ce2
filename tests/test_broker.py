"""The broker's lifecycle with a real protocol plugin over real sockets.

`LinePlugin` is a tiny protocol registered exactly like a third-party one: it serves through
`herald.core.listeners.serve_tcp`, registers each connection with the broker, and publishes
each line it reads to the default exchange. The line "crash" makes its handler raise, which
must close that connection only.
"""

from __future__ import annotations

import gc
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from herald.core import hookimpl
from herald.core.broker import GC_YOUNG_THRESHOLD, Broker
from herald.core.embedding import embedded
from herald.core.listeners import serve_tcp
from herald.core.plugin_types import ConfigSection, ProtocolSpec
from herald.storage.memory import MemoryStore
from tests.sinks import RecordingSink, msg


@attrs.frozen
class LineConfig:
    host: str = "127.0.0.1"
    port: int = 0


class LinePlugin:
    def __init__(self) -> None:
        self.closed_politely = 0

    @hookimpl
    def herald_config_sections(self) -> list[ConfigSection]:
        return [ConfigSection("line", LineConfig)]

    @hookimpl
    def herald_protocols(self) -> list[ProtocolSpec]:
        return [ProtocolSpec("line", "publishes each line to a queue", self.serve)]

    async def serve(self, broker: Broker, config: LineConfig, *, task_status: Any) -> None:
        async def handle(stream: trio.abc.Stream) -> None:
            closing = trio.Event()

            def closer(reason: str) -> None:
                self.closed_politely += 1
                closing.set()

            connection = broker.connections.open("line", "peer", closer)
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._read, broker, stream, connection, nursery)
                    await closing.wait()
                    await stream.send_all(b"bye\n")
                    nursery.cancel_scope.cancel()
            finally:
                broker.connections.close(connection, "done")

        await serve_tcp(handle, config.host, config.port, protocol="line", task_status=task_status)

    async def _read(self, broker: Broker, stream: Any, connection: Any, nursery: Any) -> None:
        vhost = broker.default_vhost
        vhost.declare_queue("lines", exclusive=True, owner=connection) if (
            "lines" not in vhost.queues
        ) else None
        buffer = b""
        while data := await stream.receive_some(1024):
            buffer += data
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if line == b"crash":
                    raise RuntimeError("handler bug")
                vhost.publish(msg(line, "lines"))
                await stream.send_all(b"ok\n")
        nursery.cancel_scope.cancel()


async def run_line_broker(
    tmp_path: Path, plugin: LinePlugin
) -> AbstractAsyncContextManager[Broker]:
    return embedded(
        data_dir=tmp_path, extra_plugins=[plugin], plugins=["line"], store=MemoryStore()
    )


async def test_listeners_are_reported_and_connections_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    plugin = LinePlugin()
    caplog.set_level("INFO", logger="herald")
    async with await run_line_broker(tmp_path, plugin) as broker:
        (listener,) = broker.listeners
        assert (listener.protocol, listener.transport, listener.host) == (
            "line",
            "tcp",
            "127.0.0.1",
        )
        assert listener.port > 0
        stream = await trio.open_tcp_stream("127.0.0.1", listener.port)
        with trio.fail_after(5):
            await stream.send_all(b"hello\n")
            assert await stream.receive_some(10) == b"ok\n"
        assert len(broker.connections) == 1
        assert broker.default_vhost.queues["lines"].message_count == 1
        await stream.aclose()
        with trio.fail_after(5):
            while len(broker.connections):
                await trio.sleep(0.01)
        # The exclusive queue went with its connection.
        assert "lines" not in broker.default_vhost.queues
    messages = [r.getMessage() for r in caplog.records]
    assert any("connection #1 opened: line" in m for m in messages)
    assert any("connection #1 closed: line" in m for m in messages)


async def test_a_crashing_connection_leaves_the_others_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    plugin = LinePlugin()
    async with await run_line_broker(tmp_path, plugin) as broker:
        port = broker.listeners[0].port
        good = await trio.open_tcp_stream("127.0.0.1", port)
        bad = await trio.open_tcp_stream("127.0.0.1", port)
        with trio.fail_after(5):
            await good.send_all(b"first\n")
            assert await good.receive_some(10) == b"ok\n"
            await bad.send_all(b"crash\n")
            assert await bad.receive_some(10) == b""  # closed by the broker
            await good.send_all(b"second\n")
            assert await good.receive_some(10) == b"ok\n"
        assert len(broker.connections) == 1
        await good.aclose()
    assert any("handler failed" in r.getMessage() for r in caplog.records)


async def test_stop_closes_connections_politely_then_stops(tmp_path: Path) -> None:
    plugin = LinePlugin()
    async with await run_line_broker(tmp_path, plugin) as broker:
        stream = await trio.open_tcp_stream("127.0.0.1", broker.listeners[0].port)
        await stream.send_all(b"x\n")
        assert await stream.receive_some(10) == b"ok\n"
        broker.stop()
        with trio.fail_after(5):
            assert await stream.receive_some(10) == b"bye\n"
            await broker.wait_stopped()
    assert plugin.closed_politely == 1


async def test_graceful_timeout_bounds_shutdown(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    """A connection that ignores the close request is cancelled after graceful_timeout."""

    class Stubborn(LinePlugin):
        async def serve(self, broker: Broker, config: LineConfig, *, task_status: Any) -> None:
            async def handle(stream: trio.abc.Stream) -> None:
                connection = broker.connections.open("line", "peer", lambda reason: None)
                try:
                    await trio.sleep_forever()
                finally:
                    broker.connections.close(connection, "cancelled")

            await serve_tcp(
                handle, config.host, config.port, protocol="line", task_status=task_status
            )

    async with embedded(
        data_dir=tmp_path,
        extra_plugins=[Stubborn()],
        plugins=["line"],
        settings=["broker.graceful_timeout=3"],
        store=MemoryStore(),
    ) as broker:
        stream = await trio.open_tcp_stream("127.0.0.1", broker.listeners[0].port)
        while not len(broker.connections):
            await trio.sleep(0.01)
        start = trio.current_time()
        broker.stop()
        await broker.wait_stopped()
        assert 3 <= trio.current_time() - start < 4
        await stream.aclose()


async def test_in_process_publish_and_consume(kernel: Broker) -> None:
    vhost = kernel.default_vhost
    queue = vhost.declare_queue("q")
    sink = RecordingSink()
    queue.add_consumer("c", sink)
    vhost.publish(msg("hi", "q"))
    assert sink.bodies == [b"hi"]


async def test_a_running_broker_tunes_the_collector_and_restores_it(tmp_path: Path) -> None:
    """While any broker runs, CPython's first GC threshold is raised and what existed at its
    start is frozen; the last broker to stop puts the collector back as it found it."""
    # Another test's broker may still run in a thread (a session-scoped fixture): then the
    # collector is already tuned, and "as it found it" means that.
    before, frozen_before = gc.get_threshold(), gc.get_freeze_count()
    async with embedded(data_dir=tmp_path / "a", store=MemoryStore(), plugins=[]):
        assert gc.get_threshold()[0] >= max(before[0], GC_YOUNG_THRESHOLD)
        assert gc.get_threshold()[1:] == before[1:]
        assert gc.get_freeze_count() > 0
        async with embedded(data_dir=tmp_path / "b", store=MemoryStore(), plugins=[]):
            pass
        assert gc.get_threshold()[0] >= GC_YOUNG_THRESHOLD  # the first broker still runs
    assert gc.get_threshold() == before
    if frozen_before == 0:  # no other broker ran: everything is unfrozen again
        assert gc.get_freeze_count() == 0
    else:  # another still runs: what was frozen under it stays frozen until it stops
        assert gc.get_freeze_count() >= frozen_before

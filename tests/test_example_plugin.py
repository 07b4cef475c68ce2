"""The example third-party plugin (tests/example_plugin), end to end: its sniffing, and its
protocol served inside a real broker, found through its entry point."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from herald.core.embedding import embedded
from herald.core.plugins import get_plugin_manager
from herald.storage.memory import MemoryStore
from tests.test_plugins import echo, example_on_path

__all__ = ["example_on_path"]  # a fixture, used by name


@given(st.binary(max_size=8))
def test_example_sniff(prefix: bytes) -> None:
    result = echo.sniff(prefix)
    if prefix.startswith(b"ECHO"):
        assert result is True
    elif b"ECHO".startswith(prefix):
        assert result is None
    else:
        assert result is False


async def _receive_exactly(stream: trio.SocketStream, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = await stream.receive_some(size - len(data))
        assert chunk, f"connection closed after {data!r}"
        data += chunk
    return data


async def _closed_by_peer(stream: trio.SocketStream) -> bool:
    try:
        while await stream.receive_some(65536):
            pass
    except trio.BrokenResourceError:
        pass  # reset because the server closed with our bytes unread
    return True


async def test_example_plugin_echoes_lines_over_tcp(
    example_on_path: None, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    """The example plugin, loaded from its entry point, serving inside a real broker."""
    caplog.set_level(logging.INFO, logger="herald")
    with trio.fail_after(10):
        async with embedded(data_dir=tmp_path, plugins=["echo"], store=MemoryStore()) as broker:
            assert [(lst.protocol, lst.transport, lst.host) for lst in broker.listeners] == [
                ("echo", "tcp", "127.0.0.1")
            ]
            port = broker.listeners[0].port
            assert port > 0
            max_line = broker.config.section("echo").max_line

            good = await trio.open_tcp_stream("127.0.0.1", port)
            await good.send_all(b"ECHO hello\nECHO wor")
            assert await _receive_exactly(good, 11) == b"ECHO hello\n"

            # A client breaking the protocol loses its own connection, nothing else.
            bad = await trio.open_tcp_stream("127.0.0.1", port)
            await bad.send_all(b"x" * (max_line + 1))
            assert await _closed_by_peer(bad)

            await good.send_all(b"ld\n")
            assert await _receive_exactly(good, 11) == b"ECHO world\n"
            assert len(broker.connections) == 1
            await good.aclose()
            await bad.aclose()
    closed = [r.getMessage() for r in caplog.records if "closed: echo" in r.getMessage()]
    assert any("line longer than 65536 bytes" in m for m in closed)


def test_tracing_logs_hook_calls(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("HERALD_TRACE_PLUGINS", "1")
    caplog.set_level(logging.DEBUG, logger="herald.plugins")
    plugins = get_plugin_manager(load_entrypoints=False, builtins=[echo])
    plugins.protocols()
    messages = [r.getMessage() for r in caplog.records if r.name == "herald.plugins"]
    assert any(m.startswith("hook herald_protocols()") for m in messages)
    assert any(m.startswith("hook herald_protocols returned [[ProtocolSpec(") for m in messages)

"""herald-example-echo: a small third-party herald protocol plugin.

It serves a line echo protocol over TCP: every line a client sends (`ECHO hello\\n`) comes back
as it was sent. It is registered as a real entry point (see the `.dist-info` directory next to
this package; a pip-installed plugin gets the same from its pyproject.toml):

    [project.entry-points.herald]
    echo = "herald_example_echo"

docs/plugins.md walks through it.
"""

from __future__ import annotations

import logging
from typing import Any

import attrs
import trio

from herald.core import hookimpl
from herald.core.adapter import ConnectionServer
from herald.core.plugin_types import ConfigSection, Listener, PluginInfo, ProtocolSpec
from herald.core.serving import ListenerSpec, serve_protocol
from herald.core.session_io import SessionIO

log = logging.getLogger(__name__)

MAGIC = b"ECHO"


@attrs.frozen
class EchoConfig:
    """The `[echo]` section of herald's config file. Every field has a default."""

    host: str = "127.0.0.1"
    port: int = 0  # 0: any free port; the bound one is reported in the Listener
    max_line: int = 64 * 1024


class LineTooLong(Exception):
    """A client sent more than `max_line` bytes without a newline."""


@hookimpl
def herald_plugin_info() -> PluginInfo:
    return PluginInfo("echo", "Line echo protocol (example plugin)", "0.1")


@hookimpl
def herald_config_sections() -> list[ConfigSection]:
    return [ConfigSection("echo", EchoConfig)]


@hookimpl
def herald_protocols() -> list[ProtocolSpec]:
    return [
        ProtocolSpec(
            name="echo",
            description="Echoes every line back",
            serve=serve,
            sniff=sniff,
            sniff_bytes=len(MAGIC),
        )
    ]


def sniff(prefix: bytes) -> bool | None:
    """True if a connection starting with `prefix` speaks echo; None until 4 bytes arrived."""
    if len(prefix) < len(MAGIC):
        return None if MAGIC.startswith(prefix) else False
    return prefix.startswith(MAGIC)


async def serve(
    broker: Any,
    config: EchoConfig | None,
    *,
    task_status: trio.TaskStatus[list[Listener]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Listen, report the bound addresses, then serve until cancelled.

    The plugin declares where it listens and how a session is made; herald's adapter does
    the rest: the listening and the reporting of real ports (port 0 works), one task per
    connection reading into the session and a writer only while there is output, crash
    isolation (a session that raises closes only its own connection), and the connection's
    registration with the broker (one log line when it opens and closes, a place in the
    management API, a polite close at shutdown).
    """
    config = config if config is not None else EchoConfig()

    def new_session(connection: Any, peer_host: str | None) -> EchoSession:
        return EchoSession(config.max_line)

    server = ConnectionServer(broker, "echo", new_session, close_timeout=1.0)
    listeners = [ListenerSpec("tcp", config.host, config.port, "echo.port")]
    await serve_protocol(server, listeners, task_status=task_status)


class EchoSession(SessionIO):
    """The protocol: complete lines go back as they came; an unfinished line over `max_line`
    bytes ends the connection. `SessionIO` is the output side every herald protocol shares."""

    def __init__(self, max_line: int) -> None:
        super().__init__(write_buffer=max_line)
        self.codec = LineCodec(max_line)

    async def receive(self, data: bytes) -> None:
        try:
            self.codec.receive_data(data)
        except LineTooLong as exc:
            self.finish(str(exc))
        self.wake()

    def finish(self, reason: str) -> None:
        if not self.done:
            self.done, self.close_reason = True, reason
        self.wake()

    def connection_lost(self, reason: str) -> None:
        self.finish(reason)

    def close_from_broker(self, reason: str) -> None:
        self.finish(reason)

    def teardown(self) -> None:
        """Nothing held: no queues, no consumers."""


class LineCodec:
    """Sans-IO: bytes in, whole lines queued for sending back."""

    def __init__(self, max_line: int) -> None:
        self.max_line = max_line
        self._buffer = bytearray()
        self._out = bytearray()

    def receive_data(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        end = buffer.rfind(b"\n") + 1
        if end:
            self._out += buffer[:end]
            del buffer[:end]
        if len(buffer) > self.max_line:
            raise LineTooLong(f"line longer than {self.max_line} bytes")

    def data_to_send(self) -> bytes:
        data, self._out = bytes(self._out), bytearray()
        return data

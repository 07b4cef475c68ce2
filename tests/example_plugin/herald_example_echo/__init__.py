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
from herald.core.listeners import peer_name, serve_tcp
from herald.core.plugin_types import ConfigSection, Listener, PluginInfo, ProtocolSpec

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

    `serve_tcp` does the listening, the reporting of real ports (port 0 works), and the
    isolation of each connection: a handler that raises is logged and closes only its own
    connection. Registering each connection with the broker gives it one log line when it
    opens and closes, a place in the management API, and a polite close at shutdown.
    """
    config = config if config is not None else EchoConfig()

    async def handle(stream: trio.abc.Stream) -> None:
        connection = broker.connections.open("echo", peer_name(stream))
        reason = "client closed the connection"
        try:
            await echo_lines(stream, config.max_line)
        except LineTooLong as exc:
            reason = str(exc)
            raise
        finally:
            broker.connections.close(connection, reason)

    await serve_tcp(
        handle,
        config.host,
        config.port,
        protocol="echo",
        setting="echo.port",  # named when the port is taken
        task_status=task_status,
    )


async def echo_lines(stream: trio.abc.Stream, max_line: int) -> None:
    """Send back each complete line; an unfinished line over `max_line` bytes is an error."""
    buffer = bytearray()
    while data := await stream.receive_some(65536):
        buffer += data
        end = buffer.rfind(b"\n") + 1
        if end:
            await stream.send_all(bytes(buffer[:end]))
            del buffer[:end]
        if len(buffer) > max_line:
            raise LineTooLong(f"line longer than {max_line} bytes")

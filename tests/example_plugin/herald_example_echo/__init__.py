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
    """Listen, report the bound addresses, then serve until cancelled."""
    config = config if config is not None else EchoConfig()
    tcp_listeners = await trio.open_tcp_listeners(config.port, host=config.host)
    bound = []
    for listener in tcp_listeners:
        host, port = listener.socket.getsockname()[:2]
        bound.append(Listener("echo", "tcp", host, port))

    async def handle(stream: trio.SocketStream) -> None:
        # One connection's failure must close that connection only: trio.serve_listeners
        # would otherwise let the exception cancel every connection and the listener.
        try:
            await echo_lines(stream, config.max_line)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        except Exception:
            log.exception("echo connection failed; closing it")

    async with trio.open_nursery() as nursery:
        await nursery.start(trio.serve_listeners, handle, tcp_listeners)
        task_status.started(bound)


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

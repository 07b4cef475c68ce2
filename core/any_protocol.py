"""One port for every protocol: the protocol is told from a connection's first bytes
(ActiveMQ Apollo's `AnyProtocol`), then the connection is served by that protocol's
`ConnectionServer` exactly as on its own port.

Each protocol plugin's `ProtocolSpec.sniff(prefix)` answers True (mine), False (cannot be
mine) or None (need more bytes, at most `sniff_bytes`). The port reads until one says True,
or every one says False, or the handshake timeout passes; a connection whose first bytes
match no protocol is closed with one log line. Off by default: `broker.any_port` (0 picks a
free port) and `broker.any_tls_port` turn it on. Only protocols that are running and can
sniff are offered (AMQP 0-9-1, MQTT and STOMP; not HTTP).
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING

import attrs
import trio

from herald.core.listeners import peer_name, serve_tcp
from herald.core.plugin_types import Listener, ProtocolSpec
from herald.core.transports import StreamTransport

if TYPE_CHECKING:
    from herald.core.broker import Broker

log = logging.getLogger(__name__)

PROTOCOL = "any"
SNIFF_TIMEOUT_S = 10.0
"""How long a client may take to send enough bytes to tell its protocol."""
REFUSED_LINGER_S = 1.0
"""How long a refused connection's input is read and discarded before the socket closes."""


@attrs.frozen
class Sniffer:
    name: str
    sniff: Callable[[bytes], bool | None]
    most: int


def sniffers(specs: Sequence[ProtocolSpec], running: Sequence[str]) -> list[Sniffer]:
    """The protocols the port can offer: running, and able to sniff."""
    return [
        Sniffer(spec.name, spec.sniff, spec.sniff_bytes)
        for spec in specs
        if spec.sniff is not None and spec.name in running
    ]


def detect(candidates: Sequence[Sniffer], prefix: bytes) -> str | bool:
    """The protocol `prefix` starts, True while more bytes could tell, False when none can."""
    undecided = False
    for candidate in candidates:
        verdict = candidate.sniff(prefix[: candidate.most])
        if verdict:
            return candidate.name
        if verdict is None and len(prefix) < candidate.most:
            undecided = True
    return undecided


async def serve_any_port(
    broker: Broker,
    *,
    tls: bool = False,
    task_status: trio.TaskStatus[list[Listener]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve `broker.any_port` (or `any_tls_port` with `tls`) until cancelled."""
    section = broker.config.broker
    port = section.any_tls_port if tls else section.any_port
    assert port is not None
    context: ssl.SSLContext | None = broker.tls_context if tls else None
    if tls and context is None:
        raise ValueError("broker.any_tls_port needs [tls] with a certificate")
    candidates = sniffers(broker.plugins.protocols(section.plugins), list(broker.protocol_servers))
    most = max((c.most for c in candidates), default=1)

    async def handle(stream: trio.abc.Stream) -> None:
        prefix = b""
        verdict: str | bool = True
        with trio.move_on_after(SNIFF_TIMEOUT_S):
            while verdict is True:
                data = await stream.receive_some(most - len(prefix) or 1)
                if not data:
                    return  # gone before saying anything: nothing to log
                prefix += data
                verdict = detect(candidates, prefix)
        if not isinstance(verdict, str):
            why = "no protocol matches its first bytes" if verdict is False else "too slow"
            log.info(
                "any-protocol port: closing a connection from %s: %s %r",
                peer_name(stream),
                why,
                prefix[:16],
            )
            await StreamTransport(stream).linger(REFUSED_LINGER_S)  # a close, not a reset
            return
        server = broker.protocol_servers.get(verdict)
        if server is None:  # the protocol stopped meanwhile (shutdown)
            return
        await server.run_connection(stream, initial=prefix)

    setting = "broker.any_tls_port" if tls else "broker.any_port"
    start = partial(
        serve_tcp,
        handle,
        section.any_host,
        port,
        protocol=PROTOCOL,
        ssl_context=context,
        setting=setting,
    )
    async with trio.open_nursery() as nursery:
        task_status.started(await nursery.start(start))

"""The cluster port (`cluster.listen`, default 0.0.0.0:25680): where slaves dial their master.

It listens for the node's whole life, whatever its role, because the role changes under it:
the first frame of each connection picks the stream. HELLO goes to the node's HA master when
it is one (`handler()` returns it), else it is refused with NOT_MASTER naming the master's
cluster address when known, so a slave that dialled an old master learns where to go.
LINK_HELLO (the node link of shared queues) goes to the master's `LinkOrigin`
(cluster/shared/link.py); a node that is not master refuses it with NOT_MASTER. A peer that
sends no first frame within `HELLO_TIMEOUT_S` is dropped.

The address peers dial (`advertised`) is `cluster.advertise`, else the bound address with the
node's advertised host for a wildcard (addresses.py), published in the node key and the
group state.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from herald.cluster.config import WILDCARD_HOSTS, join_address, split_address
from herald.cluster.frames import Hello, LinkHello, Refuse, RefuseCode, Role
from herald.cluster.peer import Peer, PeerGone, leaves

if TYPE_CHECKING:
    from herald.cluster.config import ClusterConfig
    from herald.cluster.ha.master import HAMaster
    from herald.cluster.shared.link import LinkOrigin

log = logging.getLogger("herald.cluster.port")

HELLO_TIMEOUT_S = 5.0


class ClusterPort:
    """The listener. `handler()` is the node's HA master now (None on a slave); `master()`
    names the group's master's cluster address for a refusal ("" if unknown)."""

    def __init__(
        self,
        config: ClusterConfig,
        host: str,
        handler: Callable[[], HAMaster | None],
        master: Callable[[], str],
        link: Callable[[], LinkOrigin | None] = lambda: None,
    ) -> None:
        self.config = config
        self.host = host
        self.handler = handler
        self.master = master
        self.link = link
        self.advertised = config.advertise

    async def run(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        """Bind, report the advertised address, serve until cancelled."""
        where = split_address(self.config.listen)
        assert where is not None  # the config's validator checked it
        bind_host, port = where
        listeners = await trio.open_tcp_listeners(
            port, host=None if bind_host in WILDCARD_HOSTS else bind_host
        )
        bound = listeners[0].socket.getsockname()[1]
        if not self.advertised:
            host = self.host if bind_host in WILDCARD_HOSTS else bind_host
            self.advertised = join_address(host, bound)
        log.info(
            "cluster port on %s (advertised %s)", join_address(bind_host, bound), self.advertised
        )
        task_status.started(self.advertised)
        await trio.serve_listeners(self._serve, listeners)

    async def _not_master(self, peer: Peer) -> None:
        master = self.master()
        where = f": the master is at {master}" if master else ""
        await peer.send(Refuse(RefuseCode.NOT_MASTER, f"not the master{where}"))

    async def _serve(self, stream: trio.SocketStream) -> None:
        peer = Peer(stream, Role.ACCEPTOR, "cluster port peer")
        try:
            first: object = None
            with trio.move_on_after(HELLO_TIMEOUT_S):
                first = await peer.receive()
            if isinstance(first, Hello):
                handler = self.handler()
                if handler is not None:
                    await handler.serve(peer, first)
                else:
                    await self._not_master(peer)
            elif isinstance(first, LinkHello):
                origin = self.link()
                if origin is not None:
                    await origin.serve(peer, first)
                else:
                    await self._not_master(peer)
        except* PeerGone as group:
            log.debug("cluster port: %s", "; ".join(map(str, leaves(group))))
        except* Exception:  # one connection's failure must not take the port down
            log.exception("cluster port: a connection failed")
        finally:
            await peer.aclose()

"""`Peer`: a `FrameConnection` (cluster/frames/) over a Trio stream, for the cluster port's
two ends (the HA master and slave, later the node link).

The codec stays sans-IO; this is the only place where its bytes meet a socket. `receive`
returns the next frame, or `ConnectionClosed` once the peer ended its stream between two
frames; a peer that broke the protocol gets the codec's REFUSE (when it has one) and
`PeerGone`. Sends are serialised by a lock, so a sender task and a reader task can share a
peer (the reader refuses a bad ACK while the sender streams).
"""

from __future__ import annotations

import contextlib
import logging

import trio

from herald.cluster.frames import NEED_DATA, ConnectionClosed, Frame, FrameConnection, Role
from herald.core.codec_kit import RemoteProtocolError

log = logging.getLogger("herald.cluster.peer")

RECEIVE_SIZE = 1 << 20
"""Read up to this much per receive: one DATA frame of 256 KiB and its neighbours."""


BROKEN = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)


def leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    """The exceptions of a (nested) exception group, as raised: what a nursery wrapped."""
    out: list[BaseException] = []
    for exc in group.exceptions:
        out.extend(leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out


class PeerGone(Exception):
    """The peer broke the protocol or the connection broke: this stream is over."""


class Peer:
    """One end of a cluster-port connection: `send`, `receive`, `aclose`."""

    def __init__(self, stream: trio.abc.Stream, role: Role, name: str = "") -> None:
        self.stream = stream
        self.conn = FrameConnection(role)
        self.name = name
        self._send_lock = trio.Lock()

    async def send(self, *frames: Frame) -> None:
        """Send `frames` in one write; raises PeerGone when the connection broke."""
        async with self._send_lock:
            for frame in frames:
                self.conn.send(frame)
            data = self.conn.data_to_send()
            try:
                await self.stream.send_all(data)
            except BROKEN as exc:
                raise PeerGone(f"{self.name or 'peer'}: connection lost ({exc})") from None

    async def receive(self) -> Frame | ConnectionClosed:
        """The next frame; ConnectionClosed at a clean end; PeerGone on a protocol error (the
        codec's REFUSE sent first when it has one) or a broken connection."""
        conn = self.conn
        while True:
            try:
                event = conn.next_event()
            except RemoteProtocolError as exc:
                reply = conn.error_reply()
                if reply is not None:
                    conn.send(reply)
                    with trio.move_on_after(1), contextlib.suppress(*BROKEN):
                        await self.stream.send_all(conn.data_to_send())
                raise PeerGone(f"{self.name or 'peer'}: protocol error: {exc.text}") from None
            if event is not NEED_DATA:
                assert not isinstance(event, type)
                return event
            try:
                data = await self.stream.receive_some(RECEIVE_SIZE)
            except BROKEN as exc:
                raise PeerGone(f"{self.name or 'peer'}: connection lost ({exc})") from None
            conn.receive_data(data)

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            await self.stream.aclose()

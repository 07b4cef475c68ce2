"""The node link (CLUSTER.md §4.1): a slot holder reads a remote origin's messages and acks
them there, over the origin group's master's cluster port.

`LinkOrigin.serve` is the origin's end (the cluster port hands it a LINK_HELLO): READ answers
ENTRIES with the live messages of an offset range, each as the message record's bytes as
stored, neither decoded nor encoded at the origin (the holder decodes it once, CRC checked);
ACKS acks offsets in the origin's log and answers ACKED once those acks are durable (flushed,
and replicated in sync mode). A node that is not its group's master
answers LINK_ERROR NOT_MASTER, so the holder re-resolves the master through etcd.

`LinkPool` is the holder's end: one link per origin group, dialled to the address the group's
state names, requests matched to answers by `req`. Acks are idempotent (an offset acked
twice is acked once), so a holder resends a batch whose ACKED it never saw.
"""

from __future__ import annotations

import hmac
import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import trio

from herald.cluster.config import split_address
from herald.cluster.frames import (
    Acked,
    Acks,
    ConnectionClosed,
    Entries,
    Entry,
    LinkError,
    LinkErrorCode,
    LinkHello,
    Read,
    Refuse,
    RefuseCode,
    Role,
)
from herald.cluster.peer import Peer, PeerGone
from herald.storage import record as rec

if TYPE_CHECKING:
    from herald.cluster.config import ClusterConfig
    from herald.cluster.shared.queue import SharedQueue
    from herald.cluster.shared.runtime import SharedRuntime
    from herald.core.message import Message

log = logging.getLogger("herald.cluster.shared")

REQUEST_TIMEOUT_S = 5.0
CONNECT_TIMEOUT_S = 2.0
MAX_ENTRIES = 4096
ENTRIES_BUDGET = 1 << 19
"""The most record bytes one ENTRIES carries (a frame holds at most 1 MiB + 64: MAX_FRAME);
a larger READ is answered in parts (`more`)."""


class LinkFailed(Exception):
    """A request on the node link failed; the holder tries again later."""


def message_from(data: bytes) -> Message:
    """A message record as the origin stored it: decoded at the position its header names
    (the record is not rewritten for the wire), its CRC checked."""
    try:
        position = rec.COMMON.unpack_from(data)[3] if len(data) >= rec.COMMON.size else 0
        record = rec.decode(data, position)
    except rec.RecordError as exc:
        raise LinkFailed(f"ENTRIES carried a bad record: {exc}") from None
    if not isinstance(record, rec.MessageRecord):
        raise LinkFailed(f"ENTRIES carried a {type(record).__name__}")
    return record.to_message()


# -- the origin's end ---------------------------------------------------------------------------


class LinkOrigin:
    """Serves holders' READ and ACKS from this node's store, while `runtime()` is not None."""

    def __init__(
        self, config: ClusterConfig, node: str, runtime: Callable[[], SharedRuntime | None]
    ):
        self.config = config
        self.node = node
        self.runtime = runtime

    async def serve(self, peer: Peer, hello: LinkHello) -> None:
        config = self.config
        if hello.cluster != config.name or not hmac.compare_digest(
            hello.secret.encode(), config.secret.encode()
        ):
            await peer.send(Refuse(RefuseCode.BAD_SECRET, "wrong cluster or secret"))
            return
        await peer.send(LinkHello(config.name, self.node, ""))
        async with trio.open_nursery() as nursery:
            while True:
                frame = await peer.receive()
                if isinstance(frame, ConnectionClosed):
                    break
                if isinstance(frame, Read):
                    await peer.send(self._read(frame))
                elif isinstance(frame, Acks):
                    nursery.start_soon(self._ack, peer, frame)
            nursery.cancel_scope.cancel()

    def _queue(self, vhost: str, name: str) -> tuple[SharedRuntime, SharedQueue] | LinkErrorCode:
        runtime = self.runtime()
        if runtime is None:
            return LinkErrorCode.NOT_MASTER
        queue = runtime.queues.get((vhost, name))
        if queue is None or queue.deleted:
            return LinkErrorCode.NO_SUCH_QUEUE
        return runtime, queue

    def _read(self, frame: Read) -> Entries | LinkError:
        found = self._queue(frame.vhost, frame.queue)
        if isinstance(found, LinkErrorCode):
            return LinkError(frame.req, found, f"{frame.vhost}/{frame.queue}")
        runtime, queue = found
        assert queue.store_id is not None
        limit = min(frame.limit, MAX_ENTRIES)
        store = runtime.store
        stored = store.read_queue_records(queue.store_id, frame.first, frame.last, limit + 1)
        entries: list[Entry] = []
        size = 0
        budget = min(frame.max_bytes, ENTRIES_BUDGET)
        for offset, count, data in stored[:limit]:
            if entries and size + len(data) > budget:
                break
            entries.append(Entry(offset, count, data))
            size += len(data)
        return Entries(frame.req, tuple(entries), more=len(entries) < len(stored))

    async def _ack(self, peer: Peer, frame: Acks) -> None:
        found = self._queue(frame.vhost, frame.queue)
        if isinstance(found, LinkErrorCode):
            await peer.send(LinkError(frame.req, found, f"{frame.vhost}/{frame.queue}"))
            return
        runtime, queue = found
        assert queue.store_id is not None
        for offset in frame.offsets:
            runtime.store.ack(queue.store_id, offset)
        try:
            await runtime.acks_durable()
        except Exception as exc:  # demoted meanwhile: the holder resends to the new master
            await peer.send(LinkError(frame.req, LinkErrorCode.NOT_MASTER, str(exc)))
            return
        await peer.send(Acked(frame.req))


# -- the holder's end ---------------------------------------------------------------------------


class Link:
    """One dialled link; `request` sends a frame and waits for the answer with its `req`."""

    def __init__(self, peer: Peer, group: str) -> None:
        self.peer = peer
        self.group = group
        self.waiting: dict[int, list[object]] = {}
        self.events: dict[int, trio.Event] = {}
        self.closed = False

    async def run(self) -> None:
        try:
            while True:
                frame = await self.peer.receive()
                if isinstance(frame, ConnectionClosed | Refuse):
                    break
                req = getattr(frame, "req", None)
                if req in self.events:
                    self.waiting[req].append(frame)
                    self.events.pop(req).set()
        except PeerGone:
            pass
        finally:
            self.closed = True
            for event in self.events.values():
                event.set()
            self.events.clear()
            with trio.CancelScope(shield=True):
                await self.peer.aclose()

    async def request(self, req: int, frame: Read | Acks) -> object:
        if self.closed:
            raise LinkFailed(f"link to {self.group} closed")
        event = trio.Event()
        self.events[req], self.waiting[req] = event, []
        try:
            await self.peer.send(frame)
            with trio.move_on_after(REQUEST_TIMEOUT_S):
                await event.wait()
            answer = self.waiting.pop(req)
        finally:
            self.events.pop(req, None)
            self.waiting.pop(req, None)
        if not answer:
            raise LinkFailed(f"no answer from {self.group}'s master")
        return answer[0]


class LinkPool:
    """The holder's links, one per origin group; `address(group)` resolves the group's master."""

    def __init__(
        self, config: ClusterConfig, node: str, address: Callable[[str], Awaitable[str]]
    ) -> None:
        self.config = config
        self.node = node
        self.address = address
        self.links: dict[str, Link] = {}
        self._reqs = itertools.count(1)
        self._locks: dict[str, trio.Lock] = {}
        self._nursery: trio.Nursery | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    async def _link(self, group: str) -> Link:
        lock = self._locks.setdefault(group, trio.Lock())
        async with lock:
            link = self.links.get(group)
            if link is not None and not link.closed:
                return link
            address = await self.address(group)
            where = split_address(address) if address else None
            if where is None:
                raise LinkFailed(f"group {group} has no master now")
            with trio.move_on_after(CONNECT_TIMEOUT_S) as scope:
                stream = await trio.open_tcp_stream(*where)
            if scope.cancelled_caught:
                raise LinkFailed(f"{group}'s master at {address} did not answer")
            peer = Peer(stream, Role.LINK_HOLDER, f"origin {group} at {address}")
            config = self.config
            await peer.send(LinkHello(config.name, self.node, config.secret))
            with trio.move_on_after(CONNECT_TIMEOUT_S):
                answer = await peer.receive()
                if isinstance(answer, LinkHello):
                    link = Link(peer, group)
                    self.links[group] = link
                    assert self._nursery is not None
                    self._nursery.start_soon(link.run)
                    return link
            await peer.aclose()
            raise LinkFailed(f"{group}'s master at {address} refused the link")

    async def _request(self, group: str, make: Callable[[int], Read | Acks]) -> object:
        link = await self._link(group)
        req = next(self._reqs)
        answer = await link.request(req, make(req))
        if isinstance(answer, LinkError):
            if answer.code is LinkErrorCode.NOT_MASTER:
                link.closed = True  # re-resolve the master at the next request
                await link.peer.aclose()
            raise LinkFailed(f"{group}: {answer.code.name} {answer.text}")
        return answer

    async def read(
        self, group: str, vhost: str, queue: str, first: int, last: int, max_bytes: int
    ) -> tuple[list[tuple[int, Message, int]], bool]:
        count = last - first + 1
        answer = await self._request(
            group, lambda req: Read(req, vhost, queue, first, last, count, max_bytes)
        )
        if not isinstance(answer, Entries):
            raise LinkFailed(f"READ answered with {type(answer).__name__}")
        found = [(e.offset, message_from(e.record), e.delivery_count) for e in answer.entries]
        return found, answer.more

    async def ack(self, group: str, vhost: str, queue: str, offsets: list[int]) -> None:
        answer = await self._request(group, lambda req: Acks(req, vhost, queue, tuple(offsets)))
        if not isinstance(answer, Acked):
            raise LinkFailed(f"ACKS answered with {type(answer).__name__}")

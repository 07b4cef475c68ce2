"""`Watch`: every change under a prefix, in revision order, across broken streams.

A watch is a streaming `/v3/watch` request that etcd answers with JSON lines. Streams end:
etcd restarts, an endpoint dies, the network drops. The watch remembers the revision after
the last event it returned and reopens the stream from there, so a change is neither missed
nor returned twice (etcd keeps history until compaction, so it can replay from any
uncompacted revision; revisions survive a restart). When the revision it needs was
compacted, no replay is possible: the watch re-reads the prefix and returns the current
state as one `WatchReset`, then goes on from the revision of that read.

Not an async generator: a cancelled `__anext__` must leave the watch usable. Cancellation
mid-read drops the stream (its parser state is unknown) and the next call reconnects.
"""

from __future__ import annotations

import json
import logging
from collections import deque
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING

import httpx
import trio

from herald.cluster.etcd_types import (
    GRPC_PERMANENT,
    EtcdError,
    EtcdUnavailable,
    Json,
    WatchEvent,
    WatchReset,
    b64,
    error_from_json,
    prefix_end,
)

if TYPE_CHECKING:
    from herald.cluster.etcd import EtcdClient

log = logging.getLogger("herald.cluster.etcd")

MIN_BACKOFF = 0.05
MAX_BACKOFF = 1.0


class _StreamEnded(Exception):
    """etcd closed the stream (restart, shutdown) or said so in an error line."""


# What ends one stream without ending the watch: reconnect after a backoff.
RETRY = (httpx.TransportError, EtcdUnavailable, _StreamEnded, json.JSONDecodeError)


class Watch:
    """Made by `EtcdClient.watch`. `next_revision` is the first revision not yet returned."""

    def __init__(
        self, client: EtcdClient, prefix: bytes, start_revision: int, prev_kv: bool
    ) -> None:
        self._client = client
        self.prefix = prefix
        self.next_revision = start_revision
        self._prev_kv = prev_kv
        self._stack: AsyncExitStack | None = None
        self._lines: AsyncIterator[Json] | None = None
        self._pending: deque[WatchEvent | WatchReset] = deque()
        self._backoff = MIN_BACKOFF
        self._closed = False
        self.reconnects = 0  # streams reopened after a break (tests and metrics read it)

    async def __aenter__(self) -> Watch:
        await self._fix_start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __aiter__(self) -> Watch:
        return self

    async def __anext__(self) -> WatchEvent | WatchReset:
        if self._closed:
            raise StopAsyncIteration
        await self._fix_start()
        while not self._pending:
            await self._receive()
        return self._pending.popleft()

    async def aclose(self) -> None:
        self._closed = True
        await self._drop()

    async def _fix_start(self) -> None:
        """ "From now" means from the revision after the store's current one, learned by a
        range, so the start does not depend on when the stream gets connected."""
        if self.next_revision <= 0:
            found = await self._client.range(self.prefix, prefix=True, count_only=True)
            self.next_revision = found.revision + 1

    async def _receive(self) -> None:
        """Read one message into `_pending`, (re)connecting first if needed."""
        try:
            if self._lines is None:
                await self._connect()
            assert self._lines is not None
            try:
                message = await self._lines.__anext__()
            except StopAsyncIteration:
                raise _StreamEnded("stream closed") from None
            await self._handle(message)
        except RETRY as exc:
            await self._drop()
            self.reconnects += 1
            log.info(
                "etcd watch on %r broke (%r); resuming from revision %d in %.2f s",
                self.prefix,
                exc,
                self.next_revision,
                self._backoff,
            )
            await trio.sleep(self._backoff)
            self._backoff = min(self._backoff * 2, MAX_BACKOFF)
        except BaseException:
            await self._drop()
            raise

    async def _connect(self) -> None:
        request: Json = {
            "key": b64(self.prefix),
            "range_end": b64(prefix_end(self.prefix)),
            "start_revision": str(self.next_revision),
        }
        if self._prev_kv:
            request["prev_kv"] = True
        stack = AsyncExitStack()
        try:
            stream = self._client.stream("/v3/watch", {"create_request": request})
            self._lines = await stack.enter_async_context(stream)
        except BaseException:
            with trio.move_on_after(1, shield=True):
                await stack.aclose()
            raise
        self._stack = stack

    async def _drop(self) -> None:
        stack, self._stack, self._lines = self._stack, None, None
        if stack is not None:
            with trio.move_on_after(1, shield=True):
                await stack.aclose()

    async def _handle(self, message: Json) -> None:
        if "error" in message:  # the stream's last line: etcd ended it
            error = error_from_json(message)
            if error.code in GRPC_PERMANENT:
                raise error
            raise _StreamEnded(f"{error} (code {error.code})")
        result: Json = message.get("result") or {}
        if result.get("canceled"):
            compacted = int(result.get("compact_revision") or 0)
            if not compacted:
                raise EtcdError(f"etcd cancelled the watch: {result.get('cancel_reason', '')}")
            await self._drop()
            await self._reset(compacted)
            return
        if result.get("created"):
            self._backoff = MIN_BACKOFF
        events = [WatchEvent.from_json(e) for e in result.get("events") or ()]
        # After a reconnect etcd replays from next_revision, so nothing here is older; the
        # filter is a guard, applied per message since one txn's events share a revision.
        fresh = [e for e in events if e.revision >= self.next_revision]
        if fresh:
            self.next_revision = max(e.revision for e in fresh) + 1
            self._pending.extend(fresh)

    async def _reset(self, compacted: int) -> None:
        found = await self._client.range(self.prefix, prefix=True)
        log.info(
            "etcd watch on %r: revision %d compacted (oldest %d); re-read at %d",
            self.prefix,
            self.next_revision,
            compacted,
            found.revision,
        )
        self._pending.append(WatchReset(found.revision, found.kvs))
        self.next_revision = found.revision + 1

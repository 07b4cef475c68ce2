"""`EtcdClient`: etcd v3 from Trio, through etcd's JSON gateway with httpx.

Why the gateway and not gRPC: httpx runs on Trio (through anyio) and is already a dependency,
while the gRPC clients are asyncio-only (aetcd) or unmaintained (etcd3); the gateway ships
with etcd 3.4 and speaks the same requests (CLUSTER.md §6). Everything the cluster keeps in
etcd goes through this class: node leases, group state changed by CAS, the slot map.

Failover: requests go to the current endpoint; on a connection error the client moves to
the next one and retries there. A request that may have reached etcd (the answer was lost)
is retried only when repeating it is harmless (reads, keepalive, revoke); otherwise it
raises `EtcdUnavailable` and the caller must treat the write's outcome as unknown.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import httpx

from herald.cluster.etcd_types import (
    Bytes,
    Compacted,
    Compare,
    CompareOp,
    DeleteOp,
    DeleteResult,
    EtcdError,
    EtcdUnavailable,
    EventType,
    Json,
    KeyValue,
    Lease,
    LeaseNotFound,
    PutOp,
    PutResult,
    RangeOp,
    RangeResult,
    TxnOp,
    TxnResult,
    WatchEvent,
    WatchReset,
    error_from_json,
    range_json,
    to_bytes,
    txn_result_from_json,
)
from herald.cluster.etcd_watch import Watch

__all__ = [
    "Compacted",
    "Compare",
    "CompareOp",
    "DeleteOp",
    "DeleteResult",
    "EtcdClient",
    "EtcdError",
    "EtcdUnavailable",
    "EventType",
    "KeyValue",
    "Lease",
    "LeaseNotFound",
    "PutOp",
    "PutResult",
    "RangeOp",
    "RangeResult",
    "TxnOp",
    "TxnResult",
    "Watch",
    "WatchEvent",
    "WatchReset",
]

log = logging.getLogger("herald.cluster.etcd")

# Errors raised before the request left: safe to send it again elsewhere.
NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


def _endpoint(url: str) -> str:
    url = url.strip().rstrip("/")
    return url if "://" in url else f"http://{url}"


class EtcdClient:
    """A client of one etcd cluster, given as one or more client URLs
    (`http://127.0.0.1:2379`; a bare `host:port` means http).

    Use it as an async context manager (or call `aclose()`). `timeout` bounds each unary
    request; `connect_timeout` bounds reaching an endpoint, so a dead one is skipped quickly.
    """

    def __init__(
        self,
        endpoints: Sequence[str] | str,
        *,
        timeout: float = 5.0,
        connect_timeout: float = 1.0,
    ) -> None:
        urls = [endpoints] if isinstance(endpoints, str) else list(endpoints)
        if not urls:
            raise ValueError("EtcdClient needs at least one endpoint")
        self.endpoints: tuple[str, ...] = tuple(_endpoint(url) for url in urls)
        self._current = 0
        self._timeout = httpx.Timeout(timeout, connect=connect_timeout)
        self._stream_timeout = httpx.Timeout(timeout, connect=connect_timeout, read=None)
        self._http = httpx.AsyncClient(timeout=self._timeout)

    @property
    def endpoint(self) -> str:
        """The endpoint requests go to now (it moves on at a connection error)."""
        return self.endpoints[self._current]

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> EtcdClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # --- transport --------------------------------------------------------------------------

    def _failed(self, endpoint: str, exc: Exception) -> None:
        """Move on to the next endpoint (unless another request already did)."""
        if self.endpoints[self._current] == endpoint:
            self._current = (self._current + 1) % len(self.endpoints)
        log.debug("etcd endpoint %s failed (%r); now %s", endpoint, exc, self.endpoint)

    async def call(self, path: str, body: Json, *, idempotent: bool = False) -> Json:
        """POST `body` to the gateway path (`/v3/kv/range`, ...) and return its JSON answer,
        trying each endpoint once, starting with the current one."""
        last: Exception | None = None
        for _ in self.endpoints:
            endpoint = self.endpoint
            try:
                response = await self._http.post(endpoint + path, json=body)
                data = response.json()
            except NOT_SENT as exc:
                last = exc
            except (httpx.TransportError, ValueError) as exc:
                if not idempotent:
                    raise EtcdUnavailable(f"etcd {endpoint}{path}: no answer ({exc!r})") from exc
                last = exc
            else:
                if response.status_code == 200 and "error" not in data:
                    return data
                error = error_from_json(data)
                if not isinstance(error, EtcdUnavailable) or not idempotent:
                    raise error
                last = error
            self._failed(endpoint, last)
        raise EtcdUnavailable(f"no etcd endpoint answered {path} ({last!r})") from last

    @asynccontextmanager
    async def stream(self, path: str, body: Json) -> AsyncIterator[AsyncIterator[Json]]:
        """A streaming request (watch): JSON messages, one per line, with no read timeout.
        Connecting fails over like `call`; a stream that breaks later raises an
        `httpx.TransportError` from the iteration."""
        last: Exception | None = None
        for _ in self.endpoints:
            endpoint = self.endpoint
            try:
                request = self._http.build_request(
                    "POST", endpoint + path, json=body, timeout=self._stream_timeout
                )
                response = await self._http.send(request, stream=True)
            except httpx.TransportError as exc:
                last = exc
                self._failed(endpoint, exc)
                continue
            lines = _json_lines(response)
            try:
                if response.status_code != 200:
                    await response.aread()
                    raise error_from_json(response.json())
                yield lines
            finally:
                await lines.aclose()
                await response.aclose()
            return
        raise EtcdUnavailable(f"no etcd endpoint answered {path} ({last!r})") from last

    # --- KV -----------------------------------------------------------------------------------

    async def range(
        self,
        key: Bytes,
        range_end: Bytes | None = None,
        *,
        prefix: bool = False,
        limit: int = 0,
        revision: int = 0,
        keys_only: bool = False,
        count_only: bool = False,
        serializable: bool = False,
    ) -> RangeResult:
        """Keys in [key, range_end), or every key under `key` with `prefix=True`, read at
        `revision` (0 = now; a compacted one raises `Compacted`). Linearizable unless
        `serializable`."""
        body = range_json(
            key,
            range_end,
            prefix=prefix,
            limit=limit,
            revision=revision,
            keys_only=keys_only,
            count_only=count_only,
            serializable=serializable,
        )
        return RangeResult.from_json(await self.call("/v3/kv/range", body, idempotent=True))

    async def get(self, key: Bytes) -> KeyValue | None:
        found = await self.range(key)
        return found.kvs[0] if found.kvs else None

    async def put(
        self, key: Bytes, value: Bytes, *, lease: int = 0, prev_kv: bool = False
    ) -> PutResult:
        """Set `key`; with `lease`, the key is deleted when the lease ends."""
        body = PutOp(key, value, lease).to_json()["request_put"]
        if prev_kv:
            body["prev_kv"] = True
        return PutResult.from_json(await self.call("/v3/kv/put", body))

    async def delete(
        self,
        key: Bytes,
        range_end: Bytes | None = None,
        *,
        prefix: bool = False,
        prev_kv: bool = False,
    ) -> DeleteResult:
        body = range_json(key, range_end, prefix=prefix, prev_kv=prev_kv)
        return DeleteResult.from_json(await self.call("/v3/kv/deleterange", body))

    async def txn(
        self,
        compare: Sequence[Compare],
        success: Sequence[TxnOp] = (),
        failure: Sequence[TxnOp] = (),
    ) -> TxnResult:
        """Atomically: if every compare holds, run `success`, else `failure` (etcd allows at
        most 128 ops, and no key written twice in one branch)."""
        body: Json = {
            "compare": [c.to_json() for c in compare],
            "success": [op.to_json() for op in success],
            "failure": [op.to_json() for op in failure],
        }
        return txn_result_from_json(await self.call("/v3/kv/txn", body))

    async def compact(self, revision: int, *, physical: bool = False) -> None:
        """Drop history before `revision` (watches and reads from earlier revisions then get
        `Compacted`); `physical` waits until the space is reclaimed."""
        body: Json = {"revision": str(revision), "physical": physical}
        await self.call("/v3/kv/compaction", body, idempotent=True)

    # --- leases -------------------------------------------------------------------------------

    async def grant(self, ttl: int, lease_id: int = 0) -> Lease:
        """A new lease of `ttl` seconds (etcd picks the id unless `lease_id` is given)."""
        body: Json = {"TTL": str(ttl), "ID": str(lease_id)}
        data = await self.call("/v3/lease/grant", body)
        return Lease(int(data["ID"]), int(data.get("TTL") or 0))

    async def keepalive(self, lease_id: int) -> Lease:
        """Renew the lease once; its TTL restarts from when etcd handled this. Raises
        `LeaseNotFound` when it already expired."""
        data = await self.call("/v3/lease/keepalive", {"ID": str(lease_id)}, idempotent=True)
        result = data.get("result") or data
        ttl = int(result.get("TTL") or 0)
        if ttl <= 0:
            raise LeaseNotFound(f"lease {lease_id:x} expired or was revoked", 5)
        return Lease(lease_id, ttl)

    async def revoke(self, lease_id: int) -> None:
        """End the lease now, deleting its keys. A lease already gone raises `LeaseNotFound`."""
        await self.call("/v3/lease/revoke", {"ID": str(lease_id)}, idempotent=True)

    # --- watch --------------------------------------------------------------------------------

    def watch(self, prefix: Bytes, start_revision: int = 0, *, prev_kv: bool = False) -> Watch:
        """Every change under `prefix` from `start_revision` (0 = from when the watch is
        entered) in revision order, surviving dropped streams, etcd restarts and failover;
        a compacted start yields a `WatchReset`. Use as `async with client.watch(p) as w:
        async for event in w: ...`; the `async with` returns once the start is fixed, so
        every later write is seen."""
        return Watch(self, to_bytes(prefix), start_revision, prev_kv)


async def _json_lines(response: httpx.Response) -> AsyncGenerator[Json, None]:
    lines = response.aiter_lines()
    try:
        async for line in lines:
            if line.strip():
                message: Any = json.loads(line)
                yield message
    finally:
        if isinstance(lines, AsyncGenerator):  # close httpx's generator now, not at GC
            await lines.aclose()

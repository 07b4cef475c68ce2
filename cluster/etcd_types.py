"""What the etcd client sends and returns: typed results, txn compares and ops, errors.

etcd's v3 JSON gateway is gRPC's JSON mapping: keys and values are base64, 64-bit integers
are strings, and fields at their default (0, false, PUT, EQUAL) are left out. Everything that
knows this lives here, so `etcd.py` deals in `KeyValue`s and the tests never see base64.
"""

from __future__ import annotations

import base64
import enum
from collections.abc import Mapping
from typing import Any, TypeAlias

import attrs

from herald.core.errors import HeraldError

Bytes: TypeAlias = str | bytes
"""A key or value: `str` is sent as UTF-8."""

Json: TypeAlias = dict[str, Any]


def to_bytes(data: Bytes) -> bytes:
    return data.encode() if isinstance(data, str) else bytes(data)


def b64(data: Bytes) -> str:
    return base64.b64encode(to_bytes(data)).decode("ascii")


def unb64(text: str | None) -> bytes:
    return base64.b64decode(text) if text else b""


def prefix_end(prefix: Bytes) -> bytes:
    """The `range_end` that makes a range cover every key starting with `prefix` (etcd's
    `clientv3.GetPrefixRangeEnd`): the prefix with its last byte below 0xff incremented."""
    key = bytearray(to_bytes(prefix))
    for i in reversed(range(len(key))):
        if key[i] < 0xFF:
            key[i] += 1
            return bytes(key[: i + 1])
    return b"\0"  # an empty or all-0xff prefix: every key from it on


def _int(data: Mapping[str, Any], name: str) -> int:
    return int(data.get(name) or 0)


def header_revision(data: Mapping[str, Any]) -> int:
    return _int(data.get("header") or {}, "revision")


# --- errors ---------------------------------------------------------------------------------


class EtcdError(HeraldError):
    """etcd refused a request; `code` is the gRPC status code it answered (0 if none)."""

    def __init__(self, message: str, code: int = 0) -> None:
        super().__init__(message)
        self.code = code


class EtcdUnavailable(EtcdError):
    """No endpoint answered, or the answer was lost: a write's outcome is then unknown."""


class Compacted(EtcdError):
    """The revision asked for was compacted away; `compact_revision` is the oldest left
    (0 when etcd did not say)."""

    def __init__(self, message: str, compact_revision: int = 0) -> None:
        super().__init__(message, 11)
        self.compact_revision = compact_revision


class LeaseNotFound(EtcdError):
    """The lease expired or was revoked (keepalive of a dead lease, put on a dead lease)."""


GRPC_CANCELLED = 1  # e.g. "grpc: the client connection is closing" while etcd shuts down
GRPC_DEADLINE_EXCEEDED = 4  # e.g. "etcdserver: request timed out": outcome unknown
GRPC_NOT_FOUND = 5
GRPC_OUT_OF_RANGE = 11
GRPC_UNAVAILABLE = 14
# Retrying cannot help: a bad request, or credentials etcd refuses.
GRPC_PERMANENT = frozenset({3, 7, 12, 16})  # invalid argument, denied, unimplemented, unauth


def error_from_json(data: Mapping[str, Any]) -> EtcdError:
    """The error of a gateway error answer: `{"error", "message", "code"}`, or in a stream
    `{"error": {"grpc_code", "message", ...}}`."""
    error = data.get("error")
    if isinstance(error, Mapping):
        code, message = int(error.get("grpc_code") or 0), str(error.get("message") or "")
    else:
        code, message = _int(data, "code"), str(data.get("message") or error or "")
    if code in (GRPC_UNAVAILABLE, GRPC_CANCELLED, GRPC_DEADLINE_EXCEEDED):
        return EtcdUnavailable(message, code)
    if code == GRPC_OUT_OF_RANGE and "compacted" in message:
        return Compacted(message)
    if code == GRPC_NOT_FOUND and "lease" in message:
        return LeaseNotFound(message, code)
    return EtcdError(message or "etcd error", code)


# --- results ---------------------------------------------------------------------------------


@attrs.frozen
class KeyValue:
    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int = 0

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> KeyValue:
        return cls(
            unb64(data.get("key")),
            unb64(data.get("value")),
            _int(data, "create_revision"),
            _int(data, "mod_revision"),
            _int(data, "version"),
            _int(data, "lease"),
        )


@attrs.frozen
class RangeResult:
    kvs: tuple[KeyValue, ...]
    count: int
    more: bool
    revision: int  # the store's revision the range was read at

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RangeResult:
        kvs = tuple(KeyValue.from_json(kv) for kv in data.get("kvs") or ())
        return cls(kvs, _int(data, "count"), bool(data.get("more")), header_revision(data))


@attrs.frozen
class PutResult:
    revision: int
    prev_kv: KeyValue | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PutResult:
        prev = data.get("prev_kv")
        return cls(header_revision(data), KeyValue.from_json(prev) if prev else None)


@attrs.frozen
class DeleteResult:
    deleted: int
    revision: int
    prev_kvs: tuple[KeyValue, ...] = ()

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DeleteResult:
        prev = tuple(KeyValue.from_json(kv) for kv in data.get("prev_kvs") or ())
        return cls(_int(data, "deleted"), header_revision(data), prev)


OpResult: TypeAlias = RangeResult | PutResult | DeleteResult


@attrs.frozen
class TxnResult:
    succeeded: bool
    revision: int
    responses: tuple[OpResult, ...]  # one per op of the branch that ran


@attrs.frozen
class Lease:
    id: int
    ttl: int  # seconds etcd granted (it may round up: TTL 1 is granted as 2)


class EventType(enum.Enum):
    PUT = "PUT"
    DELETE = "DELETE"


@attrs.frozen
class WatchEvent:
    type: EventType
    kv: KeyValue  # for DELETE: the key and its mod_revision only
    prev_kv: KeyValue | None = None  # only when the watch asked for prev_kv

    @property
    def revision(self) -> int:
        return self.kv.mod_revision

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> WatchEvent:
        prev = data.get("prev_kv")
        return cls(
            EventType(data.get("type") or "PUT"),
            KeyValue.from_json(data.get("kv") or {}),
            KeyValue.from_json(prev) if prev else None,
        )


@attrs.frozen
class WatchReset:
    """The events the watch needed were compacted away: here is the whole prefix as of
    `revision` instead; events continue from `revision + 1`."""

    revision: int
    kvs: tuple[KeyValue, ...]


# --- txn compares and ops --------------------------------------------------------------------


class CompareOp(enum.Enum):
    EQUAL = "EQUAL"
    GREATER = "GREATER"
    LESS = "LESS"
    NOT_EQUAL = "NOT_EQUAL"


@attrs.frozen
class Compare:
    """One txn condition; build it with `Compare.create/mod/version/value`."""

    target: str  # CREATE | MOD | VERSION | VALUE
    key: bytes
    operand: int | bytes
    op: CompareOp = CompareOp.EQUAL

    @classmethod
    def create(cls, key: Bytes, revision: int, op: CompareOp = CompareOp.EQUAL) -> Compare:
        """On the key's create revision; `Compare.create(key, 0)` = "the key does not exist"."""
        return cls("CREATE", to_bytes(key), revision, op)

    @classmethod
    def mod(cls, key: Bytes, revision: int, op: CompareOp = CompareOp.EQUAL) -> Compare:
        """On the key's last modification revision (0 when absent): the usual CAS."""
        return cls("MOD", to_bytes(key), revision, op)

    @classmethod
    def version(cls, key: Bytes, version: int, op: CompareOp = CompareOp.EQUAL) -> Compare:
        return cls("VERSION", to_bytes(key), version, op)

    @classmethod
    def value(cls, key: Bytes, value: Bytes, op: CompareOp = CompareOp.EQUAL) -> Compare:
        return cls("VALUE", to_bytes(key), to_bytes(value), op)

    def to_json(self) -> Json:
        field = {"CREATE": "create_revision", "MOD": "mod_revision", "VERSION": "version"}
        out: Json = {"target": self.target, "key": b64(self.key), "result": self.op.value}
        if isinstance(self.operand, bytes):
            out["value"] = b64(self.operand)
        else:
            out[field[self.target]] = str(self.operand)
        return out


def range_json(
    key: Bytes, range_end: Bytes | None = None, *, prefix: bool = False, **options: Any
) -> Json:
    """A RangeRequest; `options` are its other fields (limit, revision, keys_only, ...),
    left out when false."""
    body: Json = {"key": b64(key)}
    end = prefix_end(key) if prefix else range_end
    if end is not None:
        body["range_end"] = b64(end)
    for name, value in options.items():
        if value:
            body[name] = str(value) if isinstance(value, int) and value is not True else value
    return body


@attrs.frozen
class PutOp:
    key: Bytes
    value: Bytes
    lease: int = 0

    def to_json(self) -> Json:
        body: Json = {"key": b64(self.key), "value": b64(self.value)}
        if self.lease:
            body["lease"] = str(self.lease)
        return {"request_put": body}


@attrs.frozen
class RangeOp:
    key: Bytes
    prefix: bool = False

    def to_json(self) -> Json:
        return {"request_range": range_json(self.key, prefix=self.prefix)}


@attrs.frozen
class DeleteOp:
    key: Bytes
    prefix: bool = False

    def to_json(self) -> Json:
        return {"request_delete_range": range_json(self.key, prefix=self.prefix)}


TxnOp: TypeAlias = PutOp | RangeOp | DeleteOp


def txn_result_from_json(data: Mapping[str, Any]) -> TxnResult:
    """A TxnResponse; each op's response carries only its own header revision, so the
    txn's revision (from the outer header) is what the results are stamped with."""
    revision = header_revision(data)
    responses: list[OpResult] = []
    for item in data.get("responses") or ():
        if "response_range" in item:
            found = RangeResult.from_json(item["response_range"])
            responses.append(attrs.evolve(found, revision=revision))
        elif "response_put" in item:
            put = PutResult.from_json(item["response_put"])
            responses.append(attrs.evolve(put, revision=revision))
        elif "response_delete_range" in item:
            deleted = DeleteResult.from_json(item["response_delete_range"])
            responses.append(attrs.evolve(deleted, revision=revision))
        else:
            raise EtcdError(f"unexpected txn response: {sorted(item)}")
    return TxnResult(bool(data.get("succeeded")), revision, tuple(responses))

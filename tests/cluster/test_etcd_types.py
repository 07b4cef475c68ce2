"""The gateway JSON mapping of the etcd client, without an etcd; and the harness's refusal
to run without one."""

from __future__ import annotations

from pathlib import Path

import pytest

from herald.cluster.etcd_types import (
    Compacted,
    Compare,
    CompareOp,
    EtcdError,
    EtcdUnavailable,
    EventType,
    LeaseNotFound,
    PutOp,
    WatchEvent,
    b64,
    error_from_json,
    prefix_end,
    txn_result_from_json,
)
from tests.cluster import conftest
from tests.cluster.harness import ETCD_MISSING


@pytest.mark.parametrize(
    ("prefix", "end"),
    [(b"/a/", b"/a0"), (b"a\xff", b"b"), (b"\xff\xff", b"\0"), (b"", b"\0"), ("é", b"\xc3\xaa")],
)
def test_prefix_end(prefix: str | bytes, end: bytes) -> None:
    assert prefix_end(prefix) == end


def test_compares_in_gateway_json() -> None:
    assert Compare.create("/k", 0).to_json() == {
        "target": "CREATE",
        "key": b64("/k"),
        "result": "EQUAL",
        "create_revision": "0",
    }
    assert Compare.mod(b"/k", 41, CompareOp.LESS).to_json()["mod_revision"] == "41"
    assert Compare.version("/k", 2, CompareOp.NOT_EQUAL).to_json()["result"] == "NOT_EQUAL"
    assert Compare.value("/k", "v").to_json()["value"] == b64("v")
    assert PutOp("/k", "v", lease=7).to_json() == {
        "request_put": {"key": b64("/k"), "value": b64("v"), "lease": "7"}
    }


def test_defaults_left_out_by_the_gateway() -> None:
    event = WatchEvent.from_json({"kv": {"key": b64("k"), "mod_revision": "5"}})
    assert event.type is EventType.PUT and event.kv.value == b"" and event.revision == 5
    failed = txn_result_from_json({"header": {"revision": "9"}})
    assert not failed.succeeded and failed.revision == 9 and failed.responses == ()


def test_errors_by_grpc_code() -> None:
    lease = {"error": "etcdserver: requested lease not found", "code": 5}
    assert isinstance(error_from_json(lease), LeaseNotFound)
    compacted = {"message": "mvcc: required revision has been compacted", "code": 11}
    assert isinstance(error_from_json(compacted), Compacted)
    stream = {"error": {"grpc_code": 14, "message": "transport is closing"}}
    assert isinstance(error_from_json(stream), EtcdUnavailable)
    closing = {"error": {"grpc_code": 1, "message": "grpc: the client connection is closing"}}
    assert isinstance(error_from_json(closing), EtcdUnavailable)
    other = error_from_json({"error": "bad", "code": 3})
    assert type(other) is EtcdError and other.code == 3


def test_missing_etcd_fails_not_skips(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(pytest.fail.Exception, match=ETCD_MISSING):
        conftest._started(tmp_path_factory, "no-etcd")

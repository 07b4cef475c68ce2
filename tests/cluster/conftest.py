"""Fixtures of the cluster tests: a real etcd from PATH, and a key prefix per test.

`etcd` (session) is shared by every test; a test that stops or restarts etcd takes
`own_etcd` (function scope) instead. Both fail, not skip, when the binary is missing.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cluster.harness import EtcdProcess, HarnessError, find_etcd


def _started(root_factory: pytest.TempPathFactory, name: str) -> EtcdProcess:
    try:
        find_etcd()
    except HarnessError as exc:
        pytest.fail(str(exc), pytrace=False)
    etcd = EtcdProcess(root_factory.mktemp(name))
    etcd.start()
    return etcd


@pytest.fixture(scope="session")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdProcess]:
    """One etcd for the session, on free loopback ports. Do not stop it: use `own_etcd`."""
    process = _started(tmp_path_factory, "etcd")
    yield process
    process.stop()


@pytest.fixture
def own_etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdProcess]:
    """An etcd of this test alone, which it may stop, kill and restart."""
    process = _started(tmp_path_factory, "own-etcd")
    yield process
    process.kill()


@pytest.fixture
def prefix(request: pytest.FixtureRequest) -> str:
    """Keys of this test live under this prefix, so tests sharing an etcd never meet."""
    return f"/herald-test/{request.node.nodeid}/"

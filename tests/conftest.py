"""Fixtures shared by the kernel tests: a running broker on the memory store."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import settings

from herald.core.broker import Broker
from herald.core.embedding import embedded
from herald.core.vhost import VirtualHost
from herald.storage.memory import MemoryStore, MemoryStoreData

if TYPE_CHECKING:
    from tests.tls_helpers import PKI

# No per-example deadline: it is a timing assertion, and these machines are shared and noisy
# (a 10 ms example once took 280 ms under load and failed the run).
settings.register_profile("herald", deadline=None)
settings.load_profile("herald")


@pytest.fixture
def store_data() -> MemoryStoreData:
    """The memory store's contents, kept across broker restarts within a test."""
    return MemoryStoreData()


@pytest.fixture
async def kernel(tmp_path: Path, store_data: MemoryStoreData) -> AsyncIterator[Broker]:
    """A running embedded broker with no protocol plugin (no listener): the kernel alone, on
    the memory store over `store_data`, the installed plugins' hooks loaded as in production.
    For the kernel-semantics tests, with tests/kernel_helpers.py's publish/declare/take."""
    async with embedded(data_dir=tmp_path, store=MemoryStore(store_data), plugins=[]) as broker:
        yield broker


@pytest.fixture
def vhost(kernel: Broker) -> VirtualHost:
    """The kernel's default virtual host, "/"."""
    return kernel.default_vhost


@pytest.fixture
def pki(tmp_path: Path) -> PKI:
    """A throwaway CA, the broker's certificate and the files for `[tls]` (the TLS tests)."""
    from tests.tls_helpers import PKI  # trustme only for the tests that ask

    return PKI(tmp_path)

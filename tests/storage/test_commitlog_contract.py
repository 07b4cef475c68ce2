"""The commit-log store passes the store contract, on real files in a temporary directory."""

from __future__ import annotations

from pathlib import Path

from herald.core.store import Store
from herald.storage.commitlog import CommitLogConfig, CommitLogStore
from tests.store_contract import StoreContract
from tests.store_contract_ranges import QueueRangeContract

CONFIG = CommitLogConfig(
    segment_size=4 * 1024 * 1024,
    checkpoint_bytes=256 * 1024,
    cq_entries_per_file=4096,
    index_slots=1024,
    index_entries=8192,
)
"""Small files, so the contract's tests roll segments, consume-queue and index files."""


class TestCommitLogStore(StoreContract, QueueRangeContract):
    def make_store(self, path: Path, *, reopen_from: Store | None = None) -> Store:
        if reopen_from is not None:
            assert isinstance(reopen_from, CommitLogStore)
            assert reopen_from.root == path / "store"
        return CommitLogStore(path / "store", CONFIG)

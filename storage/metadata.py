"""Metadata records (vhosts, exchanges, queues, bindings, users, plugin state) as JSON text.

Changes are records in the commit log; the whole table is saved in each checkpoint, so
recovery replays only the changes after it and old segments holding superseded changes can
be deleted (compaction by snapshot). Values are kept as JSON text: what is loaded is a fresh
copy, and a value JSON cannot hold is refused before anything is written.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from herald.core.store import MetadataValue, plain_json


class MetadataTable:
    """{kind: {key: JSON text}}."""

    def __init__(self, records: Mapping[str, Mapping[str, str]] | None = None) -> None:
        self.records: dict[str, dict[str, str]] = {
            kind: dict(items) for kind, items in (records or {}).items()
        }

    @staticmethod
    def encode(kind: str, key: str, value: MetadataValue | None) -> str | None:
        """The JSON text to store for a change (None for a deletion); TypeError if invalid."""
        if not isinstance(kind, str) or not isinstance(key, str):
            raise TypeError(f"metadata kind and key must be str, not {kind!r}, {key!r}")
        if value is None:
            return None
        where = f"metadata record kind={kind!r} key={key!r}"
        if not isinstance(value, Mapping):
            raise TypeError(f"{where}: must be a mapping, not a {type(value).__name__}")
        return json.dumps(plain_json(value, where, "value"), separators=(",", ":"))

    def apply(self, kind: str, key: str, text: str | None) -> None:
        if text is None:
            records = self.records.get(kind)
            if records is not None:
                records.pop(key, None)
                if not records:
                    del self.records[kind]
        else:
            self.records.setdefault(kind, {})[key] = text

    def load(self) -> dict[str, dict[str, Any]]:
        return {
            kind: {key: json.loads(text) for key, text in items.items()}
            for kind, items in self.records.items()
        }

    def snapshot(self) -> dict[str, dict[str, str]]:
        return {kind: dict(items) for kind, items in self.records.items()}

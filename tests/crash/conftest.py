"""The crash loops marked slow run only when asked for (`-m slow`), also when this directory
is run on its own (`pytest tests/crash`), as `make test` leaves them out with -m "not slow"."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.option.markexpr:
        return
    slow = [i for i in items if i.get_closest_marker("slow") and HERE in i.path.parents]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [i for i in items if i not in slow]

"""Fixtures: `broker`, a running broker with AMQP and the management API; `api`, an admin
(guest) HTTP client for it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from herald.core.broker import Broker
from tests.management.helpers import client, management_broker


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    async with management_broker(tmp_path / "data") as running:
        yield running


@pytest.fixture
async def api(broker: Broker) -> AsyncIterator[httpx.AsyncClient]:
    async with client(broker) as http:
        yield http

"""Sessions, queued messages and retained messages survive a restart on the commit-log store."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from herald.core.broker import Broker
from herald.core.embedding import embedded
from herald.plugins.mqtt import plugin as mqtt_plugin
from herald.storage import commitlog_plugin as commitlog
from tests.mqtt_e2e.helpers import BASE_SETTINGS, Paho, connect_props5


@asynccontextmanager
async def disk_broker(data_dir: Path) -> AsyncIterator[Broker]:
    async with embedded(
        extra_plugins=[mqtt_plugin, commitlog],
        plugins=["mqtt"],
        settings=[*BASE_SETTINGS, "store.backend=commitlog", "commitlog.segment_size=1048576"],
        data_dir=data_dir,
        load_entrypoints=False,
    ) as broker:
        yield broker


async def test_session_and_retained_survive_a_restart_on_disk(tmp_path: Path) -> None:
    session = connect_props5(SessionExpiryInterval=3600)
    with trio.fail_after(30):
        async with disk_broker(tmp_path) as broker:
            client = Paho(broker, version=5, client_id="on-disk")
            await client.connect(clean_start=False, properties=session)
            await client.subscribe("disk/#", 1, noLocal=True)
            await client.disconnect()
            publisher = Paho(broker, version=5)
            await publisher.connect()
            await publisher.publish("disk/queued", b"while away", 1)
            await publisher.publish("disk/retained", b"kept", 1, retain=True)
            await publisher.disconnect()
        async with disk_broker(tmp_path) as broker:
            client = Paho(broker, version=5, client_id="on-disk")
            assert (await client.connect(clean_start=False, properties=session)).session_present
            first, second = await client.message(), await client.message()
            assert [(m.topic, m.payload) for m in (first, second)] == [
                ("disk/queued", b"while away"),
                ("disk/retained", b"kept"),
            ]
            late = Paho(broker, version=5)
            await late.connect()
            await late.subscribe("disk/retained", 1)
            message = await late.message()
            assert (message.payload, message.retain) == (b"kept", True)

"""Fixtures of the Spark pipeline tests: one SparkSession for the whole run (its JVM costs
about 6 s to start, pyspark.md), loopback-bound and quiet, and one live broker whose data dir
was filled over AMQP, MQTT and STOMP.

The environment is set at import, before any SparkSession exists, because the JVM and the
Python workers read it only at launch (`herald.pipeline.session.prepare_environment`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from herald.pipeline.session import prepare_environment
from tests.pipeline.broker import BrokerThread, publish_amqp, publish_mqtt, publish_stomp

prepare_environment()

AMQP_COUNT = 120
MQTT_COUNT = 40
STOMP_COUNT = 30


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/pipeline" in str(item.path):
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from herald.pipeline.session import local_session

    session = local_session(app="herald-pipeline-tests")
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    """A running broker whose data dir holds messages from all three protocols."""
    with BrokerThread(tmp_path_factory.mktemp("live") / "data") as broker:
        publish_amqp(broker, AMQP_COUNT)
        publish_mqtt(broker, MQTT_COUNT)
        publish_stomp(broker, STOMP_COUNT)
        yield broker


@pytest.fixture(scope="session")
def live_dir(live: BrokerThread) -> Path:
    return live.data_dir

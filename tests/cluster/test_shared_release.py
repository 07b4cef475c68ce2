"""Shared queues giving slots back, and the orphan sweep, on real processes: `herald cluster
dev --nodes 2 --groups 2` with the sweep every second.

- The last consumer on a node leaving gives its slots back: another node's consumer gets
  every message, the one the first consumer had taken flagged redelivered, and no owner key
  of the first node is left.
- Slots lost from etcd (deleted by hand here; in life, acks lost with an origin that failed
  over after its slot was deleted) come back from the sweep as recovery slots: every stored
  message is delivered, flagged redelivered.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pika
import pytest
import trio

from herald.cluster import keys
from herald.cluster.etcd import EtcdClient
from tests.cluster.harness import EtcdProcess, wait_until
from tests.cluster.shared_cluster import SHARED, SharedCluster, declare, declared
from tests.cluster.workload import amqp_parameters


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory, etcd: EtcdProcess) -> Iterator[SharedCluster]:
    options = ("--set", "cluster.sweep_interval_s=1")
    root = tmp_path_factory.mktemp("shared-release")
    with SharedCluster(root, etcd.endpoint, nodes=2, groups=2, options=options) as cluster:
        yield cluster


def _publish(port: int, queue: str, count: int) -> None:
    connection = pika.BlockingConnection(amqp_parameters(port))
    channel = connection.channel()
    channel.confirm_delivery()
    for i in range(count):
        channel.basic_publish("", queue, f"m{i}".encode())
    connection.close()


def _drain(port: int, queue: str, count: int) -> dict[bytes, bool]:
    """Consume `count` messages; body -> its redelivered flag."""
    connection = pika.BlockingConnection(amqp_parameters(port))
    channel = connection.channel()
    channel.queue_declare(queue, durable=True, arguments=SHARED)
    got: dict[bytes, bool] = {}

    def take(ch: object, method: object, _props: object, body: bytes) -> None:
        got[body] = bool(method.redelivered)  # type: ignore[attr-defined]
        channel.basic_ack(method.delivery_tag)  # type: ignore[attr-defined]

    channel.basic_consume(queue, take)
    wait_until(lambda: connection.process_data_events(0.1) or len(got) >= count, "the drain")
    connection.close()
    return got


def test_the_last_consumer_leaving_gives_the_slots_back(pair: SharedCluster) -> None:
    n1, n2 = pair.names
    declare(pair.port(n1), "handed-back")
    wait_until(lambda: declared(pair.port(n2), "handed-back"), "declared on n2")
    _publish(pair.port(n1), "handed-back", 30)
    connection = pika.BlockingConnection(amqp_parameters(pair.port(n2)))
    channel = connection.channel()
    channel.basic_qos(prefetch_count=1)
    channel.queue_declare("handed-back", durable=True, arguments=SHARED)
    taken: list[bytes] = []
    channel.basic_consume("handed-back", lambda ch, m, p, body: taken.append(body))
    wait_until(lambda: connection.process_data_events(0.1) or taken, "one delivery on n2")
    connection.close()  # unacked: back to the queue, and n2 has no consumer left

    def n2_holds_nothing() -> bool:
        found = pair.shared_keys()  # one read: a key may go between two
        owners = [value for key, value in found.items() if key.startswith("owners/")]
        return not any(json.loads(value)["node"] == n2 for value in owners)

    wait_until(n2_holds_nothing, "n2's owner keys gone")
    got = _drain(pair.port(n1), "handed-back", 30)
    assert sorted(got) == sorted(f"m{i}".encode() for i in range(30))
    assert got[taken[0]], "the message n2 had taken comes back flagged redelivered"
    wait_until(lambda: not pair.slot_keys("handed-back"), "every slot done")


def test_the_sweep_makes_recovery_slots_for_orphaned_messages(pair: SharedCluster) -> None:
    n1, n2 = pair.names
    declare(pair.port(n1), "orphaned")
    wait_until(lambda: declared(pair.port(n2), "orphaned"), "declared on n2")
    _publish(pair.port(n1), "orphaned", 25)
    wait_until(lambda: pair.slot_keys("orphaned"), "the slots made")
    prefix = keys.slots_prefix(pair.cluster, "/", "orphaned")

    async def lose_slots() -> int:
        async with EtcdClient(pair.etcd) as client:
            return (await client.delete(prefix, prefix=True)).deleted

    assert trio.run(lose_slots) >= 1
    swept = wait_until(lambda: pair.slot_keys("orphaned"), "recovery slots from the sweep")
    assert swept
    got = _drain(pair.port(n2), "orphaned", 25)
    assert sorted(got) == sorted(f"m{i}".encode() for i in range(25))
    assert all(got.values()), "recovered messages come flagged redelivered"
    assert "made by the sweep" in pair.log_of(n1)

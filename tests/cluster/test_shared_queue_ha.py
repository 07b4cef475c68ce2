"""Shared queues over replicated groups (CLUSTER.md §8.2 scenario 12): `herald cluster dev
--nodes 6 --groups 3 --replication sync` (three masters, each with a slave), publishers and
consumers following each group's master, and kill -9 of masters, each at once an origin of
messages and a holder of other groups' slots. A slave elected in its place reports what the
dead master stored but had not made a slot of (the orphan sweep), holders re-resolve the
origin and resend their acks; the checker finds nothing lost or unexpected, every duplicate
flagged redelivered, and no slot is left once the queue is drained.
"""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Iterator

import pytest

from tests.cluster.checker import check, report
from tests.cluster.harness import EtcdProcess, wait_until
from tests.cluster.shared_cluster import (
    WAIT_S,
    SharedAmqpConsumer,
    SharedAmqpPublisher,
    SharedCluster,
    declare,
    unflagged,
    wait_declared,
)
from tests.cluster.workload import History, run_id, run_workload

KILLS = 3


@pytest.fixture(scope="module")
def replicated(
    tmp_path_factory: pytest.TempPathFactory, etcd: EtcdProcess
) -> Iterator[SharedCluster]:
    root = tmp_path_factory.mktemp("shared-ha")
    options = ("--replication", "sync")
    with SharedCluster(root, etcd.endpoint, nodes=6, groups=3, options=options) as cluster:
        yield cluster


def _replaced(cluster: SharedCluster, group: str, old: str) -> bool:
    return cluster.master_of(group) not in (None, old)


def test_kill_9_of_masters_loses_nothing_and_leaves_no_orphan(replicated: SharedCluster) -> None:
    cluster = replicated
    groups = sorted(cluster.groups)
    declare(cluster.master_port(groups[0])(), "replicated")
    wait_declared([cluster.master_port(group)() for group in groups], "replicated")
    history, run = History(), run_id()
    deadline = 7.0 * KILLS + 6
    publishers = [
        SharedAmqpPublisher(
            history, cluster.master_port(group), "replicated", run, i, 100_000, pause_s=0.01,
            deadline_s=deadline,
        )
        for i, group in enumerate(groups)
    ]  # fmt: skip
    consumers = [
        SharedAmqpConsumer(
            history, cluster.master_port(group), "replicated", index=i, idle_s=4.0,
            deadline_s=deadline + 90,
        )
        for i, group in enumerate(groups)
    ]  # fmt: skip
    rng = random.Random(12)
    kills: list[str] = []

    def nemesis() -> None:
        for _ in range(KILLS):
            time.sleep(rng.uniform(4.0, 6.0))
            group = rng.choice(groups)
            victim = cluster.master_of(group)
            if victim is None:
                continue
            kills.append(victim)
            cluster.processes[victim].kill()
            replaced = functools.partial(_replaced, cluster, group, victim)
            wait_until(replaced, f"a new master of {group}")
            cluster.processes[victim].start()

    run_workload(publishers, consumers, timeout=WAIT_S * 4, during=nemesis)
    result = check(history.snapshot(), classic=False)
    print(result.summary(kills=kills))
    assert result.valid, report(result, kills=kills)
    assert not result.body_problems, report(result)
    missing_flags = unflagged(result.duplicated, consumers)
    assert not missing_flags, missing_flags[:10]
    wait_until(lambda: not cluster.slot_keys("replicated"), "no slot left after the drain")
    swept = sum(cluster.log_of(node).count("made by the sweep") for node in cluster.names)
    print("slots made by the orphan sweep:", swept)

"""The master side of ha_catchup.py: the nodes' settings, filling a master's store and
"crashing" it, the master child process that serves its log on the cluster port; and how
the box is measured (a thread's CPU and run-queue wait, CPU pressure, profiles)."""

from __future__ import annotations

import cProfile
import io
import json
import os
import pstats
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

import psutil
import trio

from herald.cluster.config import ClusterConfig
from herald.cluster.ha.epochs import EpochFile
from herald.cluster.ha.gate import ReplicationGate
from herald.cluster.ha.master import HAMaster
from herald.cluster.ha.store import ReplicatedCommitLogStore
from herald.cluster.port import ClusterPort
from herald.core.message import CodecRegistry, Message
from herald.core.ports import free_port
from herald.core.store import QueueTarget
from herald.storage.commitlog_config import CommitLogConfig

MIB = 1024 * 1024
MASTER, SLAVE, GROUP = "n1", "n2", "g1"
PROFILE_TOP = 25
SCRIPT = Path(__file__).with_name("ha_catchup.py")
"""The benchmark script: the master child process runs it with --serve-master."""


def cluster_config() -> ClusterConfig:
    """The nodes' `[cluster]` (only what the HA stream reads matters); a free port to listen."""
    return ClusterConfig(
        name="bench",
        group=GROUP,
        listen=f"127.0.0.1:{free_port()}",
        secret="catchup",
        replication="async",
    )


CLUSTER = cluster_config()  # the settings shared by the master and the slave


def store_config() -> CommitLogConfig:
    """A node's store settings: the defaults (what `herald cluster dev` nodes run)."""
    return CommitLogConfig()


def thread_sched() -> tuple[float, float]:
    """This thread's on-CPU and run-queue wait seconds (/proc/thread-self/schedstat): on a
    shared box the wait says how long the thread was ready to run but had no core."""
    with open("/proc/thread-self/schedstat") as stats:
        on_cpu, waited, _slices = stats.read().split()
    return int(on_cpu) / 1e9, int(waited) / 1e9


def cpu_pressure() -> dict[str, float] | None:
    """The box's CPU pressure (PSI "some": share of time a runnable task waited), or None."""
    try:
        with open("/proc/pressure/cpu") as found:
            first = found.readline().split()
    except OSError:
        return None
    values = dict(field.split("=") for field in first[1:])
    return {k: float(values[k]) for k in ("avg10", "avg60", "avg300")}


def since(sched: tuple[float, float]) -> tuple[float, float]:
    now = thread_sched()
    return now[0] - sched[0], now[1] - sched[1]


def top_functions(profile: cProfile.Profile, count: int = PROFILE_TOP) -> list[dict[str, Any]]:
    """The `count` functions with the most own time: where, calls, own and cumulative s."""
    stats = pstats.Stats(profile, stream=io.StringIO())
    rows = []
    for (path, line, name), (_cc, calls, tottime, cumtime, _) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append(
            {
                "function": f"{Path(path).name}:{line}({name})",
                "calls": calls,
                "own_s": round(tottime, 3),
                "cumulative_s": round(cumtime, 3),
            }
        )
    rows.sort(key=lambda r: -r["own_s"])
    total = sum(r["own_s"] for r in rows)
    return [{**r, "own_share": round(r["own_s"] / total, 3) if total else 0} for r in rows[:count]]


# -- the master's log: filled by a child process that then crashes ---------------------------


def master_store(root: Path, config: CommitLogConfig) -> ReplicatedCommitLogStore:
    """The store `Roles.run_master` builds (async replication, epoch 1)."""
    holder: list[ReplicatedCommitLogStore] = []
    gate = ReplicationGate(
        MASTER,
        log_end=lambda: holder[0].log.write_offset,
        mode="async",
        min_in_sync_replicas=CLUSTER.min_in_sync_replicas,
        sync_timeout=CLUSTER.sync_timeout_ms / 1000,
        sync_set={MASTER},
    )
    store = ReplicatedCommitLogStore(
        root / "store",
        config,
        gate=gate,
        epochs=EpochFile.load(root / "store" / "epochs"),
        epoch=1,
        mark_recovered_redelivered=CLUSTER.mark_recovered_redelivered,
    )
    holder.append(store)
    return store


async def fill_and_crash(root: Path, mib: int, size: int, message_ids: bool) -> None:
    """Child process: append `mib` MiB of persistent `size`-byte messages, wait until they
    are durable, print the figures, and exit with the store open (abort marker left)."""
    config = CommitLogConfig(checkpoint_bytes=1 << 40)  # the only checkpoint: the one at open
    store = master_store(root, config)
    await store.open(CodecRegistry())
    bodies = [os.urandom(size) for _ in range(256)]
    limit = mib * MIB
    n = 0
    start = time.perf_counter()
    ticket = 0
    while ticket < limit:
        message = Message(
            "bench", bodies[n % 256], "amq.direct", "bench", size, persistent=True,
            message_id=f"msg-{n}" if message_ids else None,
        )  # fmt: skip
        ticket = store.append(message, [QueueTarget(1, n)])
        n += 1
        if n % 10_000 == 0:
            await store.wait_durable(ticket)
    await store.wait_durable(ticket)
    elapsed = time.perf_counter() - start
    print(json.dumps({"messages": n, "log_end": ticket, "seconds": round(elapsed, 2)}))
    sys.stdout.flush()
    os._exit(0)


# -- the master: ClusterPort + HAMaster over the filled store --------------------------------
@asynccontextmanager
async def serving_master(root: Path) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """Open the master's store (timed: a crash replay after the fill), serve its HA stream
    on a loopback cluster port; yields the port's address and the open's figures."""
    store = master_store(root, store_config())
    cpu = time.process_time()
    start = time.perf_counter()
    await store.open(CodecRegistry())
    opened = time.perf_counter() - start
    cpu = time.process_time() - cpu
    report = store.recovery
    assert report is not None
    info = {
        "log_end": store.log.write_offset,
        "open_seconds": round(opened, 3),
        "open_cpu_seconds": round(cpu, 3),
        "crashed": report.crashed,
        "records_replayed": report.records,
    }

    async def change_sync_set(_members: frozenset[str]) -> bool:
        return True  # no etcd: the sync set is this master's to keep

    config = cluster_config()  # a port free now
    ha = HAMaster(store, config, MASTER, GROUP, change_sync_set)
    port = ClusterPort(config, "127.0.0.1", lambda: ha, lambda: "")
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(store.run_flusher)
            nursery.start_soon(ha.run)
            address = await nursery.start(port.run)
            yield address, info
            ha.close()
            nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            await store.close()


async def master_process(root: Path) -> None:
    """Child process: serve the master; one JSON line when ready, then commands on stdin:
    `profile` starts cProfile, `report` stops it and prints its top functions, EOF stops."""
    async with serving_master(root) as (address, info):
        print(json.dumps({"address": address, **info}), flush=True)
        profile: list[cProfile.Profile] = []

        def command(line: str) -> None:
            if line == "profile":
                profile.append(cProfile.Profile())
                profile[-1].enable()
            elif line == "report" and profile:
                profile[-1].disable()
                print(json.dumps({"profile": top_functions(profile[-1])}), flush=True)
            print(json.dumps({"done": line}), flush=True)

        def read_commands() -> None:
            for line in sys.stdin:
                trio.from_thread.run_sync(command, line.strip())

        await trio.to_thread.run_sync(read_commands, abandon_on_cancel=True)


class MasterProcess:
    """The master child process, driven through its stdin and stdout."""

    def __init__(self, root: Path, log: Path) -> None:
        self.log = log
        with open(log, "ab") as err:
            self.process = subprocess.Popen(
                [sys.executable, str(SCRIPT), "--serve-master", str(root)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                start_new_session=True,  # Ctrl-C reaches this script, which stops it
            )
        self.ps = psutil.Process(self.process.pid)
        self.info: dict[str, Any] = {}

    def wait_ready(self) -> dict[str, Any]:
        """Its first line: the cluster port's address and the open's figures."""
        self.info = self.line()
        return self.info

    def line(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        text = self.process.stdout.readline()
        if not text:
            self.process.wait(10)
            raise RuntimeError(f"the master process exited ({self.process.returncode}):\n"
                               f"{self.log.read_text(errors='replace')[-3000:]}")  # fmt: skip
        found: dict[str, Any] = json.loads(text)
        return found

    def command(self, what: str) -> list[dict[str, Any]]:
        assert self.process.stdin is not None
        self.process.stdin.write(f"{what}\n".encode())
        self.process.stdin.flush()
        answers = []
        while "done" not in (answer := self.line()):
            answers.append(answer)
        return answers

    def cpu(self) -> float:
        times = self.ps.cpu_times()
        return float(times.user + times.system)

    def stop(self) -> None:
        if self.process.poll() is None:
            if not self.info:
                self.process.terminate()  # still opening the store: nothing to close cleanly
            with suppress(OSError):
                assert self.process.stdin is not None
                self.process.stdin.close()  # EOF: a clean close of the store
            try:
                self.process.wait(120)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


# -- the slave ---------------------------------------------------------------------------------

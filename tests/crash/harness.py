"""Kill a broker mid-publish, recover its data dir in-process, check what survived; repeat.

Each cycle starts tests/crash/publisher.py in a child process on the same data dir, reads its
report lines (publishes announced, confirms issued, acks about to happen) from a pipe, kills it
with SIGKILL at a random moment, then opens the data dir with an embedded broker and checks the
queues against everything the parent has read so far:

- MAIN (never acked by the child): every confirmed message is there exactly once; nothing is
  there that was not published; every body is intact; each publisher's messages form a gap-free
  prefix of what it published, in order (the log is one ordered stream, so a durable message
  implies every earlier one is durable too); cycles follow each other in queue order;
- WORK (the child consumes and acks): every confirmed message is there unless the child acked
  it; an acked message may come back (its ack was not yet flushed: at-least-once), counted as a
  redelivery; nothing unpublished, nothing twice, bodies intact, per-publisher order.

After checking, the parent acks MAIN's messages older than `keep_cycles` cycles and stops
its broker cleanly, so those acks are durable: they must never come back, and segments behind
them become reclaimable while later cycles keep appending — retention runs between crashes.

A SIGKILL loses no page-cache data: it tests process crashes (torn records, half-written
checkpoints, recovery interrupted by the next kill), not power loss (see docs/RELIABILITY.md).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import attrs
import trio

from herald.core.consumer import Consumer
from herald.core.embedding import embedded
from herald.core.message import NATIVE_PROTOCOL
from herald.core.queue import Queue, QueueEntry
from tests.crash.messages import MAIN, WORK, body_problem, parse_id

ROOT = Path(__file__).resolve().parents[2]
MIB = 1024 * 1024
START_TIMEOUT = 30.0  # a child that is not up by then has hung
CYCLE_TIMEOUT = 120.0


@attrs.frozen
class Scenario:
    """What the child does and how it is killed."""

    segment_size: int = MIB
    extra_settings: tuple[str, ...] = ()
    publishers: int = 4  # to MAIN
    shared: int = 2  # to MAIN and WORK
    window: int = 8  # messages per confirm, at most
    body_min: int = 32
    body_max: int = 512
    max_kill_delay: float = 0.5  # seconds after the child is up
    startup_kill_chance: float = 0.15  # kill while the child is still starting (recovering)
    tear_every: int = 0  # every n-th cycle the child kills itself half-way through a record
    tear_within: int = 100  # ... one of its first this many message records
    keep_cycles: int = 2  # the parent acks MAIN's messages of older cycles

    def settings(self) -> list[str]:
        base = ['store.backend="commitlog"', f"commitlog.segment_size={self.segment_size}"]
        return base + list(self.extra_settings)


@attrs.frozen
class CycleReport:
    cycle: int
    during_startup: bool
    torn: bool  # the child tore a record on purpose
    delay: float
    confirmed: int  # messages confirmed by this child
    main_present: int
    unconfirmed_present: int  # published, not confirmed, survived anyway
    redelivered: int  # WORK messages acked by a child and present again
    cut: bool  # recovery zeroed a torn tail
    replayed: int  # records recovery replayed


@attrs.frozen
class Summary:
    seed: int
    kills: int
    startup_kills: int
    torn_writes: int  # kills in the middle of a record, on purpose
    confirmed: int
    lost: int  # always 0 when the run passed
    redelivered: int
    unconfirmed_survivors: int
    torn_tails: int
    seconds: float
    cycles: tuple[CycleReport, ...]

    def line(self) -> str:
        return (
            f"seed={self.seed} kills={self.kills} (during startup {self.startup_kills},"
            f" mid-record {self.torn_writes})"
            f" confirmed={self.confirmed} lost={self.lost} redelivered={self.redelivered}"
            f" unconfirmed_survivors={self.unconfirmed_survivors} torn_tails={self.torn_tails}"
            f" seconds={self.seconds:.1f}"
        )


@attrs.define
class Expectations:
    """Everything the parent has read from its children, over all cycles."""

    published: dict[tuple[int, int], int] = attrs.Factory(dict)  # (cycle, pub) -> seqs below
    confirmed: dict[tuple[int, int], int] = attrs.Factory(dict)
    acked: set[str] = attrs.Factory(set)  # WORK ids a child acked (or was about to)
    redelivered: set[str] = attrs.Factory(set)  # of those, the ones seen again after a kill
    retired_below: int = 0  # MAIN's messages of cycles below this were acked durably
    shared_from: int = 0  # publishers numbered from here publish to WORK too

    def read(self, cycle: int, line: str) -> bool:
        """Apply one report line; returns True for the ready line."""
        kind, *rest = line.split()
        if kind == "R":
            return True
        if kind == "P":
            self.published[cycle, int(rest[0])] = int(rest[1])
        elif kind == "C":
            self.confirmed[cycle, int(rest[0])] = int(rest[1])
        elif kind == "A":
            self.acked.add(rest[0])
        else:
            raise AssertionError(f"unexpected line from the child: {line!r}")
        return False


class Collector:
    """A consumer's sink that keeps what it is given (a real sink, not a mock)."""

    protocol = NATIVE_PROTOCOL

    def __init__(self) -> None:
        self.entries: list[QueueEntry] = []

    def deliver(self, consumer: Consumer, entry: QueueEntry) -> None:
        self.entries.append(entry)

    def consumer_cancelled(self, consumer: Consumer) -> None:
        pass


async def run_child(
    spec: dict[str, Any],
    expectations: Expectations,
    cycle: int,
    kill_at: float,
    during_startup: bool,
    stderr_path: Path,
) -> float | None:
    """Start the child, read its lines, SIGKILL it `kill_at` seconds after it is up (or after
    it started, `during_startup`; never, if it is to kill itself: spec["tear_at"]), read
    what is left in the pipe, reap it. Returns how long the child took to come up (None:
    killed before)."""
    spawned = time.monotonic()
    up_after: float | None = None
    command = [sys.executable, "-m", "tests.crash.publisher", json.dumps(spec)]
    with open(stderr_path, "wb") as stderr:
        process = await trio.lowlevel.open_process(
            command, cwd=ROOT, stdout=subprocess.PIPE, stderr=stderr
        )
    assert process.stdout is not None
    up = trio.Event()
    ended = False

    async def read_lines() -> None:
        nonlocal ended, up_after
        buffer = b""
        assert process.stdout is not None
        while chunk := await process.stdout.receive_some(65536):
            *lines, buffer = (buffer + chunk).split(b"\n")
            for line in lines:
                if expectations.read(cycle, line.decode()):
                    up_after = time.monotonic() - spawned
                    up.set()
        # A partial last line cannot happen (pipe writes this small are atomic): ignore it.
        ended = True
        up.set()

    try:
        with trio.fail_after(CYCLE_TIMEOUT):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(read_lines)
                if not during_startup:
                    with trio.fail_after(START_TIMEOUT):
                        await up.wait()
                if "tear_at" in spec:
                    await process.wait()
                elif not ended:
                    await trio.sleep(kill_at)
                process.kill()
            returncode = await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()
    if returncode != -signal.SIGKILL:
        raise AssertionError(
            f"cycle {cycle}: the child exited with {returncode} before it was killed:\n"
            + stderr_path.read_text()[-4000:]
        )
    return up_after


def drain(queue: Queue) -> list[QueueEntry]:
    """Every message of `queue`, in delivery order, held unacked by one consumer."""
    collector = Collector()
    queue.add_consumer("crash-check", collector, prefetch_count=0)
    return collector.entries


class Checker:
    """Compares one recovered broker with the expectations; collects every problem."""

    def __init__(self, expectations: Expectations, codecs: Any, cycle: int) -> None:
        self.expectations = expectations
        self.codecs = codecs
        self.cycle = cycle
        self.problems: list[str] = []
        self.unconfirmed_present = 0  # of the cycle just killed
        self.redelivered = 0  # acked WORK messages seen again for the first time

    def _ids(self, queue_name: str, entries: list[QueueEntry]) -> list[tuple[int, int, int]]:
        """Parsed ids in queue order, each body checked; problems recorded."""
        seen: list[tuple[int, int, int]] = []
        for entry in entries:
            message = entry.message
            mid = message.message_id
            try:
                parsed = parse_id(mid or "")
            except ValueError:
                self.problems.append(f"{queue_name}: a message nobody published: id {mid!r}")
                continue
            problem = body_problem(mid, message.decoded(self.codecs).body)
            if problem is not None:
                self.problems.append(f"{queue_name}: {problem}")
            published = self.expectations.published.get(parsed[:2], 0)
            if parsed[2] >= published:
                self.problems.append(f"{queue_name}: {mid} was never published")
            seen.append(parsed)
        for parsed, count in Counter(seen).items():
            if count > 1:
                mid = ".".join(map(str, parsed))
                self.problems.append(f"{queue_name}: {mid} is there {count} times")
        last: dict[tuple[int, int], int] = {}
        for cycle, pub, seq in seen:
            if seq <= last.get((cycle, pub), -1):
                self.problems.append(f"{queue_name}: {cycle}.{pub}.{seq} out of order")
            last[cycle, pub] = seq
        return seen

    def check_main(self, entries: list[QueueEntry]) -> None:
        expectations = self.expectations
        seen = self._ids(MAIN, entries)
        cycles = [cycle for cycle, _, _ in seen]
        if cycles != sorted(cycles):
            self.problems.append(f"{MAIN}: cycles out of order: {cycles[:50]}")
        present: dict[tuple[int, int], list[int]] = {}
        for cycle, pub, seq in seen:
            if cycle < expectations.retired_below:
                self.problems.append(f"{MAIN}: {cycle}.{pub}.{seq} came back after a durable ack")
            present.setdefault((cycle, pub), []).append(seq)
        for key in expectations.published:
            if key[0] < expectations.retired_below:
                continue
            seqs = present.get(key, [])
            confirmed = expectations.confirmed.get(key, 0)
            if seqs != list(range(len(seqs))):
                self.problems.append(f"{MAIN}: publisher {key} has gaps: {seqs[:20]}...")
            if len(seqs) < confirmed:
                lost = confirmed - len(seqs)
                self.problems.append(f"{MAIN}: publisher {key} lost {lost} confirmed message(s)")
            if key[0] == self.cycle:
                self.unconfirmed_present += max(0, len(seqs) - confirmed)

    def check_work(self, entries: list[QueueEntry]) -> None:
        expectations = self.expectations
        seen = set(self._ids(WORK, entries))
        for cycle, pub, seq in seen:
            mid = f"{cycle}.{pub}.{seq}"
            if mid in expectations.acked and mid not in expectations.redelivered:
                expectations.redelivered.add(mid)
                self.redelivered += 1
        for (cycle, pub), confirmed in expectations.confirmed.items():
            if pub < expectations.shared_from:
                continue
            for seq in range(confirmed):
                mid = f"{cycle}.{pub}.{seq}"
                if (cycle, pub, seq) not in seen and mid not in expectations.acked:
                    self.problems.append(f"{WORK}: confirmed {mid} is missing and was not acked")


async def verify(
    data_dir: Path, scenario: Scenario, expectations: Expectations, cycle: int
) -> tuple[list[str], CycleReport]:
    """Open the data dir in-process, check both queues, retire old cycles (durably)."""
    async with embedded(data_dir=data_dir, settings=scenario.settings(), plugins=[]) as broker:
        store: Any = broker.store
        recovery = store.recovery
        checker = Checker(expectations, broker.codecs, cycle)
        if recovery.skipped:
            checker.problems.append(f"recovery skipped bytes in the middle: {recovery.skipped}")
        vhost = broker.default_vhost
        main, work = vhost.queues.get(MAIN), vhost.queues.get(WORK)
        main_entries = drain(main) if main is not None else []
        checker.check_main(main_entries)
        checker.check_work(work.browse() if work is not None else [])
        retire = cycle + 1 - scenario.keep_cycles
        if main is not None and retire > expectations.retired_below:
            for entry in main_entries:
                if entry.message.message_id and parse_id(entry.message.message_id)[0] < retire:
                    main.ack(entry)
    if retire > expectations.retired_below:
        expectations.retired_below = retire  # the clean stop made those acks durable
    report = CycleReport(
        cycle=cycle,
        during_startup=False,
        torn=False,
        delay=0.0,
        confirmed=0,
        main_present=len(main_entries),
        unconfirmed_present=checker.unconfirmed_present,
        redelivered=checker.redelivered,
        cut=recovery.cut,
        replayed=recovery.records,
    )
    return checker.problems, report


async def run_crash_cycles(
    data_dir: Path, scenario: Scenario, cycles: int, seed: int, *, lifetime: float = 120.0
) -> Summary:
    """Run `cycles` kill cycles on `data_dir`; raise AssertionError (naming the seed) at the
    first cycle whose recovered state breaks a guarantee."""
    rng = random.Random(seed)
    expectations = Expectations(shared_from=scenario.publishers)
    reports: list[CycleReport] = []
    started = time.monotonic()
    startup_time = 0.5
    for cycle in range(cycles):
        spec = {
            "data_dir": str(data_dir),
            "settings": scenario.settings(),
            "cycle": cycle,
            "seed": seed,
            "publishers": scenario.publishers,
            "shared": scenario.shared,
            "window": scenario.window,
            "body_min": scenario.body_min,
            "body_max": scenario.body_max,
            "lifetime": lifetime,
        }
        during_startup = cycle > 0 and rng.random() < scenario.startup_kill_chance
        delay = rng.uniform(0, startup_time if during_startup else scenario.max_kill_delay)
        every = scenario.tear_every
        torn = bool(every) and cycle % every == every - 1
        during_startup = during_startup and not torn
        if torn:
            spec["tear_at"] = rng.randint(1, scenario.tear_within)
        before = sum(expectations.confirmed.values())
        up_after = await run_child(
            spec, expectations, cycle, delay, during_startup, data_dir.parent / "child.err"
        )
        if up_after is not None:
            startup_time = up_after
        with trio.fail_after(CYCLE_TIMEOUT):
            problems, report = await verify(data_dir, scenario, expectations, cycle)
        if torn and not report.cut:
            problems.append("the child tore a record but recovery found no torn tail")
        report = attrs.evolve(
            report,
            during_startup=during_startup,
            torn=torn,
            delay=delay,
            confirmed=sum(expectations.confirmed.values()) - before,
        )
        reports.append(report)
        if problems:
            shown = "\n  ".join(problems[:25])
            raise AssertionError(
                f"seed={seed} (rerun with HERALD_CRASH_SEED={seed}) cycle={cycle} "
                f"{how_killed(during_startup, torn, delay)}: "
                f"{len(problems)} problem(s):\n  {shown}"
            )
    return Summary(
        seed=seed,
        kills=len(reports),
        startup_kills=sum(r.during_startup for r in reports),
        torn_writes=sum(r.torn for r in reports),
        confirmed=sum(expectations.confirmed.values()),
        lost=0,
        redelivered=sum(r.redelivered for r in reports),
        unconfirmed_survivors=sum(r.unconfirmed_present for r in reports),
        torn_tails=sum(r.cut for r in reports),
        seconds=time.monotonic() - started,
        cycles=tuple(reports),
    )


def how_killed(during_startup: bool, torn: bool, delay: float) -> str:
    if torn:
        return "killed itself mid-record"
    return f"killed {delay:.3f}s after {'spawning' if during_startup else 'it was up'}"


def crash_seed() -> int:
    """HERALD_CRASH_SEED if set (to replay a failure), else a fresh random seed."""
    value = os.environ.get("HERALD_CRASH_SEED")
    return int(value) if value else random.randrange(2**32)

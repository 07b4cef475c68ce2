"""Jepsen's total-queue checker in Python, over multisets (CLUSTER.md §8.1).

A history is a list of entries `{process, type, f, value, time}` (see workload.py): `type`
is `invoke`, `ok`, `fail` or `info`; `f` is `enqueue` or `dequeue`; `value` a message id
`<run>.<publisher>.<seq>`. A dequeue `ok` may carry `problem` (what `body_problem` found
wrong with the body it delivered).

From the history, as `collections.Counter`s of message ids:

- attempts  = every enqueue invoked;
- enqueues  = every enqueue acknowledged (`ok`);
- dequeues  = every dequeue `ok` (with its value);
- lost       = enqueues - dequeues (acknowledged, never delivered);
- unexpected = dequeues whose id was never attempted;
- duplicated = dequeues - attempts - unexpected (delivered more often than attempted);
- recovered  = (dequeues & attempts) - enqueues (delivered though never acknowledged:
  an `info` publish that made it);
- valid      = not lost and not unexpected.

Beyond Jepsen: `body_problems` (bodies that fail `body_problem`), and for classic (FIFO)
queues `order_problems`: per publisher, the first deliveries of its messages must come in
sequence order, and a sequence number skipped between two delivered ones must be one that
was never acknowledged (a gap of a confirmed message is a reorder or a loss). An
unacknowledged message may also come after later ones: its publisher gave up on it and went
on over a new connection, while the old one still held it unread (a fenced node reads
nothing from publishers until it unfences, then reads both connections in any order).
Meaningful only after a complete drain. `report` prints the result as one JSON line.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

Entry = Mapping[str, Any]
SAMPLE = 10  # ids listed per category in a report


def _split(mid: str) -> tuple[str, int] | None:
    """(`<run>.<publisher>`, seq), or None for an id this harness does not make."""
    publisher, _, seq = mid.rpartition(".")
    if not publisher or not seq.isdigit():
        return None
    return publisher, int(seq)


@attrs.frozen
class Result:
    attempts: Counter[str]
    enqueues: Counter[str]
    dequeues: Counter[str]
    lost: Counter[str]
    unexpected: Counter[str]
    duplicated: Counter[str]
    recovered: Counter[str]
    failed: int
    indeterminate: int
    body_problems: list[str]
    order_problems: list[str]

    @property
    def valid(self) -> bool:
        """Jepsen's verdict: nothing acknowledged went missing, nothing came from nowhere."""
        return not self.lost and not self.unexpected

    @property
    def ok(self) -> bool:
        """valid, every body intact, and (classic queues) per-publisher order held."""
        return self.valid and not self.body_problems and not self.order_problems

    def summary(self, **extra: Any) -> dict[str, Any]:
        def sample(counter: Counter[str]) -> list[str]:
            return sorted(counter)[:SAMPLE]

        return {
            **extra,
            "valid": self.valid,
            "ok": self.ok,
            "attempt_count": self.attempts.total(),
            "acknowledged_count": self.enqueues.total(),
            "failed_count": self.failed,
            "info_count": self.indeterminate,
            "dequeue_count": self.dequeues.total(),
            "lost_count": self.lost.total(),
            "unexpected_count": self.unexpected.total(),
            "duplicated_count": self.duplicated.total(),
            "recovered_count": self.recovered.total(),
            "lost": sample(self.lost),
            "unexpected": sample(self.unexpected),
            "duplicated": sample(self.duplicated),
            "recovered": sample(self.recovered),
            "body_problems": self.body_problems[:SAMPLE],
            "order_problems": self.order_problems[:SAMPLE],
        }


def check(history: Iterable[Entry], *, classic: bool = True) -> Result:
    attempts: Counter[str] = Counter()
    enqueues: Counter[str] = Counter()
    dequeues: Counter[str] = Counter()
    failed = indeterminate = 0
    body_problems: list[str] = []
    delivered_in_order: list[str] = []
    for entry in history:
        kind, f, value = entry["type"], entry["f"], str(entry.get("value"))
        if f == "enqueue":
            if kind == "invoke":
                attempts[value] += 1
            elif kind == "ok":
                enqueues[value] += 1
            elif kind == "fail":
                failed += 1
            elif kind == "info":
                indeterminate += 1
        elif f == "dequeue" and kind == "ok" and entry.get("value") is not None:
            dequeues[value] += 1
            delivered_in_order.append(value)
            if entry.get("problem"):
                body_problems.append(str(entry["problem"]))
    unexpected = Counter({mid: n for mid, n in dequeues.items() if mid not in attempts})
    lost = enqueues - dequeues
    duplicated = dequeues - attempts - unexpected
    recovered = (dequeues & attempts) - enqueues
    order_problems = _order(delivered_in_order, enqueues) if classic else []
    return Result(
        attempts,
        enqueues,
        dequeues,
        lost,
        unexpected,
        duplicated,
        recovered,
        failed,
        indeterminate,
        body_problems,
        order_problems,
    )


def _order(delivered: list[str], enqueues: Counter[str]) -> list[str]:
    """Per publisher: first deliveries in increasing seq, skipped seqs never acknowledged."""
    problems: list[str] = []
    last: dict[str, int] = {}
    seen: set[str] = set()
    for mid in delivered:
        if mid in seen:
            continue  # a redelivery: counted as duplicated, not an order problem
        seen.add(mid)
        parsed = _split(mid)
        if parsed is None:
            continue  # counted as unexpected
        publisher, seq = parsed
        previous = last.get(publisher, -1)
        if seq < previous:
            if enqueues[mid]:  # unconfirmed: it may come late (see the module docstring)
                problems.append(f"{mid} delivered after {publisher}.{previous}")
            continue
        for skipped in range(previous + 1, seq):
            gap = f"{publisher}.{skipped}"
            if enqueues[gap] and gap not in seen:
                problems.append(f"{gap} (acknowledged) skipped: {mid} delivered first")
        last[publisher] = seq
    return problems


def report(result: Result, **extra: Any) -> str:
    """Print (and return) the run's one JSON line; `extra` names the run (seed, scenario)."""
    line = json.dumps(result.summary(**extra), sort_keys=True)
    print(line, flush=True)
    return line

"""The total-queue checker on hand-made histories: each category, valid and invalid."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.cluster.checker import check, report

Entry = dict[str, Any]


def enq(mid: str, outcome: str = "ok", process: str = "p") -> list[Entry]:
    return [
        {"process": process, "type": "invoke", "f": "enqueue", "value": mid, "time": 0},
        {"process": process, "type": outcome, "f": "enqueue", "value": mid, "time": 1},
    ]


def deq(mid: str, problem: str | None = None) -> list[Entry]:
    done: Entry = {"process": "c", "type": "ok", "f": "dequeue", "value": mid, "time": 2}
    if problem:
        done["problem"] = problem
    return [{"process": "c", "type": "invoke", "f": "dequeue", "value": None, "time": 2}, done]


def history(*parts: list[Entry]) -> list[Entry]:
    return [entry for part in parts for entry in part]


def test_everything_delivered_once_is_valid() -> None:
    result = check(history(enq("r.0.0"), enq("r.0.1"), deq("r.0.0"), deq("r.0.1")))
    assert result.valid and result.ok
    assert result.enqueues.total() == result.dequeues.total() == 2
    assert not (result.lost or result.unexpected or result.duplicated or result.recovered)


def test_an_acknowledged_message_never_delivered_is_lost() -> None:
    result = check(history(enq("r.0.0"), enq("r.0.1"), deq("r.0.0")))
    assert not result.valid
    assert dict(result.lost) == {"r.0.1": 1}


def test_a_message_never_attempted_is_unexpected() -> None:
    result = check(history(enq("r.0.0"), deq("r.0.0"), deq("x.9.9")))
    assert not result.valid
    assert dict(result.unexpected) == {"x.9.9": 1}
    assert not result.duplicated  # unexpected is not counted twice


def test_a_second_delivery_is_duplicated_but_valid() -> None:
    result = check(history(enq("r.0.0"), deq("r.0.0"), deq("r.0.0")))
    assert result.valid
    assert dict(result.duplicated) == {"r.0.0": 1}


def test_an_unacknowledged_message_delivered_is_recovered_and_valid() -> None:
    result = check(history(enq("r.0.0", "info"), enq("r.0.1"), deq("r.0.0"), deq("r.0.1")))
    assert result.valid and result.ok
    assert dict(result.recovered) == {"r.0.0": 1}
    assert result.indeterminate == 1


def test_info_and_fail_messages_missing_are_not_lost() -> None:
    result = check(history(enq("r.0.0", "info"), enq("r.0.1", "fail"), enq("r.0.2"), deq("r.0.2")))
    assert result.valid and result.ok
    assert result.failed == 1 and result.indeterminate == 1


def test_a_damaged_body_is_reported() -> None:
    result = check(history(enq("r.0.0"), deq("r.0.0", problem="body of r.0.0 is damaged")))
    assert result.valid and not result.ok
    assert result.body_problems == ["body of r.0.0 is damaged"]


def test_order_per_publisher() -> None:
    swapped = history(enq("r.0.0"), enq("r.0.1"), deq("r.0.1"), deq("r.0.0"))
    assert check(swapped).order_problems and not check(swapped).ok
    assert check(swapped, classic=False).ok  # a shared queue does not promise order
    # an unconfirmed message may leave a gap, a confirmed one may not
    unconfirmed_gap = history(enq("r.0.0"), enq("r.0.1", "info"), enq("r.0.2"))
    assert check(history(unconfirmed_gap, deq("r.0.0"), deq("r.0.2"))).ok
    # ... or come late (sent on a connection its publisher gave up on), a confirmed one may not
    assert check(history(unconfirmed_gap, deq("r.0.0"), deq("r.0.2"), deq("r.0.1"))).ok
    late_confirmed = history(enq("r.0.0"), enq("r.0.1"), deq("r.0.1"), deq("r.0.0"))
    assert "r.0.0 delivered after r.0.1" in check(late_confirmed).order_problems
    # other publishers interleave freely; a redelivery is not a reorder
    mixed = history(enq("r.0.0"), enq("r.1.0"), enq("r.0.1"))
    assert check(history(mixed, deq("r.1.0"), deq("r.0.0"), deq("r.0.0"), deq("r.0.1"))).ok


def test_a_confirmed_gap_is_an_order_problem() -> None:
    result = check(history(enq("r.0.0"), enq("r.0.1"), enq("r.0.2"), deq("r.0.0"), deq("r.0.2")))
    assert result.lost and any("r.0.1" in p for p in result.order_problems)


def test_report_is_one_json_line(capsys: pytest.CaptureFixture[str]) -> None:
    report(check(history(enq("r.0.0"), deq("r.0.0"), deq("r.0.0"))), seed=7)
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    line = json.loads(out)
    assert line["valid"] is True and line["seed"] == 7 and line["duplicated_count"] == 1

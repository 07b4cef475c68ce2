"""The pure parts of shared queues: slot keys and their parsing, the orphan sweep's interval
arithmetic, and the slot index fed by etcd events (no etcd: events built by hand)."""

from __future__ import annotations

import json

import pytest

from herald.cluster import keys
from herald.cluster.etcd_types import EventType, KeyValue, WatchEvent
from herald.cluster.shared.index import SlotIndex
from herald.cluster.shared.reporter import uncovered

CLUSTER = "c1"


@pytest.mark.parametrize(
    ("first", "last", "covered", "expected"),
    [
        (0, 9, [], [(0, 9)]),
        (0, 9, [(0, 9)], []),
        (0, 9, [(3, 5)], [(0, 2), (6, 9)]),
        (0, 9, [(6, 20), (0, 1)], [(2, 5)]),
        (5, 9, [(0, 4), (10, 12)], [(5, 9)]),
        (5, 9, [(0, 5), (9, 12)], [(6, 8)]),
        (0, 9, [(2, 3), (3, 4), (8, 8)], [(0, 1), (5, 7), (9, 9)]),
    ],
)
def test_uncovered_is_what_no_slot_covers(
    first: int, last: int, covered: list[tuple[int, int]], expected: list[tuple[int, int]]
) -> None:
    assert uncovered(first, last, covered) == expected


def test_names_with_slashes_stay_one_key_segment() -> None:
    key = keys.slots_prefix(CLUSTER, "/", "a/b") + keys.slot_name("g/1", 42)
    assert key == "/herald/c1/shared/slots/%2F/a%2Fb/g%2F1/00000000000000000042"
    what, vhost, queue, rest = keys.parse_shared_key(CLUSTER, key) or ("", "", "", "")
    assert (what, vhost, queue) == ("slots", "/", "a/b")
    assert keys.parse_slot_name(rest) == ("g/1", 42)
    assert keys.parse_shared_key(CLUSTER, "/herald/c1/nodes/n1") is None
    assert keys.parse_shared_key(CLUSTER, "/herald/c1/shared/other/v/q") is None
    assert keys.parse_slot_name("g1/not-a-number") is None


def _put(key: str, value: object, revision: int = 1) -> WatchEvent:
    data = json.dumps(value).encode()
    return WatchEvent(EventType.PUT, KeyValue(key.encode(), data, revision, revision, 1))


def _delete(key: str) -> WatchEvent:
    return WatchEvent(EventType.DELETE, KeyValue(key.encode(), b"", 0, 9, 0))


def test_the_index_follows_slots_and_their_owners() -> None:
    index = SlotIndex(CLUSTER)
    where = ("/", "q")
    slots = keys.slots_prefix(CLUSTER, *where)
    owners = keys.owners_prefix(CLUSTER, *where)
    index.apply(_put(slots + keys.slot_name("g1", 0), {"last": 9, "gen": 0, "made_ms": 2}, 5))
    index.apply(_put(slots + keys.slot_name("g2", 0), {"last": 4, "gen": 0, "made_ms": 1}, 6))
    assert [(s.group, s.size, s.revision) for s in index.free(where)] == [
        ("g2", 5, 6),
        ("g1", 10, 5),
    ]
    index.apply(_put(owners + keys.slot_name("g2", 0), {"node": "n3", "gen": 1}))
    assert [s.group for s in index.free(where)] == ["g1"]
    assert {s.group: s.owner for s in index.of_queue(where)} == {"g1": "", "g2": "n3"}
    index.apply(_delete(owners + keys.slot_name("g2", 0)))  # its holder's lease ended
    assert [s.group for s in index.free(where)] == ["g2", "g1"]
    index.apply(_delete(slots + keys.slot_name("g1", 0)))  # done
    assert [s.group for s in index.of_queue(where)] == ["g2"]
    index.apply(_put(slots + keys.slot_name("g3", 0), "not a slot"))  # skipped, not raised
    assert [s.group for s in index.of_queue(where)] == ["g2"]

"""The topic trie against RabbitMQ's topic semantics, case by case and against a reference.

How "" splits is the one surprising rule, taken from RabbitMQ's source
(`rabbit_db_topic_exchange:split_topic_key/1`, `split_topic_key(<<>>, [], []) -> []`):
the empty routing key has *zero* words, not one empty word. So "*" (exactly one word) does not
match "", while "#" (zero or more) does. A non-empty key keeps its empty words: "." is two
empty words, "a." is "a" then "".
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from herald.core.topic_trie import TopicTrie, split_words

CASES = [
    # (pattern, routing key, matches)
    ("#", "", True),
    ("#", "a", True),
    ("#", "a.b.c", True),
    ("#", ".", True),
    ("", "", True),
    ("", "a", False),
    ("a", "", False),
    ("*", "", False),  # "" has no word for "*" to take
    ("*", "a", True),
    ("*", "a.b", False),
    ("*", ".", False),  # "." is two (empty) words
    ("*.*", ".", True),
    ("a.*", "a.", True),  # "*" takes the empty word
    ("a.*", "a", False),
    ("a.#", "a", True),
    ("a.#", "a.", True),
    ("a.#", "a.b.c", True),
    ("a.#", "b.a", False),
    ("#.a", "a", True),
    ("#.a", "b.a", True),
    ("#.a", "x.y.a", True),
    ("#.a", "a.b", False),
    ("a.*.#", "a", False),
    ("a.*.#", "a.b", True),
    ("a.*.#", "a.b.c.d", True),
    ("#.#", "", True),
    ("#.#", "a.b", True),
    ("#.*", "", False),
    ("#.*", "a", True),
    ("*.#", "", False),
    ("*.#", "a.b.c", True),
    ("#.b.#", "b", True),
    ("#.b.#", "a.b.c", True),
    ("#.b.#", "a.c", False),
    ("a.#.b", "a.b", True),
    ("a.#.b", "a.x.y.b", True),
    ("a.#.b", "a.x.y", False),
    ("a..b", "a..b", True),
    ("a..b", "a.b", False),
    ("a.*.b", "a..b", True),
    (".", ".", True),
    (".", "", False),
    ("a.", "a", False),
    ("a.", "a.", True),
    ("a*", "ab", False),  # wildcards are whole words only
    ("a*", "a*", True),
    ("a#", "a", False),
    ("*.*.*", "a.b", False),
    # The RabbitMQ tutorial's examples.
    ("*.orange.*", "quick.orange.rabbit", True),
    ("*.*.rabbit", "quick.orange.rabbit", True),
    ("lazy.#", "lazy.orange.male.rabbit", True),
    ("*.orange.*", "quick.orange.male.rabbit", False),
    ("*.*.rabbit", "lazy.brown.fox", False),
]


@pytest.mark.parametrize(("pattern", "key", "expected"), CASES)
def test_rabbitmq_topic_cases(pattern: str, key: str, expected: bool) -> None:
    trie = TopicTrie()
    trie.add(pattern, "q")
    assert trie.match(key) == ({"q"} if expected else set())


def test_split_words_empty_key_has_no_words() -> None:
    assert split_words("") == []
    assert split_words(".") == ["", ""]
    assert split_words("a..b") == ["a", "", "b"]


def test_add_and_remove_report_changes() -> None:
    trie = TopicTrie()
    assert trie.add("a.*", 1)
    assert not trie.add("a.*", 1)
    assert trie.add("a.*", 2)
    assert len(trie) == 2
    assert trie.remove("a.*", 1)
    assert not trie.remove("a.*", 1)
    assert not trie.remove("a", 2)  # a prefix of a pattern, not a pattern
    assert not trie.remove("a.*.c", 2)
    assert trie.match("a.b") == {2}
    assert len(trie) == 1


def test_remove_prunes_empty_nodes_but_keeps_shared_ones() -> None:
    trie = TopicTrie()
    trie.add("a.b.c", 1)
    trie.add("a.#.d", 1)
    trie.add("a", 2)
    assert trie.node_count == 6  # root, a, b, c, #, d
    trie.remove("a.b.c", 1)
    assert trie.node_count == 4
    assert trie.match("a") == {2}
    trie.remove("a.#.d", 1)
    assert trie.node_count == 2  # "a" still holds a pattern
    trie.remove("a", 2)
    assert trie.node_count == 1
    assert trie.match("a") == set()


def test_distinct_destinations_when_several_patterns_match() -> None:
    trie = TopicTrie()
    for pattern in ("a.b", "a.*", "#", "a.#", "#.b"):
        trie.add(pattern, "q")
    trie.add("a.c", "other")
    assert trie.match("a.b") == {"q"}
    assert trie.match("a.c") == {"q", "other"}


def test_many_hashes_against_a_long_key_terminate() -> None:
    """Without deduplication "#.#.#..." against 100 words takes combinatorially many paths."""
    trie = TopicTrie()
    trie.add(".".join(["#"] * 12) + ".z", "deep")
    trie.add(".".join(["#"] * 12), "all")
    key = ".".join(["w"] * 100)
    assert trie.match(key) == {"all"}
    assert trie.match(key + ".z") == {"all", "deep"}


def test_pairs_lists_every_binding() -> None:
    trie = TopicTrie()
    bound = {("", 1), ("#", 2), ("a..*", 3), ("a.#.b", 1), (".", 4)}
    for pattern, dest in bound:
        trie.add(pattern, dest)
    assert set(trie.pairs()) == bound


# -- property: the trie agrees with a direct recursive matcher ------------------------------


def reference_match(pattern: list[str], words: list[str]) -> bool:
    """The definition, written plainly: "*" is one word, "#" zero or more."""
    if not pattern:
        return not words
    head, rest = pattern[0], pattern[1:]
    if head == "#":
        return reference_match(rest, words) or (bool(words) and reference_match(pattern, words[1:]))
    if not words:
        return False
    return (head == "*" or head == words[0]) and reference_match(rest, words[1:])


patterns = st.lists(st.sampled_from(["a", "b", "", "*", "#"]), max_size=5).map(".".join)
keys = st.lists(st.sampled_from(["a", "b", ""]), max_size=6).map(".".join)
operations = st.lists(
    st.tuples(st.booleans(), patterns, st.integers(min_value=0, max_value=3)), max_size=40
)


@settings(max_examples=300)
@given(operations=operations, probe_keys=st.lists(keys, min_size=1, max_size=12))
def test_trie_matches_reference(
    operations: list[tuple[bool, str, int]], probe_keys: list[str]
) -> None:
    trie = TopicTrie()
    model: set[tuple[str, int]] = set()
    for adding, pattern, dest in operations:
        if adding:
            assert trie.add(pattern, dest) == ((pattern, dest) not in model)
            model.add((pattern, dest))
        else:
            assert trie.remove(pattern, dest) == ((pattern, dest) in model)
            model.discard((pattern, dest))
    assert len(trie) == len(model)
    assert set(trie.pairs()) == model
    for key in probe_keys:
        expected = {d for p, d in model if reference_match(split_words(p), split_words(key))}
        assert trie.match(key) == expected, key
    for pattern, dest in model:
        trie.remove(pattern, dest)
    assert trie.node_count == 1

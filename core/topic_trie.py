"""A trie of AMQP topic patterns: a publish costs what its own key needs, not one test per binding.

Semantics are RabbitMQ's (`rabbit_db_topic_exchange:split_topic_key/1`):

- a key is split on "." into words; words may be empty ("a..b" is "a", "", "b"; "a." is "a", "");
- the empty key "" has *zero* words (not one empty word), for routing keys and patterns alike;
- in a pattern, "*" matches exactly one word (which may be the empty word), "#" matches zero or
  more words; only whole words are wildcards ("a*" is a literal word).

So "#" matches every key, "" included; "*" does not match "" (no word to take) but does match
"a." 's second word, and "*.*" matches "."; the pattern "" matches only the key "".

Matching walks the trie with a stack of (node, position) states. A "#" node is entered without
consuming a word and may then absorb one word at a time (a self-loop), as RabbitMQ's trie does.
States of "#" nodes are deduplicated, which bounds a match by (nodes on the key's paths) x
(words) even for patterns such as "#.#.#" that would otherwise explode combinatorially.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator

__all__ = ["TopicTrie", "split_words"]

STAR = "*"
HASH = "#"


def split_words(key: str) -> list[str]:
    """The words of a routing key or pattern: "" has none, "a..b" has three."""
    return key.split(".") if key else []


class _Node:
    """One trie node: literal children by word, the "*" and "#" children, and the pattern's
    destinations when a pattern ends here."""

    __slots__ = ("destinations", "hash", "is_hash", "star", "words")

    def __init__(self, is_hash: bool = False) -> None:
        self.words: dict[str, _Node] = {}
        self.star: _Node | None = None
        self.hash: _Node | None = None
        self.destinations: set[Hashable] | None = None
        self.is_hash = is_hash

    def is_empty(self) -> bool:
        return not (self.destinations or self.words or self.star or self.hash)


class TopicTrie:
    """A set of (pattern, destination) pairs, matched against routing keys.

    Adding a pair twice keeps one; removing it once removes it. Callers that need several
    bindings per pair (e.g. differing arguments) count them themselves.
    """

    __slots__ = ("_root", "_size")

    def __init__(self) -> None:
        self._root = _Node()
        self._size = 0

    def __len__(self) -> int:
        """The number of (pattern, destination) pairs."""
        return self._size

    def add(self, pattern: str, destination: Hashable) -> bool:
        """Add one pair; True if it was not there yet."""
        node = self._root
        for word in split_words(pattern):
            if word == STAR:
                child = node.star
                if child is None:
                    child = node.star = _Node()
            elif word == HASH:
                child = node.hash
                if child is None:
                    child = node.hash = _Node(is_hash=True)
            else:
                child = node.words.get(word)
                if child is None:
                    child = node.words[word] = _Node()
            node = child
        dests = node.destinations
        if dests is None:
            dests = node.destinations = set()
        elif destination in dests:
            return False
        dests.add(destination)
        self._size += 1
        return True

    def remove(self, pattern: str, destination: Hashable) -> bool:
        """Remove one pair, pruning nodes left without patterns; True if it was there."""
        node = self._root
        path: list[tuple[_Node, str]] = []
        for word in split_words(pattern):
            if word == STAR:
                child = node.star
            elif word == HASH:
                child = node.hash
            else:
                child = node.words.get(word)
            if child is None:
                return False
            path.append((node, word))
            node = child
        dests = node.destinations
        if not dests or destination not in dests:
            return False
        dests.discard(destination)
        if not dests:
            node.destinations = None
        self._size -= 1
        # Prune from the leaf up while nodes are empty.
        while path and node.is_empty():
            parent, word = path.pop()
            if word == STAR:
                parent.star = None
            elif word == HASH:
                parent.hash = None
            else:
                del parent.words[word]
            node = parent
        return True

    def match(self, routing_key: str) -> set[Hashable]:
        """Every destination whose pattern matches `routing_key`."""
        words = routing_key.split(".") if routing_key else []
        n = len(words)
        found: set[Hashable] = set()
        # Alternatives still to explore; the literal child is followed in place (no push).
        stack: list[tuple[_Node, int]] = []
        # States of "#" nodes already queued: they are reachable along several paths
        # (different splits of the key), and exploring each once keeps "#.#.#" linear.
        seen: set[tuple[_Node, int]] | None = None
        node, i = self._root, 0
        while True:
            hash_child = node.hash
            if hash_child is not None:  # enter "#" consuming no word
                if seen is None:
                    seen = set()
                state = (hash_child, i)
                if state not in seen:
                    seen.add(state)
                    stack.append(state)
            if i == n:
                if node.destinations:
                    found.update(node.destinations)
            else:
                if node.is_hash:  # this "#" absorbs one more word
                    assert seen is not None  # a "#" node is only reached through the above
                    state = (node, i + 1)
                    if state not in seen:
                        seen.add(state)
                        stack.append(state)
                if node.star is not None:
                    stack.append((node.star, i + 1))
                child = node.words.get(words[i])
                if child is not None:
                    node = child
                    i += 1
                    continue
            if not stack:
                return found
            node, i = stack.pop()

    def pairs(self) -> Iterator[tuple[str, Hashable]]:
        """Every (pattern, destination) pair, patterns rebuilt from the trie."""
        stack: list[tuple[_Node, list[str]]] = [(self._root, [])]
        while stack:
            node, words = stack.pop()
            if node.destinations:
                pattern = ".".join(words)
                for destination in node.destinations:
                    yield pattern, destination
            for word, child in node.words.items():
                stack.append((child, [*words, word]))
            if node.star is not None:
                stack.append((node.star, [*words, STAR]))
            if node.hash is not None:
                stack.append((node.hash, [*words, HASH]))

    @property
    def node_count(self) -> int:
        """Nodes in the trie, root included (for tests of pruning and for diagnostics)."""
        count = 0
        stack = [self._root]
        while stack:
            node = stack.pop()
            count += 1
            stack.extend(node.words.values())
            if node.star is not None:
                stack.append(node.star)
            if node.hash is not None:
                stack.append(node.hash)
        return count

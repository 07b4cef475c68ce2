"""Exchanges: routing of each type, binding identity and counting, listing, redeclare checks."""

from __future__ import annotations

import pickle
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from herald.core.errors import PreconditionFailed
from herald.core.exchange import (
    Binding,
    DirectExchange,
    Exchange,
    FanoutExchange,
    FrozenArguments,
    HeadersExchange,
    TopicExchange,
    make_exchange,
)


class Dest:
    """An opaque destination, hashed by identity like the vhost's queues and exchanges."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Dest({self.name})"


q1, q2, q3 = Dest("q1"), Dest("q2"), Dest("q3")


def routed(exchange: Exchange, key: str = "", headers: dict[str, Any] | None = None) -> set[Dest]:
    result = exchange.route(key, headers)
    assert len(result) == len(set(result)), "route() must return distinct destinations"
    found = {d for d in result if isinstance(d, Dest)}
    assert len(found) == len(result), "these tests bind Dests only"
    return found


# -- factory --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("type_name", "cls"),
    [
        ("direct", DirectExchange),
        ("fanout", FanoutExchange),
        ("topic", TopicExchange),
        ("headers", HeadersExchange),
    ],
)
def test_make_exchange_builds_each_type(type_name: str, cls: type[Exchange]) -> None:
    exchange = make_exchange(
        "x", type_name, durable=True, auto_delete=True, internal=True, arguments={"k": [1]}
    )
    assert isinstance(exchange, cls)
    assert (exchange.name, exchange.type) == ("x", type_name)
    assert (exchange.durable, exchange.auto_delete, exchange.internal) == (True, True, True)
    assert exchange.arguments == {"k": (1,)}
    assert not exchange.has_bindings
    assert exchange.binding_count == 0


def test_unknown_type_is_precondition_failed() -> None:
    """RabbitMQ (since 3.12.x) answers an unknown exchange type with 406, a channel error."""
    with pytest.raises(PreconditionFailed) as info:
        make_exchange("x", "x-consistent-hash")
    assert info.value.reply_code == 406 and not info.value.connection_level
    assert info.value.reply_text == "unknown exchange type 'x-consistent-hash'"


# -- direct ---------------------------------------------------------------------------------


def test_direct_routes_by_exact_key() -> None:
    exchange = make_exchange("d", "direct")
    assert exchange.bind(q1, "a")
    assert exchange.bind(q2, "a")
    assert exchange.bind(q3, "b")
    assert routed(exchange, "a") == {q1, q2}
    assert routed(exchange, "b") == {q3}
    assert routed(exchange, "c") == set()
    assert routed(exchange, "a.b") == set()
    assert exchange.route("a") is exchange.route("a")  # precomputed, not rebuilt per publish


def test_redundant_bind_is_reported_and_not_counted() -> None:
    exchange = make_exchange("d", "direct")
    assert exchange.bind(q1, "a", {"x": 1})
    assert not exchange.bind(q1, "a", {"x": 1})
    assert exchange.binding_count == 1
    assert routed(exchange, "a") == {q1}


def test_bindings_differing_in_arguments_route_once_and_unbind_separately() -> None:
    exchange = make_exchange("d", "direct")
    assert exchange.bind(q1, "a")
    assert exchange.bind(q1, "a", {"tag": "v"})
    assert exchange.binding_count == 2
    assert exchange.route("a") == (q1,)
    assert exchange.unbind(q1, "a")
    assert routed(exchange, "a") == {q1}  # the other binding still routes
    assert not exchange.unbind(q1, "a")
    assert exchange.unbind(q1, "a", {"tag": "v"})
    assert routed(exchange, "a") == set()
    assert not exchange.has_bindings


def test_unbind_of_missing_binding_is_false() -> None:
    exchange = make_exchange("d", "direct")
    exchange.bind(q1, "a")
    assert not exchange.unbind(q2, "a")
    assert not exchange.unbind(q1, "b")
    assert not exchange.unbind(q1, "a", {"other": 1})
    assert not exchange.unbind(q1, "a", {"bad": object()})  # could never have been bound
    assert exchange.binding_count == 1


def test_binding_identity_is_type_strict() -> None:
    """AMQP tells a bool from an int from a float, so these are three bindings."""
    exchange = make_exchange("d", "direct")
    assert exchange.bind(q1, "a", {"v": 1})
    assert exchange.bind(q1, "a", {"v": True})
    assert exchange.bind(q1, "a", {"v": 1.0})
    assert not exchange.bind(q1, "a", {"v": 1})
    assert exchange.binding_count == 3


def test_unhashable_argument_value_is_refused() -> None:
    exchange = make_exchange("d", "direct")
    with pytest.raises(PreconditionFailed):
        exchange.bind(q1, "a", {"v": object.__new__(type("Unhashable", (), {"__hash__": None}))})
    assert not exchange.has_bindings


# -- fanout ---------------------------------------------------------------------------------


def test_fanout_routes_to_every_destination_whatever_the_key() -> None:
    exchange = make_exchange("f", "fanout")
    assert routed(exchange, "any") == set()
    exchange.bind(q1, "")
    exchange.bind(q2, "ignored")
    exchange.bind(q2, "also-ignored")
    assert routed(exchange, "") == {q1, q2}
    assert routed(exchange, "x.y") == {q1, q2}
    exchange.unbind(q2, "ignored")
    assert routed(exchange, "k") == {q1, q2}
    exchange.unbind(q2, "also-ignored")
    assert routed(exchange, "k") == {q1}


# -- topic ----------------------------------------------------------------------------------


def test_topic_routes_by_pattern_without_duplicates() -> None:
    exchange = make_exchange("t", "topic")
    exchange.bind(q1, "*.orange.*")
    exchange.bind(q2, "*.*.rabbit")
    exchange.bind(q2, "lazy.#")
    exchange.bind(q3, "#")
    assert routed(exchange, "quick.orange.rabbit") == {q1, q2, q3}
    assert routed(exchange, "lazy.pink.rabbit") == {q2, q3}
    assert routed(exchange, "quick.brown.fox") == {q3}
    assert routed(exchange, "") == {q3}


def test_topic_cache_follows_binds_and_unbinds() -> None:
    exchange = make_exchange("t", "topic")
    exchange.bind(q1, "a.*")
    assert routed(exchange, "a.b") == {q1}
    exchange.bind(q2, "#.b")
    assert routed(exchange, "a.b") == {q1, q2}
    exchange.unbind(q1, "a.*")
    assert routed(exchange, "a.b") == {q2}
    exchange.unbind_destination(q2)
    assert routed(exchange, "a.b") == set()


@pytest.mark.parametrize("cache_size", [0, 1, 2, 4096])
def test_topic_results_do_not_depend_on_cache_size(cache_size: int) -> None:
    exchange = TopicExchange("t", cache_size=cache_size)
    exchange.bind(q1, "a.*")
    exchange.bind(q2, "*.b")
    for _ in range(3):
        for key, expected in [("a.b", {q1, q2}), ("a.c", {q1}), ("c.b", {q2}), ("c", set())]:
            assert routed(exchange, key) == expected


# -- headers --------------------------------------------------------------------------------


def headers_exchange(**bindings: dict[str, Any]) -> tuple[HeadersExchange, dict[str, Dest]]:
    exchange = HeadersExchange("h")
    dests = {name: Dest(name) for name in bindings}
    for name, arguments in bindings.items():
        assert exchange.bind(dests[name], "", arguments)
    return exchange, dests


def names(result: set[Dest]) -> set[str]:
    return {d.name for d in result}


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"format": "pdf", "type": "report"}, {"all", "any", "default_all"}),
        ({"format": "pdf"}, {"any"}),
        ({"type": "report"}, {"any"}),
        ({"format": "zip", "type": "log"}, set()),
        ({"format": "pdf", "type": "report", "extra": 1}, {"all", "any", "default_all"}),
        ({}, set()),
        (None, set()),
    ],
)
def test_headers_all_and_any(headers: dict[str, Any] | None, expected: set[str]) -> None:
    exchange, _ = headers_exchange(
        all={"x-match": "all", "format": "pdf", "type": "report"},
        any={"x-match": "any", "format": "pdf", "type": "report"},
        default_all={"format": "pdf", "type": "report"},
    )
    assert names(routed(exchange, "ignored", headers)) == expected


def test_headers_plain_all_any_ignore_x_arguments_but_with_x_compares_them() -> None:
    exchange, _ = headers_exchange(
        all={"x-match": "all", "k": 1, "x-tag": "a"},
        any={"x-match": "any", "x-tag": "a"},
        all_x={"x-match": "all-with-x", "k": 1, "x-tag": "a"},
        any_x={"x-match": "any-with-x", "x-tag": "a"},
    )
    assert names(routed(exchange, "", {"k": 1})) == {"all"}
    assert names(routed(exchange, "", {"k": 1, "x-tag": "a"})) == {"all", "all_x", "any_x"}
    assert names(routed(exchange, "", {"k": 1, "x-tag": "b"})) == {"all"}


def test_headers_binding_with_nothing_to_compare() -> None:
    """RabbitMQ: such a binding matches everything under all and nothing under any."""
    exchange, _ = headers_exchange(
        all={"x-match": "all"}, any={"x-match": "any"}, plain={}, only_x={"x-other": 1}
    )
    assert names(routed(exchange, "", None)) == {"all", "plain", "only_x"}
    assert names(routed(exchange, "", {"a": 1})) == {"all", "plain", "only_x"}


def test_headers_void_value_matches_presence_only() -> None:
    exchange, _ = headers_exchange(
        all={"x-match": "all", "flag": None, "k": "v"}, any={"x-match": "any", "flag": None}
    )
    assert names(routed(exchange, "", {"flag": "anything", "k": "v"})) == {"all", "any"}
    assert names(routed(exchange, "", {"flag": None, "k": "v"})) == {"all", "any"}
    assert names(routed(exchange, "", {"flag": 0})) == {"any"}
    assert names(routed(exchange, "", {"k": "v"})) == set()


def test_headers_value_comparison() -> None:
    exchange, _ = headers_exchange(
        num={"n": 1},
        flag={"b": True},
        text={"s": "abc"},
        raw={"r": b"abc"},
        array={"l": [1, "a"]},
        nested={"t": {}},
    )
    assert names(routed(exchange, "", {"n": 1.0})) == {"num"}  # numbers by value
    assert names(routed(exchange, "", {"n": True})) == set()  # a bool is not a number
    assert names(routed(exchange, "", {"b": 1})) == set()
    assert names(routed(exchange, "", {"b": True})) == {"flag"}
    assert names(routed(exchange, "", {"s": b"abc"})) == {"text"}  # a long string as bytes
    assert names(routed(exchange, "", {"s": "abd"})) == set()
    assert names(routed(exchange, "", {"r": "abc"})) == {"raw"}
    assert names(routed(exchange, "", {"r": "abd"})) == set()
    assert names(routed(exchange, "", {"l": [1, "a"]})) == {"array"}
    assert names(routed(exchange, "", {"l": [1, "b"]})) == set()
    assert names(routed(exchange, "", {"t": {}})) == {"nested"}


def test_headers_destination_routed_once_across_bindings() -> None:
    exchange = HeadersExchange("h")
    exchange.bind(q1, "", {"a": 1})
    exchange.bind(q1, "", {"x-match": "any", "a": 1})
    exchange.bind(q1, "other-key", {"a": 1})  # another binding, same routing
    assert exchange.binding_count == 3
    assert exchange.route("", {"a": 1}) == (q1,)
    exchange.unbind(q1, "", {"a": 1})
    exchange.unbind(q1, "", {"x-match": "any", "a": 1})
    assert exchange.route("", {"a": 1}) == (q1,)
    exchange.unbind(q1, "other-key", {"a": 1})
    assert exchange.route("", {"a": 1}) == ()


@pytest.mark.parametrize("x_match", ["some", "ALL", "", 1, None])
def test_headers_invalid_x_match_is_refused_at_bind(x_match: object) -> None:
    exchange = HeadersExchange("h")
    with pytest.raises(PreconditionFailed) as info:
        exchange.bind(q1, "", {"x-match": x_match, "a": 1})
    assert "x-match" in info.value.reply_text
    assert not exchange.has_bindings
    assert exchange.route("", {"a": 1}) == ()


def test_headers_x_match_may_arrive_as_bytes() -> None:
    exchange = HeadersExchange("h")
    exchange.bind(q1, "", {"x-match": b"any", "a": 1, "b": 2})
    assert exchange.route("", {"b": 2}) == (q1,)


# -- every type: unbind_destination, listing ------------------------------------------------


@pytest.mark.parametrize("type_name", ["direct", "fanout", "topic", "headers"])
def test_unbind_destination_removes_all_its_bindings(type_name: str) -> None:
    exchange = make_exchange("x", type_name)
    exchange.bind(q1, "a")
    exchange.bind(q1, "b", {"x-match": "any", "h": 1})
    exchange.bind(q1, "#")
    exchange.bind(q2, "a")
    assert exchange.is_bound(q1)
    assert exchange.unbind_destination(q1) == 3
    assert not exchange.is_bound(q1)
    assert exchange.unbind_destination(q1) == 0
    assert exchange.binding_count == 1
    assert q1 not in exchange.route("a", {"h": 1})
    assert q2 in exchange.route("a", {"h": 1})
    assert [b.destination for b in exchange.bindings()] == [q2]


def test_bindings_lists_frozen_values() -> None:
    exchange = make_exchange("src", "topic")
    destination_exchange = make_exchange("dst", "fanout")
    exchange.bind(q1, "a.#", {"n": [1, {"m": 2}]})
    exchange.bind(destination_exchange, "b")
    listed = list(exchange.bindings())
    assert listed == [
        Binding("src", q1, "a.#", FrozenArguments({"n": [1, {"m": 2}]})),
        Binding("src", destination_exchange, "b", FrozenArguments()),
    ]
    arguments = listed[0].arguments
    assert arguments == {"n": (1, {"m": 2})}
    assert isinstance(arguments, dict)  # JSON and cattrs take it as a dict
    assert len({listed[0], listed[1]}) == 2  # hashable
    with pytest.raises(TypeError):
        arguments["n"] = 2
    assert pickle.loads(pickle.dumps(arguments)) == arguments


def test_exchange_is_a_hashable_destination() -> None:
    source = make_exchange("src", "direct")
    inner = make_exchange("inner", "direct")
    source.bind(inner, "k")
    assert source.route("k") == (inner,)
    assert {inner: 1}[inner] == 1


# -- redeclare ------------------------------------------------------------------------------


def test_equivalent_compares_type_flags_and_alternate_exchange() -> None:
    exchange = make_exchange(
        "x", "topic", durable=True, arguments={"alternate-exchange": "ae", "other": 1}
    )
    same = ("topic", True, False, False, {"alternate-exchange": "ae", "other": 1})
    assert exchange.equivalent(*same)
    # As RabbitMQ: arguments other than alternate-exchange are not compared.
    assert exchange.equivalent("topic", True, False, False, {"alternate-exchange": "ae"})
    assert not exchange.equivalent("direct", True, False, False, {"alternate-exchange": "ae"})
    assert not exchange.equivalent("topic", False, False, False, {"alternate-exchange": "ae"})
    assert not exchange.equivalent("topic", True, True, False, {"alternate-exchange": "ae"})
    assert not exchange.equivalent("topic", True, False, True, {"alternate-exchange": "ae"})
    assert not exchange.equivalent("topic", True, False, False, {"alternate-exchange": "b"})
    assert not exchange.equivalent("topic", True, False, False, None)


def test_difference_says_which_property_differs() -> None:
    exchange = make_exchange("logs", "fanout", durable=True)
    assert exchange.difference("fanout", True, False, False, None) is None
    assert exchange.difference("fanout", False, False, False, None) == (
        "inequivalent arg 'durable' for exchange 'logs': received 'false' but current is 'true'"
    )
    assert exchange.difference("topic", True, False, False, {}) == (
        "inequivalent arg 'type' for exchange 'logs': received 'topic' but current is 'fanout'"
    )
    assert exchange.difference("fanout", True, False, False, {"alternate-exchange": "ae"}) == (
        "inequivalent arg 'alternate-exchange' for exchange 'logs': "
        "received 'ae' but current is 'none'"
    )


# -- property: routing always equals what the set of bindings implies ----------------------

DESTS = [Dest(f"d{i}") for i in range(3)]
HEADER_ARGS = [
    None,
    {"x-match": "any", "a": 1},
    {"x-match": "all", "a": 1, "b": None},
    {"x-match": "any-with-x", "x-a": 1},
]


def expected_route(type_name: str, model: set[tuple[int, str, int]], key: str) -> set[Dest]:
    """What routing `key` with headers {"a": 1, "b": 2} must reach, given the bindings."""
    found = set()
    for dest, bound_key, arg_index in model:
        args = HEADER_ARGS[arg_index] or {}
        if type_name == "direct":
            hit = bound_key == key
        elif type_name == "fanout":
            hit = True
        elif type_name == "topic":  # keys drawn below only use literal words and "#"
            hit = bound_key == "#" or bound_key == key
        else:
            hit = args in ({}, HEADER_ARGS[1], HEADER_ARGS[2])
        if hit:
            found.add(DESTS[dest])
    return found


@pytest.mark.parametrize("type_name", ["direct", "fanout", "topic", "headers"])
@given(
    operations=st.lists(
        st.tuples(
            st.sampled_from(["bind", "unbind", "unbind_destination"]),
            st.integers(0, 2),
            st.sampled_from(["a", "b", "#"]),
            st.integers(0, len(HEADER_ARGS) - 1),
        ),
        max_size=30,
    )
)
def test_routing_follows_the_binding_set(
    type_name: str, operations: list[tuple[str, int, str, int]]
) -> None:
    exchange = make_exchange("x", type_name)
    model: set[tuple[int, str, int]] = set()
    for op, dest, key, arg_index in operations:
        binding = (dest, key, arg_index)
        args = HEADER_ARGS[arg_index]
        if op == "bind":
            assert exchange.bind(DESTS[dest], key, args) == (binding not in model)
            model.add(binding)
        elif op == "unbind":
            assert exchange.unbind(DESTS[dest], key, args) == (binding in model)
            model.discard(binding)
        else:
            gone = {b for b in model if b[0] == dest}
            assert exchange.unbind_destination(DESTS[dest]) == len(gone)
            model -= gone
        assert exchange.binding_count == len(model)
        for probe in ("a", "b", "c"):
            assert routed(exchange, probe, {"a": 1, "b": 2}) == expected_route(
                type_name, model, probe
            )

"""`RouteRegistry` and the name server's JSON, with time passed by hand (no I/O)."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from herald.cluster.nameserver.registry import QueueInfo, Registration, Role, RouteRegistry
from herald.cluster.nameserver.wire import (
    BadRequest,
    cluster_json,
    parse_registration,
    registration_json,
    route_json,
)

ORDERS = QueueInfo("/", "orders", "shared")
AUDIT = QueueInfo("/", "audit")


def reg(
    node: str,
    role: Role = Role.MASTER,
    *,
    group: str = "g1",
    epoch: int = 1,
    data_version: int = 1,
    queues: tuple[QueueInfo, ...] | None = (ORDERS,),
    offset: int | None = 0,
) -> Registration:
    host = f"10.0.0.{node[-1]}"
    addrs = {"amqp": f"{host}:5672", "mqtt": f"{host}:1883"}
    return Registration("prod", group, node, role, epoch, data_version, addrs, queues, offset)


def test_route_names_group_master_address_and_slaves() -> None:
    registry = RouteRegistry()
    registry.register(reg("n1", Role.SLAVE, queues=None), now=0)
    registry.register(reg("n2", epoch=8), now=0)
    registry.register(reg("n3", Role.SLAVE, epoch=8, queues=None), now=0)
    route = registry.route("/", "orders", "amqp")
    assert route is not None and route.type == "shared"
    (group,) = route.groups
    assert (group.group, group.epoch, group.slaves) == ("g1", 8, ("n1", "n3"))
    assert group.master is not None
    assert (group.master.node, group.master.addr) == ("n2", "10.0.0.2:5672")
    mqtt = registry.route("/", "orders", "mqtt")
    assert mqtt is not None and mqtt.groups[0].master is not None
    assert mqtt.groups[0].master.addr == "10.0.0.2:1883"
    stomp = registry.route("/", "orders", "stomp")
    assert stomp is not None and stomp.groups[0].master is not None
    assert stomp.groups[0].master.addr is None
    assert registry.route("/", "nope") is None
    assert registry.route("other", "orders") is None


def test_a_queue_on_several_groups_lists_each() -> None:
    registry = RouteRegistry()
    registry.register(reg("n1", group="g1"), now=0)
    registry.register(reg("n2", group="g2", queues=(ORDERS, AUDIT)), now=0)
    route = registry.route("/", "orders")
    assert route is not None and [g.group for g in route.groups] == ["g1", "g2"]
    audit = registry.route("/", "audit")
    assert audit is not None and [g.group for g in audit.groups] == ["g2"]


def test_queue_tables_come_from_masters_only() -> None:
    registry = RouteRegistry()
    registry.register(reg("n1", Role.SLAVE, queues=(AUDIT,)), now=0)
    assert registry.route("/", "audit") is None


def test_highest_epoch_master_wins() -> None:
    """An old master still registering (paused, not yet demoted) loses to the new one, and
    its queue table is ignored."""
    registry = RouteRegistry()
    registry.register(reg("n1", epoch=8, queues=(ORDERS,)), now=0)
    registry.register(reg("n2", epoch=9, queues=(ORDERS, AUDIT)), now=1)
    registry.register(reg("n1", epoch=8, data_version=2, queues=(ORDERS,)), now=2)
    route = registry.route("/", "audit", "amqp")
    assert route is not None and route.groups[0].master is not None
    assert (route.groups[0].master.node, route.groups[0].epoch) == ("n2", 9)
    (group,) = registry.groups(now=2)
    assert group.master == "n2" and group.epoch == 9 and group.queues == 2
    # The old master's lease is gone: it comes back as a slave of epoch 9.
    registry.register(reg("n1", Role.SLAVE, epoch=9, queues=None), now=3)
    route = registry.route("/", "orders")
    assert route is not None and route.groups[0].slaves == ("n1",)


def test_data_version_decides_when_a_table_is_replaced() -> None:
    registry = RouteRegistry()
    registry.register(reg("n1", data_version=1, queues=(ORDERS,)), now=0)
    version = registry.version
    # A heartbeat and a repeat of the same table change nothing.
    assert not registry.register(reg("n1", data_version=1, queues=None), now=1).need_full
    registry.register(reg("n1", data_version=1, queues=(ORDERS,)), now=2)
    assert registry.version == version
    # A changed table replaces the old one (audit in, orders out).
    registry.register(reg("n1", data_version=2, queues=(AUDIT,)), now=3)
    assert registry.version > version
    assert registry.route("/", "orders") is None and registry.route("/", "audit") is not None
    # A heartbeat with a data_version the registry has not seen asks for the table.
    assert registry.register(reg("n1", data_version=3, queues=None), now=4).need_full


def test_need_full_after_a_name_server_restart() -> None:
    registry = RouteRegistry()  # a fresh name server: knows nothing
    assert registry.register(reg("n2", queues=None), now=0).need_full
    assert not registry.register(reg("n3", Role.SLAVE, queues=None), now=0).need_full
    assert registry.route("/", "orders") is None
    assert not registry.register(reg("n2", queues=(ORDERS,)), now=1).need_full
    assert registry.route("/", "orders") is not None
    assert not registry.register(reg("n2", queues=None), now=2).need_full


def test_a_new_master_is_asked_for_its_table() -> None:
    registry = RouteRegistry()
    registry.register(reg("n1", epoch=1), now=0)
    assert registry.register(reg("n2", epoch=2, queues=None), now=1).need_full


def test_expiry_drops_silent_nodes_and_empty_groups() -> None:
    registry = RouteRegistry(expiry_s=120)
    registry.register(reg("n1", group="g1"), now=0)
    registry.register(reg("n2", Role.SLAVE, group="g1", queues=None), now=0)
    registry.register(reg("n3", group="g2"), now=0)
    assert registry.expire(now=120) == ()  # silent for exactly the limit: kept
    registry.register(reg("n2", Role.SLAVE, group="g1", queues=None), now=100)
    assert sorted(registry.expire(now=121)) == ["n1", "n3"]
    # g1 lost its master but still has a node: its queues are known, with no master.
    route = registry.route("/", "orders", "amqp")
    assert route is not None and [g.group for g in route.groups] == ["g1"]
    assert route.groups[0].master is None and route.groups[0].slaves == ("n2",)
    assert registry.expire(now=221) == ("n2",)
    assert registry.groups(now=221) == () and registry.route("/", "orders") is None


def test_unregister_and_moving_groups() -> None:
    registry = RouteRegistry()
    registry.register(reg("n1", group="g1"), now=0)
    registry.register(reg("n1", group="g2"), now=1)
    assert [g.group for g in registry.groups(now=1)] == ["g2"]
    assert registry.unregister("n1") and not registry.unregister("n1")
    assert registry.groups(now=1) == ()


def test_cluster_view() -> None:
    registry = RouteRegistry()
    registry.register(reg("n1", Role.SLAVE, epoch=8, queues=None), now=0)
    registry.register(reg("n2", epoch=8, data_version=41), now=0.5)
    (group,) = registry.groups(now=2)
    assert (group.cluster, group.group, group.master, group.queues) == ("prod", "g1", "n2", 1)
    n1, n2 = group.nodes
    assert (n1.node, n1.role, n1.last_seen_ms_ago) == ("n1", Role.SLAVE, 2000)
    assert (n2.node, n2.role, n2.data_version, n2.last_seen_ms_ago) == ("n2", Role.MASTER, 41, 1500)


def test_offset_is_kept_as_of_the_last_registration() -> None:
    """Each registration replaces the node's offset; a change of the offset alone (a busy
    node, every period) does not move `version`, a node without one shows None."""
    registry = RouteRegistry()
    registry.register(reg("n1", offset=100), now=0)
    registry.register(reg("n2", Role.SLAVE, queues=None, offset=None), now=0)
    version = registry.version
    assert {n.node: n.offset for n in registry.groups(now=0)[0].nodes} == {"n1": 100, "n2": None}
    registry.register(reg("n1", queues=None, offset=4196), now=1)
    assert registry.version == version
    (group,) = registry.groups(now=1)
    assert [(n.node, n.offset) for n in group.nodes] == [("n1", 4196), ("n2", None)]
    registry.register(reg("n1", epoch=2, queues=None, offset=4196), now=2)
    assert registry.version > version  # what else a node shows still moves it
    cluster = cluster_json(registry.version, registry.groups(now=2))
    assert [n["offset"] for n in cluster["groups"][0]["nodes"]] == [4196, None]


def test_a_registration_without_offset_is_accepted() -> None:
    """A node from before the field: no `offset` (or null) means None, not 0."""
    old = registration_json(reg("n2", queues=None))
    del old["offset"]
    assert parse_registration(old).offset is None
    assert parse_registration({**old, "offset": None}).offset is None
    assert parse_registration({**old, "offset": 0}).offset == 0
    registry = RouteRegistry()
    registry.register(parse_registration(old), now=0)
    assert registry.groups(now=0)[0].nodes[0].offset is None


def test_registration_json_round_trip() -> None:
    r = reg("n2", epoch=8, offset=18432)
    assert registration_json(r)["offset"] == 18432
    assert parse_registration(registration_json(r)) == r
    heartbeat = attrs.evolve(r, queues=None)
    assert parse_registration(registration_json(heartbeat)) == heartbeat


def test_route_json_matches_the_design() -> None:
    registry = RouteRegistry()
    registry.register(reg("n2", epoch=8), now=0)
    route = registry.route("/", "orders", "amqp")
    assert route is not None
    assert route_json(route) == {
        "vhost": "/",
        "queue": "orders",
        "type": "shared",
        "groups": [
            {
                "group": "g1",
                "epoch": 8,
                "master": {
                    "node": "n2",
                    "addr": "10.0.0.2:5672",
                    "addrs": {"amqp": "10.0.0.2:5672", "mqtt": "10.0.0.2:1883"},
                },
                "slaves": [],
            }
        ],
    }


def _body(**changes: Any) -> dict[str, Any]:
    body = registration_json(reg("n2"))
    for key, value in changes.items():
        if value is ...:
            del body[key]
        else:
            body[key] = value
    return body


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ([], "body"),
        (_body(node=...), "node"),
        (_body(group=""), "group"),
        (_body(cluster=7), "cluster"),
        (_body(role="leader"), "role"),
        (_body(epoch=-1), "epoch"),
        (_body(epoch="8"), "epoch"),
        (_body(data_version=True), "data_version"),
        (_body(offset=-1), "offset"),
        (_body(offset="18432"), "offset"),
        (_body(offset=False), "offset"),
        (_body(offset=1.5), "offset"),
        (_body(addrs=["10.0.0.2:5672"]), "addrs"),
        (_body(addrs={"amqp": "10.0.0.2"}), "addrs.amqp"),
        (_body(addrs={"amqp": "10.0.0.2:99999"}), "addrs.amqp"),
        (_body(queues={"vhost": "/"}), "queues"),
        (_body(queues=[{"vhost": "/", "name": "a"}, {"vhost": "/"}]), "queues[1].name"),
        (_body(queues=[{"vhost": "/", "name": "a", "durable": "yes"}]), "queues[0].durable"),
        (_body(queues=["a"]), "queues[0]"),
    ],
)
def test_bad_registrations_name_the_field(body: Any, field: str) -> None:
    with pytest.raises(BadRequest) as caught:
        parse_registration(body)
    assert caught.value.field == field

"""AMQP 0-9-1 classes, methods and basic properties, typed by hand for herald's code generator.

Why by hand: the AMQP XML and RabbitMQ's codegen JSON carry licences herald does not want to
vendor, and the protocol is small and frozen. Only the facts the wire needs are here: ids,
field names and domain types in wire order, the `synchronous` and `has content` flags, and who
may send each method (a server codec rejects client frames carrying server-only methods).

Field names follow the 0-9-1 spec with dashes as underscores and the reserved fields named as
RabbitMQ and pika name them (`ticket`, `capabilities`, `insist`, `known_hosts`,
`out_of_band`, `channel_id`, `cluster_id`); `global` is `global_qos` (a keyword), and
`nowait` is spelled as pika spells it. RabbitMQ's extensions are included: exchange.bind /
unbind, basic.nack, confirm.select, connection.blocked / unblocked, connection.update-secret.

Run `python tools/amqp_codegen.py` after editing this file.
"""

from __future__ import annotations

from typing import Any

import attrs

# Domain types and how the generator maps them to Python.
DOMAINS = ("bit", "octet", "short", "long", "longlong", "shortstr", "longstr", "table", "timestamp")

CLIENT = "client"
SERVER = "server"
BOTH = "both"


@attrs.frozen
class Field:
    name: str
    domain: str
    default: Any = attrs.NOTHING  # NOTHING = the domain's zero value


@attrs.frozen
class Method:
    name: str
    index: int
    fields: tuple[Field, ...]
    synchronous: bool
    sender: str
    content: bool = False


@attrs.frozen
class AMQPClass:
    name: str
    index: int
    methods: tuple[Method, ...]


@attrs.frozen
class Property:
    name: str
    domain: str
    flag: int


def F(name: str, domain: str, default: Any = attrs.NOTHING) -> Field:
    assert domain in DOMAINS, domain
    return Field(name, domain, default)


def M(
    name: str,
    index: int,
    *fields: Field,
    sync: bool = False,
    sender: str = CLIENT,
    content: bool = False,
) -> Method:
    return Method(name, index, fields, sync, sender, content)


CLOSE_FIELDS = (
    F("reply_code", "short", 200),
    F("reply_text", "shortstr"),
    F("class_id", "short"),
    F("method_id", "short"),
)
TUNE_FIELDS = (F("channel_max", "short"), F("frame_max", "long"), F("heartbeat", "short"))
EXCHANGE_BIND_FIELDS = (
    F("ticket", "short"),
    F("destination", "shortstr"),
    F("source", "shortstr"),
    F("routing_key", "shortstr"),
    F("nowait", "bit"),
    F("arguments", "table"),
)

CLASSES: tuple[AMQPClass, ...] = (
    AMQPClass(
        "connection",
        10,
        (
            M(
                "start",
                10,
                F("version_major", "octet", 0),
                F("version_minor", "octet", 9),
                F("server_properties", "table"),
                F("mechanisms", "longstr", b"PLAIN"),
                F("locales", "longstr", b"en_US"),
                sync=True,
                sender=SERVER,
            ),
            M(
                "start-ok",
                11,
                F("client_properties", "table"),
                F("mechanism", "shortstr", "PLAIN"),
                F("response", "longstr"),
                F("locale", "shortstr", "en_US"),
            ),
            M("secure", 20, F("challenge", "longstr"), sync=True, sender=SERVER),
            M("secure-ok", 21, F("response", "longstr")),
            M("tune", 30, *TUNE_FIELDS, sync=True, sender=SERVER),
            M("tune-ok", 31, *TUNE_FIELDS),
            M(
                "open",
                40,
                F("virtual_host", "shortstr", "/"),
                F("capabilities", "shortstr"),
                F("insist", "bit"),
                sync=True,
            ),
            M("open-ok", 41, F("known_hosts", "shortstr"), sender=SERVER),
            M("close", 50, *CLOSE_FIELDS, sync=True, sender=BOTH),
            M("close-ok", 51, sender=BOTH),
            M("blocked", 60, F("reason", "shortstr"), sender=SERVER),
            M("unblocked", 61, sender=SERVER),
            M(
                "update-secret",
                70,
                F("new_secret", "longstr"),
                F("reason", "shortstr"),
                sync=True,
            ),
            M("update-secret-ok", 71, sender=SERVER),
        ),
    ),
    AMQPClass(
        "channel",
        20,
        (
            M("open", 10, F("out_of_band", "shortstr"), sync=True),
            M("open-ok", 11, F("channel_id", "longstr"), sender=SERVER),
            M("flow", 20, F("active", "bit", True), sync=True, sender=BOTH),
            M("flow-ok", 21, F("active", "bit", True), sender=BOTH),
            M("close", 40, *CLOSE_FIELDS, sync=True, sender=BOTH),
            M("close-ok", 41, sender=BOTH),
        ),
    ),
    AMQPClass(
        "exchange",
        40,
        (
            M(
                "declare",
                10,
                F("ticket", "short"),
                F("exchange", "shortstr"),
                F("type", "shortstr", "direct"),
                F("passive", "bit"),
                F("durable", "bit"),
                F("auto_delete", "bit"),
                F("internal", "bit"),
                F("nowait", "bit"),
                F("arguments", "table"),
                sync=True,
            ),
            M("declare-ok", 11, sender=SERVER),
            M(
                "delete",
                20,
                F("ticket", "short"),
                F("exchange", "shortstr"),
                F("if_unused", "bit"),
                F("nowait", "bit"),
                sync=True,
            ),
            M("delete-ok", 21, sender=SERVER),
            M("bind", 30, *EXCHANGE_BIND_FIELDS, sync=True),
            M("bind-ok", 31, sender=SERVER),
            M("unbind", 40, *EXCHANGE_BIND_FIELDS, sync=True),
            M("unbind-ok", 51, sender=SERVER),
        ),
    ),
    AMQPClass(
        "queue",
        50,
        (
            M(
                "declare",
                10,
                F("ticket", "short"),
                F("queue", "shortstr"),
                F("passive", "bit"),
                F("durable", "bit"),
                F("exclusive", "bit"),
                F("auto_delete", "bit"),
                F("nowait", "bit"),
                F("arguments", "table"),
                sync=True,
            ),
            M(
                "declare-ok",
                11,
                F("queue", "shortstr"),
                F("message_count", "long"),
                F("consumer_count", "long"),
                sender=SERVER,
            ),
            M(
                "bind",
                20,
                F("ticket", "short"),
                F("queue", "shortstr"),
                F("exchange", "shortstr"),
                F("routing_key", "shortstr"),
                F("nowait", "bit"),
                F("arguments", "table"),
                sync=True,
            ),
            M("bind-ok", 21, sender=SERVER),
            M(
                "purge",
                30,
                F("ticket", "short"),
                F("queue", "shortstr"),
                F("nowait", "bit"),
                sync=True,
            ),
            M("purge-ok", 31, F("message_count", "long"), sender=SERVER),
            M(
                "delete",
                40,
                F("ticket", "short"),
                F("queue", "shortstr"),
                F("if_unused", "bit"),
                F("if_empty", "bit"),
                F("nowait", "bit"),
                sync=True,
            ),
            M("delete-ok", 41, F("message_count", "long"), sender=SERVER),
            M(
                "unbind",
                50,
                F("ticket", "short"),
                F("queue", "shortstr"),
                F("exchange", "shortstr"),
                F("routing_key", "shortstr"),
                F("arguments", "table"),
                sync=True,
            ),
            M("unbind-ok", 51, sender=SERVER),
        ),
    ),
    AMQPClass(
        "basic",
        60,
        (
            M(
                "qos",
                10,
                F("prefetch_size", "long"),
                F("prefetch_count", "short"),
                F("global_qos", "bit"),
                sync=True,
            ),
            M("qos-ok", 11, sender=SERVER),
            M(
                "consume",
                20,
                F("ticket", "short"),
                F("queue", "shortstr"),
                F("consumer_tag", "shortstr"),
                F("no_local", "bit"),
                F("no_ack", "bit"),
                F("exclusive", "bit"),
                F("nowait", "bit"),
                F("arguments", "table"),
                sync=True,
            ),
            M("consume-ok", 21, F("consumer_tag", "shortstr"), sender=SERVER),
            # RabbitMQ sends basic.cancel to consumers whose queue went away.
            M(
                "cancel",
                30,
                F("consumer_tag", "shortstr"),
                F("nowait", "bit"),
                sync=True,
                sender=BOTH,
            ),
            M("cancel-ok", 31, F("consumer_tag", "shortstr"), sender=SERVER),
            M(
                "publish",
                40,
                F("ticket", "short"),
                F("exchange", "shortstr"),
                F("routing_key", "shortstr"),
                F("mandatory", "bit"),
                F("immediate", "bit"),
                content=True,
            ),
            M(
                "return",
                50,
                F("reply_code", "short"),
                F("reply_text", "shortstr"),
                F("exchange", "shortstr"),
                F("routing_key", "shortstr"),
                sender=SERVER,
                content=True,
            ),
            M(
                "deliver",
                60,
                F("consumer_tag", "shortstr"),
                F("delivery_tag", "longlong"),
                F("redelivered", "bit"),
                F("exchange", "shortstr"),
                F("routing_key", "shortstr"),
                sender=SERVER,
                content=True,
            ),
            M(
                "get",
                70,
                F("ticket", "short"),
                F("queue", "shortstr"),
                F("no_ack", "bit"),
                sync=True,
            ),
            M(
                "get-ok",
                71,
                F("delivery_tag", "longlong"),
                F("redelivered", "bit"),
                F("exchange", "shortstr"),
                F("routing_key", "shortstr"),
                F("message_count", "long"),
                sender=SERVER,
                content=True,
            ),
            M("get-empty", 72, F("cluster_id", "shortstr"), sender=SERVER),
            # Both ways: client acks deliveries, server acks publishes (publisher confirms).
            M("ack", 80, F("delivery_tag", "longlong"), F("multiple", "bit"), sender=BOTH),
            M("reject", 90, F("delivery_tag", "longlong"), F("requeue", "bit", True)),
            M("recover-async", 100, F("requeue", "bit")),
            M("recover", 110, F("requeue", "bit"), sync=True),
            M("recover-ok", 111, sender=SERVER),
            M(
                "nack",
                120,
                F("delivery_tag", "longlong"),
                F("multiple", "bit"),
                F("requeue", "bit", True),
                sender=BOTH,
            ),
        ),
    ),
    AMQPClass(
        "confirm",
        85,
        (
            M("select", 10, F("nowait", "bit"), sync=True),
            M("select-ok", 11, sender=SERVER),
        ),
    ),
    AMQPClass(
        "tx",
        90,
        (
            M("select", 10, sync=True),
            M("select-ok", 11, sender=SERVER),
            M("commit", 20, sync=True),
            M("commit-ok", 21, sender=SERVER),
            M("rollback", 30, sync=True),
            M("rollback-ok", 31, sender=SERVER),
        ),
    ),
)

# The content class (basic) carries these properties, in wire order, with their flag bits:
# bits 15..2 of the flags word; bit 1 is unused and bit 0 says another flags word follows.
BASIC_PROPERTIES: tuple[Property, ...] = (
    Property("content_type", "shortstr", 0x8000),
    Property("content_encoding", "shortstr", 0x4000),
    Property("headers", "table", 0x2000),
    Property("delivery_mode", "octet", 0x1000),
    Property("priority", "octet", 0x0800),
    Property("correlation_id", "shortstr", 0x0400),
    Property("reply_to", "shortstr", 0x0200),
    Property("expiration", "shortstr", 0x0100),
    Property("message_id", "shortstr", 0x0080),
    Property("timestamp", "timestamp", 0x0040),
    Property("type", "shortstr", 0x0020),
    Property("user_id", "shortstr", 0x0010),
    Property("app_id", "shortstr", 0x0008),
    Property("cluster_id", "shortstr", 0x0004),
)

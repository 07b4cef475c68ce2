"""GENERATED FILE, DO NOT EDIT: python tools/amqp_codegen.py

AMQP 0-9-1 methods (with RabbitMQ's extensions) and the basic properties, from the table in
tools/amqp_spec.py. Each method is a frozen attrs class with CLASS_ID, METHOD_ID, NAME,
SYNCHRONOUS, HAS_CONTENT, SENT_BY_CLIENT and SENT_BY_SERVER, and `encode()` returning the
method frame payload. `METHODS[(class_id, method_id)]` is the class; `DECODERS[(class_id << 16)
| method_id](buf, off, end)` decodes the arguments found between `off` and `end`.

Decoders raise LocalProtocolError 501 when the arguments don't fill their frame exactly, and let
struct.error / IndexError / UnicodeDecodeError escape on truncated input: callers (the
connection, `decode_method`) turn those into FRAME_ERROR 501 too. `encode()` raises
LocalProtocolError for a string longer than its domain allows and struct.error for an integer
out of range.
"""

# fmt: off
# ruff: noqa: E501
from __future__ import annotations

import struct
from collections.abc import Callable
from typing import ClassVar

import attrs

from herald.core.errors import LocalProtocolError
from herald.plugins.amqp.codec.constants import ReplyCode
from herald.plugins.amqp.codec.fields import FieldTable, decode_table, encode_table

Decoder = Callable[[bytes | bytearray, int, int], "Method"]


def _malformed(name: str) -> LocalProtocolError:
    return LocalProtocolError(f"cannot decode {name} arguments", ReplyCode.FRAME_ERROR)


def _too_long(name: str, field: str) -> LocalProtocolError:
    return LocalProtocolError(f"{name}: {field} is longer than 255 bytes")


class Method:
    """Base of the generated method classes."""

    __slots__ = ()
    CLASS_ID: ClassVar[int]
    METHOD_ID: ClassVar[int]
    NAME: ClassVar[str]
    SYNCHRONOUS: ClassVar[bool]
    HAS_CONTENT: ClassVar[bool]
    SENT_BY_CLIENT: ClassVar[bool]
    SENT_BY_SERVER: ClassVar[bool]

    def encode(self) -> bytes:
        """The method frame payload: class id, method id, arguments."""
        raise NotImplementedError


_S_B = struct.Struct(">B")
_S_BB = struct.Struct(">BB")
_S_H = struct.Struct(">H")
_S_HB = struct.Struct(">HB")
_S_HH = struct.Struct(">HH")
_S_HHB = struct.Struct(">HHB")
_S_HHBB = struct.Struct(">HHBB")
_S_HHHB = struct.Struct(">HHHB")
_S_HHHIH = struct.Struct(">HHHIH")
_S_HHI = struct.Struct(">HHI")
_S_HHIHB = struct.Struct(">HHIHB")
_S_HHQB = struct.Struct(">HHQB")
_S_HHQBB = struct.Struct(">HHQBB")
_S_HIH = struct.Struct(">HIH")
_S_I = struct.Struct(">I")
_S_IHB = struct.Struct(">IHB")
_S_II = struct.Struct(">II")
_S_Q = struct.Struct(">Q")
_S_QB = struct.Struct(">QB")
_S_QBB = struct.Struct(">QBB")


@attrs.frozen(slots=True)
class ConnectionStart(Method):
    """connection.start (10.10)."""

    CLASS_ID = 10
    METHOD_ID = 10
    NAME = "connection.start"
    SYNCHRONOUS = True
    HAS_CONTENT = False
    SENT_BY_CLIENT = False
    SENT_BY_SERVER = True

    version_major: int = 0
    version_minor: int = 9
    server_properties: FieldTable = attrs.field(factory=dict)
    mechanisms: bytes = b"PLAIN"
    locales: bytes = b"en_US"

    def encode(self) -> bytes:
        return b"".join((
            _S_HHBB.pack(10, 10, self.version_major, self.version_minor),
            encode_table(self.server_properties),
            _S_I.pack(len(self.mechanisms)),
            self.mechanisms,
            _S_I.pack(len(self.locales)),
            self.locales,
        ))


@attrs.frozen(slots=True)
class ConnectionStartOk(Method):
    """connection.start-ok (10.11)."""

    CLASS_ID = 10
    METHOD_ID = 11
    NAME = "connection.start-ok"
    SYNCHRONOUS = False
    HAS_CONTENT = False
    SENT_BY_CLIENT = True
    SENT_BY_SERVER = False

    client_properties: FieldTable = attrs.field(factory=dict)
    mechanism: str = "PLAIN"
    response: bytes = b""
    locale: str = "en_US"

    def encode(self) -> bytes:
        mechanism = self.mechanism.encode()
        if len(mechanism) > 255:
            raise _too_long("connection.start-ok", "mechanism")
        locale = self.locale.encode()
        if len(locale) > 255:
            raise _too_long("connection.start-ok", "locale")
        return b"".join((
            _S_HH.pack(10, 11),
            encode_table(self.client_properties),
            _S_B.pack(len(mechanism)),
            mechanism,
            _S_I.pack(len(self.response)),
            self.response,
            _S_B.pack(len(locale)),
            locale,
        ))


@attrs.frozen(slots=True)
class ConnectionSecure(Method):
    """connection.secure (10.20)."""

    CLASS_ID = 10
    METHOD_ID = 20
    NAME = "connection.secure"
    SYNCHRONOUS = True
    HAS_CONTENT = False
    SENT_BY_CLIENT = False
    SENT_BY_SERVER = True

    challenge: bytes = b""

    def encode(self) -> bytes:
        return b"".join((
            _S_HHI.pack(10, 20, len(self.challenge)),
            self.challenge,
        ))


@attrs.frozen(slots=True)
class ConnectionSecureOk(Method):
    """connection.secure-ok (10.21)."""

    CLASS_ID = 10
    METHOD_ID = 21
    NAME = "connection.secure-ok"
    SYNCHRONOUS = False
    HAS_CONTENT = False
    SENT_BY_CLIENT = True
    SENT_BY_SERVER = False

    response: bytes = b""

    def encode(self) -> bytes:
        return b"".join((
            _S_HHI.pack(10, 21, len(self.response)),
            self.response,
        ))


@attrs.frozen(slots=True)
class ConnectionTune(Method):
    """connection.tune (10.30)."""

    CLASS_ID = 10
    METHOD_ID = 30
    NAME = "connection.tune"
    SYNCHRONOUS = True
    HAS_CONTENT = False
    SENT_BY_CLIENT = False
    SENT_BY_SERVER = True

    channel_max: int = 0
    frame_max: int = 0
    heartbeat: int = 0

    def encode(self) -> bytes:
        return _S_HHHIH.pack(10, 30, self.channel_max, self.frame_max, self.heartbeat)


@attrs.frozen(slots=True)
class ConnectionTuneOk(Method):
    """connection.tune-ok (10.31)."""

    CLASS_ID = 10
    METHOD_ID = 31
    NAME = "connection.tune-ok"
    SYNCHRONOUS = False
    HAS_CONTENT = False
    SENT_BY_CLIENT = True
    SENT_BY_SERVER = False

    channel_max: int = 0
    frame_max: int = 0
    heartbeat: int = 0

    def encode(self) -> bytes:
        return _S_HHHIH.pack(10, 31, self.channel_max, self.frame_max, self.heartbeat)


@attrs.frozen(slots=True)
class ConnectionOpen(Method):
    """connection.open (10.40)."""

    CLASS_ID = 10
    METHOD_ID = 40
    NAME = "connection.open"
    SYNCHRONOUS = True
    HAS_CONTENT = False
    SENT_BY_CLIENT = True
    SENT_BY_SERVER = False

    virtual_host: str = "/"
    capabilities: str = ""
    insist: bool = False

    def encode(self) -> bytes:
        virtual_host = self.virtual_host.encode()
        if len(virtual_host) > 255:
            raise _too_long("connection.open", "virtual_host")
        capabilities = self.capabilities.encode()
        if len(capabilities) > 255:
            raise _too_long("connection.open", "capabilities")
        return b"".join((
            _S_HHB.pack(10, 40, len(virtual_host)),
            virtual_host,
            _S_B.pack(len(capabilities)),
            capabilities,
            _S_B.pack(1 if self.insist else 0),
        ))


@attrs.frozen(slots=True)
class ConnectionOpenOk(Method):
    """connection.open-ok (10.41)."""

    CLASS_ID = 10
    METHOD_ID = 41
    NAME = "connection.open-ok"
    SYNCHRONOUS = False
    HAS_CONTENT = False
    SENT_BY_CLIENT = False
    SENT_BY_SERVER = True

    known_hosts: str = ""

    def encode(self) -> bytes:
        known_hosts = self.known_hosts.encode()
        if len(known_hosts) > 255:
            raise _too_long("connection.open-ok", "known_hosts")
        return b"".join((
            _S_HHB.pack(10, 41, len(known_hosts)),
            known_hosts,
        ))


@attrs.frozen(slots=True)
class ConnectionClose(Method):
    """connection.close (10.50)."""

    CLASS_ID = 10
    METHOD_ID = 50
    NAME = "connection.close"
    SYNCHRONOUS = True
    HAS_CONTENT = False
    SENT_BY_CLIENT = True
    SENT_BY_SERVER = True

    reply_code: int = 200
    reply_text: str = ""
    class_id: int = 0
    method_id: int = 0

    def encode(self) -> bytes:
        reply_text = self.reply_text.encode()
        if len(reply_text) > 255:
            raise _too_long("connection.close", "reply_text")
        return b"".join((
            _S_HHHB.pack(10, 50, self.reply_code, len(reply_text)),
            reply_text,
            _S_HH.pack(self.class_id, self.method_id),
        ))


@attrs.frozen(slots=True)
class ConnectionCloseOk(Method):
    """connection.close-ok (10.51)."""

    CLASS_ID = 10
    METHOD_ID = 51
    NAME = "connection.close-ok"
    SYNCHRONOUS = False
    HAS_CONTENT = False
    SENT_BY_CLIENT = True
    SENT_BY_SERVER = True

    def encode(self) -> bytes:
        return _S_HH.pack(10, 51)


@attrs.frozen(slots=True)
class ConnectionBlocked(Method):
    """connection.blocked (10.60)."""

    CLASS_ID = 10
    METHOD_ID = 60
    NAME = "connection.blocked"
    SYNCHRONOUS = False
    HAS_CONTENT = False
    SENT_BY_CLIENT = False
    SENT_BY_SERVER = True

    reason: str = ""

    def encode(self) -> bytes:
        reason = self.reason.encode()
        if len(reason) > 255:
            raise _too_long("connection.blocked", "reason")
        return b"".join((
            _S_HHB.pack(10, 60, len(reason)),
            reason,
        ))


@attrs.frozen(slots=True)
class ConnectionUnblocked(Method):
    """connection.unblocked (10.61)."""

    CLASS_ID = 10
    METHOD_ID = 61
    NAME = "connection.unblocked"
    SYNCHRONOUS = False
    HAS_CONTENT = False
    SENT_BY_CLIENT = False
    SENT_BY_SERVER = True

    def encode(self) -> bytes:
        return _S_HH.pack(10, 61)


@attrs.frozen(slots=True)
class ConnectionUpdateSecret(Method):
    """connection.update-secret (10.70)."""

    CLASS_ID = 10
    METHOD_ID = 70
    NAME = "connection.update-secret"
    SYNCHRONOUS = True
    HAS_CONTENT = False
    SENT_BY_CLIENT = True
    SENT_BY_SERVER = False

    new_secret: bytes = b""
    reason: str = ""

    def encode(self) -> bytes:
        reason = self.reason.encode()
        if len(reason) > 255:
            raise _too_long("connection.update-secret", "reason")
        return b"".join((
            _S_HHI.pack(10, 70, len(self.new_secret)),
            self.new_secret,
            _S_B.pack(len(reason)),
            reason,
        ))


@attrs.frozen(slots=True)
class ConnectionUpdateSecretOk(Method):
    """connection.update-secret-ok (10.71)."""

    CLASS_ID = 10
    METHOD_ID = 71
    NAME = "connection.update-secret-ok"
    SYNCHRONOUS = False
    HAS_CONTENT = False
    SENT_BY_CLIENT = False
    SENT_BY_SERVER = True

    def encode(self) -> bytes:
        return _S_HH.pack(10, 71)


@attrs.frozen(slots=True)
class ChannelOpen(Method):
    """channel.open (20.10)."""

    CLASS_ID = 20
    METHOD_ID = 10
    NAME = "channel.open"
    SYNCHRONOUS = True
    HAS_CONTENT = False
    SENT_BY_CLIENT = True
    SENT_BY_SERVER = False

    out_of_band: str = ""

    def encode(self) -> bytes:
        out_of_band = self.out_of_band.encode()
        if len(out_of_band) > 255:
            raise _too_long("channel.open", "out_of_band")
        return b"".join((
            _S_HHB.pack(20, 10, len(out_of_band)),
            out_of_band,
        ))


@attrs.frozen(slots=True)
class ChannelOpenOk(Method):
    """channel.open-ok (20.11)."""

    CLASS_ID = 20
    METHOD_ID = 11
    NAME = "channel.open-ok"
    SYNCHRONOUS = False
    HAS_CONTENT = False
    SENT_BY_CLIENT = False
    SENT_BY_SERVER = True

    channel_id: bytes = b""

    def encode(self) -> bytes:
        return b"".join((
            _S_HHI.pack(20, 11, len(self.channel_id)),
            self.channel_id,
        ))


@attrs.frozen(slots=True)
class ChannelFlow(Method):
    """channel.flow (20.20)."""

    CLASS_ID = 20
    METHOD_ID = 20
    NAME = "channel.flow"
    SYNCHRONOUS = True
    HAS_CONTENT = False
    SENT_BY_CLIENT = True
    SENT_BY_SERVER = True

    active: bool = True

    def encode(self) -> bytes:
        return _S_HHB.pack(20, 20, 1 if self.active else 0)


@attrs.frozen(slots=True)
class ChannelFlowOk(Method):
    """channel.flow-ok (20.21)."""

    CLASS_ID = 20
    METHOD_ID = 21
    NAME = "channel.flow-ok"
    SYNCHRONOUS = False
    HAS_CONTENT = False
    SENT_BY_CLIENT = True
    SENT_BY_SERVER = True

    active: bool = True

    def encode(self) -> bytes:
        return _S_HHB.pack(20, 21, 1 if self.active else 0)


@attrs.frozen(slots=True)
class ChannelClose(Method):
    """channel.close (20.40)."""

    CLASS_ID = 20
    METHOD_ID = 40
    NAME = "channel.close"
    SYNCHRONOUS = True
    HAS_CONTENT = False
    SENT_BY_CLIENT = True
    SENT_BY_SERVER = True

    reply_code: int = 200
    reply_text: str = ""
    class_id: int = 0
    method_id: int = 0

    def encode(self) -> bytes:
        reply_text = self.reply_text.encode()
        if len(reply_text) > 255:
            raise _too_long("channel.close", "reply_text")
        return b"".join((
            _S_HHHB.pack(20, 40, self.reply_code, len(reply_text)),
            reply_text,
            _S_HH.pack(self.class_id, self.method_id),
        ))


@attrs.frozen(slots=True)
class ChannelCloseOk(Method):
    """channel.close-ok (20.41)."""

    CLASS_ID = 20
    METHOD_ID = 41
    NAME = "channel.close-ok"
    SYNCHRONOUS = False
    HAS_CONTENT = False
    SENT_BY_CLIENT = True
    SENT_BY_SERVER = True

    def encode(self) -> bytes:
        return _S_HH.pack(20, 41)


@attrs.frozen(slots=True)
class ExchangeDeclare(Method):
    """exchange.declare (40.10)."""

    CLASS_ID = 40
    METHOD_ID = 10
    NAME = "exchange.declare"
    SYNCHRONOUS = True
    HAS_CONTENT = False
    SENT_BY_CLIENT = True
    SENT_BY_SERVER = False

    ticket: int = 0
    exchange: str = ""
    type: str = "direct"
    passive: bool = False
    durable: bool = False
    auto_delete: bool = False
    internal: bool = False
    nowait: bool = False
    arguments: FieldTable = attrs.field(factory=dict)

    def encode(self) -> bytes:
        exchange = self.exchange.encode()
        if len(exchange) > 255:
            raise _too_long("exchange.declare", "exchange")
        type = self.type.encode()
        if len(type) > 255:
            raise _too_long("exchange.declare", "type")
        return b"".join((
            _S_HHHB.pack(40, 10, self.ticket, len(exchange)),
            exchange,
            _S_B.pack(len(type)),
            type,
            _S_B.pack((1 if self.passive else 0) | (2 if self.durable else 0) | (4 if self.auto_delete else 0) | (8 if self.internal else 0) | (16 if self.nowait else 0)),
            encode_table(self.arguments),
        ))


@attrs.frozen(slots=True)
class ExchangeDeclareOk(Method):
    """exchange.declare-ok (40.11)."""

    CLASS_ID = 40
    METHOD_ID = 11
    NAME = "exchange.declare-ok"
    SYNCHRONOUS = False
    HAS_CONTENT = False
    SENT_BY_CLIENT = False
    SENT_BY_SERVER = True

    def encode(self) -> bytes:
        return _S_HH.pack(40, 11)


@attrs.frozen(slots=True)
class ExchangeDelete(Method):
    """exchange.delete (40.20)."""

    CLASS_ID = 40
    METHOD_ID = 20
    NAME = "exchange.delete"
    SYNCHRONOUS = True
    HAS_CONTENT = False
    SENT_BY_CLIENT = True
    SENT_BY_SERVER = False

    ticket: int = 0
    exchange: str = ""
    if_unused: bool = False
    nowait: bool = False

    def encode(self) -> bytes:
        exchange = self.exchange.encode()
        if len(exchange) > 255:
            raise _too_long("exchange.delete", "exchange")
        return b"".join((
            _S_HHHB.pack(40, 20, self.ticket, len(exchange)),
            exchange,
            _S_B.pack((1 if self.if_unused else 0) | (2 if self.nowait else 0)),
        ))


@attrs.frozen(slots=True)
class ExchangeDeleteOk(Method):
    """exchange.delete-ok (40.21)."""

    CLASS_ID = 40
    METHOD_ID = 21
    NAME = "exchange.delete-ok"
    SYNCHRONOUS = False
    HAS_CONTENT = False
    SENT_BY_CLIENT = False
    SENT_BY_SERVER = True

    def encode(self) -> bytes:
        return _S_HH.pack(40, 21)


@attrs.frozen(slots=True)
class ExchangeBind(Method):
    """exchange.bind (40.30)."""

    CLASS_ID = 40
    METHOD_ID = 30
    NAME = "exchange.bind"
    SYNCHRONOUS = True
    HAS_CONTENT = False
    SENT_BY_CLIENT = True
    SENT_BY_SERVER = False

    ticket: int = 0
    destination: str = ""
    source: str = ""
    routing_key: str = ""
    nowait: bool = False
    arguments: FieldTable = attrs.field(factory=dict)

    def encode(self) -> bytes:
        destination = self.destination.encode()
        if len(destination) > 255:
            raise _too_long("exchange.bind", "destination")
        source = self.source.encode()
        if len(source) > 255:
            raise _too_long("exchange.bind", "source")
        routing_key = self.routing_key.encode()
        if len(routing_key) > 255:
            raise _too_long("exchange.bind", "routing_key")
        return b"".join((
            _S_HHHB.pack(40, 30, self.ticket, len(destination)),
            destination,
            _S_B.pack(len(source)),
            source,
            _S_B.pack(len(routing_key)),
            routing_key,
            _S_B.pack(1 if self.nowait else 0),
            encode_table(self.arguments),
        ))


@attrs.frozen(slots=True)
class ExchangeBindOk(Method):
    """exchange.bind-ok (40.31)."""

    CLASS_ID = 40
    METHOD_ID = 31
    NAME = "exchange.bind-ok"
    SYNCHRONOUS = False
    HAS_CONTENT = False
    SENT_BY_CLIENT = False
    SENT_BY_SERVER = True

    def encode(self) -> bytes:
        return _S_HH.pack(40, 31)


@attrs.frozen(slots=True)
class ExchangeUnbind(Method):
    """exchange.unbind (40.40)."""

    CLASS_ID = 40
    METHOD_ID = 40
    NAME = "exchange.unbind"
    SYNCHRONOUS = True
    HAS_CONTENT = False
    SENT_BY_CLIENT = True
    SENT_BY_SERVER = False

    ticket: int = 0
    destination: str = ""
    source: str = ""
    routing_key: str = ""
    nowait: bool = False
    arguments: FieldTable = attrs.field(factory=dict)

    def encode(self) -> bytes:
        destination = self.destination.encode()
        if len(destination) > 255:
            raise _too_long("exchange.unbind", "destination")
        source = self.source.encode()
        if len(source) > 255:
            raise _too_long("exchange.unbind", "source")
        routing_key = self.routing_key.encode()
        if len(routing_key) > 255:
            raise _too_long("exchange.unbind", "routing_key")
        return b"".join((
            _S_HHHB.pack(40, 40, self.ticket, len(destination)),
            destination,
            _S_B.pack(len(source)),
            source,
            _S_B.pack(len(routing_key)),
            routing_key,
            _S_B.pack(1 if self.nowait else 0),
            encode_table(self.arguments),
        ))


@attrs.frozen(slots=True)
class ExchangeUnbindOk(Method):
    """exchange.unbind-ok (40.51)."""

    CLASS_ID = 40
    METHOD_ID = 51
    NAME = "exchange.unbind-ok"
    SYNCHRONOUS = False
    HAS_CONTENT = False
    SENT_BY_CLIENT = False
    SENT_BY_SERVER = True

    def encode(self) -> bytes:
        return _S_HH.pack(40, 51)


@attrs.frozen(slots=True)
class QueueDeclare(Method):
    """queue.declare (50.10)."""

    CLASS_ID = 50
    METHOD_ID = 10
    NAME = "queue.declare"
    SYNCHRONOUS = True
    HAS_CONTENT = False
    SENT_BY_CLIENT = True
    SENT_BY_SERVER = False

    ticket: int = 0
    queue: str = ""
    passive: bool = False
    durable: bool = False
    exclusive: bool = False
    auto_delete: bool = False
    nowait: bool = False
    arguments: FieldTable = attrs.field(factory=dict)

    def encode(self) -> bytes:
        queue = self.queue.encode()
        if len(queue) > 255:
            raise _too_long("queue.declare", "queue")
        return b"".join((
            _S_HHHB.pack(50, 10, self.ticket, len(queue)),
            queue,
            _S_B.pack((1 if self.passive else 0) | (2 if self.durable else 0) | (4 if self.exclusive else 0) | (8 if self.auto_delete else 0) | (16 if self.nowait else 0)),
            encode_table(self.arguments),
        ))


@attrs.frozen(slots=True)
class QueueDeclareOk(Method):
    """queue.declare-ok (50.11)."""

    CLASS_ID = 50
    METHOD_ID = 11
    NAME = "queue.declare-ok"
    SYNCHRONOUS = False
    HAS_CONTENT = False
    SENT_BY_CLIENT = False
    SENT_BY_SERVER = True

    queue: str = ""
    message_count: int = 0
    consumer_count: int = 0

    def encode(self) -> bytes:
        queue = self.queue.encode()
        if len(queue) > 255:
            raise _too_long("queue.declare-ok", "queue")
        return b"".join((
            _S_HHB.pack(50, 11, len(queue)),
            queue,
            _S_II.pack(self.message_count, self.consumer_count),
        ))


@attrs.frozen(slots=True)
class QueueBind(Method):
    """queue.bind (50.20)."""

    CLASS_ID = 50
    METHOD_ID = 20
    NAME = "queue.bind"
    SYNCHRONOUS = True
    HAS_CONTENT = False
    SENT_BY_CLIENT = True
    SENT_BY_SERVER = False

    ticket: int = 0
    queue: str = ""
    exchange: str = ""
    routing_key: str = ""
    nowait: bool = False
    arguments: FieldTable = attrs.field(factory=dict)

    def encode(self) -> bytes:
        queue = self.queue.encode()
        if len(queue) > 255:
            raise _too_long("queue.bind", "queue")
        exchange = self.exchange.encode()
        if len(exchange) > 255:
            raise _too_long("queue.bind", "exchange")
        routing_key = self.routing_key.encode()
        if len(routing_key) > 255:
            raise _too_long("queue.bind", "routing_key")
        return b"".join((
            _S_HHHB.pack(50, 20, self.ticket, len(queue)),
            queue,
            _S_B.pack(len(exchange)),
            exchange,
            _S_B.pack(len(routing_key)),
            routing_key,
            _S_B.pack(1 if self.nowait else 0),
            encode_table(self.arguments),
        ))


@attrs.frozen(slots=True)
class QueueBindOk(Method):
    """queue.bind-ok (50.21)."""

    CLASS_ID = 50
    METHOD_ID = 21
    NAME = "queue.bind-ok"
    SYNCHRONOUS = False
    HAS_CONTENT = False
    SENT_BY_CLIENT = False
    SENT_BY_SERVER = True

    def encode(self) -> bytes:
        return _S_HH.pack(50, 21)


@attrs.frozen(slots=True)
class QueuePurge(Method):
    """queue.purge (50.30)."""

    CLASS_ID = 50
    METHOD_ID = 30
    NAME = "queue.purge"
    SYNCHRONOUS = True
    HAS_CONTENT = False
    SENT_BY_CLIENT = True
    SENT_BY_SERVER = False

    ticket: int = 0
    queue: str = ""
    nowait: bool = False

    def encode(self) -> bytes:
        queue = self.queue.encode()
        if len(queue) > 255:
            raise _too_long("queue.purge", "queue")
        return b"".join((
            _S_HHHB.pack(50, 30, self.ticket, len(queue)),
            queue,
            _S_B.pack(1 if self.nowait else 0),
        ))


@attrs.frozen(slots=True)
class QueuePurgeOk(Method):
    """queue.purge-ok (50.31)."""

    CLASS_ID = 50
    METHOD_ID = 31
    NAME = "queue.purge-ok"
    SYNCHRONOUS = False
    HAS_CONTENT = False
    SENT_BY_CLIENT = False
    SENT_BY_SERVER = True

    message_count: int = 0

    def encode(self) -> bytes:
        return _S_HHI.pack(50, 31, self.message_count)


@attrs.frozen(slots=True)
class QueueDelete(Method):
    """queue.delete (50.40)."""

    CLASS_ID = 50
    METHOD_ID = 40
    NAME = "queue.delete"
    SYNCHRONOUS = True
    HAS_CONTENT = False
    SENT_BY_CLIENT = True
    SENT_BY_SERVER = False

    ticket: int = 0
    queue: str = ""
    if_unused: bool = False
    if_empty: bool = False
    nowait: bool = False

    def encode(self) -> bytes:
        queue = self.queue.encode()
        if len(queue) > 255:
            raise _too_long("queue.delete", "queue")
        return b"".join((
            _S_HHHB.pack(50, 40, self.ticket, len(queue)),
            queue,
            _S_B.pack((1 if self.if_unused else 0) | (2 if self.if_empty else 0) | (4 if self.nowait else 0)),
        ))


@attrs.frozen(slots=True)
class QueueDeleteOk(Method):
    """queue.delete-ok (50.41)."""

    CLASS_ID = 50
    METHOD_ID = 41
    NAME = "queue.delete-ok"
    SYNCHRONOUS = False
    HAS_CONTENT = False
    SENT_BY_CLIENT = False
    SENT_BY_SERVER = True

    message_count: int = 0

    def encode(self) -> bytes:
        return _S_HHI.pack(50, 41, self.message_count)


@attrs.frozen(slots=True)
class QueueUnbind(Method):
    """queue.unbind (50.50)."""

    CLASS_ID = 50
    METHOD_ID = 50
    NAME = "queue.unbind"
    SYNCHRONOUS = True
    HAS_CONTENT = False
    SENT_BY_CLIENT = True
    SENT_BY_SERVER = False

    ticket: int = 0
    queue: str = ""
    exchange: str = ""
    routing_key: str = ""
    arguments: FieldTable = attrs.field(factory=dict)

    def encode(self) -> bytes:
        queue = self.queue.encode()
        if len(queue) > 255:
            raise _too_long("queue.unbind", "queue")
        exchange = self.exchange.encode()
        if len(exchange) > 255:
            raise _too_long("queue.unbind", "exchange")
        routing_key = self.routing_key.encode()
        if len(routing_key) > 255:
            raise _too_long("queue.unbind", "routing_key")
        return b"".join((
            _S_HHHB.pack(50, 50, self.ticket, len(queue)),
            queue,
            _S_B.pack(len(exchange)),
            exchange,
            _S_B.pack(len(routing_key)),
            routing_key,
            encode_table(self.arguments),
        ))


@attrs.frozen(slots=True)
class QueueUnbindOk(Method):
    """queue.unbind-ok (50.51)."""

    CLASS_ID = 50
    METHOD_ID = 51
    NAME = "queue.unbind-ok"
    SYNCHRONOUS = False
    HAS_CONTENT = False
    SENT_BY_CLIENT = False
    SENT_BY_SERVER = True

    def encode(self) -> bytes:
        return _S_HH.pack(50, 51)


@attrs.frozen(slots=True)
class BasicQos(Method):
    """basic.qos (60.10)."""

    CLASS_ID = 60
    METHOD_ID = 10
    NAME = "basic.qos"
    SYNCHRONOUS = True
    HAS_CONTENT = False
    SENT_BY_CLIENT = True
    SENT_BY_SERVER = False

    prefetch_size: int = 0
    prefetch_count: int = 0
    global_qos: bool = False

    def encode(self) -> bytes:
        return _S_HHIHB.pack(60, 10, self.prefetch_size, self.prefetch_count, 1 if self.global_qos else 0)


@attrs.frozen(slots=True)
class BasicQosOk(Method):
    """basic.qos-ok (60.11)."""

    CLASS_ID = 60
    METHOD_ID = 11
    NAME = "basic.qos-ok"
    SYNCHRONOUS = False
    HAS_CONTENT = False
    SENT_BY_CLIENT = False
    SENT_BY_SERVER = True

    def encode(self) -> bytes:
        return _S_HH.pack(60, 11)


@attrs.frozen(slots=True)
class BasicConsume(Method):
    """basic.consume (60.20)."""

    CLASS_ID = 60
    METHOD_ID = 20
    NAME = "basic.consume"
    SYNCHRONOUS = True
    HAS_CONTENT = False
    SENT_BY_CLIENT = True
    SENT_BY_SERVER = False

    ticket: int = 0
    queue: str = ""
    consumer_tag: str = ""
    no_local: bool = False
    no_ack: bool = False
    exclusive: bool = False
    nowait: bool = False
    arguments: FieldTable = attrs.field(factory=dict)

    def encode(self) -> bytes:
        queue = self.queue.encode()
        if len(queue) > 255:
            raise _too_long("basic.consume", "queue")
        consumer_tag = self.consumer_tag.encode()
        if len(consumer_tag) > 255:
            raise _too_long("basic.consume", "consumer_tag")
        return b"".join((
            _S_HHHB.pack(60, 20, self.ticket, len(queue)),
            queue,
            _S_B.pack(len(consumer_tag)),
            consumer_tag,
            _S_B.pack((1 if self.no_local else 0) | (2 if self.no_ack else 0) | (4 if self.exclusive else 0) | (8 if self.nowait else 0)),
            encode_table(self.arguments),
        ))


@attrs.frozen(slots=True)
class BasicConsumeOk(Method):
    """basic.consume-ok (60.21)."""

    CLASS_ID = 60
    METHOD_ID = 21
    NAME = "basic.consume-ok"
    SYNCHRONOUS = False
    HAS_CONTENT = False
    SENT_BY_CLIENT = False
    SENT_BY_SERVER = True

    consumer_tag: str = ""

    def encode(self) -> bytes:
        consumer_tag = self.consumer_tag.encode()
        if len(consumer_tag) > 255:
            raise _too_long("basic.consume-ok", "consumer_tag")
        return b"".join((
            _S_HHB.pack(60, 21, len(consumer_tag)),
            consumer_tag,
        ))


@attrs.frozen(slots=True)
class BasicCancel(Method):
    """basic.cancel (60.30)."""

    CLASS_ID = 60
    METHOD_ID = 30
    NAME = "basic.cancel"
    SYNCHRONOUS = True
    HAS_CONTENT = False
    SENT_BY_CLIENT = True
    SENT_BY_SERVER = True

    consumer_tag: str = ""
    nowait: bool = False

    def encode(self) -> bytes:
        consumer_tag = self.consumer_tag.encode()
        if len(consumer_tag) > 255:
            raise _too_long("basic.cancel", "consumer_tag")
        return b"".join((
            _S_HHB.pack(60, 30, len(consumer_tag)),
            consumer_tag,
            _S_B.pack(1 if self.nowait else 0),
        ))


@attrs.frozen(slots=True)
class BasicCancelOk(Method):
    """basic.cancel-ok (60.31)."""

    CLASS_ID = 60
    METHOD_ID = 31
    NAME = "basic.cancel-ok"
    SYNCHRONOUS = False
    HAS_CONTENT = False
    SENT_BY_CLIENT = False
    SENT_BY_SERVER = True

    consumer_tag: str = ""

    def encode(self) -> bytes:
        consumer_tag = self.consumer_tag.encode()
        if len(consumer_tag) > 255:
            raise _too_long("basic.cancel-ok", "consumer_tag")
        return b"".join((
            _S_HHB.pack(60, 31, len(consumer_tag)),
            consumer_tag,
        ))


@attrs.frozen(slots=True)
class BasicPublish(Method):
    """basic.publish (60.40)."""

    CLASS_ID = 60
    METHOD_ID = 40
    NAME = "basic.publish"
    SYNCHRONOUS = False
    HAS_CONTENT = True
    SENT_BY_CLIENT = True
    SENT_BY_SERVER = False

    ticket: int = 0
    exchange: str = ""
    routing_key: str = ""
    mandatory: bool = False
    immediate: bool = False

    def encode(self) -> bytes:
        exchange = self.exchange.encode()
        if len(exchange) > 255:
            raise _too_long("basic.publish", "exchange")
        routing_key = self.routing_key.encode()
        if len(routing_key) > 255:
            raise _too_long("basic.publish", "routing_key")
        return b"".join((
            _S_HHHB.pack(60, 40, self.ticket, len(exchange)),
            exchange,
            _S_B.pack(len(routing_key)),
            routing_key,
            _S_B.pack((1 if self.mandatory else 0) | (2 if self.immediate else 0)),
        ))


@attrs.frozen(slots=True)
class BasicReturn(Method):
    """basic.return (60.50)."""

    CLASS_ID = 60
    METHOD_ID = 50
    NAME = "basic.return"
    SYNCHRONOUS = False
    HAS_CONTENT = True
    SENT_BY_CLIENT = False
    SENT_BY_SERVER = True

    reply_code: int = 0
    reply_text: str = ""
    exchange: str = ""
    routing_key: str = ""

    def encode(self) -> bytes:
        reply_text = self.reply_text.encode()
        if len(reply_text) > 255:
            raise _too_long("basic.return", "reply_text")
        exchange = self.exchange.encode()
        if len(exchange) > 255:
            raise _too_long("basic.return", "exchange")
        routing_key = self.routing_key.encode()
        if len(routing_key) > 255:
            raise _too_long("basic.return", "routing_key")
        return b"".join((
            _S_HHHB.pack(60, 50, self.reply_code, len(reply_text)),
            reply_text,
            _S_B.pack(len(exchange)),
            exchange,
            _S_B.pack(len(routing_key)),
            routing_key,
        ))


@attrs.frozen(slots=True)
class BasicDeliver(Method):
    """basic.deliver (60.60)."""

    CLASS_ID = 60
    METHOD_ID = 60
    NAME = "basic.deliver"
    SYNCHRONOUS = False
    HAS_CONTENT = True
    SENT_BY_CLIENT = False
    SENT_BY_SERVER = True

    consumer_tag: str = ""
    delivery_tag: int = 0
    redelivered: bool = False
    exchange: str = ""
    routing_key: str = ""

    def encode(self) -> bytes:
        consumer_tag = self.consumer_tag.encode()
        if len(consumer_tag) > 255:
            raise _too_long("basic.deliver", "consumer_tag")
        exchange = self.exchange.encode()
        if len(exchange) > 255:
            raise _too_long("basic.deliver", "exchange")
        routing_key = self.routing_key.encode()
        if len(routing_key) > 255:
            raise _too_long("basic.deliver", "routing_key")
        return b"".join((
            _S_HHB.pack(60, 60, len(consumer_tag)),
            consumer_tag,
            _S_QBB.pack(self.delivery_tag, 1 if self.redelivered else 0, len(exchange)),
            exchange,
            _S_B.pack(len(routing_key)),
            routing_key,
        ))


@attrs.frozen(slots=True)
class BasicGet(Method):
    """basic.get (60.70)."""

    CLASS_ID = 60
    METHOD_ID = 70
    NAME = "basic.get"
    SYNCHRONOUS = True
    HAS_CONTENT = False
    SENT_BY_CLIENT = True
    SENT_BY_SERVER = False

    ticket: int = 0
    queue: str = ""
    no_ack: bool = False

    def encode(self) -> bytes:
        queue = self.queue.encode()
        if len(queue) > 255:
            raise _too_long("basic.get", "queue")
        return b"".join((
            _S_HHHB.pack(60, 70, self.ticket, len(queue)),
            queue,
            _S_B.pack(1 if self.no_ack else 0),
        ))


@attrs.frozen(slots=True)
class BasicGetOk(Method):
    """basic.get-ok (60.71)."""

    CLASS_ID = 60
    METHOD_ID = 71
    NAME = "basic.get-ok"
    SYNCHRONOUS = False
    HAS_CONTENT = True
    SENT_BY_CLIENT = False
    SENT_BY_SERVER = True

    delivery_tag: int = 0
    redelivered: bool = False
    exchange: str = ""
    routing_key: str = ""
    message_count: int = 0

    def encode(self) -> bytes:
        exchange = self.exchange.encode()
        if len(exchange) > 255:
            raise _too_long("basic.get-ok", "exchange")
        routing_key = self.routing_key.encode()
        if len(routing_key) > 255:
            raise _too_long("basic.get-ok", "routing_key")
        return b"".join((
            _S_HHQBB.pack(60, 71, self.delivery_tag, 1 if self.redelivered else 0, len(exchange)),
            exchange,
            _S_B.pack(len(routing_key)),
            routing_key,
            _S_I.pack(self.message_count),
        ))


@attrs.frozen(slots=True)
class BasicGetEmpty(Method):
    """basic.get-empty (60.72)."""

    CLASS_ID = 60
    METHOD_ID = 72
    NAME = "basic.get-empty"
    SYNCHRONOUS = False
    HAS_CONTENT = False
    SENT_BY_CLIENT = False
    SENT_BY_SERVER = True

    cluster_id: str = ""

    def encode(self) -> bytes:
        cluster_id = self.cluster_id.encode()
        if len(cluster_id) > 255:
            raise _too_long("basic.get-empty", "cluster_id")
        return b"".join((
            _S_HHB.pack(60, 72, len(cluster_id)),
            cluster_id,
        ))


@attrs.frozen(slots=True)
class BasicAck(Method):
    """basic.ack (60.80)."""

    CLASS_ID = 60
    METHOD_ID = 80
    NAME = "basic.ack"
    SYNCHRONOUS = False
    HAS_CONTENT = False
    SENT_BY_CLIENT = True
    SENT_BY_SERVER = True

    delivery_tag: int = 0
    multiple: bool = False

    def encode(self) -> bytes:
        return _S_HHQB.pack(60, 80, self.delivery_tag, 1 if self.multiple else 0)


@attrs.frozen(slots=True)
class BasicReject(Method):
    """basic.reject (60.90)."""

    CLASS_ID = 60
    METHOD_ID = 90
    NAME = "basic.reject"
    SYNCHRONOUS = False
    HAS_CONTENT = False
    SENT_BY_CLIENT = True
    SENT_BY_SERVER = False

    delivery_tag: int = 0
    requeue: bool = True

    def encode(self) -> bytes:
        return _S_HHQB.pack(60, 90, self.delivery_tag, 1 if self.requeue else 0)


@attrs.frozen(slots=True)
class BasicRecoverAsync(Method):
    """basic.recover-async (60.100)."""

    CLASS_ID = 60
    METHOD_ID = 100
    NAME = "basic.recover-async"
    SYNCHRONOUS = False
    HAS_CONTENT = False
    SENT_BY_CLIENT = True
    SENT_BY_SERVER = False

    requeue: bool = False

    def encode(self) -> bytes:
        return _S_HHB.pack(60, 100, 1 if self.requeue else 0)


@attrs.frozen(slots=True)
class BasicRecover(Method):
    """basic.recover (60.110)."""

    CLASS_ID = 60
    METHOD_ID = 110
    NAME = "basic.recover"
    SYNCHRONOUS = True
    HAS_CONTENT = False
    SENT_BY_CLIENT = True
    SENT_BY_SERVER = False

    requeue: bool = False

    def encode(self) -> bytes:
        return _S_HHB.pack(60, 110, 1 if self.requeue else 0)


@attrs.frozen(slots=True)
class BasicRecoverOk(Method):
    """basic.recover-ok (60.111)."""

    CLASS_ID = 60
    METHOD_ID = 111
    NAME = "basic.recover-ok"
    SYNCHRONOUS = False
    HAS_CONTENT = False
    SENT_BY_CLIENT = False
    SENT_BY_SERVER = True

    def encode(self) -> bytes:
        return _S_HH.pack(60, 111)


@attrs.frozen(slots=True)
class BasicNack(Method):
    """basic.nack (60.120)."""

    CLASS_ID = 60
    METHOD_ID = 120
    NAME = "basic.nack"
    SYNCHRONOUS = False
    HAS_CONTENT = False
    SENT_BY_CLIENT = True
    SENT_BY_SERVER = True

    delivery_tag: int = 0
    multiple: bool = False
    requeue: bool = True

    def encode(self) -> bytes:
        return _S_HHQB.pack(60, 120, self.delivery_tag, (1 if self.multiple else 0) | (2 if self.requeue else 0))


@attrs.frozen(slots=True)
class ConfirmSelect(Method):
    """confirm.select (85.10)."""

    CLASS_ID = 85
    METHOD_ID = 10
    NAME = "confirm.select"
    SYNCHRONOUS = True
    HAS_CONTENT = False
    SENT_BY_CLIENT = True
    SENT_BY_SERVER = False

    nowait: bool = False

    def encode(self) -> bytes:
        return _S_HHB.pack(85, 10, 1 if self.nowait else 0)


@attrs.frozen(slots=True)
class ConfirmSelectOk(Method):
    """confirm.select-ok (85.11)."""

    CLASS_ID = 85
    METHOD_ID = 11
    NAME = "confirm.select-ok"
    SYNCHRONOUS = False
    HAS_CONTENT = False
    SENT_BY_CLIENT = False
    SENT_BY_SERVER = True

    def encode(self) -> bytes:
        return _S_HH.pack(85, 11)


@attrs.frozen(slots=True)
class TxSelect(Method):
    """tx.select (90.10)."""

    CLASS_ID = 90
    METHOD_ID = 10
    NAME = "tx.select"
    SYNCHRONOUS = True
    HAS_CONTENT = False
    SENT_BY_CLIENT = True
    SENT_BY_SERVER = False

    def encode(self) -> bytes:
        return _S_HH.pack(90, 10)


@attrs.frozen(slots=True)
class TxSelectOk(Method):
    """tx.select-ok (90.11)."""

    CLASS_ID = 90
    METHOD_ID = 11
    NAME = "tx.select-ok"
    SYNCHRONOUS = False
    HAS_CONTENT = False
    SENT_BY_CLIENT = False
    SENT_BY_SERVER = True

    def encode(self) -> bytes:
        return _S_HH.pack(90, 11)


@attrs.frozen(slots=True)
class TxCommit(Method):
    """tx.commit (90.20)."""

    CLASS_ID = 90
    METHOD_ID = 20
    NAME = "tx.commit"
    SYNCHRONOUS = True
    HAS_CONTENT = False
    SENT_BY_CLIENT = True
    SENT_BY_SERVER = False

    def encode(self) -> bytes:
        return _S_HH.pack(90, 20)


@attrs.frozen(slots=True)
class TxCommitOk(Method):
    """tx.commit-ok (90.21)."""

    CLASS_ID = 90
    METHOD_ID = 21
    NAME = "tx.commit-ok"
    SYNCHRONOUS = False
    HAS_CONTENT = False
    SENT_BY_CLIENT = False
    SENT_BY_SERVER = True

    def encode(self) -> bytes:
        return _S_HH.pack(90, 21)


@attrs.frozen(slots=True)
class TxRollback(Method):
    """tx.rollback (90.30)."""

    CLASS_ID = 90
    METHOD_ID = 30
    NAME = "tx.rollback"
    SYNCHRONOUS = True
    HAS_CONTENT = False
    SENT_BY_CLIENT = True
    SENT_BY_SERVER = False

    def encode(self) -> bytes:
        return _S_HH.pack(90, 30)


@attrs.frozen(slots=True)
class TxRollbackOk(Method):
    """tx.rollback-ok (90.31)."""

    CLASS_ID = 90
    METHOD_ID = 31
    NAME = "tx.rollback-ok"
    SYNCHRONOUS = False
    HAS_CONTENT = False
    SENT_BY_CLIENT = False
    SENT_BY_SERVER = True

    def encode(self) -> bytes:
        return _S_HH.pack(90, 31)


def _decode_connection_start(buf: bytes | bytearray, off: int, end: int) -> ConnectionStart:
    version_major, version_minor = _S_BB.unpack_from(buf, off)
    off += 2
    server_properties, off = decode_table(buf, off, end)
    n, = _S_I.unpack_from(buf, off)
    off += 4
    mechanisms = bytes(buf[off:off + n])
    off += n
    n, = _S_I.unpack_from(buf, off)
    off += 4
    locales = bytes(buf[off:off + n])
    off += n
    if off != end:
        raise _malformed("connection.start")
    return ConnectionStart(version_major, version_minor, server_properties, mechanisms, locales)


def _decode_connection_start_ok(buf: bytes | bytearray, off: int, end: int) -> ConnectionStartOk:
    client_properties, off = decode_table(buf, off, end)
    n = buf[off]
    off += 1
    mechanism = buf[off:off + n].decode()
    off += n
    n, = _S_I.unpack_from(buf, off)
    off += 4
    response = bytes(buf[off:off + n])
    off += n
    n = buf[off]
    off += 1
    locale = buf[off:off + n].decode()
    off += n
    if off != end:
        raise _malformed("connection.start-ok")
    return ConnectionStartOk(client_properties, mechanism, response, locale)


def _decode_connection_secure(buf: bytes | bytearray, off: int, end: int) -> ConnectionSecure:
    n, = _S_I.unpack_from(buf, off)
    off += 4
    challenge = bytes(buf[off:off + n])
    off += n
    if off != end:
        raise _malformed("connection.secure")
    return ConnectionSecure(challenge)


def _decode_connection_secure_ok(buf: bytes | bytearray, off: int, end: int) -> ConnectionSecureOk:
    n, = _S_I.unpack_from(buf, off)
    off += 4
    response = bytes(buf[off:off + n])
    off += n
    if off != end:
        raise _malformed("connection.secure-ok")
    return ConnectionSecureOk(response)


def _decode_connection_tune(buf: bytes | bytearray, off: int, end: int) -> ConnectionTune:
    channel_max, frame_max, heartbeat = _S_HIH.unpack_from(buf, off)
    off += 8
    if off != end:
        raise _malformed("connection.tune")
    return ConnectionTune(channel_max, frame_max, heartbeat)


def _decode_connection_tune_ok(buf: bytes | bytearray, off: int, end: int) -> ConnectionTuneOk:
    channel_max, frame_max, heartbeat = _S_HIH.unpack_from(buf, off)
    off += 8
    if off != end:
        raise _malformed("connection.tune-ok")
    return ConnectionTuneOk(channel_max, frame_max, heartbeat)


def _decode_connection_open(buf: bytes | bytearray, off: int, end: int) -> ConnectionOpen:
    n = buf[off]
    off += 1
    virtual_host = buf[off:off + n].decode()
    off += n
    n = buf[off]
    off += 1
    capabilities = buf[off:off + n].decode()
    off += n
    bits2 = buf[off]
    off += 1
    if off != end:
        raise _malformed("connection.open")
    return ConnectionOpen(virtual_host, capabilities, bits2 & 1 != 0)


def _decode_connection_open_ok(buf: bytes | bytearray, off: int, end: int) -> ConnectionOpenOk:
    n = buf[off]
    off += 1
    known_hosts = buf[off:off + n].decode()
    off += n
    if off != end:
        raise _malformed("connection.open-ok")
    return ConnectionOpenOk(known_hosts)


def _decode_connection_close(buf: bytes | bytearray, off: int, end: int) -> ConnectionClose:
    reply_code, n = _S_HB.unpack_from(buf, off)
    off += 3
    reply_text = buf[off:off + n].decode()
    off += n
    class_id, method_id = _S_HH.unpack_from(buf, off)
    off += 4
    if off != end:
        raise _malformed("connection.close")
    return ConnectionClose(reply_code, reply_text, class_id, method_id)


def _decode_connection_close_ok(buf: bytes | bytearray, off: int, end: int) -> ConnectionCloseOk:
    if off != end:
        raise _malformed("connection.close-ok")
    return ConnectionCloseOk()


def _decode_connection_blocked(buf: bytes | bytearray, off: int, end: int) -> ConnectionBlocked:
    n = buf[off]
    off += 1
    reason = buf[off:off + n].decode()
    off += n
    if off != end:
        raise _malformed("connection.blocked")
    return ConnectionBlocked(reason)


def _decode_connection_unblocked(buf: bytes | bytearray, off: int, end: int) -> ConnectionUnblocked:
    if off != end:
        raise _malformed("connection.unblocked")
    return ConnectionUnblocked()


def _decode_connection_update_secret(buf: bytes | bytearray, off: int, end: int) -> ConnectionUpdateSecret:
    n, = _S_I.unpack_from(buf, off)
    off += 4
    new_secret = bytes(buf[off:off + n])
    off += n
    n = buf[off]
    off += 1
    reason = buf[off:off + n].decode()
    off += n
    if off != end:
        raise _malformed("connection.update-secret")
    return ConnectionUpdateSecret(new_secret, reason)


def _decode_connection_update_secret_ok(buf: bytes | bytearray, off: int, end: int) -> ConnectionUpdateSecretOk:
    if off != end:
        raise _malformed("connection.update-secret-ok")
    return ConnectionUpdateSecretOk()


def _decode_channel_open(buf: bytes | bytearray, off: int, end: int) -> ChannelOpen:
    n = buf[off]
    off += 1
    out_of_band = buf[off:off + n].decode()
    off += n
    if off != end:
        raise _malformed("channel.open")
    return ChannelOpen(out_of_band)


def _decode_channel_open_ok(buf: bytes | bytearray, off: int, end: int) -> ChannelOpenOk:
    n, = _S_I.unpack_from(buf, off)
    off += 4
    channel_id = bytes(buf[off:off + n])
    off += n
    if off != end:
        raise _malformed("channel.open-ok")
    return ChannelOpenOk(channel_id)


def _decode_channel_flow(buf: bytes | bytearray, off: int, end: int) -> ChannelFlow:
    bits0 = buf[off]
    off += 1
    if off != end:
        raise _malformed("channel.flow")
    return ChannelFlow(bits0 & 1 != 0)


def _decode_channel_flow_ok(buf: bytes | bytearray, off: int, end: int) -> ChannelFlowOk:
    bits0 = buf[off]
    off += 1
    if off != end:
        raise _malformed("channel.flow-ok")
    return ChannelFlowOk(bits0 & 1 != 0)


def _decode_channel_close(buf: bytes | bytearray, off: int, end: int) -> ChannelClose:
    reply_code, n = _S_HB.unpack_from(buf, off)
    off += 3
    reply_text = buf[off:off + n].decode()
    off += n
    class_id, method_id = _S_HH.unpack_from(buf, off)
    off += 4
    if off != end:
        raise _malformed("channel.close")
    return ChannelClose(reply_code, reply_text, class_id, method_id)


def _decode_channel_close_ok(buf: bytes | bytearray, off: int, end: int) -> ChannelCloseOk:
    if off != end:
        raise _malformed("channel.close-ok")
    return ChannelCloseOk()


def _decode_exchange_declare(buf: bytes | bytearray, off: int, end: int) -> ExchangeDeclare:
    ticket, n = _S_HB.unpack_from(buf, off)
    off += 3
    exchange = buf[off:off + n].decode()
    off += n
    n = buf[off]
    off += 1
    type = buf[off:off + n].decode()
    off += n
    bits3 = buf[off]
    off += 1
    arguments, off = decode_table(buf, off, end)
    if off != end:
        raise _malformed("exchange.declare")
    return ExchangeDeclare(ticket, exchange, type, bits3 & 1 != 0, bits3 & 2 != 0, bits3 & 4 != 0, bits3 & 8 != 0, bits3 & 16 != 0, arguments)


def _decode_exchange_declare_ok(buf: bytes | bytearray, off: int, end: int) -> ExchangeDeclareOk:
    if off != end:
        raise _malformed("exchange.declare-ok")
    return ExchangeDeclareOk()


def _decode_exchange_delete(buf: bytes | bytearray, off: int, end: int) -> ExchangeDelete:
    ticket, n = _S_HB.unpack_from(buf, off)
    off += 3
    exchange = buf[off:off + n].decode()
    off += n
    bits2 = buf[off]
    off += 1
    if off != end:
        raise _malformed("exchange.delete")
    return ExchangeDelete(ticket, exchange, bits2 & 1 != 0, bits2 & 2 != 0)


def _decode_exchange_delete_ok(buf: bytes | bytearray, off: int, end: int) -> ExchangeDeleteOk:
    if off != end:
        raise _malformed("exchange.delete-ok")
    return ExchangeDeleteOk()


def _decode_exchange_bind(buf: bytes | bytearray, off: int, end: int) -> ExchangeBind:
    ticket, n = _S_HB.unpack_from(buf, off)
    off += 3
    destination = buf[off:off + n].decode()
    off += n
    n = buf[off]
    off += 1
    source = buf[off:off + n].decode()
    off += n
    n = buf[off]
    off += 1
    routing_key = buf[off:off + n].decode()
    off += n
    bits4 = buf[off]
    off += 1
    arguments, off = decode_table(buf, off, end)
    if off != end:
        raise _malformed("exchange.bind")
    return ExchangeBind(ticket, destination, source, routing_key, bits4 & 1 != 0, arguments)


def _decode_exchange_bind_ok(buf: bytes | bytearray, off: int, end: int) -> ExchangeBindOk:
    if off != end:
        raise _malformed("exchange.bind-ok")
    return ExchangeBindOk()


def _decode_exchange_unbind(buf: bytes | bytearray, off: int, end: int) -> ExchangeUnbind:
    ticket, n = _S_HB.unpack_from(buf, off)
    off += 3
    destination = buf[off:off + n].decode()
    off += n
    n = buf[off]
    off += 1
    source = buf[off:off + n].decode()
    off += n
    n = buf[off]
    off += 1
    routing_key = buf[off:off + n].decode()
    off += n
    bits4 = buf[off]
    off += 1
    arguments, off = decode_table(buf, off, end)
    if off != end:
        raise _malformed("exchange.unbind")
    return ExchangeUnbind(ticket, destination, source, routing_key, bits4 & 1 != 0, arguments)


def _decode_exchange_unbind_ok(buf: bytes | bytearray, off: int, end: int) -> ExchangeUnbindOk:
    if off != end:
        raise _malformed("exchange.unbind-ok")
    return ExchangeUnbindOk()


def _decode_queue_declare(buf: bytes | bytearray, off: int, end: int) -> QueueDeclare:
    ticket, n = _S_HB.unpack_from(buf, off)
    off += 3
    queue = buf[off:off + n].decode()
    off += n
    bits2 = buf[off]
    off += 1
    arguments, off = decode_table(buf, off, end)
    if off != end:
        raise _malformed("queue.declare")
    return QueueDeclare(ticket, queue, bits2 & 1 != 0, bits2 & 2 != 0, bits2 & 4 != 0, bits2 & 8 != 0, bits2 & 16 != 0, arguments)


def _decode_queue_declare_ok(buf: bytes | bytearray, off: int, end: int) -> QueueDeclareOk:
    n = buf[off]
    off += 1
    queue = buf[off:off + n].decode()
    off += n
    message_count, consumer_count = _S_II.unpack_from(buf, off)
    off += 8
    if off != end:
        raise _malformed("queue.declare-ok")
    return QueueDeclareOk(queue, message_count, consumer_count)


def _decode_queue_bind(buf: bytes | bytearray, off: int, end: int) -> QueueBind:
    ticket, n = _S_HB.unpack_from(buf, off)
    off += 3
    queue = buf[off:off + n].decode()
    off += n
    n = buf[off]
    off += 1
    exchange = buf[off:off + n].decode()
    off += n
    n = buf[off]
    off += 1
    routing_key = buf[off:off + n].decode()
    off += n
    bits4 = buf[off]
    off += 1
    arguments, off = decode_table(buf, off, end)
    if off != end:
        raise _malformed("queue.bind")
    return QueueBind(ticket, queue, exchange, routing_key, bits4 & 1 != 0, arguments)


def _decode_queue_bind_ok(buf: bytes | bytearray, off: int, end: int) -> QueueBindOk:
    if off != end:
        raise _malformed("queue.bind-ok")
    return QueueBindOk()


def _decode_queue_purge(buf: bytes | bytearray, off: int, end: int) -> QueuePurge:
    ticket, n = _S_HB.unpack_from(buf, off)
    off += 3
    queue = buf[off:off + n].decode()
    off += n
    bits2 = buf[off]
    off += 1
    if off != end:
        raise _malformed("queue.purge")
    return QueuePurge(ticket, queue, bits2 & 1 != 0)


def _decode_queue_purge_ok(buf: bytes | bytearray, off: int, end: int) -> QueuePurgeOk:
    message_count, = _S_I.unpack_from(buf, off)
    off += 4
    if off != end:
        raise _malformed("queue.purge-ok")
    return QueuePurgeOk(message_count)


def _decode_queue_delete(buf: bytes | bytearray, off: int, end: int) -> QueueDelete:
    ticket, n = _S_HB.unpack_from(buf, off)
    off += 3
    queue = buf[off:off + n].decode()
    off += n
    bits2 = buf[off]
    off += 1
    if off != end:
        raise _malformed("queue.delete")
    return QueueDelete(ticket, queue, bits2 & 1 != 0, bits2 & 2 != 0, bits2 & 4 != 0)


def _decode_queue_delete_ok(buf: bytes | bytearray, off: int, end: int) -> QueueDeleteOk:
    message_count, = _S_I.unpack_from(buf, off)
    off += 4
    if off != end:
        raise _malformed("queue.delete-ok")
    return QueueDeleteOk(message_count)


def _decode_queue_unbind(buf: bytes | bytearray, off: int, end: int) -> QueueUnbind:
    ticket, n = _S_HB.unpack_from(buf, off)
    off += 3
    queue = buf[off:off + n].decode()
    off += n
    n = buf[off]
    off += 1
    exchange = buf[off:off + n].decode()
    off += n
    n = buf[off]
    off += 1
    routing_key = buf[off:off + n].decode()
    off += n
    arguments, off = decode_table(buf, off, end)
    if off != end:
        raise _malformed("queue.unbind")
    return QueueUnbind(ticket, queue, exchange, routing_key, arguments)


def _decode_queue_unbind_ok(buf: bytes | bytearray, off: int, end: int) -> QueueUnbindOk:
    if off != end:
        raise _malformed("queue.unbind-ok")
    return QueueUnbindOk()


def _decode_basic_qos(buf: bytes | bytearray, off: int, end: int) -> BasicQos:
    prefetch_size, prefetch_count, bits2 = _S_IHB.unpack_from(buf, off)
    off += 7
    if off != end:
        raise _malformed("basic.qos")
    return BasicQos(prefetch_size, prefetch_count, bits2 & 1 != 0)


def _decode_basic_qos_ok(buf: bytes | bytearray, off: int, end: int) -> BasicQosOk:
    if off != end:
        raise _malformed("basic.qos-ok")
    return BasicQosOk()


def _decode_basic_consume(buf: bytes | bytearray, off: int, end: int) -> BasicConsume:
    ticket, n = _S_HB.unpack_from(buf, off)
    off += 3
    queue = buf[off:off + n].decode()
    off += n
    n = buf[off]
    off += 1
    consumer_tag = buf[off:off + n].decode()
    off += n
    bits3 = buf[off]
    off += 1
    arguments, off = decode_table(buf, off, end)
    if off != end:
        raise _malformed("basic.consume")
    return BasicConsume(ticket, queue, consumer_tag, bits3 & 1 != 0, bits3 & 2 != 0, bits3 & 4 != 0, bits3 & 8 != 0, arguments)


def _decode_basic_consume_ok(buf: bytes | bytearray, off: int, end: int) -> BasicConsumeOk:
    n = buf[off]
    off += 1
    consumer_tag = buf[off:off + n].decode()
    off += n
    if off != end:
        raise _malformed("basic.consume-ok")
    return BasicConsumeOk(consumer_tag)


def _decode_basic_cancel(buf: bytes | bytearray, off: int, end: int) -> BasicCancel:
    n = buf[off]
    off += 1
    consumer_tag = buf[off:off + n].decode()
    off += n
    bits1 = buf[off]
    off += 1
    if off != end:
        raise _malformed("basic.cancel")
    return BasicCancel(consumer_tag, bits1 & 1 != 0)


def _decode_basic_cancel_ok(buf: bytes | bytearray, off: int, end: int) -> BasicCancelOk:
    n = buf[off]
    off += 1
    consumer_tag = buf[off:off + n].decode()
    off += n
    if off != end:
        raise _malformed("basic.cancel-ok")
    return BasicCancelOk(consumer_tag)


def _decode_basic_publish(buf: bytes | bytearray, off: int, end: int) -> BasicPublish:
    ticket, n = _S_HB.unpack_from(buf, off)
    off += 3
    exchange = buf[off:off + n].decode()
    off += n
    n = buf[off]
    off += 1
    routing_key = buf[off:off + n].decode()
    off += n
    bits3 = buf[off]
    off += 1
    if off != end:
        raise _malformed("basic.publish")
    return BasicPublish(ticket, exchange, routing_key, bits3 & 1 != 0, bits3 & 2 != 0)


def _decode_basic_return(buf: bytes | bytearray, off: int, end: int) -> BasicReturn:
    reply_code, n = _S_HB.unpack_from(buf, off)
    off += 3
    reply_text = buf[off:off + n].decode()
    off += n
    n = buf[off]
    off += 1
    exchange = buf[off:off + n].decode()
    off += n
    n = buf[off]
    off += 1
    routing_key = buf[off:off + n].decode()
    off += n
    if off != end:
        raise _malformed("basic.return")
    return BasicReturn(reply_code, reply_text, exchange, routing_key)


def _decode_basic_deliver(buf: bytes | bytearray, off: int, end: int) -> BasicDeliver:
    n = buf[off]
    off += 1
    consumer_tag = buf[off:off + n].decode()
    off += n
    delivery_tag, bits2, n = _S_QBB.unpack_from(buf, off)
    off += 10
    exchange = buf[off:off + n].decode()
    off += n
    n = buf[off]
    off += 1
    routing_key = buf[off:off + n].decode()
    off += n
    if off != end:
        raise _malformed("basic.deliver")
    return BasicDeliver(consumer_tag, delivery_tag, bits2 & 1 != 0, exchange, routing_key)


def _decode_basic_get(buf: bytes | bytearray, off: int, end: int) -> BasicGet:
    ticket, n = _S_HB.unpack_from(buf, off)
    off += 3
    queue = buf[off:off + n].decode()
    off += n
    bits2 = buf[off]
    off += 1
    if off != end:
        raise _malformed("basic.get")
    return BasicGet(ticket, queue, bits2 & 1 != 0)


def _decode_basic_get_ok(buf: bytes | bytearray, off: int, end: int) -> BasicGetOk:
    delivery_tag, bits1, n = _S_QBB.unpack_from(buf, off)
    off += 10
    exchange = buf[off:off + n].decode()
    off += n
    n = buf[off]
    off += 1
    routing_key = buf[off:off + n].decode()
    off += n
    message_count, = _S_I.unpack_from(buf, off)
    off += 4
    if off != end:
        raise _malformed("basic.get-ok")
    return BasicGetOk(delivery_tag, bits1 & 1 != 0, exchange, routing_key, message_count)


def _decode_basic_get_empty(buf: bytes | bytearray, off: int, end: int) -> BasicGetEmpty:
    n = buf[off]
    off += 1
    cluster_id = buf[off:off + n].decode()
    off += n
    if off != end:
        raise _malformed("basic.get-empty")
    return BasicGetEmpty(cluster_id)


def _decode_basic_ack(buf: bytes | bytearray, off: int, end: int) -> BasicAck:
    delivery_tag, bits1 = _S_QB.unpack_from(buf, off)
    off += 9
    if off != end:
        raise _malformed("basic.ack")
    return BasicAck(delivery_tag, bits1 & 1 != 0)


def _decode_basic_reject(buf: bytes | bytearray, off: int, end: int) -> BasicReject:
    delivery_tag, bits1 = _S_QB.unpack_from(buf, off)
    off += 9
    if off != end:
        raise _malformed("basic.reject")
    return BasicReject(delivery_tag, bits1 & 1 != 0)


def _decode_basic_recover_async(buf: bytes | bytearray, off: int, end: int) -> BasicRecoverAsync:
    bits0 = buf[off]
    off += 1
    if off != end:
        raise _malformed("basic.recover-async")
    return BasicRecoverAsync(bits0 & 1 != 0)


def _decode_basic_recover(buf: bytes | bytearray, off: int, end: int) -> BasicRecover:
    bits0 = buf[off]
    off += 1
    if off != end:
        raise _malformed("basic.recover")
    return BasicRecover(bits0 & 1 != 0)


def _decode_basic_recover_ok(buf: bytes | bytearray, off: int, end: int) -> BasicRecoverOk:
    if off != end:
        raise _malformed("basic.recover-ok")
    return BasicRecoverOk()


def _decode_basic_nack(buf: bytes | bytearray, off: int, end: int) -> BasicNack:
    delivery_tag, bits1 = _S_QB.unpack_from(buf, off)
    off += 9
    if off != end:
        raise _malformed("basic.nack")
    return BasicNack(delivery_tag, bits1 & 1 != 0, bits1 & 2 != 0)


def _decode_confirm_select(buf: bytes | bytearray, off: int, end: int) -> ConfirmSelect:
    bits0 = buf[off]
    off += 1
    if off != end:
        raise _malformed("confirm.select")
    return ConfirmSelect(bits0 & 1 != 0)


def _decode_confirm_select_ok(buf: bytes | bytearray, off: int, end: int) -> ConfirmSelectOk:
    if off != end:
        raise _malformed("confirm.select-ok")
    return ConfirmSelectOk()


def _decode_tx_select(buf: bytes | bytearray, off: int, end: int) -> TxSelect:
    if off != end:
        raise _malformed("tx.select")
    return TxSelect()


def _decode_tx_select_ok(buf: bytes | bytearray, off: int, end: int) -> TxSelectOk:
    if off != end:
        raise _malformed("tx.select-ok")
    return TxSelectOk()


def _decode_tx_commit(buf: bytes | bytearray, off: int, end: int) -> TxCommit:
    if off != end:
        raise _malformed("tx.commit")
    return TxCommit()


def _decode_tx_commit_ok(buf: bytes | bytearray, off: int, end: int) -> TxCommitOk:
    if off != end:
        raise _malformed("tx.commit-ok")
    return TxCommitOk()


def _decode_tx_rollback(buf: bytes | bytearray, off: int, end: int) -> TxRollback:
    if off != end:
        raise _malformed("tx.rollback")
    return TxRollback()


def _decode_tx_rollback_ok(buf: bytes | bytearray, off: int, end: int) -> TxRollbackOk:
    if off != end:
        raise _malformed("tx.rollback-ok")
    return TxRollbackOk()


@attrs.frozen(slots=True)
class BasicProperties:
    """The 14 basic content properties; None = absent (its flag bit is clear)."""

    content_type: str | None = None
    content_encoding: str | None = None
    headers: FieldTable | None = None
    delivery_mode: int | None = None
    priority: int | None = None
    correlation_id: str | None = None
    reply_to: str | None = None
    expiration: str | None = None
    message_id: str | None = None
    timestamp: int | None = None
    type: str | None = None
    user_id: str | None = None
    app_id: str | None = None
    cluster_id: str | None = None


def decode_basic_property_list(
    flags: int, buf: bytes | bytearray, off: int, end: int
) -> BasicProperties:
    """Decode the property list after the flags word(s); it must end at `end`."""
    if flags & 0x8000:
        n = buf[off]
        content_type = buf[off + 1:off + 1 + n].decode()
        off += 1 + n
    else:
        content_type = None
    if flags & 0x4000:
        n = buf[off]
        content_encoding = buf[off + 1:off + 1 + n].decode()
        off += 1 + n
    else:
        content_encoding = None
    if flags & 0x2000:
        headers, off = decode_table(buf, off, end)
    else:
        headers = None
    if flags & 0x1000:
        delivery_mode = buf[off]
        off += 1
    else:
        delivery_mode = None
    if flags & 0x0800:
        priority = buf[off]
        off += 1
    else:
        priority = None
    if flags & 0x0400:
        n = buf[off]
        correlation_id = buf[off + 1:off + 1 + n].decode()
        off += 1 + n
    else:
        correlation_id = None
    if flags & 0x0200:
        n = buf[off]
        reply_to = buf[off + 1:off + 1 + n].decode()
        off += 1 + n
    else:
        reply_to = None
    if flags & 0x0100:
        n = buf[off]
        expiration = buf[off + 1:off + 1 + n].decode()
        off += 1 + n
    else:
        expiration = None
    if flags & 0x0080:
        n = buf[off]
        message_id = buf[off + 1:off + 1 + n].decode()
        off += 1 + n
    else:
        message_id = None
    if flags & 0x0040:
        timestamp, = _S_Q.unpack_from(buf, off)
        off += 8
    else:
        timestamp = None
    if flags & 0x0020:
        n = buf[off]
        type = buf[off + 1:off + 1 + n].decode()
        off += 1 + n
    else:
        type = None
    if flags & 0x0010:
        n = buf[off]
        user_id = buf[off + 1:off + 1 + n].decode()
        off += 1 + n
    else:
        user_id = None
    if flags & 0x0008:
        n = buf[off]
        app_id = buf[off + 1:off + 1 + n].decode()
        off += 1 + n
    else:
        app_id = None
    if flags & 0x0004:
        n = buf[off]
        cluster_id = buf[off + 1:off + 1 + n].decode()
        off += 1 + n
    else:
        cluster_id = None
    if off != end:
        raise _malformed("basic properties")
    return BasicProperties(
        content_type, content_encoding, headers, delivery_mode, priority, correlation_id, reply_to, expiration, message_id, timestamp, type, user_id, app_id, cluster_id,
    )


def encode_basic_property_list(props: BasicProperties) -> bytes:
    """The flags word and the property list: a content header minus 12 bytes."""
    flags = 0
    parts = [b""]
    if props.content_type is not None:
        flags |= 0x8000
        raw = props.content_type.encode()
        if len(raw) > 255:
            raise _too_long("basic properties", "content_type")
        parts.append(_S_B.pack(len(raw)))
        parts.append(raw)
    if props.content_encoding is not None:
        flags |= 0x4000
        raw = props.content_encoding.encode()
        if len(raw) > 255:
            raise _too_long("basic properties", "content_encoding")
        parts.append(_S_B.pack(len(raw)))
        parts.append(raw)
    if props.headers is not None:
        flags |= 0x2000
        parts.append(encode_table(props.headers))
    if props.delivery_mode is not None:
        flags |= 0x1000
        parts.append(_S_B.pack(props.delivery_mode))
    if props.priority is not None:
        flags |= 0x0800
        parts.append(_S_B.pack(props.priority))
    if props.correlation_id is not None:
        flags |= 0x0400
        raw = props.correlation_id.encode()
        if len(raw) > 255:
            raise _too_long("basic properties", "correlation_id")
        parts.append(_S_B.pack(len(raw)))
        parts.append(raw)
    if props.reply_to is not None:
        flags |= 0x0200
        raw = props.reply_to.encode()
        if len(raw) > 255:
            raise _too_long("basic properties", "reply_to")
        parts.append(_S_B.pack(len(raw)))
        parts.append(raw)
    if props.expiration is not None:
        flags |= 0x0100
        raw = props.expiration.encode()
        if len(raw) > 255:
            raise _too_long("basic properties", "expiration")
        parts.append(_S_B.pack(len(raw)))
        parts.append(raw)
    if props.message_id is not None:
        flags |= 0x0080
        raw = props.message_id.encode()
        if len(raw) > 255:
            raise _too_long("basic properties", "message_id")
        parts.append(_S_B.pack(len(raw)))
        parts.append(raw)
    if props.timestamp is not None:
        flags |= 0x0040
        parts.append(_S_Q.pack(props.timestamp))
    if props.type is not None:
        flags |= 0x0020
        raw = props.type.encode()
        if len(raw) > 255:
            raise _too_long("basic properties", "type")
        parts.append(_S_B.pack(len(raw)))
        parts.append(raw)
    if props.user_id is not None:
        flags |= 0x0010
        raw = props.user_id.encode()
        if len(raw) > 255:
            raise _too_long("basic properties", "user_id")
        parts.append(_S_B.pack(len(raw)))
        parts.append(raw)
    if props.app_id is not None:
        flags |= 0x0008
        raw = props.app_id.encode()
        if len(raw) > 255:
            raise _too_long("basic properties", "app_id")
        parts.append(_S_B.pack(len(raw)))
        parts.append(raw)
    if props.cluster_id is not None:
        flags |= 0x0004
        raw = props.cluster_id.encode()
        if len(raw) > 255:
            raise _too_long("basic properties", "cluster_id")
        parts.append(_S_B.pack(len(raw)))
        parts.append(raw)
    parts[0] = _S_H.pack(flags)
    return b"".join(parts)


METHODS: dict[tuple[int, int], type[Method]] = {
    (10, 10): ConnectionStart,
    (10, 11): ConnectionStartOk,
    (10, 20): ConnectionSecure,
    (10, 21): ConnectionSecureOk,
    (10, 30): ConnectionTune,
    (10, 31): ConnectionTuneOk,
    (10, 40): ConnectionOpen,
    (10, 41): ConnectionOpenOk,
    (10, 50): ConnectionClose,
    (10, 51): ConnectionCloseOk,
    (10, 60): ConnectionBlocked,
    (10, 61): ConnectionUnblocked,
    (10, 70): ConnectionUpdateSecret,
    (10, 71): ConnectionUpdateSecretOk,
    (20, 10): ChannelOpen,
    (20, 11): ChannelOpenOk,
    (20, 20): ChannelFlow,
    (20, 21): ChannelFlowOk,
    (20, 40): ChannelClose,
    (20, 41): ChannelCloseOk,
    (40, 10): ExchangeDeclare,
    (40, 11): ExchangeDeclareOk,
    (40, 20): ExchangeDelete,
    (40, 21): ExchangeDeleteOk,
    (40, 30): ExchangeBind,
    (40, 31): ExchangeBindOk,
    (40, 40): ExchangeUnbind,
    (40, 51): ExchangeUnbindOk,
    (50, 10): QueueDeclare,
    (50, 11): QueueDeclareOk,
    (50, 20): QueueBind,
    (50, 21): QueueBindOk,
    (50, 30): QueuePurge,
    (50, 31): QueuePurgeOk,
    (50, 40): QueueDelete,
    (50, 41): QueueDeleteOk,
    (50, 50): QueueUnbind,
    (50, 51): QueueUnbindOk,
    (60, 10): BasicQos,
    (60, 11): BasicQosOk,
    (60, 20): BasicConsume,
    (60, 21): BasicConsumeOk,
    (60, 30): BasicCancel,
    (60, 31): BasicCancelOk,
    (60, 40): BasicPublish,
    (60, 50): BasicReturn,
    (60, 60): BasicDeliver,
    (60, 70): BasicGet,
    (60, 71): BasicGetOk,
    (60, 72): BasicGetEmpty,
    (60, 80): BasicAck,
    (60, 90): BasicReject,
    (60, 100): BasicRecoverAsync,
    (60, 110): BasicRecover,
    (60, 111): BasicRecoverOk,
    (60, 120): BasicNack,
    (85, 10): ConfirmSelect,
    (85, 11): ConfirmSelectOk,
    (90, 10): TxSelect,
    (90, 11): TxSelectOk,
    (90, 20): TxCommit,
    (90, 21): TxCommitOk,
    (90, 30): TxRollback,
    (90, 31): TxRollbackOk,
}

DECODERS: dict[int, Decoder] = {
    0x000A000A: _decode_connection_start,  # connection.start
    0x000A000B: _decode_connection_start_ok,  # connection.start-ok
    0x000A0014: _decode_connection_secure,  # connection.secure
    0x000A0015: _decode_connection_secure_ok,  # connection.secure-ok
    0x000A001E: _decode_connection_tune,  # connection.tune
    0x000A001F: _decode_connection_tune_ok,  # connection.tune-ok
    0x000A0028: _decode_connection_open,  # connection.open
    0x000A0029: _decode_connection_open_ok,  # connection.open-ok
    0x000A0032: _decode_connection_close,  # connection.close
    0x000A0033: _decode_connection_close_ok,  # connection.close-ok
    0x000A003C: _decode_connection_blocked,  # connection.blocked
    0x000A003D: _decode_connection_unblocked,  # connection.unblocked
    0x000A0046: _decode_connection_update_secret,  # connection.update-secret
    0x000A0047: _decode_connection_update_secret_ok,  # connection.update-secret-ok
    0x0014000A: _decode_channel_open,  # channel.open
    0x0014000B: _decode_channel_open_ok,  # channel.open-ok
    0x00140014: _decode_channel_flow,  # channel.flow
    0x00140015: _decode_channel_flow_ok,  # channel.flow-ok
    0x00140028: _decode_channel_close,  # channel.close
    0x00140029: _decode_channel_close_ok,  # channel.close-ok
    0x0028000A: _decode_exchange_declare,  # exchange.declare
    0x0028000B: _decode_exchange_declare_ok,  # exchange.declare-ok
    0x00280014: _decode_exchange_delete,  # exchange.delete
    0x00280015: _decode_exchange_delete_ok,  # exchange.delete-ok
    0x0028001E: _decode_exchange_bind,  # exchange.bind
    0x0028001F: _decode_exchange_bind_ok,  # exchange.bind-ok
    0x00280028: _decode_exchange_unbind,  # exchange.unbind
    0x00280033: _decode_exchange_unbind_ok,  # exchange.unbind-ok
    0x0032000A: _decode_queue_declare,  # queue.declare
    0x0032000B: _decode_queue_declare_ok,  # queue.declare-ok
    0x00320014: _decode_queue_bind,  # queue.bind
    0x00320015: _decode_queue_bind_ok,  # queue.bind-ok
    0x0032001E: _decode_queue_purge,  # queue.purge
    0x0032001F: _decode_queue_purge_ok,  # queue.purge-ok
    0x00320028: _decode_queue_delete,  # queue.delete
    0x00320029: _decode_queue_delete_ok,  # queue.delete-ok
    0x00320032: _decode_queue_unbind,  # queue.unbind
    0x00320033: _decode_queue_unbind_ok,  # queue.unbind-ok
    0x003C000A: _decode_basic_qos,  # basic.qos
    0x003C000B: _decode_basic_qos_ok,  # basic.qos-ok
    0x003C0014: _decode_basic_consume,  # basic.consume
    0x003C0015: _decode_basic_consume_ok,  # basic.consume-ok
    0x003C001E: _decode_basic_cancel,  # basic.cancel
    0x003C001F: _decode_basic_cancel_ok,  # basic.cancel-ok
    0x003C0028: _decode_basic_publish,  # basic.publish
    0x003C0032: _decode_basic_return,  # basic.return
    0x003C003C: _decode_basic_deliver,  # basic.deliver
    0x003C0046: _decode_basic_get,  # basic.get
    0x003C0047: _decode_basic_get_ok,  # basic.get-ok
    0x003C0048: _decode_basic_get_empty,  # basic.get-empty
    0x003C0050: _decode_basic_ack,  # basic.ack
    0x003C005A: _decode_basic_reject,  # basic.reject
    0x003C0064: _decode_basic_recover_async,  # basic.recover-async
    0x003C006E: _decode_basic_recover,  # basic.recover
    0x003C006F: _decode_basic_recover_ok,  # basic.recover-ok
    0x003C0078: _decode_basic_nack,  # basic.nack
    0x0055000A: _decode_confirm_select,  # confirm.select
    0x0055000B: _decode_confirm_select_ok,  # confirm.select-ok
    0x005A000A: _decode_tx_select,  # tx.select
    0x005A000B: _decode_tx_select_ok,  # tx.select-ok
    0x005A0014: _decode_tx_commit,  # tx.commit
    0x005A0015: _decode_tx_commit_ok,  # tx.commit-ok
    0x005A001E: _decode_tx_rollback,  # tx.rollback
    0x005A001F: _decode_tx_rollback_ok,  # tx.rollback-ok
}

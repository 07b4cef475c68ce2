"""The kernel's errors.

Kernel operations fail with the same conditions RabbitMQ reports, so every protocol plugin can
map one kernel error to its own wire answer: an AMQP reply code, an MQTT reason code, a STOMP
ERROR frame. Each error carries `reply_code` (the AMQP 0-9-1 code, the most specific vocabulary
of the three) and says whether it is fatal to the whole connection or only to the operation.
"""

from __future__ import annotations

from collections.abc import Mapping


class HeraldError(Exception):
    """Base of every error herald raises on purpose."""


class KernelError(HeraldError):
    """An operation on the kernel's model was refused.

    `reply_code` and `reply_text` follow AMQP 0-9-1 (RabbitMQ); `connection_level` says the
    condition ends the connection rather than just the channel / subscription.
    """

    reply_code: int = 541
    connection_level: bool = False

    def __init__(self, reply_text: str) -> None:
        super().__init__(reply_text)
        self.reply_text = reply_text

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.reply_code}, {self.reply_text!r})"


class AccessRefused(KernelError):
    """403: the user may not do this, or an exclusive resource belongs to someone else."""

    reply_code = 403


class NotFound(KernelError):
    """404: the exchange, queue or virtual host does not exist."""

    reply_code = 404


class ResourceLocked(KernelError):
    """405: the queue is exclusive to another connection, or has an exclusive consumer."""

    reply_code = 405


class PreconditionFailed(KernelError):
    """406: redeclared with other properties, bad argument, if-unused / if-empty not met."""

    reply_code = 406


class CommandInvalid(KernelError):
    """503: the command is invalid (e.g. an unknown exchange type); closes the connection."""

    reply_code = 503
    connection_level = True


class NotAllowed(KernelError):
    """530: the operation is not allowed in this state (e.g. unknown virtual host)."""

    reply_code = 530
    connection_level = True


class ResourceError(KernelError):
    """506: the broker is out of a resource (e.g. too many channels)."""

    reply_code = 506
    connection_level = True


class NotMaster(ResourceError):
    """320: this node is not, or no longer, its group's master (a slave, or a master fenced or
    demoted), so it refuses writes and cannot confirm the ones it took: clients must go to the
    master. AMQP closes the connection 320 CONNECTION_FORCED, as RabbitMQ closes the
    connections of a node that stops serving; MQTT 5 says DISCONNECT 0x9C Use another server;
    STOMP says ERROR "Not master".

    `reply_text` names this node and why ("n1 is no longer master of g1 (epoch 9)"), not an
    address: each protocol adds the master's address for its own clients (`text_for`).
    `master` is the group master's client address, "host:port", when known; `addrs`, when
    known, its address for each protocol, as in its node key (`amqp`, `mqtt`, `stomp`,
    `amqps`, ...), and wins over `master`.
    """

    reply_code = 320

    def __init__(
        self,
        reply_text: str = "this node is not its group's master",
        master: str | None = None,
        *,
        addrs: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(reply_text)
        self.master = master
        self.addrs: Mapping[str, str] = dict(addrs) if addrs else {}

    def master_for(self, protocol: str, tls: bool = False) -> str | None:
        """The master's address for a client of `protocol` ("amqp", "mqtt", "stomp"), over TLS
        or not; None when unknown (or the master does not serve that protocol)."""
        addrs = self.addrs
        if not addrs:
            return self.master
        return (addrs.get(protocol + "s") if tls else None) or addrs.get(protocol)

    def text_for(self, protocol: str, tls: bool = False) -> str:
        """`reply_text`, and where to go when the master's address is known."""
        address = self.master_for(protocol, tls)
        return self.reply_text if address is None else f"{self.reply_text}; use {address}"


REPLICATION_TIMEOUT_TEXT = (
    "replication timeout: the sync replicas did not confirm the write in time;"
    " the message is stored on the master and may still be delivered"
)


class ReplicationTimeout(ResourceError):
    """506: a durable write was not confirmed by the sync replicas within `sync_timeout`. The
    message is stored on the master and may still be delivered (RocketMQ's
    FLUSH_SLAVE_TIMEOUT): a nack, not a loss, and a resend may duplicate it. Only its waiters
    fail, not the connection: AMQP nacks the confirms (a tx.commit closes its channel 506);
    MQTT and STOMP, which cannot refuse an ack, end the connection (DISCONNECT 0x83, ERROR
    "Replication timeout"). A raiser's own text should keep saying the message is stored.
    """

    reply_code = 506
    connection_level = False

    def __init__(self, reply_text: str = REPLICATION_TIMEOUT_TEXT) -> None:
        super().__init__(reply_text)


class InternalError(KernelError):
    """541: the broker failed in a way that is not the client's fault."""

    reply_code = 541
    connection_level = True


class ConfigError(HeraldError):
    """The configuration is invalid; the message names the key."""


class InvalidValue(ConfigError, ValueError):
    """A value broke a rule. A `ValueError` too, so cattrs records it against its field."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.message = message
        self.field = field


def show_value(value: object) -> str:
    """A value as a user wrote it (TOML spells booleans lower-case), cut to a sane length."""
    text = str(value).lower() if isinstance(value, bool) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class PluginError(HeraldError):
    """A plugin is unknown, cannot be loaded, or implements a hook wrongly."""


class ProtocolError(HeraldError):
    """A protocol's rules were broken; raised by sans-IO codecs and protocol sessions.

    `code` is the protocol's own answer: an AMQP reply code (501 frame error, 505 unexpected
    frame, ...), an MQTT 5 reason code (0x81 malformed packet, 0x82 protocol error, 0x95
    packet too large, ...), or None for STOMP, whose answer is an ERROR frame with `text`.
    Codecs raise `LocalProtocolError` internally and turn it into `RemoteProtocolError` at
    their inbound entry point (h11's strategy), so callers catch one type per direction.
    """

    def __init__(self, text: str, code: int | None = None) -> None:
        super().__init__(text)
        self.text = text
        self.code = code

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.text!r}, code={self.code!r})"


class LocalProtocolError(ProtocolError):
    """Our side misused a codec (e.g. sent a frame the state does not allow)."""


class RemoteProtocolError(ProtocolError):
    """The peer sent bytes that break the protocol; close its connection with `code`."""

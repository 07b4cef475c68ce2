"""The kernel's errors.

Kernel operations fail with the same conditions RabbitMQ reports, so every protocol plugin can
map one kernel error to its own wire answer: an AMQP reply code, an MQTT reason code, a STOMP
ERROR frame. Each error carries `reply_code` (the AMQP 0-9-1 code, the most specific vocabulary
of the three) and says whether it is fatal to the whole connection or only to the operation.
"""

from __future__ import annotations


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

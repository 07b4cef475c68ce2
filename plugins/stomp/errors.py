"""Why the STOMP session refuses a frame, as the ERROR frame will say it.

STOMP has no error codes: an ERROR frame carries a short `message` header and a plain-text
body. `FrameError` is raised by the session's helpers (destinations, subscriptions,
transactions) for a frame that breaks STOMP or herald's mapping rules; kernel refusals
(`KernelError`) are translated by `kernel_error_message` (the `message` header) and
`kernel_error_detail` (the body). Either way the session sends the ERROR and closes the
connection, as STOMP requires.

Two refusals come from a cluster node's store and are named by their type, not their AMQP
code: `NotMaster` ("Not master": this node is not its group's master; the body says where the
master is when known) and `ReplicationTimeout` ("Replication timeout": the sync replicas did
not confirm in time; the body says the message is stored and may still be delivered).
"""

from __future__ import annotations

from typing import Final

from herald.core.errors import HeraldError, KernelError, NotMaster, ReplicationTimeout

NOT_MASTER: Final = "Not master"
REPLICATION_TIMEOUT: Final = "Replication timeout"

_KERNEL_MESSAGES: Final = {
    403: "Access refused",
    404: "Not found",
    405: "Resource locked",
    406: "Precondition failed",
    503: "Command invalid",
    506: "Resource error",
    530: "Not allowed",
    541: "Internal error",
}


class FrameError(HeraldError):
    """A frame the session cannot act on: `message` is the ERROR header, `detail` its body."""

    def __init__(self, message: str, detail: str) -> None:
        super().__init__(f"{message}: {detail}")
        self.message = message
        self.detail = detail


def kernel_error_message(error: KernelError) -> str:
    """The ERROR frame's `message` header for a kernel refusal (its body: `kernel_error_detail`)."""
    if isinstance(error, NotMaster):
        return NOT_MASTER
    if isinstance(error, ReplicationTimeout):
        return REPLICATION_TIMEOUT
    return _KERNEL_MESSAGES.get(error.reply_code, "Processing error")


def kernel_error_detail(error: KernelError, tls: bool = False) -> str:
    """The ERROR frame's body for a kernel refusal: the reply text, and for `NotMaster` the
    master's STOMP address (`stomps` over TLS) when known."""
    if isinstance(error, NotMaster):
        return error.text_for("stomp", tls)
    return error.reply_text

"""A connection's RECEIPT frames: sent in the order their frames arrived, each once its frame
is settled.

A SEND's receipt waits until the store has made the message durable when it is persistent and
reached a durable queue (its store ticket); a COMMIT's waits for the last such message of the
transaction; every later receipt waits behind them. While receipts wait for the store, one
task of the connection's (`Link.start_task`, core/adapter.py) waits for the latest ticket and
sends what became due (group commit: one flush settles a batch); it ends when nothing waits
for a later ticket, so a connection that owes no such receipt has no task for them, and never
two. A SUBSCRIBE's receipt releases its held subscription once it is out (`then`,
subscriptions.py), so it precedes the subscription's first MESSAGE; DISCONNECT's receipt
(`final`) ends the connection once it, and every receipt before it, is out.

When the store fails the wait, the receipts already due are sent, then an ERROR with the
`receipt-id` of the first frame still waiting, and the connection closes: "Replication
timeout" (a cluster's sync replicas did not confirm in time; the message is stored and may
still be delivered, so a resend may duplicate it), "Not master" (the node was demoted; the
body names the master when known), otherwise "Message not stored".
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from herald.core.errors import KernelError, NotMaster, ReplicationTimeout
from herald.plugins.stomp.codec import Frame
from herald.plugins.stomp.errors import kernel_error_detail, kernel_error_message

if TYPE_CHECKING:
    from herald.plugins.stomp.session import Session

log = logging.getLogger(__name__)

_Receipt = tuple[int | None, str | None, bool, Callable[[], None] | None]
"""(store ticket to wait for, receipt id or None, whether it ends the connection, what to do
once it is sent: a held subscription's release)."""


class Receipts:
    """One connection's receipts not yet sent, in order (made at its first receipt)."""

    __slots__ = ("_pending", "_session", "_ticket", "_waiting")

    def __init__(self, session: Session) -> None:
        self._session = session
        self._pending: list[_Receipt] = []
        self._ticket = 0  # the latest store ticket a receipt waits for
        self._waiting: trio.CancelScope | None = None  # while the task waits for the store

    def __bool__(self) -> bool:
        return bool(self._pending)

    def add(
        self,
        receipt_id: str | None,
        ticket: int | None = None,
        final: bool = False,
        then: Callable[[], None] | None = None,
    ) -> None:
        """A receipt (or, with `receipt_id` None, only `final` or `then`) behind the others;
        `ticket`: the store ticket its frame waits for."""
        self._pending.append((ticket, receipt_id, final, then))
        session = self._session
        if ticket is not None and ticket > session.store.durable_ticket:
            if ticket > self._ticket:
                self._ticket = ticket
            link = session.link
            if self._waiting is None and link is not None:
                self._waiting = trio.CancelScope()
                link.start_task(self._wait_durable, self._waiting)

    def flush(self) -> None:
        """Send, in order, every receipt whose frame is settled (stored messages durable)."""
        pending = self._pending
        if not pending:
            return
        session = self._session
        durable = session.store.durable_ticket
        sent = 0
        try:
            for ticket, receipt_id, final, then in pending:
                if not session.can_send or (ticket is not None and ticket > durable):
                    break
                sent += 1
                if receipt_id is not None:
                    session.codec.send(Frame("RECEIPT", (("receipt-id", receipt_id),)))
                if then is not None:
                    then()
                if final:
                    session.finish("client disconnected")
        finally:
            del pending[:sent]

    def cancel(self) -> None:
        """The connection ended: stop waiting for the store."""
        if self._waiting is not None:
            self._waiting.cancel()

    async def _wait_durable(self, scope: trio.CancelScope) -> None:
        session = self._session
        try:
            with scope:
                while True:
                    ticket = self._ticket
                    try:
                        await session.store.wait_durable(ticket)
                    except KernelError as exc:
                        self._failed(exc)
                        return
                    self.flush()
                    session.wake()
                    if self._ticket <= ticket:
                        return  # no await since the check: a later receipt starts a new wait
        finally:
            self._waiting = None

    def _failed(self, exc: KernelError) -> None:
        """The store failed the wait: send the receipts already due, then an ERROR naming the
        first frame still waiting, and close."""
        session = self._session
        if isinstance(exc, NotMaster | ReplicationTimeout):
            log.warning("STOMP receipts not sent: %s", exc.reply_text)
            message = kernel_error_message(exc)
            detail = kernel_error_detail(exc, session.connection.tls is not None)
        else:
            log.error("store failed to make STOMP messages durable: %s", exc)
            message, detail = "Message not stored", f"the broker could not store the message: {exc}"
        self.flush()
        receipt = self._pending[0][1] if self._pending else None
        self._pending.clear()
        session.fail(message, detail, receipt_id=receipt)

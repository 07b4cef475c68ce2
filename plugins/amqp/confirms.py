"""Publisher confirms that wait for the store: a confirm of a persistent publish goes out only
once the commit log is flushed past it (group commit), as the flush policy says.

One task of the connection's (`Link.start_task`) waits for durability while confirms are owed,
never two at once, and ends when none is owed: an idle connection holds no task for this.

When the store fails that wait, the publishes waiting on it are nacked (basic.nack), never
acked: a nack says "not confirmed", not "lost". A ReplicationTimeout (the sync replicas did
not confirm in time; the message is stored on the master and may still be delivered) ends
there, and the connection carries on. A NotMaster (the node was demoted meanwhile) nacks every
confirm still owed and closes the connection 320 CONNECTION_FORCED naming the master
(`Session.not_master`).
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING

from herald.core.errors import KernelError, NotMaster, ReplicationTimeout

if TYPE_CHECKING:
    from herald.plugins.amqp.session import Session

log = logging.getLogger(__name__)


class DurableConfirms:
    __slots__ = ("_running", "_session", "_ticket")

    def __init__(self, session: Session) -> None:
        self._session = session
        self._ticket = 0  # the highest store ticket a confirm waits for
        self._running = False  # a task waits for durability (`_run`)

    def after(self, ticket: int) -> None:
        """A confirm waits for `ticket`: unless the store is there already, wait for it in a
        task of the connection's, one at a time, which ends once no confirm is owed."""
        session = self._session
        if ticket <= session.store.durable_ticket:
            return
        if ticket > self._ticket:
            self._ticket = ticket
        link = session.link
        if not self._running and link is not None:
            self._running = True
            link.start_task(self._run)

    def flush(self) -> None:
        """Send every confirm the store's durable point now allows."""
        session = self._session
        durable = session.store.durable_ticket
        for channel in session.channels.values():
            if channel.publisher.pending and channel.open:
                channel.publisher.flush_confirms(durable)

    def fail_all(self) -> None:
        """Nack every confirm still owed (after acking those the store's durable point allows):
        the connection is about to close, and a confirm is never left unanswered."""
        self.flush()
        for channel in self._session.channels.values():
            channel.publisher.fail_confirms(sys.maxsize)
        self.flush()

    async def _run(self) -> None:
        session = self._session
        try:
            while True:
                ticket = self._ticket
                try:
                    await session.store.wait_durable(ticket)
                except NotMaster as exc:
                    log.warning("publishes not confirmed: %s", exc.reply_text)
                    session.not_master(exc)  # nacks them all, then closes
                    return
                except KernelError as exc:
                    if isinstance(exc, ReplicationTimeout):
                        log.warning("publishes not confirmed: %s", exc.reply_text)
                    else:
                        log.error("store failed to make publishes durable: %s", exc)
                    self.flush()  # those durable meanwhile are acked, not nacked
                    for channel in session.channels.values():
                        channel.publisher.fail_confirms(ticket)
                self.flush()
                if self._ticket <= ticket:
                    return  # no await since the check: a later publish starts a new task
        finally:
            self._running = False

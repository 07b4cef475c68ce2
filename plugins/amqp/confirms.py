"""Publisher confirms that wait for the store: a confirm of a persistent publish goes out only
once the commit log is flushed past it (group commit), as the flush policy says.

One task of the connection's (`Link.start_task`) waits for durability while confirms are owed,
never two at once, and ends when none is owed: an idle connection holds no task for this.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from herald.core.errors import KernelError

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

    async def _run(self) -> None:
        session = self._session
        try:
            while True:
                ticket = self._ticket
                try:
                    await session.store.wait_durable(ticket)
                except KernelError as exc:
                    log.error("store failed to make publishes durable: %s", exc)
                    for channel in session.channels.values():
                        channel.publisher.fail_confirms(ticket)
                self.flush()
                if self._ticket <= ticket:
                    return  # no await since the check: a later publish starts a new task
        finally:
            self._running = False

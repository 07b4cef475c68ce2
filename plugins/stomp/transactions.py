"""STOMP transactions: BEGIN, then SENDs, ACKs and NACKs held back until COMMIT or ABORT.

As in RabbitMQ's STOMP plugin, a frame with a `transaction` header is kept whole and acted on
only at COMMIT, in the order it arrived; ABORT forgets it (the messages an aborted ACK named
stay unacknowledged). Transaction ids belong to one connection; an open transaction is aborted
when its connection ends. The caps are RabbitMQ's: 16 open transactions per connection and
1024 frames per transaction, so a client cannot make the broker buffer without bound.
"""

from __future__ import annotations

from typing import Final

from herald.plugins.stomp.codec import Frame
from herald.plugins.stomp.errors import FrameError

MAX_TRANSACTIONS: Final = 16
MAX_TRANSACTION_FRAMES: Final = 1024
TRANSACTIONAL: Final = frozenset({"SEND", "ACK", "NACK"})
"""The commands a `transaction` header holds back."""


class Transactions:
    """One connection's open transactions, by id."""

    __slots__ = ("_open",)  # one per connection

    def __init__(self) -> None:
        self._open: dict[str, list[Frame]] = {}

    def __len__(self) -> int:
        return len(self._open)

    def begin(self, frame: Frame) -> None:
        transaction = _transaction(frame)
        if transaction in self._open:
            raise FrameError(
                "Bad transaction", f"transaction '{transaction}' is already open on this connection"
            )
        if len(self._open) >= MAX_TRANSACTIONS:
            raise FrameError(
                "Transaction limit exceeded",
                f"too many open transactions (the limit is {MAX_TRANSACTIONS} per connection)",
            )
        self._open[transaction] = []

    def add(self, transaction: str, frame: Frame) -> None:
        """Hold `frame` (a SEND, ACK or NACK) until its transaction ends."""
        frames = self._frames(transaction)
        if len(frames) >= MAX_TRANSACTION_FRAMES:
            raise FrameError(
                "Transaction too large",
                f"too many frames in transaction '{transaction}' "
                f"(the limit is {MAX_TRANSACTION_FRAMES})",
            )
        frames.append(frame)

    def commit(self, frame: Frame) -> list[Frame]:
        """End the transaction; returns its frames, in order, for the session to act on."""
        transaction = _transaction(frame)
        frames = self._frames(transaction)
        del self._open[transaction]
        return frames

    def abort(self, frame: Frame) -> None:
        transaction = _transaction(frame)
        self._frames(transaction)
        del self._open[transaction]

    def clear(self) -> None:
        """The connection ends: every open transaction is aborted."""
        self._open.clear()

    def _frames(self, transaction: str) -> list[Frame]:
        frames = self._open.get(transaction)
        if frames is None:
            raise FrameError(
                "Bad transaction", f"invalid transaction identifier: '{transaction}' is not open"
            )
        return frames


def _transaction(frame: Frame) -> str:
    transaction = frame.get("transaction")
    if transaction is None:
        raise FrameError(
            "Missing transaction", f"{frame.command} must include a 'transaction' header"
        )
    return transaction

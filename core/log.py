"""Logging for the `herald` command: one line per record, UTC timestamps, under "herald".

Only the "herald" logger gets a handler, so a program embedding the broker keeps control of its
own root logger, and records still propagate to whatever the root has (pytest's caplog).
"""

from __future__ import annotations

import logging
import sys
import time
from typing import TextIO

from herald.core.errors import ConfigError

ROOT_LOGGER = "herald"
_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


class LineFormatter(logging.Formatter):
    """`2026-11-22T03:49:49.123Z INFO herald.core.broker: message`.

    Newlines in the message are escaped, so a queue name or a client id chosen by a peer cannot
    forge log lines; a traceback, written by herald itself, follows on its own lines.
    """

    converter = staticmethod(time.gmtime)

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", self.converter(record.created))
        millis = int(record.msecs)
        message = record.getMessage().replace("\r", "\\r").replace("\n", "\\n")
        line = f"{stamp}.{millis:03d}Z {record.levelname} {record.name}: {message}"
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line = f"{line}\n{record.exc_text}"
        if record.stack_info:
            line = f"{line}\n{self.formatStack(record.stack_info)}"
        return line


class _HeraldHandler(logging.StreamHandler):
    """The handler `configure_logging` installs; a reconfiguration replaces it."""


def configure_logging(level: str, stream: TextIO | None = None) -> logging.Logger:
    """Log records of the "herald" hierarchy at `level` and above to `stream`, one per line.

    `stream` defaults to the `sys.stderr` of the moment of the call. Calling it again replaces
    the handler (idempotent). Returns the "herald" logger.
    """
    try:
        number = _LEVELS[level.lower()]
    except KeyError:
        choices = ", ".join(_LEVELS)
        raise ConfigError(f"log level must be one of {choices}, got {level!r}") from None
    reset_logging()
    logger = logging.getLogger(ROOT_LOGGER)
    handler = _HeraldHandler(sys.stderr if stream is None else stream)
    handler.setFormatter(LineFormatter())
    logger.addHandler(handler)
    logger.setLevel(number)
    return logger


def reset_logging() -> None:
    """Remove what `configure_logging` installed (for commands run inside another program)."""
    logger = logging.getLogger(ROOT_LOGGER)
    for handler in list(logger.handlers):
        if isinstance(handler, _HeraldHandler):
            logger.removeHandler(handler)
            handler.close()
    logger.setLevel(logging.NOTSET)

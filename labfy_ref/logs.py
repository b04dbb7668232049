"""The server log (SV-05): one line per event, no secrets, tracebacks only with ``--debug``.

Every logger of the product lives under ``labfy_ref``. :func:`configure` sets
its level and destination once (``--log-level``, ``--log-file``);
:func:`incident` is how any layer reports an *unexpected* exception: one line
with the error code, an incident id the user also sees, and the exception's
class — the traceback goes to the log only in debug mode, and never to a user.
"""

from __future__ import annotations

import logging
import secrets
import sys
from pathlib import Path

from labfy_ref.errors import ErrorCode, bounded

ROOT = "labfy_ref"
LEVELS = ("debug", "info", "warning", "error")
DEFAULT_LEVEL = "info"
_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
_state = {"debug": False}


class _OneLine(logging.Formatter):
    """Every record on one line: control characters in a message cannot forge another."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        if record.exc_info is None and record.stack_info is None:
            return bounded(text, 2000)
        return text  # a traceback (debug mode only) spans lines by nature


def configure(level: str = DEFAULT_LEVEL, file: Path | None = None, *,
              debug: bool = False) -> None:
    """Send the product's log to ``file`` (appended) or stderr, at ``level``."""
    logger = logging.getLogger(ROOT)
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()
    out: logging.Handler = (logging.FileHandler(file, encoding="utf-8")
                            if file is not None else logging.StreamHandler(sys.stderr))
    out.setFormatter(_OneLine(_FORMAT))
    logger.addHandler(out)
    logger.setLevel(logging.DEBUG if debug else getattr(logging, level.upper()))
    logger.propagate = False
    _state["debug"] = debug


def debug_enabled() -> bool:
    """Was ``--debug`` given (tracebacks go to the log)?"""
    return _state["debug"]


def incident(logger: logging.Logger, exc: BaseException, where: str,
             code: ErrorCode = ErrorCode.INTERNAL_ERROR) -> str:
    """Log an unexpected exception as one line; return the incident id shown to the user."""
    incident_id = f"inc_{secrets.token_hex(6)}"
    logger.error("%s incident=%s where=%s exception=%s", code.value, incident_id,
                 bounded(where, 120), type(exc).__name__,
                 exc_info=exc if _state["debug"] else None)
    return incident_id

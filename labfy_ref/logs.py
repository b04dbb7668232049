"""The server log (SV-05, SV-09): one line per event, no secrets, tracebacks only with
``--debug``, and no flood.

Every logger of the product lives under ``labfy_ref``. :func:`configure` sets
its level and destination once (``--log-level``, ``--log-file``) and puts the one
handler on the root logger, so every other logger -- asyncio's, uvicorn's, the
database driver's -- writes through it too (at ``warning`` and above) instead of
Python's last-resort handler, which prints whole tracebacks to stderr. The handler
makes every record one line (a record's traceback becomes its exception's class,
unless ``--debug``) and rate-limits each (logger, level, message) to
:data:`BURST` lines per :data:`WINDOW_SECONDS`; the lines it held back are never
lost from the count: one ``N similar lines suppressed`` line says how many, once
the window is over or the log closes.
:func:`incident` is how any layer reports an *unexpected* exception: one line
with the error code, an incident id the user also sees, and the exception's
class — the traceback goes to the log only in debug mode, and never to a user.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
import sys
import threading
import time
from pathlib import Path
from typing import Any

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


#: Lines one (logger, level, message) may write per window; the rest are counted.
BURST = 20
WINDOW_SECONDS = 10.0
#: Most (logger, level, message) keys tracked at once (older ones are said and dropped).
MAX_KEYS = 1024


def one_line(record: logging.LogRecord) -> logging.LogRecord:
    """``record`` as one line: its traceback (in ``exc_info``, or formatted inside its
    message, as uvicorn reports a failed startup) becomes the exception's class."""
    text = record.getMessage()
    exception = record.exc_info[0].__name__ if record.exc_info and record.exc_info[0] else None
    if (exception is None and record.stack_info is None
            and "Traceback (most recent call last)" not in text):
        return record
    lines = [line for line in text.splitlines() if line.strip()]
    if "Traceback (most recent call last)" in text:
        exception = lines[-1].split(":", 1)[0]
        summary = f"{ErrorCode.INTERNAL_ERROR.value} in the application"
    else:
        summary = lines[0] if lines else ""
    if exception is not None:
        summary += f" exception={exception} (the traceback only with --debug)"
    copy = logging.makeLogRecord(record.__dict__)
    copy.msg, copy.args = summary, None
    copy.exc_info = copy.exc_text = copy.stack_info = None
    return copy


@dataclasses.dataclass(slots=True)
class _Window:
    start: float
    written: int = 0
    suppressed: int = 0


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to ``sys.stderr`` as it is when a record comes, not as it was when configured
    (a command run in-process by a test, whose stderr is replaced and closed after it)."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _: Any) -> None:
        pass  # always the current sys.stderr


class FloodGuard(logging.Handler):
    """The one handler: one line per record, at most :data:`BURST` per key and window,
    then one line saying how many were held back (see the module)."""

    def __init__(self, target: logging.Handler, *, debug: bool = False,
                 clock: object = time.monotonic) -> None:
        super().__init__()
        self.target = target
        self.debug = debug
        self._clock = clock
        self._windows: dict[tuple[str, int, str], _Window] = {}
        self._guard = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        """Write ``record`` (one line unless debugging) unless its key is over its burst."""
        if not self.debug:
            record = one_line(record)
        key = (record.name, record.levelno, str(record.msg)[:200])
        now = self._clock()  # type: ignore[operator]
        with self._guard:
            due = self._due(now, keep=key)
            window = self._windows.get(key)
            if window is None or now - window.start >= WINDOW_SECONDS:
                if window is not None and window.suppressed:
                    due.append((key, window))
                window = self._windows[key] = _Window(now)
            write = window.written < BURST
            if write:
                window.written += 1
            else:
                window.suppressed += 1
        for held, window in due:
            self.target.handle(_summary(held, window.suppressed))
        if write:
            self.target.handle(record)

    def _due(self, now: float, *, keep: tuple[str, int, str] | None = None) -> list[
            tuple[tuple[str, int, str], _Window]]:
        """Forget windows that are over (or the oldest, past MAX_KEYS); those that held
        lines back are returned, to be said."""
        due = []
        over = [key for key, window in self._windows.items()
                if key != keep and now - window.start >= WINDOW_SECONDS]
        if len(self._windows) - len(over) >= MAX_KEYS:
            over += sorted((key for key in self._windows if key not in over and key != keep),
                           key=lambda key: self._windows[key].start)[:len(self._windows) // 4]
        for key in over:
            window = self._windows.pop(key)
            if window.suppressed:
                due.append((key, window))
        return due

    def flush(self) -> None:
        """Say every count still held, then flush the destination."""
        with self._guard:
            due = [(key, window.suppressed) for key, window in self._windows.items()
                   if window.suppressed]
            for window in self._windows.values():
                window.suppressed = 0
        for key, count in due:
            self.target.handle(_summary(key, count))
        self.target.flush()

    def close(self) -> None:
        """Say every count still held, then close the destination."""
        self.flush()
        self.target.close()
        super().close()


def _summary(key: tuple[str, int, str], suppressed: int) -> logging.LogRecord:
    name, level, message = key
    return logging.LogRecord(name, level, __file__, 0,
                             "%d similar lines suppressed in %gs: %s", (
                                 suppressed, WINDOW_SECONDS, bounded(message, 120)),
                             None)


def configure(level: str = DEFAULT_LEVEL, file: Path | None = None, *,
              debug: bool = False) -> None:
    """Send the product's log, and every other logger's warnings, to ``file`` (appended)
    or stderr: the product's at ``level``, through one :class:`FloodGuard`."""
    logger, root = logging.getLogger(ROOT), logging.getLogger()
    for owner in (logger, root):
        for handler in list(owner.handlers):
            if owner is logger or isinstance(handler, FloodGuard):
                owner.removeHandler(handler)
                handler.close()
    out: logging.Handler = (logging.FileHandler(file, encoding="utf-8")
                            if file is not None else _Stderr())
    out.setFormatter(_OneLine(_FORMAT))
    root.addHandler(FloodGuard(out, debug=debug))
    root.setLevel(logging.WARNING)  # other libraries: their warnings and errors only
    logger.setLevel(logging.DEBUG if debug else getattr(logging, level.upper()))
    logger.propagate = True  # to the one handler, on the root
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

"""The usage ledger's service (BR-14): how model calls are recorded and read.

The runtime never touches the store: the one agent loop records each model
call through this service, which the gateway holds, and the admin API reads it.
"""

from __future__ import annotations

import datetime
from typing import Any

from labfy_ref.clock import iso, utcnow
from labfy_ref.errors import ErrorCode, RuntimeRefused
from labfy_ref.protocol.exchange import Usage
from labfy_ref.workspace.store import WorkspaceStore
from labfy_ref.workspace.usage import USAGE_RETENTION, UsageRecord

#: ``GET /api/cordis/usage``: records per page, by default and at most.
USAGE_PAGE = 50
MAX_USAGE_PAGE = 500
_MAX_CURSOR_DIGITS = 19  # an SQLite rowid fits in a signed 64-bit integer
_MAX_ROW_ID = 2**63 - 1  # 19 digits can still exceed it (9999999999999999999)


class UsageService:
    """Records model calls and reads them back, newest first, with totals."""

    def __init__(self, store: WorkspaceStore, *, keep: int = USAGE_RETENTION) -> None:
        self._store = store
        self.keep = keep

    def record(self, model: str, usage: Usage, latency_ms: float, outcome: str,
               caller: str) -> None:
        """One model call, ended now: tokens as the provider reported them (None: not said)."""
        self._store.add_usage(UsageRecord(
            0, iso(utcnow()), model, usage.prompt_tokens, usage.completion_tokens,
            usage.cached_tokens, round(max(latency_ms, 0.0), 1), outcome, caller), keep=self.keep)

    def report(self, since: str | None = None, limit: int = USAGE_PAGE,
               cursor: str | None = None) -> dict[str, Any]:
        """The body of ``GET /api/cordis/usage`` (422 VALIDATION_FAILED on a bad parameter).

        ``usage``: at most ``limit`` records at or after ``since``, newest first,
        continuing below ``cursor``; ``totals``: every record at or after
        ``since`` (not just this page), per model and per UTC day;
        ``next_cursor``: the next page's cursor, null on the last page.
        """
        if isinstance(limit, bool) or not isinstance(limit, int) \
                or not 1 <= limit <= MAX_USAGE_PAGE:
            raise RuntimeRefused(ErrorCode.VALIDATION_FAILED, f"limit must be 1-{MAX_USAGE_PAGE}")
        records, below, totals = self._store.usage_report(_since(since), limit, _cursor(cursor))
        return {"usage": [record.as_json() for record in records], "totals": totals,
                "next_cursor": None if below is None else str(below)}


def _since(text: str | None) -> str:
    """``since`` as the ledger writes times; a moment without an offset is UTC."""
    if text is None:
        return ""  # sorts before every time: all records
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=datetime.UTC)
        return iso(moment.astimezone(datetime.UTC))
    except (ValueError, OverflowError):  # not a time, or one UTC cannot hold (year 0)
        raise RuntimeRefused(ErrorCode.VALIDATION_FAILED,
                             "since must be an ISO 8601 time, e.g. 2026-01-31T00:00:00Z") from None


def _cursor(text: str | None) -> int | None:
    """A cursor this service gave out (a record id), or VALIDATION_FAILED."""
    if text is None:
        return None
    if not (text.isascii() and text.isdigit() and len(text) <= _MAX_CURSOR_DIGITS
            and int(text) <= _MAX_ROW_ID):
        raise RuntimeRefused(ErrorCode.VALIDATION_FAILED, "cursor is not one this API gave")
    return int(text)

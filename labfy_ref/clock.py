"""UTC timestamps, written one way everywhere (ISO 8601, millisecond, ``Z``)."""

from __future__ import annotations

import datetime


def utcnow() -> datetime.datetime:
    """Now, in UTC, to the millisecond."""
    now = datetime.datetime.now(datetime.UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def iso(moment: datetime.datetime) -> str:
    """ISO 8601 text of a UTC moment, e.g. ``2026-11-30T09:53:26.123Z``.

    Always three fraction digits (``isoformat()`` alone drops the fraction of a moment on a
    whole second), so the texts of two moments sort as the moments do.
    """
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_iso(text: str) -> datetime.datetime:
    """Inverse of :func:`iso`."""
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))

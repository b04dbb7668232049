"""The words every floor shares: which agent, what a turn may change, a human's answer.

The ground floor (``docs/architecture.md``): it imports nothing of labfy-ref, so the
gateway, the runtime, the bridge and Work name these without climbing to ``config``.
"""

from __future__ import annotations

import enum


class AgentMode(enum.StrEnum):
    """Which agent answers turns."""

    DEMO = "demo"
    LOCAL_MODEL = "local-model"


class PermissionMode(enum.StrEnum):
    """What tool effects a runtime turn may have (GW-07)."""

    READ_ONLY = "read-only"
    WORKSPACE_WRITE = "workspace-write"


class BridgeToggle(enum.StrEnum):
    """May the admin disable, enable and reload the bridge while serving (BR-16)?"""

    LOCKED = "locked"
    UNLOCKED = "unlocked"


class SessionTitles(enum.StrEnum):
    """Where a new engine session's title comes from (BR-18)."""

    MODEL = "model"  # asked of the session's model once its first turn ends
    PREVIEW = "preview"  # its first message, cut to 80 characters (no model call)


#: BR-12: how long a bridge approval waits for its human unless ``--approval-timeout``
#: says otherwise, and the most it may say; an unanswered approval expires (rejected).
DEFAULT_APPROVAL_SECONDS = 300.0
MAX_APPROVAL_SECONDS = 86400.0
#: MC-06: calls that may wait for a model's slots; one more is MODEL_BUSY. As many as the
#: server keeps connections open (SV-09): each waiting call is an open request.
MAX_WAITING_CALLS = 512
#: SV-11: a login session ends after this long without a request...
DEFAULT_IDLE_SECONDS = 8 * 3600.0
#: ...and this long after the login, whatever the activity.
DEFAULT_MAX_SESSION_SECONDS = 7 * 86400.0


class Approval(enum.StrEnum):
    """A human's answer to one approval question: the turn port's, the bridge's, Work's."""

    ALLOWED_ONCE = "allowed-once"
    REJECTED = "rejected"

    @classmethod
    def parse(cls, text: object) -> Approval | None:
        """The answer ``text`` spells, or None for anything else (never raises)."""
        try:
            return cls(text) if isinstance(text, str) else None
        except ValueError:
            return None


#: The answers, as the wire and the CLI spell them.
APPROVALS = tuple(answer.value for answer in Approval)

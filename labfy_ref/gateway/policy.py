"""Policy decisions (GW-07), as small pure functions in one place.

A tool call is allowed by effect: reads always; writes with the
``workspace-write`` permission or a one-time approval of that very call;
``research.prepare`` always (it contacts nothing: it creates a campaign and
the turn pauses). Running a campaign is not a tool at all: it needs a
persistent human grant, checked by :func:`research_allowed`.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Sequence

from labfy_ref.errors import ErrorCode
from labfy_ref.modes import PermissionMode
from labfy_ref.tools.catalog import Effect, ToolSpec
from labfy_ref.workspace.store import Grant


@dataclasses.dataclass(frozen=True, slots=True)
class CallContext:
    """Who is calling, with which permission, whether this call was approved once, and
    at which step of its turn (the model calls made so far: Work keys effects by it)."""

    permission_mode: PermissionMode
    approved_once: bool = False
    step: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class Verdict:
    """Allowed, or refused with a code and a one-line reason."""

    allowed: bool
    code: ErrorCode | None = None
    reason: str = ""


ALLOW = Verdict(True)


def decide(spec: ToolSpec, context: CallContext) -> Verdict:
    """May ``spec`` run in ``context``?"""
    if spec.effect is Effect.WRITE and not (
            context.permission_mode is PermissionMode.WORKSPACE_WRITE or context.approved_once):
        return Verdict(False, ErrorCode.PERMISSION_DENIED,
                        f"{spec.tool_id} needs the workspace-write permission "
                        f"(this turn runs {context.permission_mode.value})")
    return ALLOW


def needs_approval(spec: ToolSpec, context: CallContext) -> bool:
    """Would a one-time approval turn a refusal of ``spec`` into an allowed call (BR-12)?"""
    return spec.effect is Effect.WRITE and not decide(spec, context).allowed


def research_allowed(grants: Sequence[Grant], workspace_id: str,
                     now: datetime.datetime) -> Verdict:
    """A campaign may run only with an active grant of this workspace (RT-08)."""
    if any(grant.active_for(workspace_id, now) for grant in grants):
        return ALLOW
    return Verdict(False, ErrorCode.GRANT_REQUIRED,
                    "no active grant for this campaign in this workspace")

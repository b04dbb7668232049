"""GW-07, RT-08, BR-12: the policy decisions and the grant records, as decision tables.

The gateway tests prove these through turns; here each decision is called
directly with the published catalog's own specs and a real store, so every
branch is pinned in milliseconds (the mutation run of QR-04 runs these per
mutant): which effect needs what, what a one-time approval changes, and which
grant counts (its workspace, unrevoked, unexpired to the millisecond).
"""

from __future__ import annotations

import dataclasses
import datetime
from pathlib import Path

import pytest

from labfy_ref.clock import iso, utcnow
from labfy_ref.errors import ErrorCode, RuntimeRefused
from labfy_ref.gateway.policy import (
    ALLOW,
    CallContext,
    Verdict,
    decide,
    needs_approval,
    research_allowed,
)
from labfy_ref.modes import PermissionMode
from labfy_ref.tools.catalog import Effect, ToolSpec, default_catalog
from labfy_ref.workspace.store import Grant, WorkspaceStore

NOW = datetime.datetime(2026, 11, 30, 12, 0, tzinfo=datetime.UTC)
READ_ONLY, WRITE = PermissionMode.READ_ONLY, PermissionMode.WORKSPACE_WRITE


def _spec(effect: Effect) -> ToolSpec:
    return next(spec for spec in default_catalog().values() if spec.effect is effect)


@pytest.mark.req("GW-07", "BR-12")
@pytest.mark.parametrize(("effect", "mode", "approved", "allowed"), [
    (Effect.READ, READ_ONLY, False, True), (Effect.READ, WRITE, False, True),
    (Effect.READ, READ_ONLY, True, True), (Effect.RESEARCH, READ_ONLY, False, True),
    (Effect.WRITE, READ_ONLY, False, False), (Effect.WRITE, READ_ONLY, True, True),
    (Effect.WRITE, WRITE, False, True), (Effect.WRITE, WRITE, True, True),
])
def test_what_each_effect_needs(effect: Effect, mode: PermissionMode, approved: bool,
                                allowed: bool) -> None:
    spec = _spec(effect)
    context = CallContext(mode, approved_once=approved)
    decision = decide(spec, context)
    assert decision.allowed is allowed
    # An approval helps exactly the writes the permission alone refuses.
    assert needs_approval(spec, context) is (not allowed)
    if allowed:
        assert decision == ALLOW == Verdict(True) and decision.code is None
    else:
        assert decision.code is ErrorCode.PERMISSION_DENIED
        assert decision.reason == (f"{spec.tool_id} needs the workspace-write permission "
                                   "(this turn runs read-only)")


@pytest.mark.req("GW-07")
def test_a_call_is_not_approved_unless_said_so() -> None:
    assert CallContext(READ_ONLY).approved_once is False
    assert not decide(_spec(Effect.WRITE), CallContext(READ_ONLY)).allowed


@pytest.mark.req("GW-07")
def test_a_decision_and_a_context_cannot_be_changed_after_the_fact() -> None:
    # ALLOW is one shared value: were it mutable, one caller could refuse (or allow) for all.
    with pytest.raises(dataclasses.FrozenInstanceError):
        ALLOW.allowed = False  # type: ignore[misc]
    context = CallContext(READ_ONLY)
    with pytest.raises(dataclasses.FrozenInstanceError):
        context.approved_once = True  # type: ignore[misc]
    assert ALLOW.allowed and not context.approved_once


def _grant(workspace: str = "ws_a", expires: datetime.datetime | None = None,
           revoked: bool = False) -> Grant:
    return Grant("grant_1", "camp_1", workspace, iso(NOW - datetime.timedelta(days=1)),
                 iso(expires) if expires else None, iso(NOW) if revoked else None)


@pytest.mark.req("GW-07", "RT-08")
def test_only_an_active_grant_of_this_workspace_lets_research_run() -> None:
    millisecond = datetime.timedelta(milliseconds=1)
    active = [_grant(), _grant(expires=NOW + millisecond)]
    inactive = [_grant("ws_b"), _grant(revoked=True), _grant(expires=NOW),
                _grant(expires=NOW - millisecond), _grant(expires=NOW + millisecond, revoked=True)]
    here = "".join(["ws", "_a"])  # equal to the grant's, not the same object: == not `is`
    for grant in active:
        assert grant.active_for(here, NOW), grant
        assert research_allowed([grant], here, NOW) == ALLOW
        assert research_allowed([*inactive, grant], here, NOW).allowed
    for grant in inactive:
        assert not grant.active_for("ws_a", NOW), grant
    refused = research_allowed(inactive, "ws_a", NOW)
    assert refused == Verdict(False, ErrorCode.GRANT_REQUIRED,
                               "no active grant for this campaign in this workspace")
    assert research_allowed([], "ws_a", NOW).code is ErrorCode.GRANT_REQUIRED
    assert _grant().as_json("ws_a", NOW)["active"] is True
    assert _grant().as_json("ws_b", NOW)["active"] is False


@pytest.mark.req("RT-08", "GW-07")
def test_the_store_keeps_grants_as_history(tmp_path: Path) -> None:
    store = WorkspaceStore(tmp_path / "labfy.sqlite", create=True)
    try:
        later = utcnow() + datetime.timedelta(hours=1)
        camp, other = (store.add_campaign("ws_a", topic, ["q"], []).campaign_id
                       for topic in ("one", "two"))
        first = store.add_grant(camp, "ws_a", None)
        second = store.add_grant(camp, "ws_a", later)
        third = store.add_grant(other, "ws_a", None)
        assert (first.campaign_id, first.workspace_id, first.expires_at,
                first.revoked_at) == (camp, "ws_a", None, None)
        assert second.expires_at == iso(later)
        assert store.grants_for(camp) == [first, second]
        assert store.get_grant(first.grant_id) == first
        assert store.get_grant("grant_missing") is None
        store.revoke_grant(first.grant_id)
        revoked = store.get_grant(first.grant_id)
        assert revoked is not None and revoked.revoked_at is not None
        assert not revoked.active_for("ws_a", utcnow())
        store.revoke_grant(first.grant_id)  # a second revoke keeps the first stamp
        assert store.get_grant(first.grant_id) == revoked
        assert store.get_grant(second.grant_id) == second, "only that grant is revoked"
        newer, older = sorted((second, third), key=lambda g: g.grant_id, reverse=True)
        store.revoke_grant(newer.grant_id)  # an id is compared for equality, not for order
        assert store.get_grant(older.grant_id) == older
        assert store.get_grant(newer.grant_id).revoked_at is not None  # type: ignore[union-attr]
        assert [g.grant_id for g in store.grants_for(camp)] == [first.grant_id,
                                                                     second.grant_id]
        assert store.grants_for("camp_none") == []
        for call in (lambda: store.add_grant(camp, "ws_\ud800", None),
                     lambda: store.grants_for("\udc00"), lambda: store.get_grant("\ud800"),
                     lambda: store.revoke_grant("\ud800")):
            with pytest.raises(RuntimeRefused) as refused:
                call()
            assert refused.value.code is ErrorCode.VALIDATION_FAILED
    finally:
        store.close()

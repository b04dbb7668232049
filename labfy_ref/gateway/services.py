"""Services: the only code that touches the store, the files and the research adapter.

Each service method takes validated arguments and returns the tool's
``data`` (matching its output schema) or raises :class:`ToolError`.
"""

from __future__ import annotations

import datetime
import re
from typing import Any

from labfy_ref.clock import utcnow
from labfy_ref.errors import ErrorCode, RuntimeRefused, ToolError
from labfy_ref.gateway.files import ConfinedFiles
from labfy_ref.gateway.policy import research_allowed
from labfy_ref.gateway.research import NoAdapter, ResearchAdapter, SpecimenAdapter
from labfy_ref.workspace.layout import Workspace, WorkspaceKind
from labfy_ref.workspace.store import Campaign, Grant, WorkspaceStore


class ObjectService:
    """Reads workspace objects."""

    def __init__(self, store: WorkspaceStore) -> None:
        self._store = store

    def list_objects(self, kind: str | None = None, limit: int = 100,
                     match: str | None = None) -> dict[str, Any]:
        """``workspace.list_objects``; ``match``: objects with a word that starts with it."""
        if match is None:
            objects = self._store.list_objects(kind, limit)
        else:
            wanted = _words(match)
            objects = [o for o in self._store.list_objects(kind, MATCH_SCAN)
                       if wanted and any(word.startswith(w) for w in wanted
                                         for word in _words(f"{o.title} {o.body}"))][:limit]
        return {"objects": [{"object_id": o.object_id, "kind": o.kind, "title": o.title}
                            for o in objects]}

    def read_object(self, object_id: str) -> dict[str, Any]:
        """``workspace.read_object``."""
        obj = self._store.get_object(object_id)
        if obj is None:
            raise ToolError(f"unknown object_id {object_id}", code=ErrorCode.OBJECT_NOT_FOUND)
        return {"object_id": obj.object_id, "kind": obj.kind, "title": obj.title,
                "body": obj.body}

    def missing(self, object_ids: list[str]) -> list[str]:
        """Which of ``object_ids`` do not exist (GW-04)."""
        existing = self._store.existing_objects(object_ids)
        return [oid for oid in object_ids if oid not in existing]


#: How many objects a ``match`` listing looks through (creation order).
MATCH_SCAN = 10_000
_WORD = re.compile(r"[^\W_]+")


def _words(text: str) -> set[str]:
    """The casefolded words (letters and digits) of ``text``."""
    return set(_WORD.findall(text.casefold()))


def cited(object_refs: list[str] | None) -> list[str]:
    """The objects a campaign cites, each once, first cited first: a model's repeat of an id
    is harmless (the grammar of a constrained reply cannot forbid it, PR-07 amended)."""
    return list(dict.fromkeys(object_refs or []))


class ResearchService:
    """Campaigns: prepare (no contact), run (only with a grant), read."""

    def __init__(self, store: WorkspaceStore, workspace: Workspace) -> None:
        self._store = store
        self._workspace_id = workspace.workspace_id
        self._adapter: ResearchAdapter = (SpecimenAdapter(store)
                                          if workspace.kind is WorkspaceKind.SPECIMEN
                                          else NoAdapter())

    def prepare(self, topic: str, questions: list[str],
                object_refs: list[str] | None = None) -> dict[str, Any]:
        """``research.prepare``: a PREPARED campaign; nothing is contacted."""
        campaign = self._store.add_campaign(self._workspace_id, topic, questions,
                                            cited(object_refs))
        return {"campaign_id": campaign.campaign_id, "status": campaign.status}

    def prepare_made_since(self, since: str, topic: str, questions: list[str],
                           object_refs: list[str] | None = None) -> list[dict[str, Any]]:
        """What ``prepare`` with these arguments returned for the campaigns it made at or
        after ``since`` (an ISO time): how Work learns whether a crashed call made one."""
        found = self._store.campaigns_like(self._workspace_id, topic, questions,
                                           cited(object_refs), since)
        return [{"campaign_id": campaign_id, "status": "PREPARED"} for campaign_id in found]

    def campaign(self, campaign_id: str) -> Campaign:
        """A campaign of this workspace, or CAMPAIGN_NOT_FOUND."""
        campaign = self._store.get_campaign(campaign_id, self._workspace_id)
        if campaign is None:
            raise ToolError(f"unknown campaign_id {campaign_id}",
                            code=ErrorCode.CAMPAIGN_NOT_FOUND)
        return campaign

    def get_state(self, campaign_id: str) -> dict[str, Any]:
        """``research.get_state``."""
        campaign = self.campaign(campaign_id)
        return {"campaign_id": campaign.campaign_id, "status": campaign.status,
                "evidence": list(campaign.evidence)}

    def run(self, campaign_id: str) -> None:
        """Run a granted campaign through the adapter (idempotent once COMPLETED)."""
        campaign = self.campaign(campaign_id)
        decision = research_allowed(self._store.grants_for(campaign_id), self._workspace_id,
                                    utcnow())
        if not decision.allowed:
            raise RuntimeRefused(ErrorCode.GRANT_REQUIRED, decision.reason)
        if campaign.status != "COMPLETED":
            self._store.complete_campaign(campaign_id, self._adapter.gather(campaign))


class GrantService:
    """Human grants: create, revoke, look up. Reached only from the authenticated API."""

    def __init__(self, store: WorkspaceStore, workspace: Workspace) -> None:
        self._store = store
        self.workspace_id = workspace.workspace_id

    def create(self, campaign_id: str, expires_at: datetime.datetime | None = None) -> Grant:
        """Grant a campaign of this workspace."""
        if self._store.get_campaign(campaign_id, self.workspace_id) is None:
            raise RuntimeRefused(ErrorCode.CAMPAIGN_NOT_FOUND,
                                 f"unknown campaign_id {campaign_id}")
        return self._store.add_grant(campaign_id, self.workspace_id, expires_at)

    def revoke(self, grant_id: str) -> Grant:
        """Revoke a grant (kept as history)."""
        grant = self._store.get_grant(grant_id)
        if grant is None or grant.workspace_id != self.workspace_id:
            raise RuntimeRefused(ErrorCode.GRANT_NOT_FOUND, f"unknown grant {grant_id}")
        self._store.revoke_grant(grant_id)
        revoked = self._store.get_grant(grant_id)
        assert revoked is not None
        return revoked

    def has_active(self, campaign_id: str) -> bool:
        """Does an active grant of this workspace cover ``campaign_id``?"""
        return research_allowed(self._store.grants_for(campaign_id), self.workspace_id,
                                utcnow()).allowed

    def for_campaign(self, campaign_id: str) -> list[Grant]:
        """Every grant of a campaign, history included."""
        return [g for g in self._store.grants_for(campaign_id)
                if g.workspace_id == self.workspace_id]


class FileService:
    """``files.*`` over :class:`ConfinedFiles`."""

    def __init__(self, workspace: Workspace) -> None:
        self.files = ConfinedFiles(workspace.files_dir)

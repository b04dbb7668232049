"""Research adapters (WS-04): canned SPECIMEN evidence, or none at all in a LIVE workspace."""

from __future__ import annotations

import re
from typing import Protocol

from labfy_ref.errors import ErrorCode, ToolError
from labfy_ref.workspace.store import Campaign, WorkspaceStore

MAX_EVIDENCE = 8
_WORD = re.compile(r"[a-z0-9]+")


class ResearchAdapter(Protocol):
    """Gathers evidence for a granted campaign."""

    def gather(self, campaign: Campaign) -> list[dict[str, str]]:
        """The evidence found for ``campaign``."""
        ...


class SpecimenAdapter:
    """Answers from the workspace's canned evidence; never contacts a network."""

    def __init__(self, store: WorkspaceStore) -> None:
        self._store = store

    def gather(self, campaign: Campaign) -> list[dict[str, str]]:
        """Entries whose keywords meet the topic or questions; the general ones otherwise."""
        words = set(_WORD.findall(" ".join((campaign.topic, *campaign.questions)).lower()))
        entries = self._store.all_evidence()
        matched = [(s, e) for keys, s, e in entries if words & set(keys)]
        chosen = matched or [(s, e) for keys, s, e in entries if not keys]
        return [{"source": s, "excerpt": e} for s, e in chosen[:MAX_EVIDENCE]]


class NoAdapter:
    """A LIVE workspace has no research adapter in this reference."""

    def gather(self, campaign: Campaign) -> list[dict[str, str]]:
        """Always refuses."""
        raise ToolError("this LIVE workspace has no research adapter",
                        code=ErrorCode.RESEARCH_ADAPTER_UNAVAILABLE)

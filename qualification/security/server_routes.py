"""Every route of the workspace API, for attack tests parametrized across all entry points."""

from __future__ import annotations

from typing import Any

PROTECTED: list[tuple[str, str, Any]] = [
    ("GET", "/api/v1/session", None),
    ("DELETE", "/api/v1/session", None),
    ("GET", "/api/v1/agent-runtime/status", None),
    ("POST", "/api/v1/agent-runtime/turns", {"message": "hi"}),
    ("GET", "/api/v1/agent-runtime/turns", None),
    ("GET", "/api/v1/agent-runtime/turns/turn_x", None),
    ("POST", "/api/v1/agent-runtime/turns/turn_x/resume", None),
    ("POST", "/api/v1/agent-runtime/turns/turn_x/cancel", None),
    ("GET", "/api/v1/agent-runtime/events?cursor=0", None),
    ("GET", "/api/v1/agent-runtime/tools", None),
    ("GET", "/api/v1/objects", None),
    ("GET", "/api/v1/research/campaigns/camp_x", None),
    ("POST", "/api/v1/grants", {"campaign_id": "camp_x"}),
    ("DELETE", "/api/v1/grants/grant_x", None),
    ("GET", "/api/openapi.json", None),
]
MUTATIONS = [route for route in PROTECTED if route[0] in ("POST", "DELETE", "PATCH", "PUT")]

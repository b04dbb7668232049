"""BR-21, BR-06: a session log written by another release reads, and stays as it was.

Seed 003: "old persona-model headers are ignored as implicit hints without changing the
log". A header (or a settings event) carrying fields this release does not know —
``persona``, ``persona_id``, ``persona_model``, whatever a later release adds — is read;
those fields are never shown and never used as the model; the file is not rewritten.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labfy_ref.ids import new_id
from qualification.conftest import ServerFactory

DEMO = "engine:demo:deterministic-demo"
LEGACY_HEADER: dict[str, Any] = {
    "kind": "header", "version": 1, "created_at": "2026-01-01T00:00:00Z",
    "persona": "Pirate", "persona_id": "per_7", "persona_model": "engine:local:persona-only-model",
    "settings": {"model": DEMO, "permission_mode": "read-only",
                 "persona_model": "engine:local:persona-only-model"}}
LINES: tuple[dict[str, Any], ...] = (
    {"kind": "message", "role": "user", "text": "Ahoy", "at": "2026-01-01T00:00:01Z",
     "persona": "Pirate"},
    {"kind": "message", "role": "assistant", "text": "Arr", "at": "2026-01-01T00:00:02Z"},
    {"kind": "settings", "settings": {"persona_model": "engine:local:other"},
     "at": "2026-01-01T00:00:03Z"},
)


def _plant(root: Path, header: dict[str, Any], *lines: dict[str, Any]) -> tuple[str, str]:
    sid = new_id("ses")
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"{sid}.jsonl"
    path.write_bytes(b"".join(json.dumps(r).encode() + b"\n"
                              for r in ({**header, "session_id": sid}, *lines)))
    return sid, hashlib.sha256(path.read_bytes()).hexdigest()


def _digest(root: Path, sid: str) -> str:
    return hashlib.sha256((root / f"{sid}.jsonl").read_bytes()).hexdigest()


@pytest.mark.req("BR-21", "BR-06")
def test_a_session_with_persona_fields_reads_ignores_them_and_is_left_unchanged(
        specimen: Path, server_factory: ServerFactory) -> None:
    root = specimen / "sessions"
    sid, before = _plant(root, LEGACY_HEADER, *LINES)
    client = server_factory(specimen, bridge=True).client()
    listed = client.get("/api/cordis/sessions").json()["sessions"]
    assert [(s["id"], s["title"]) for s in listed] == [(sid, "Ahoy")]
    opened = client.get(f"/api/cordis/sessions/{sid}")
    assert opened.status_code == 200, opened.text
    session = opened.json()["session"]
    assert session["settings"] == {"model": DEMO, "permission_mode": "read-only"}, \
        "unknown settings are never shown nor used as the model"
    assert [(m["role"], m["text"]) for m in session["messages"]] == [
        ("user", "Ahoy"), ("assistant", "Arr")]
    assert "persona" not in opened.text.casefold()
    assert _digest(root, sid) == before, "reading never rewrites the log"
    turn = client.post(f"/api/cordis/sessions/{sid}/messages", {"text": "What now?"})
    assert turn.status_code == 200, turn.text
    assert _digest(root, sid) != before  # appended to …
    text = (root / f"{sid}.jsonl").read_bytes()
    assert text.startswith(b"".join(json.dumps(r).encode() + b"\n" for r in (
        {**LEGACY_HEADER, "session_id": sid}, *LINES))), "… never rewritten: old bytes stay"
    usage = client.get("/api/cordis/usage").json()["usage"]
    assert {u["model"] for u in usage} == {DEMO}, "the persona's model was never called"


@pytest.mark.req("BR-21", "BR-07")
@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(st.text(min_size=1, max_size=12).filter(
    lambda k: k not in {"model", "permission_mode"}), st.text(max_size=20), max_size=4))
def test_any_unknown_settings_field_is_ignored_and_known_ones_still_checked(
        tmp_path_factory: pytest.TempPathFactory, extra: dict[str, str]) -> None:
    from labfy_ref.bridge.store.projection import check_log, project_settings  # noqa: PLC0415
    from labfy_ref.errors import SessionInvalid  # noqa: PLC0415

    header = {**LEGACY_HEADER, "settings": {"model": DEMO, "permission_mode": "read-only",
                                            **extra}}
    check_log("ses_x", header, [{"kind": "settings", "settings": dict(extra)}])
    assert project_settings(header, [{"kind": "settings", "settings": dict(extra)}]) == {
        "model": DEMO, "permission_mode": "read-only"}
    bad = {**header, "settings": {**header["settings"], "permission_mode": "root"}}
    with pytest.raises(SessionInvalid):
        check_log("ses_x", bad, [])
    missing = {**header, "settings": dict(extra)}
    with pytest.raises(SessionInvalid):
        check_log("ses_x", missing, [])


@pytest.mark.req("BR-21")
def test_a_later_settings_event_changes_the_known_fields_only_and_other_records_none() -> None:
    """Settings in force are the header's, then each settings event's known fields in order:
    a later release's field in the same event is dropped, the known one beside it kept; a
    tool, title or message record (whatever its fields) changes no setting."""
    from labfy_ref.bridge.store.projection import project_settings  # noqa: PLC0415

    events: list[dict[str, Any]] = [
        {"kind": "settings", "settings": {"permission_mode": "workspace-write",
                                          "persona_model": "engine:local:other"}},
        {"kind": "tool", "tool_id": "files.list", "settings": {"model": "engine:local:t"}},
        {"kind": "title", "title": "A title", "settings": {"model": "engine:local:u"}},
        {"kind": "message", "role": "user", "text": "hi"},
        {"kind": "settings", "settings": {"model": "engine:local:later", "theme": "dark"}},
    ]
    assert project_settings(LEGACY_HEADER, events) == {
        "model": "engine:local:later", "permission_mode": "workspace-write"}
    assert project_settings(LEGACY_HEADER, events[:4]) == {
        "model": DEMO, "permission_mode": "workspace-write"}

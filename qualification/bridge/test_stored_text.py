"""AV-02, BR-06, BR-07: session logs hold valid Unicode, and read back whatever they hold.

A record holding a lone surrogate is refused before it is written, so every line
is plain UTF-8. Logs written earlier may hold ``\\ud800`` escapes (older builds
wrote ASCII-escaped lines, lone surrogates included) or bytes that are not UTF-8
(a damaged disk, another tool): those read back with U+FFFD, through the store
and through the HTTP API, instead of failing every request for the session.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labfy_ref.bridge.store.logs import JsonlSessionStore
from labfy_ref.errors import RuntimeRefused
from labfy_ref.ids import new_id
from labfy_ref.text import has_surrogate, scrub
from qualification.conftest import ServerFactory

#: Any text, lone surrogates well represented.
TEXT = st.text(st.one_of(st.characters(codec=None, categories=["Cs"]),
                         st.characters(codec=None)), max_size=40)
#: Raw bytes that can stand inside a JSON string once decoded (no quote, backslash, control).
RAW = st.binary(max_size=40).map(
    lambda raw: bytes(b for b in raw if b >= 0x20 and b not in b'"\\'))
PROPERTY = settings(deadline=None, max_examples=150,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])

HEADER = {"kind": "header", "version": 1, "created_at": "2026-01-01T00:00:00Z",
          "settings": {"model": "engine:demo:deterministic-demo", "permission_mode": "read-only"}}
#: Old lines as they stand on disk (JSON text, escapes literal) and what they read back as.
ESCAPED = (rb'{"kind":"message","role":"user","text":"lone \ud800 high, \uDC00 low, '
           rb'pair \ud83d\ude00 end","at":"2026-01-01T00:00:01Z"}')
ESCAPED_TEXT = "lone \ufffd high, \ufffd low, pair \U0001f600 end"
UNDECODABLE = (b'{"kind":"message","role":"user","text":"caf\xe9 \xed\xa0\x80 \xf0\x9f! \xc0\xaf",'
               b'"at":"2026-01-01T00:00:01Z"}')
UNDECODABLE_TEXT = "caf\ufffd \ufffd\ufffd\ufffd \ufffd! \ufffd\ufffd"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "sessions"
    path.mkdir()
    return path


def _plant(root: Path, sid: str, *lines: bytes) -> None:
    header = json.dumps({**HEADER, "session_id": sid}).encode()
    (root / f"{sid}.jsonl").write_bytes(b"".join(line + b"\n" for line in (header, *lines)))


@pytest.mark.req("AV-02", "BR-06")
@pytest.mark.parametrize("where", ["value", "key", "nested", "header"])
def test_a_record_holding_a_lone_surrogate_is_refused_before_writing(root: Path,
                                                                     where: str) -> None:
    store = JsonlSessionStore(root)
    sid = new_id("ses")
    if where == "header":
        with pytest.raises(RuntimeRefused) as caught:
            store.create(sid, {"title": "x\udfff"})
        assert store.list_ids() == []
    else:
        store.create(sid, {})
        before = (root / f"{sid}.jsonl").read_bytes()
        events: dict[str, dict[str, Any]] = {
            "value": {"kind": "message", "text": "a\ud800b"},
            "key": {"kind": "message", "\udc80": 1},
            "nested": {"kind": "tool", "result": {"lines": ["ok", "\ud83d"]}}}
        with pytest.raises(RuntimeRefused) as caught:
            store.append(sid, events[where])
        assert (root / f"{sid}.jsonl").read_bytes() == before, "nothing written"
    assert (caught.value.code.value, caught.value.status) == ("VALIDATION_FAILED", 422)
    assert "lone surrogate" in caught.value.message


@pytest.mark.req("AV-02", "BR-06")
@PROPERTY
@given(text=TEXT)
def test_any_text_is_stored_exactly_or_refused_whole(root: Path, text: str) -> None:
    store = JsonlSessionStore(root)
    sid = new_id("ses")
    store.create(sid, {})
    before = (root / f"{sid}.jsonl").read_bytes()
    event = {"kind": "message", "text": text, text: "as a key"}
    if has_surrogate(text):
        with pytest.raises(RuntimeRefused):
            store.append(sid, event)
        assert (root / f"{sid}.jsonl").read_bytes() == before
    else:
        store.append(sid, event)
        (root / f"{sid}.jsonl").read_bytes().decode("utf-8")  # strict: plain UTF-8 lines
        assert store.read(sid)[1] == [event]
    store.close()


@pytest.mark.req("AV-02", "BR-07")
def test_stored_surrogate_escapes_and_undecodable_bytes_read_back_with_replacement(
        root: Path) -> None:
    store = JsonlSessionStore(root)
    sid = new_id("ses")
    _plant(root, sid, ESCAPED, UNDECODABLE)
    header, events = store.read(sid)
    assert header["session_id"] == sid
    assert [e["text"] for e in events] == [ESCAPED_TEXT, UNDECODABLE_TEXT]
    store.append(sid, {"kind": "message", "role": "user", "text": "still going"})
    assert [e["text"] for e in store.read(sid)[1]][-1] == "still going"


@pytest.mark.req("AV-02", "BR-07")
@PROPERTY
@given(text=TEXT, raw=RAW)
def test_whatever_an_older_log_holds_reads_back_as_valid_text(root: Path, text: str,
                                                              raw: bytes) -> None:
    store = JsonlSessionStore(root)
    sid = new_id("ses")
    escaped = json.dumps({"kind": "message", "text": text, text: 1}).encode("ascii")
    undecodable = b'{"kind":"message","text":"' + raw + b'"}'
    _plant(root, sid, escaped, undecodable)
    events = store.read(sid)[1]
    assert events == [{"kind": "message", "text": scrub(text), scrub(text): 1},
                      {"kind": "message", "text": raw.decode("utf-8", errors="replace")}]
    assert not has_surrogate(events)
    store.close()


@pytest.mark.req("AV-02", "BR-04", "BR-06")
def test_sessions_holding_invalid_text_are_listed_and_opened_over_http(
        specimen: Path, server_factory: ServerFactory) -> None:
    root = specimen / "sessions"
    escaped, undecodable = new_id("ses"), new_id("ses")
    _plant(root, escaped, ESCAPED, rb'{"kind":"message","role":"assistant","text":"ok \udfff"}')
    _plant(root, undecodable, UNDECODABLE)
    client = server_factory(specimen, bridge=True).client()
    listing = client.get("/api/cordis/sessions")
    assert listing.status_code == 200, listing.text
    titles = {s["id"]: s.get("title") for s in listing.json()["sessions"]}
    assert titles == {escaped: ESCAPED_TEXT, undecodable: UNDECODABLE_TEXT}
    expected = {escaped: [ESCAPED_TEXT, "ok \ufffd"], undecodable: [UNDECODABLE_TEXT]}
    for sid, texts in expected.items():
        response = client.get(f"/api/cordis/sessions/{sid}")
        assert response.status_code == 200, response.text
        response.content.decode("utf-8")  # strict: the answer is valid UTF-8
        assert [m["text"] for m in response.json()["session"]["messages"]] == texts

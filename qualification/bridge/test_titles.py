"""BR-18: a new session's title is asked of its own model once its first turn ends.

The call is a direct one (BR-17's mechanism): the first message alone, under a short
prompt, no tools, no session, no workspace data, a bounded answer, behind every chat turn.
Meanwhile, and whenever the model cannot answer, the title is the local 80-character
preview; a provider that is down is never replaced by another. The title is a record of
the session's log, so it survives a restart and a rebuilt index. ``--session-titles
preview`` makes no call.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fake_provider import Answer, FakeProvider, Scenario
from labfy_ref.bridge.titles import TITLE_MAX_TOKENS, TITLE_PROMPT, clean_title
from qualification.conftest import (
    ProviderFactory,
    ServerFactory,
    composition_with_row,
    local_agent,
)
from qualification.harness import ApiClient, LiveServer, TurnReader, wait_until

FINAL = Answer(content=json.dumps({"type": "final", "text": "The hedge of garden 9."}))
FIRST = "Which bees did we see along the hedge of garden 9 last spring, and how many of each?"


def _titled(provider_factory: ProviderFactory, server_factory: ServerFactory, specimen: Path,
            *direct: Answer, titles: str = "model") -> tuple[FakeProvider, ApiClient]:
    provider = provider_factory(Scenario("titled", (FINAL,), when_exhausted="repeat_last",
                                         direct=direct))
    server = server_factory(specimen, bridge=True, session_titles=titles,
                            **local_agent(provider.base_url))
    return provider, server.client()


def _title(client: ApiClient, session_id: str) -> str:
    listed = client.get("/api/cordis/sessions").json()["sessions"]
    title: str = next(s["title"] for s in listed if s["id"] == session_id)
    return title


def _session(client: ApiClient) -> str:
    session_id: str = client.post("/api/cordis/sessions", {}).json()["session"]["id"]
    return session_id


def _direct(provider: FakeProvider) -> list[dict[str, Any]]:
    """The requests that were no agent round (no agent schema): the title calls."""
    return [r.json() for r in provider.chat_requests()
            if "agent" not in json.dumps(r.json().get("response_format") or {})]


@pytest.mark.req("BR-18", "BR-17", "BR-14")
def test_the_first_turn_is_titled_by_its_own_model_in_one_bounded_direct_call(
        specimen: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    provider, client = _titled(provider_factory, server_factory, specimen,
                               Answer(content='Title: "Bees along the garden 9 hedge".\n'
                                              "(a second line the title leaves out)"))
    session_id = _session(client)
    assert TurnReader(client, session_id, FIRST).join()[-1]["reason"] == "completed"
    wait_until(lambda: _title(client, session_id) == "Bees along the garden 9 hedge",
               timeout=15)
    [asked] = _direct(provider)
    assert asked["messages"] == [{"role": "system", "content": TITLE_PROMPT},
                                 {"role": "user", "content": FIRST}]
    assert asked["max_tokens"] == TITLE_MAX_TOKENS == 32, "eight words, with room"
    assert "tools" not in asked and asked.get("response_format") is None
    records = client.get("/api/cordis/usage", params={"limit": 20}).json()["usage"]
    assert any(r["model"] == "direct:local:fake-model" and r["caller"] == session_id
               and r["outcome"] == "ok" for r in records), records
    assert TurnReader(client, session_id, "And in garden 4?").join()[-1]["reason"] == (
        "completed")
    assert len(_direct(provider)) == 1, "a session is titled once"
    assert _title(client, session_id) == "Bees along the garden 9 hedge"
    session = client.get(f"/api/cordis/sessions/{session_id}").json()["session"]
    assert [m["role"] for m in session["messages"]] == ["user", "assistant"] * 2, \
        "the title is no message"


@pytest.mark.req("BR-18")
def test_the_preview_stands_meanwhile_and_stays_when_the_model_cannot_title(
        specimen: Path, provider_factory: ProviderFactory, server_factory: ServerFactory,
        caplog: pytest.LogCaptureFixture) -> None:
    """The model is shown at most the first 2,000 characters of a long first message; a
    title it cannot give is said in the log (info: the preview stays), never an error."""
    provider, client = _titled(provider_factory, server_factory, specimen,
                               Answer(content="A slow title", delay=1.5),
                               Answer(status=500, content="no"))
    slow = _session(client)
    TurnReader(client, slow, FIRST).join()
    assert _title(client, slow) == FIRST[:80], "the preview, until the model has answered"
    wait_until(lambda: _title(client, slow) == "A slow title", timeout=15)
    failed = _session(client)
    long = ("A second question " * 120)[:2001]
    with caplog.at_level(logging.INFO, logger="labfy_ref.bridge.titles"):
        assert TurnReader(client, failed, long).join()[-1]["reason"] == "completed"
        wait_until(lambda: len(_direct(provider)) == 2, timeout=15)
        wait_until(lambda: any(r["caller"] == failed and r["outcome"] == "MODEL_UNAVAILABLE"
                               for r in client.get("/api/cordis/usage").json()["usage"]))
        wait_until(lambda: any(failed in r.getMessage() for r in caplog.records
                               if r.name == "labfy_ref.bridge.titles"), timeout=15)
    assert _title(client, failed) == long[:80], "the preview stays"
    assert _direct(provider)[1]["messages"][1]["content"] == long[:2000]
    assert [(r.levelno, r.getMessage()) for r in caplog.records
            if r.name == "labfy_ref.bridge.titles"] == [
        (logging.INFO, f"session {failed}: no title from engine:local:fake-model "
                       "(MODEL_UNAVAILABLE); its preview stays")]


@pytest.mark.req("BR-18", "BR-19")
def test_a_provider_that_is_down_leaves_the_preview_and_no_other_titles_it(
        specimen: Path, tmp_path: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    provider = provider_factory(Scenario("up", (FINAL,), when_exhausted="repeat_last",
                                         direct=(Answer(content="Never asked"),)))
    # it answers the turn, then its connection drops when the title is asked
    gone = provider_factory(Scenario("gone", (FINAL,), when_exhausted="repeat_last",
                                     direct=(Answer(drop=True),)))
    providers = tmp_path / "providers.toml"
    providers.write_text(f'[[provider]]\nname = "gone"\nendpoint = "{gone.base_url}"\n'
                         f'model = "fake-model"\n', "utf-8")
    server = server_factory(specimen, bridge=True, session_titles="model",
                            providers=str(providers), **local_agent(provider.base_url))
    client = server.client()
    session_id = client.post("/api/cordis/sessions",
                             {"model": "engine:gone:fake-model"}).json()["session"]["id"]
    assert TurnReader(client, session_id, FIRST).join()[-1]["reason"] == "completed"
    wait_until(lambda: any(r["caller"] == session_id and r["model"].startswith("direct:gone")
                           for r in client.get("/api/cordis/usage").json()["usage"]),
               timeout=15)
    assert _title(client, session_id) == FIRST[:80]
    assert _direct(provider) == [], "the other provider was never asked"


@pytest.mark.req("BR-18")
def test_preview_titles_and_the_demo_agent_make_no_title_call(
        specimen: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    provider, client = _titled(provider_factory, server_factory, specimen,
                               Answer(content="Never asked"), titles="preview")
    session_id = _session(client)
    TurnReader(client, session_id, FIRST).join()
    assert _direct(provider) == [] and _title(client, session_id) == FIRST[:80]

    demo = server_factory(specimen, bridge=True, session_titles="model").client()
    session_id = _session(demo)
    TurnReader(demo, session_id, "What is in this workspace?").join()
    assert _title(demo, session_id) == "What is in this workspace?", "no model to ask"


def _titles_row(tmp_path: Path, value: str) -> Path:
    """The default composition plus, first, a row publishing ``session_titles: value``."""
    return composition_with_row(tmp_path, {
        "id": "titles", "plugin": "qualification.host.plugins_for_tests:SessionTitles",
        "config": {"value": value}})


def _title_asks_settled(server: LiveServer) -> None:
    """On the server's loop, wait for every title ask the engine started (none: at once),
    so a call it made is in the provider's log before the test reads it."""
    async def settle() -> None:
        asks = [t for t in asyncio.all_tasks() if t.get_name().startswith("title ")]
        await asyncio.gather(*asks, return_exceptions=True)

    server.on_loop(settle)


@pytest.mark.req("HO-01", "BR-18")
@pytest.mark.parametrize(("served", "row", "asked"), [
    ("model", None, True),  # the server's own service says model
    ("preview", None, False),
    ("preview", "model", True),  # a row's service is the one the engine row reads
    ("model", "disabled", False),  # anything but "model" is the preview
    ("model", "preview", False),
])
def test_the_engine_row_asks_the_model_for_titles_only_when_its_service_says_model(
        specimen: Path, tmp_path: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory, served: str, row: str | None, asked: bool) -> None:
    """The engine row takes ``session_titles`` from the host by name (an optional service
    the server seeds, which a composition row may publish instead): exactly ``model``
    titles a session by its model; any other value keeps the local preview, no call."""
    provider = provider_factory(Scenario("titled", (FINAL,), when_exhausted="repeat_last",
                                         direct=(Answer(content="Hedge bees"),)))
    composition = {"composition": str(_titles_row(tmp_path, row))} if row else {}
    server = server_factory(specimen, bridge=True, session_titles=served, **composition,
                            **local_agent(provider.base_url))
    client = server.client()
    session_id = _session(client)
    assert TurnReader(client, session_id, FIRST).join()[-1]["reason"] == "completed"
    if asked:
        wait_until(lambda: _title(client, session_id) == "Hedge bees", timeout=15)
    _title_asks_settled(server)
    assert len(_direct(provider)) == (1 if asked else 0)
    assert _title(client, session_id) == ("Hedge bees" if asked else FIRST[:80])


@pytest.mark.req("BR-18", "BR-15")
def test_a_title_is_a_record_of_the_log_it_survives_a_restart_and_a_rebuilt_index(
        specimen: Path, provider_factory: ProviderFactory) -> None:
    provider = provider_factory(Scenario("titled", (FINAL,), when_exhausted="repeat_last",
                                         direct=(Answer(content="Hedge bees"),)))
    options: dict[str, Any] = {"bridge": True, "session_titles": "model",
                               **local_agent(provider.base_url)}
    server = LiveServer(specimen, **options).start()
    try:
        client = server.client()
        session_id = _session(client)
        TurnReader(client, session_id, FIRST).join()
        wait_until(lambda: _title(client, session_id) == "Hedge bees", timeout=15)
    finally:
        server.stop()
    log = (specimen / "sessions" / f"{session_id}.jsonl").read_text("utf-8").splitlines()
    assert [json.loads(line)["kind"] for line in log][-1] == "title"
    for index in (specimen / "sessions").glob(".index.sqlite*"):
        index.unlink()
    again = LiveServer(specimen, **options).start()
    try:
        assert _title(again.client(), session_id) == "Hedge bees"
    finally:
        again.stop()


@pytest.mark.req("BR-18")
@pytest.mark.parametrize(("reply", "title"), [
    ("Bees of the hedge", "Bees of the hedge"),
    ('"Bees of the hedge."', "Bees of the hedge"),
    ("**Title:** Bees of the hedge", "Bees of the hedge"),
    ("titre : Abeilles de la haie", "Abeilles de la haie"),
    ("\n\n  « Albinele gardului »  \nmore", "Albinele gardului"),
    ("", None), ("   \n\"\"\n", None),
    ("x" * 200, "x" * 80),
    ("tab\there\u202eoverride", "tab here override"),
])
def test_a_reply_is_cut_to_one_clean_line(reply: str, title: str | None) -> None:
    assert clean_title(reply) == title


@pytest.mark.req("BR-18", "AV-02")
@given(st.text(st.characters(codec=None)))
def test_any_reply_gives_no_title_or_one_printable_line_of_80_at_most(reply: str) -> None:
    title = clean_title(reply)
    assert title is None or (0 < len(title) <= 80 and title.isprintable()
                             and title == title.strip())

"""BR-14, UI-07: the engine page's usage panel shows what ``GET /api/cordis/usage`` says.

A real bridge server on a scripted fake provider: a session turn of two calls,
a turn whose call fails, then a runtime turn started through the API. The
panel's totals per model and per day, and its last calls, equal the API's,
cell by cell (a count the provider did not report is "—", never 0); the panel
reads the ledger again when a turn ends and when Refresh is pressed. Its empty
and filled states are checked at 390 px and 1280 px.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By

from fake_provider import Answer
from qualification.browser.engine_page import (
    final_action,
    new_session,
    open_engine,
    send,
    tool_call,
    turn_over,
)
from qualification.browser.page import Page
from qualification.conftest import ProviderFactory, ServerFactory
from qualification.harness import LAUNCH_CODE, ApiClient

NOT_REPORTED = "—"


def _count(value: int | None) -> str:
    return NOT_REPORTED if value is None else str(value)


def _totals_rows(totals: list[dict[str, Any]], name: str) -> list[list[str]]:
    return [[t[name], str(t["calls"]), _count(t["prompt_tokens"]),
             _count(t["completion_tokens"]), _count(t["cached_tokens"]), str(t["errors"]),
             str(t["cancelled"])]
            for t in totals]


def _number(value: float) -> str:
    """A JSON number as JavaScript's String() writes it (7.0 is "7")."""
    return str(int(value)) if value == int(value) else repr(value)


def _call_rows(usage: list[dict[str, Any]]) -> list[list[str]]:
    # The time is shown in the reader's locale: every other cell is the API's text.
    return [[r["model"], _count(r["prompt_tokens"]), _count(r["completion_tokens"]),
             _count(r["cached_tokens"]), _number(r["latency_ms"]), r["outcome"], r["caller"]]
            for r in usage]


def _shown(page: Page, testid: str) -> list[list[str]]:
    """The cells of each row of ``testid`` (a row header first), as their exact text."""
    return [[Page.content(cell) for cell in row.find_elements(By.CSS_SELECTOR, "th, td")]
            for row in page.all(testid)]


def _api(client: ApiClient) -> dict[str, Any]:
    response = client.get("/api/cordis/usage?limit=20")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def _panel_equals_api(page: Page, client: ApiClient, calls: int) -> dict[str, Any]:
    """Wait until the panel shows ``calls`` calls; then every cell must be the API's."""
    said = f"{calls} model call{'' if calls == 1 else 's'} recorded"
    page.wait(lambda: page.text("usage-status").startswith(said),
              what=f"{calls} calls in the usage panel")
    body = _api(client)
    assert sum(t["calls"] for t in body["totals"]["by_model"]) == calls
    assert _shown(page, "usage-model-row") == _totals_rows(body["totals"]["by_model"], "model")
    assert _shown(page, "usage-day-row") == _totals_rows(body["totals"]["by_day"], "day")
    assert [row[1:] for row in _shown(page, "usage-call-row")] == _call_rows(body["usage"])
    return body


@pytest.mark.req("BR-14", "UI-07")
def test_the_usage_panel_shows_the_ledgers_totals_and_last_calls(
        page: Page, specimen: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    server = open_engine(page, specimen, provider_factory, server_factory,
                         Answer(content=tool_call("workspace.list_objects")),
                         Answer(content=final_action("Listed.")),
                         Answer(status=500, raw_body='{"error": {"message": "down"}}'),
                         Answer(content=final_action("From the runtime.")))
    client = server.client()
    page.wait(lambda: page.text("usage-status") == "No model call recorded yet.",
              what="an empty ledger said")
    assert page.all("usage-model-row") == page.all("usage-call-row") == []
    page.at_widths("usage-empty")

    session_id = new_session(page)
    send(page, "What is in the workspace?")
    turn_over(page)
    body = _panel_equals_api(page, client, 2)  # read again when the turn ended
    assert {(r["caller"], r["outcome"]) for r in body["usage"]} == {(session_id, "ok")}
    assert all(r["prompt_tokens"] is not None for r in body["usage"]), "the stream said them"

    send(page, "And now?")
    turn_over(page)
    body = _panel_equals_api(page, client, 3)
    assert (body["usage"][0]["outcome"], body["usage"][0]["prompt_tokens"]) == \
        ("MODEL_UNAVAILABLE", None)
    assert _shown(page, "usage-model-row")[0][-2:] == ["1", "0"], "one error, none cancelled"

    turn = client.start_turn("From the runtime, please.")  # not through this page
    client.wait_state(turn["id"], {"COMPLETED"})
    page.click("usage-refresh")
    body = _panel_equals_api(page, client, 4)
    assert body["usage"][0]["caller"] == turn["id"]
    page.at_widths("usage-filled")
    # The end state's screenshot shows the panel.
    page.driver.execute_script("arguments[0].scrollIntoView()", page.find("usage-panel"))


@pytest.mark.req("BR-13", "BR-14", "UI-04")
def test_a_chat_client_completion_leaves_no_session_on_the_page_only_its_usage(
        page: Page, specimen: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    """The official ``openai`` client uses the engine; the engine page shows no session of
    it, before and after a reload — only its provider call, as ``transient``."""
    import openai  # noqa: PLC0415 - only this scenario is a chat client

    server = open_engine(page, specimen, provider_factory, server_factory,
                         Answer(content=final_action("Hello from the engine.")))
    page.wait(lambda: page.text("usage-status") == "No model call recorded yet.",
              what="an empty ledger said")
    chat = openai.OpenAI(base_url=f"{server.url}/api/cordis/v1", api_key=LAUNCH_CODE,
                         max_retries=0, timeout=30)
    try:
        model = chat.models.list().data[0].id
        reply = chat.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "Say hello"}])
    finally:
        chat.close()
    assert reply.choices[0].message.content == "Hello from the engine."
    page.click("usage-refresh")
    body = _panel_equals_api(page, server.client(), 1)
    assert [r["caller"] for r in body["usage"]] == ["transient"]
    assert page.all("session-item") == [], "a chat request is never a listed session"
    page.reload()
    page.wait(lambda: page.find("bridge-status").get_attribute("data-state") == "ready",
              what="the bridge ready")
    _panel_equals_api(page, server.client(), 1)
    assert page.all("session-item") == []
    assert server.client().get("/api/cordis/sessions").json()["sessions"] == []

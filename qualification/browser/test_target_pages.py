"""UI-07 against a conformance target (QR-03): both pages driven through their SPEC §15 hooks
on whatever server ``target`` is — ours in-process, or ``--target-url``'s.

The page logs in with the target's code, runs one turn the kit's provider answers, and
shows the reply as text; the engine page streams a tool call and a reply. Nothing here
reads the target's workspace or process.
"""

from __future__ import annotations

import pytest

from qualification.browser.engine_page import new_session, send, turn_over
from qualification.browser.page import Page
from qualification.browser.runtime_page import wait_state
from qualification.conformance.kit import marker, nonce
from qualification.target import Served

pytestmark = [pytest.mark.conformance, pytest.mark.req("UI-07")]


def _log_in(page: Page, target: Served, path: str) -> None:
    """Open ``path`` logged out (the target outlives one test: drop its cookie), then log in."""
    page.base_url = target.url
    page.open(path)
    page.driver.delete_all_cookies()
    page.reload()
    page.login(target.admin_token)


@pytest.mark.req("UI-01", "UI-02")
def test_the_runtime_page_runs_a_turn_on_the_target(page: Page, model_target: Served) -> None:
    _log_in(page, model_target, "/")
    page.wait(lambda: page.find("composer-input").is_enabled(), what="the composer")
    tag = nonce()
    page.type("composer-input", f"Say it {marker('final', tag)}", submit=True)
    # the target is shared: other clients' turns may appear beside ours, so find ours
    turn = page.wait(lambda: next((t for t in page.all("turn") if tag in Page.content(t)), None),
                     what="our turn")
    wait_state(page, turn, "COMPLETED")
    final = page.find("final-text", within=turn)
    assert Page.content(final) == f"KIT final « ünïcödé » 𝄞 {tag}"


@pytest.mark.req("UI-04", "UI-05")
def test_the_engine_page_streams_a_tool_call_and_a_reply_on_the_target(
        page: Page, model_target: Served) -> None:
    _log_in(page, model_target, "/cordis")
    page.wait(lambda: page.find("bridge-status").get_attribute("data-state") == "ready",
              what="the bridge ready")
    new_session(page)
    send(page, f"What is in notes? {marker('files-list')}")
    turn_over(page)
    (card,) = page.all("tool-call")
    assert "files.list" in Page.content(card)
    assert Page.content(page.find("assistant-message")).strip() == "KIT listed the notes."

"""PR-09 on both pages: a final's checked facts under the answer, a fact nothing read or
said supports marked ``fact-unsupported`` — the answer itself as the model wrote it."""

from __future__ import annotations

from pathlib import Path

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
from qualification.browser.runtime_page import (
    answer_action,
    answer_call,
    logged_in,
    scripted,
    send_message,
    wait_state,
)
from qualification.conftest import ProviderFactory, ServerFactory, local_agent
from qualification.harness import object_id

GARDEN = "Garden 4, 14 June"
ANSWER = "Sixty-two visits in 20 minutes, and 9731 more later."


@pytest.mark.req("PR-09", "PR-08", "UI-01")
def test_the_runtime_page_marks_the_fact_nothing_supports(
        page: Page, specimen: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    garden = object_id(specimen, GARDEN)
    provider = provider_factory(scripted(
        "facts", answer_call("workspace.read_object", object_id=garden),
        answer_action(type="final", text=ANSWER)))
    logged_in(page, server_factory(specimen, **local_agent(provider.base_url)))
    line = page.driver.find_element(By.ID, "workspace-line")
    page.wait(lambda: "guidance: guided" in line.text, what="the profile in force shown")
    turn = wait_state(page, send_message(page, "How busy was garden 4?"), "COMPLETED")
    assert page.text("final-text", within=turn) == ANSWER, "the answer is never rewritten"
    page.wait(lambda: len(page.all("fact-unsupported", within=turn)) == 1,
              what="the unsupported fact marked")
    [mark] = page.all("fact-unsupported", within=turn)
    assert mark.text.startswith("9731") and "not found" in str(mark.get_attribute("title"))
    assert "Sixty-two" in turn.text, "the supported fact is listed, unmarked"
    page.at_widths("a turn with its checked facts")  # no spill, no severe axe finding
    page.screenshot("runtime-facts")


@pytest.mark.req("PR-09", "PR-08", "UI-04")
def test_the_engine_page_marks_the_fact_nothing_supports(
        page: Page, specimen: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    open_engine(page, specimen, provider_factory, server_factory,
                Answer(content=tool_call("workspace.read_object",
                                         object_id=object_id(specimen, GARDEN))),
                Answer(content=final_action(ANSWER)))
    new_session(page)
    context = page.find("session-context")
    page.wait(lambda: "Guidance" in str(context.get_attribute("textContent")), what="guidance")
    assert "guided (relevance" in str(context.get_attribute("textContent"))
    send(page, "How busy was garden 4?")
    turn_over(page)
    page.wait(lambda: len(page.all("fact-unsupported")) == 1,
              what="the unsupported fact marked")
    [mark] = page.all("fact-unsupported")
    assert mark.text.startswith("9731") and "not found" in str(mark.get_attribute("title"))
    assert ANSWER in page.all("assistant-message")[-1].text
    page.at_widths("a reply with its checked facts")
    page.screenshot("engine-facts")

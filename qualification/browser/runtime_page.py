"""Scenario helpers of the runtime page ``/`` (UI-01..UI-03, UI-07), shared by its test files.

A scenario scripts a fake provider whose replies are model actions
(:func:`scripted`, :func:`answer_action`, :func:`answer_call`), logs the page in to a
real workspace server (:func:`logged_in`) and drives it by its SPEC §15 hooks.
"""

from __future__ import annotations

import json
from typing import Any

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement

from fake_provider import Scenario
from qualification.browser.page import Page
from qualification.harness import LAUNCH_CODE, LiveServer


def answer_action(**action: Any) -> dict[str, Any]:
    """One scripted model reply: the action as the model's whole message."""
    return {"content": json.dumps(action)}


def answer_call(tool_id: str, **arguments: Any) -> dict[str, Any]:
    """One scripted model reply calling ``tool_id`` with ``arguments``."""
    return answer_action(type="tool_call", tool_id=tool_id, arguments=arguments)


def scripted(name: str, *answers: dict[str, Any]) -> Scenario:
    """A fake provider scenario answering ``answers`` in order."""
    return Scenario.from_json({"name": name, "answers": list(answers)})


def account(page: Page) -> WebElement:
    """The "Logged in as …" line with its Log out button."""
    return page.driver.find_element(By.ID, "account")


def logged_in(page: Page, server: LiveServer) -> None:
    """Open ``/`` on ``server`` and log in with the launch code."""
    page.base_url = server.url
    page.open("/")
    page.login(LAUNCH_CODE)
    page.wait(lambda: "Logged in as admin (admin)" in account(page).text, what="logged in")


def send_message(page: Page, message: str) -> WebElement:
    """Type a message, press Enter, and return the new turn's element."""
    before = len(page.all("turn"))
    page.type("composer-input", message, submit=True)
    page.wait(lambda: len(page.all("turn")) == before + 1, what="the new turn")
    return page.all("turn")[-1]  # oldest first, like a chat: the newest is last


def wait_state(page: Page, turn: WebElement, state: str, timeout: float = 20) -> WebElement:
    """Wait until ``turn`` is in ``state`` (its ``data-state``); the turn."""
    page.wait(lambda: turn.get_attribute("data-state") == state, timeout=timeout,
              what=f"turn {state}")
    return turn


def unfold(page: Page, turn: WebElement) -> WebElement:
    """Open ``turn``'s folded tool activity (its cards are in the DOM either way); the turn."""
    activity = page.find("turn-activity", within=turn)
    if activity.get_attribute("open") is None:
        activity.find_element(By.TAG_NAME, "summary").click()
    page.wait(lambda: activity.get_attribute("open") is not None, what="the activity open")
    return turn


def card_states(page: Page, turn: WebElement) -> list[tuple[str | None, str | None]]:
    """(tool id, status) of each activity card of ``turn``, in order."""
    return [(c.get_attribute("data-tool-id"), c.get_attribute("data-status"))
            for c in page.all("activity-card", within=turn)]

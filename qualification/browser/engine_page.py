"""Scenario helpers of the engine page ``/cordis`` (UI-04..UI-07), shared by its test files.

A scenario scripts a fake provider with :class:`fake_provider.Answer` replies whose
content is one model action (:func:`final_action`, :func:`tool_call`), starts a real
bridge server on it (:func:`open_engine`), and drives the page by its SPEC §15 hooks.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement

from fake_provider import Answer, Scenario
from qualification.browser.page import Page
from qualification.conftest import ProviderFactory, ServerFactory, local_agent
from qualification.harness import LAUNCH_CODE, LiveServer

# Records what the page hands to navigator.clipboard.writeText; ``fail``: the call rejects,
# as a browser that refuses the clipboard does.
_CLIPBOARD = """
const fail = arguments[0];
window.__copied = [];
navigator.clipboard.writeText = function (text) {
  window.__copied.push(text);
  return fail ? Promise.reject(new DOMException("refused", "NotAllowedError"))
              : Promise.resolve();
};
"""


def final_action(text: str) -> str:
    """A model reply that ends the turn with ``text`` (the action protocol's ``final``)."""
    return json.dumps({"type": "final", "text": text}, ensure_ascii=False)


def tool_call(tool_id: str, **arguments: Any) -> str:
    """A model reply that calls ``tool_id`` with ``arguments``."""
    return json.dumps({"type": "tool_call", "tool_id": tool_id, "arguments": arguments},
                      ensure_ascii=False)


def open_engine(page: Page, specimen: Path, provider_factory: ProviderFactory,
                server_factory: ServerFactory, *answers: Answer) -> LiveServer:
    """A bridge server on a fake provider scripted with ``answers``; the page logged in."""
    provider = provider_factory(Scenario(name="engine-page", answers=answers))
    return log_in_to_engine(page, server_factory(specimen, bridge=True,
                                                 **local_agent(provider.base_url)))


def log_in_to_engine(page: Page, server: LiveServer, *, state: str = "ready") -> LiveServer:
    """Open ``/cordis`` on ``server``, log in, wait until the bridge's line says ``state``."""
    page.base_url = server.url
    page.open("/cordis")
    page.login(LAUNCH_CODE)
    page.wait(lambda: page.find("bridge-status").get_attribute("data-state") == state,
              what=f"the bridge {state}")
    return server


def new_session(page: Page) -> str:
    """Press New session; the new session's id once it is listed and open (in the URL)."""
    before = {item.get_attribute("data-session-id") for item in page.all("session-item")}
    page.click("session-new")

    def created() -> str | None:
        ids = [item.get_attribute("data-session-id") for item in page.all("session-item")]
        fresh = [sid for sid in ids if sid not in before]
        return fresh[0] if fresh and page.driver.current_url.endswith(f"#{fresh[0]}") else None

    return page.wait(created, what="a new session opened")


def send(page: Page, text: str) -> None:
    """Type ``text`` into the composer and press Send."""
    page.type("message-input", text)
    page.click("message-send")


def turn_over(page: Page) -> None:
    """Wait until no turn runs: Send enabled again and Stop hidden."""
    page.wait(lambda: page.find("message-send").is_enabled()
              and not page.all("stop-turn")[0].is_displayed(), timeout=30, what="the turn's end")


def unfold_activity(page: Page) -> None:
    """Open every exchange's folded tool activity (its cards are in the DOM either way)."""
    for activity in page.all("tool-activity"):
        if activity.get_attribute("open") is None:
            activity.find_element(By.TAG_NAME, "summary").click()
    page.wait(lambda: all(a.get_attribute("open") is not None
                          for a in page.all("tool-activity")), what="the activity open")


def call_card(page: Page, call_id: str) -> WebElement:
    """The tool-call card of ``call_id``."""
    return page.driver.find_element(
        By.CSS_SELECTOR, f'[data-testid="tool-call"][data-call-id="{call_id}"]')


def fake_clipboard(page: Page, *, fail: bool) -> None:
    """Record what the page copies (see :func:`copied`); ``fail``: every copy is refused."""
    page.driver.execute_script(_CLIPBOARD, fail)


def copied(page: Page) -> list[str]:
    """What the page handed to the clipboard since :func:`fake_clipboard`."""
    texts: list[str] = page.driver.execute_script("return window.__copied")
    return texts

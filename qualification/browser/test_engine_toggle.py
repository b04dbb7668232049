"""BR-16, UI-04: the admin turns the engine off and on again from its page, no restart.

The engine page offers the toggle to the admin while ``serve`` leaves it unlocked: off
says ``CORDIS_DISABLED`` instead of the sessions and offers to turn it on; on brings the
sessions back, the open one reopened. With ``--bridge-toggle locked`` no button shows.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from selenium.webdriver.common.by import By

from fake_provider import Answer
from qualification.browser.engine_page import (
    final_action,
    log_in_to_engine,
    new_session,
    open_engine,
    send,
    turn_over,
)
from qualification.browser.page import Page
from qualification.conftest import ProviderFactory, ServerFactory


def _bridge(page: Page) -> str | None:
    return page.find("bridge-status").get_attribute("data-state")


def _shown(page: Page) -> set[str]:
    return {testid for testid in ("bridge-disable", "bridge-enable", "bridge-reload")
            if page.all(testid) and page.all(testid)[0].is_displayed()}


@pytest.mark.req("BR-16", "UI-04")
def test_the_admin_turns_the_engine_off_and_on_from_its_page(
        page: Page, specimen: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    server = open_engine(page, specimen, provider_factory, server_factory,
                         Answer(content=final_action("Still here.")))
    session_id = new_session(page)
    send(page, "hello")
    page.wait(lambda: page.find("assistant-message").text == "Still here.", what="the reply")
    turn_over(page)
    page.wait(lambda: _shown(page) == {"bridge-disable", "bridge-reload"}, what="off, reload")

    page.click("bridge-disable")
    page.wait(lambda: _bridge(page) == "refused", what="the engine off")
    assert "CORDIS_DISABLED" in Page.content(page.find("bridge-status"))
    assert not page.driver.find_element(By.ID, "workspace").is_displayed()
    page.wait(lambda: _shown(page) == {"bridge-enable"}, what="only on offered")
    assert server.client().get("/api/cordis/health").json()["state"] == "disabled"
    page.at_widths("engine page: turned off")

    page.click("bridge-enable")
    page.wait(lambda: _bridge(page) == "ready", timeout=30, what="the engine on again")
    page.wait(lambda: page.driver.current_url.endswith(f"#{session_id}")
              and page.find("assistant-message").text == "Still here.",
              what="the open session reopened with its reply")
    assert _shown(page) == {"bridge-disable", "bridge-reload"}


@pytest.mark.req("BR-16")
def test_a_locked_toggle_shows_no_button(page: Page, specimen: Path,
                                         server_factory: ServerFactory) -> None:
    log_in_to_engine(page, server_factory(specimen, bridge=True, bridge_toggle="locked"))
    assert not page.driver.find_element(By.ID, "bridge-toggle").is_displayed()
    assert _shown(page) == set()

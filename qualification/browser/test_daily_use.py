"""UI-09, UI-10, UI-11: the pages in daily use — a chat that reads top to bottom with the
answer first, light and dark, and an engine page whose status says what is true.

Each scenario runs on a real server with the deterministic demo agent or a scripted fake
provider, in every browser the suite drives; the screenshots of both themes go to the
report beside the others.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webelement import WebElement

from fake_provider import Answer, Scenario
from labfy_ref.netutil import free_port
from qualification.browser.engine_page import (
    final_action,
    log_in_to_engine,
    new_session,
    open_engine,
    send,
    tool_call,
    turn_over,
)
from qualification.browser.page import Page
from qualification.browser.runtime_page import logged_in, send_message, unfold, wait_state
from qualification.conftest import (
    ProviderFactory,
    ServerFactory,
    composition_with_slow_row,
    local_agent,
)
from qualification.harness import LAUNCH_CODE, LiveServer

_RECT = "const r = arguments[0].getBoundingClientRect(); return [r.top, r.bottom, r.left];"
_AT_END = ("const b = document.getElementById(arguments[0]);"
           " return b.scrollTop + b.clientHeight >= b.scrollHeight - 60;")
_SCROLL_TOP = "return document.getElementById(arguments[0]).scrollTop;"


def _rect(page: Page, element: WebElement) -> tuple[float, float, float]:
    top, bottom, left = page.driver.execute_script(_RECT, element)
    return float(top), float(bottom), float(left)


def _active_testid(page: Page) -> str | None:
    value: str | None = page.driver.execute_script(
        "return document.activeElement && document.activeElement.dataset.testid || null")
    return value


def _theme(page: Page) -> str:
    value: str = page.driver.execute_script("return document.documentElement.dataset.theme || ''")
    return value


def _background(page: Page) -> str:
    value: str = page.driver.execute_script(
        "return getComputedStyle(document.body).backgroundColor")
    return value


# -- the runtime page: a chat ------------------------------------------------------------------

@pytest.mark.req("UI-09", "UI-08", "RT-10")
def test_the_runtime_page_reads_like_a_chat_with_the_answer_first(
        page: Page, specimen: Path, server_factory: ServerFactory) -> None:
    server = server_factory(specimen, bridge=True)
    logged_in(page, server)
    page.find("engine-link")  # with the bridge on, the engine page is one click away
    first = wait_state(page, send_message(page, "Which bees visit lavender?"), "COMPLETED")
    second = wait_state(page, send_message(page, "Tell me about the nest boxes."), "COMPLETED")
    turns = page.all("turn")
    assert turns == [first, second], "oldest first: the conversation reads top to bottom"
    answer = page.find("final-text", within=second)
    assert "Nest boxes, 12 July" in answer.text and answer.text.startswith("Demo agent")
    activity = page.find("turn-activity", within=second)
    assert activity.get_attribute("open") is None, "what the agent did is folded"
    calls = len(server.client().turn(str(second.get_attribute("data-turn-id")))["tool_calls"])
    assert f"What the agent did · {calls} tool calls" in activity.text
    assert _rect(page, answer)[0] < _rect(page, activity)[0], "the answer before the tools"
    assert page.driver.execute_script(_AT_END, "turns-panel"), "it followed the new answer"
    cards = page.all("activity-card", within=second)
    assert len(cards) == calls and not cards[0].is_displayed(), "folded, still in the DOM"
    unfold(page, second)
    assert cards[0].is_displayed()
    composer = page.find("composer-input")
    assert _rect(page, composer)[0] > _rect(page, answer)[0], "the composer under the answer"
    page.at_widths("runtime page: a chat of two turns")
    page.set_width(390)
    page.wait(lambda: page.inner_width() == 390, what="390 px")
    objects = page.driver.find_element(By.CSS_SELECTOR, ".objects-panel")
    turns_panel = page.driver.find_element(By.CSS_SELECTOR, ".turns-panel")
    assert _rect(page, turns_panel)[0] < _rect(page, objects)[0], \
        "at 390 px the conversation comes before the objects"
    page.set_width(1280)


@pytest.mark.req("UI-09", "RT-08")
def test_an_approval_is_brought_into_view_and_focused_and_scrolling_up_stops_following(
        page: Page, specimen: Path, server_factory: ServerFactory) -> None:
    server = server_factory(specimen)
    logged_in(page, server)
    page.wait(lambda: "Deterministic demo agent" in page.text("mode-label"), what="the status")
    assert not page.all("engine-link")[0].is_displayed(), "no bridge: no link to a dead page"
    for index in range(4):  # enough to scroll
        wait_state(page, send_message(page, f"Where is the study area? ({index})"), "COMPLETED")
    page.driver.execute_script("document.getElementById('turns-panel').scrollTop = 0")
    page.find("composer-input").send_keys("half typed")
    # a turn started elsewhere (the API) appears while the reader reads the top
    started = server.client().start_turn("How is each survey walk timed?")
    page.wait(lambda: len(page.all("turn")) == 5, what="the turn from elsewhere")
    server.client().wait_state(str(started["id"]), {"COMPLETED"})
    page.wait(lambda: page.all("turn")[-1].get_attribute("data-state") == "COMPLETED",
              what="it completed")
    assert page.driver.execute_script(_SCROLL_TOP, "turns-panel") == 0, "scrolled up: it stays"
    page.find("composer-input").clear()
    paused = send_message(page, "Check whether the early ivy bee record is real.")
    wait_state(page, paused, "AUTHORIZATION_REQUIRED")
    authorize = page.find("authorize-resume", within=paused)
    page.wait(lambda: _active_testid(page) == "authorize-resume", what="the approval focused")
    top, bottom, _ = _rect(page, authorize)
    height = page.driver.execute_script("return window.innerHeight")
    assert top >= 0 and bottom <= height, "the approval is in view"
    authorize.send_keys(Keys.ENTER)  # the keyboard grants it
    wait_state(page, paused, "COMPLETED")


@pytest.mark.req("UI-09", "RT-05")
def test_escape_stops_the_running_turn(
        page: Page, specimen: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    provider = provider_factory(Scenario(name="slow", answers=(
        Answer(content=final_action("late"), delay=30),)))
    server = server_factory(specimen, **local_agent(provider.base_url))
    logged_in(page, server)
    running = send_message(page, "Take your time")
    wait_state(page, running, "RUNNING")
    page.find("composer-input").send_keys(Keys.ESCAPE)
    wait_state(page, running, "CANCELLED")


# -- light and dark ----------------------------------------------------------------------------

def _themes(page: Page, name: str) -> None:
    """Light, then dark by the toggle, remembered across a reload; axe clean in both (its
    colour-contrast rule holds AA); a screenshot of each for the report."""
    toggle = page.find("theme-toggle")
    assert toggle.get_attribute("aria-pressed") == "false", "the system's light by default"
    light = _background(page)
    page.at_widths(f"{name}: light")
    page.screenshot(f"{name}-light")
    toggle.click()
    page.wait(lambda: _theme(page) == "dark", what="the dark theme")
    assert toggle.get_attribute("aria-pressed") == "true"
    assert _background(page) != light
    page.reload()
    page.wait(lambda: _theme(page) == "dark", what="the dark theme remembered")
    page.at_widths(f"{name}: dark")
    page.screenshot(f"{name}-dark")
    page.find("theme-toggle").click()
    page.wait(lambda: _theme(page) == "light", what="back to light")


@pytest.mark.req("UI-10", "UI-08")
def test_the_runtime_page_in_light_and_dark(page: Page, specimen: Path,
                                           server_factory: ServerFactory) -> None:
    server = server_factory(specimen)
    logged_in(page, server)
    turn = wait_state(page, send_message(page, "Check the early ivy bee record."),
                      "AUTHORIZATION_REQUIRED")
    unfold(page, turn)
    _themes(page, "runtime")


@pytest.mark.req("UI-10", "UI-08")
def test_the_engine_page_in_light_and_dark(
        page: Page, specimen: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    open_engine(page, specimen, provider_factory, server_factory,
                Answer(content=tool_call("files.write", path="a.txt", content="one")))
    new_session(page)
    send(page, "write a file")
    page.find("approval-allow-once")
    _themes(page, "engine")


# -- the engine page says what is true ---------------------------------------------------------

def _status(page: Page, testid: str) -> tuple[str | None, str]:
    element = page.driver.find_element(By.CSS_SELECTOR, f'[data-testid="{testid}"]')
    return element.get_attribute("data-state"), Page.content(element)


@pytest.mark.req("UI-11", "UI-05", "BR-12")
def test_the_engine_page_says_working_then_waiting_for_you_then_ready(
        page: Page, specimen: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    open_engine(page, specimen, provider_factory, server_factory,
                Answer(content=tool_call("files.write", path="a.txt", content="one"), delay=1),
                Answer(content=final_action("Written.")))
    state, text = _status(page, "bridge-status")
    assert state == "ready" and text.startswith("Ready · engine:local:"), text
    new_session(page)
    send(page, "write a file")
    page.wait(lambda: _status(page, "turn-status")[0] == "working", what="working")
    assert "working" in _status(page, "turn-status")[1]
    allow = page.find("approval-allow-once")
    page.wait(lambda: _status(page, "turn-status")[0] == "approval", what="waiting for you")
    assert "Waiting for your approval" in _status(page, "turn-status")[1]
    page.wait(lambda: _active_testid(page) == "approval-allow-once", what="the approval focused")
    top, bottom, _ = _rect(page, allow)
    assert top >= 0 and bottom <= page.driver.execute_script("return window.innerHeight")
    allow.send_keys(Keys.ENTER)
    page.wait(lambda: page.find("assistant-message").text == "Written.", what="the reply")
    turn_over(page)
    assert _status(page, "turn-status")[0] == "idle"
    title = page.driver.find_element(By.ID, "chat-title")
    page.wait(lambda: title.text == "write a file", what="the session titled by its message")


@pytest.mark.req("HO-07", "UI-04")
def test_the_engine_page_says_starting_then_shows_the_sessions(
        page: Page, specimen: Path, tmp_path: Path) -> None:
    slow = composition_with_slow_row(tmp_path, seconds=4)
    server = LiveServer(specimen, bridge=True, composition=str(slow)).start(settled=False)
    try:
        page.base_url = server.url
        page.open("/cordis")
        page.login(LAUNCH_CODE)
        page.wait(lambda: _status(page, "bridge-status")[0] == "starting",
                  what="the bridge said starting")
        assert "CORDIS_STARTING" in _status(page, "bridge-status")[1]
        assert not page.driver.find_element(By.ID, "workspace").is_displayed()
        page.at_widths("engine page: starting")
        page.wait(lambda: _status(page, "bridge-status")[0] == "ready", timeout=30,
                  what="ready once settled")
        page.find("session-new")
    finally:
        server.stop()


@pytest.mark.req("UI-11", "MC-02")
def test_a_model_that_does_not_answer_is_said_with_its_reason(
        page: Page, specimen: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    provider = provider_factory(Scenario(name="down", answers=()))
    server = server_factory(specimen, bridge=True, **local_agent(provider.base_url))
    provider.stop()  # gone before the page asks
    log_in_to_engine(page, server, state="model-unavailable")
    text = _status(page, "bridge-status")[1]
    assert text.startswith("Model unavailable: ") and "connection" in text, text
    page.at_widths("engine page: model unavailable")


@pytest.mark.req("UI-11", "BR-05", "BR-14")
def test_stop_right_after_send_never_duplicates_the_message(
        page: Page, specimen: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    server = open_engine(page, specimen, provider_factory, server_factory,
                         Answer(content=final_action("slow " * 100), chunk_chars=2,
                                chunk_delay=0.05),
                         Answer(content=final_action("second")))
    session_id = new_session(page)
    page.type("message-input", "only once")
    page.click("message-send")
    page.click("stop-turn")  # at once: before or just after the stream began
    turn_over(page)
    assert page.find("message-input").get_attribute("value") == "", "sent: never put back"
    assert "ABORTED" not in Page.content(page.driver.find_element(By.ID, "composer"))
    messages = server.client().get(f"/api/cordis/sessions/{session_id}").json()["session"][
        "messages"]
    assert [m["text"] for m in messages if m["role"] == "user"] == ["only once"]
    usage = server.client().get("/api/cordis/usage").json()["totals"]["by_model"]
    assert [(t["errors"], t["cancelled"]) for t in usage] in ([], [(0, 1)]), usage
    row = page.wait(lambda: page.all("usage-model-row"), what="the usage row") \
        if usage else None
    if row:
        assert row[0].find_elements(By.TAG_NAME, "td")[-1].text == "1", "its own column"


@pytest.mark.req("UI-11", "BR-10")
def test_the_model_selector_lists_the_engines_models_and_waits_for_the_turn(
        page: Page, specimen: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    provider = provider_factory(Scenario(name="two-models", answers=(
        Answer(content=final_action("slow " * 60), chunk_chars=2, chunk_delay=0.05),),
        models=("fake-model", "other-model")))
    server = log_in_to_engine(page, server_factory(specimen, bridge=True,
                                                   **local_agent(provider.base_url)))
    selector = page.find("model-select")
    options = selector.find_elements(By.TAG_NAME, "option")
    served: list[dict[str, Any]] = server.client().get("/api/cordis/models").json()["models"]
    assert [o.get_attribute("value") for o in options] == [m["id"] for m in served]
    assert all(m["provider"] in o.text for o, m in zip(options, served, strict=True))
    session_id = new_session(page)
    send(page, "Take your time.")
    page.wait(lambda: not selector.is_enabled(), what="disabled during the turn")
    turn_over(page)
    assert selector.is_enabled()
    other = served[-1]["id"]
    selector.find_element(By.CSS_SELECTOR, f'option[value="{other}"]').click()
    page.wait(lambda: server.client().get(f"/api/cordis/sessions/{session_id}").json()[
        "session"]["settings"]["model"] == other, what="the session's model changed")
    page.at_widths("engine page: the model selector")


@pytest.mark.req("BR-19", "UI-11")
def test_the_selector_lists_every_provider_and_a_down_one_is_said_not_replaced(
        page: Page, specimen: Path, tmp_path: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    local = provider_factory(Scenario(name="local", answers=(
        Answer(content=final_action("From local.")),), when_exhausted="repeat_last"))
    providers = tmp_path / "providers.toml"
    providers.write_text(f'[[provider]]\nname = "gone"\nendpoint = '
                         f'"http://127.0.0.1:{free_port()}"\nmodel = "absent"\n', "utf-8")
    server = log_in_to_engine(page, server_factory(specimen, bridge=True,
                                                   providers=str(providers),
                                                   **local_agent(local.base_url)))
    selector = page.find("model-select")
    texts = [o.text for o in selector.find_elements(By.TAG_NAME, "option")]
    assert texts == ["fake-model · local", "absent · gone (unavailable)"], texts
    session_id = new_session(page)
    selector.find_element(By.CSS_SELECTOR, 'option[value="engine:gone:absent"]').click()
    page.wait(lambda: _status(page, "bridge-status")[0] == "model-unavailable",
              what="the chosen provider said down")
    assert _status(page, "bridge-status")[1].startswith("Model unavailable: gone: ")
    page.at_widths("engine page: a provider down")
    selector.find_element(By.CSS_SELECTOR, 'option[value="engine:local:fake-model"]').click()
    page.wait(lambda: _status(page, "bridge-status")[0] == "ready", what="ready again")
    send(page, "hello")
    page.wait(lambda: page.find("assistant-message").text == "From local.", what="the reply")
    assert server.client().get(f"/api/cordis/sessions/{session_id}").json()["session"][
        "settings"]["model"] == "engine:local:fake-model"


@pytest.mark.req("BR-18", "UI-04")
def test_a_new_session_takes_the_title_its_model_gives(
        page: Page, specimen: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    provider = provider_factory(Scenario(name="titled", answers=(
        Answer(content=final_action("Seen.")),), when_exhausted="repeat_last",
        direct=(Answer(content="Hedge bees of garden 9", delay=0.5),)))
    log_in_to_engine(page, server_factory(specimen, bridge=True, session_titles="model",
                                          **local_agent(provider.base_url)))
    session_id = new_session(page)
    send(page, "Which bees did we see along the hedge of garden 9?")
    turn_over(page)
    title = page.driver.find_element(By.ID, "chat-title")
    page.wait(lambda: title.text == "Hedge bees of garden 9", timeout=20,
              what="the model's title in the conversation's heading")
    item = page.driver.find_element(
        By.CSS_SELECTOR, f'[data-testid="session-item"][data-session-id="{session_id}"]')
    assert "Hedge bees of garden 9" in item.text

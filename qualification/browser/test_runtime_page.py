"""Browser scenarios of the runtime page ``/`` (UI-01..UI-03, UI-07, UI-08), on every browser.

A real workspace server (thread) on a temporary SPECIMEN workspace talks to a
real fake provider; the page is driven only through the hooks of SPEC §15 and
what a user sees. Hostile content comes from where it really comes from: the
model's final text and tool arguments (a scripted provider), an object and
canned evidence written with the workspace's own store, a file in ``files/``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webelement import WebElement

from labfy_ref.server.serve import bind_socket
from labfy_ref.workspace import open_workspace
from qualification import harness
from qualification.browser.page import Page
from qualification.browser.runtime_page import (
    account,
    answer_action,
    answer_call,
    card_states,
    logged_in,
    scripted,
    send_message,
    unfold,
    wait_state,
)
from qualification.conftest import ProviderFactory, ServerFactory, local_agent, scenario
from qualification.harness import LAUNCH_CODE

# Each payload sets window.__pwned if it ever runs; the preload watcher also counts the
# CSP violation an inline handler would raise, so markup that was parsed fails either way.
PAYLOADS = (
    '<img src=x onerror="window.__pwned=1">',
    '<svg onload="window.__pwned=1"><circle r="4"/></svg>',
    "<svg><script>window.__pwned=1</script></svg>",
    '<iframe srcdoc="<script>parent.__pwned=1</script>"></iframe>',
    '<iframe src="javascript:parent.__pwned=1"></iframe>',
    "<style>main{display:none}</style>",
    '<a href="javascript:window.__pwned=1">a javascript: link</a>',
    '<a href="data:text/html,<script>window.__pwned=1</script>">a data: link</a>',
    "[a Markdown link](javascript:window.__pwned=1)",
    "![a Markdown image](data:image/svg+xml,<svg onload=window.__pwned=1>)",
    "<script>window.__pwned=1</script>",
    '<b onmouseover="window.__pwned=1">bold</b>',
    "line\u2028separator\u2029paragraph\u0085next",
)
HOSTILE = " ".join(PAYLOADS)
INJECTED = """
const root = document.querySelector("main");
const tags = root.querySelectorAll("img, svg, iframe, style, a, script, b, object, embed");
const handlers = [...root.querySelectorAll("*")].filter(
  (e) => [...e.attributes].some((a) => a.name.startsWith("on")));
return tags.length + handlers.length;
"""
COUNT_POLLS = """
window.__polls = 0;
const original = window.fetch;
window.fetch = function (...parts) {
  if (String(parts[0]).includes("/agent-runtime/events")) window.__polls += 1;
  return original.apply(window, parts);
};
"""
SELECT = """
const range = document.createRange();
range.selectNodeContents(arguments[0]);
const selection = window.getSelection();
selection.removeAllRanges();
selection.addRange(range);
return selection.toString();
"""


def _still_attached(element: WebElement) -> bool:
    try:
        element.is_enabled()
    except StaleElementReferenceException:
        return False
    return True


@pytest.mark.req("UI-01", "UI-03", "SV-03")
def test_login_a_tool_call_and_its_card(page: Page, specimen: Path,
                                        provider_factory: ProviderFactory,
                                        server_factory: ServerFactory) -> None:
    provider = provider_factory(scenario("read-then-final"))
    server = server_factory(specimen, **local_agent(provider.base_url))
    page.base_url = server.url
    page.open("/")
    assert page.find("login-code").get_attribute("type") == "password"
    page.at_widths("login form")
    page.login("not-the-code")
    refused = page.driver.find_element(By.CSS_SELECTOR, ".login-error")
    page.wait(lambda: refused.text.startswith("UNAUTHENTICATED: "), what="a refused code")
    assert "not-the-code" not in page.driver.current_url
    page.login(LAUNCH_CODE)
    page.wait(lambda: "Logged in as admin (admin)" in account(page).text, what="logged in")
    assert LAUNCH_CODE not in page.driver.current_url
    page.wait(lambda: page.text("mode-label") == "Local agent · fake-model", what="mode label")
    page.at_widths("logged in, no turn yet")

    # UI-03: the references offered are exactly the workspace's objects, inserted verbatim.
    objects = server.client().get("/api/v1/objects").json()["objects"]
    page.wait(lambda: len(page.all("object-ref")) == len(objects), what="object list")
    offered = [str(ref.get_attribute("data-object-id")) for ref in page.all("object-ref")]
    assert sorted(offered) == sorted(o["object_id"] for o in objects)
    chosen = objects[3]["object_id"]
    page.type("composer-input", "Summarise")
    field = page.find("composer-input")
    ActionChains(page.driver).key_down(Keys.SHIFT).send_keys(Keys.ENTER).key_up(Keys.SHIFT) \
        .send_keys("the notes about").perform()
    assert page.all("turn") == [], "Shift+Enter is a new line, not a send"
    next(r for r in page.all("object-ref") if r.get_attribute("data-object-id") == chosen).click()
    message = field.get_attribute("value")
    assert message == f"Summarise\nthe notes about {chosen} "

    field.send_keys(Keys.ENTER)  # Enter sends
    page.wait(lambda: len(page.all("turn")) == 1, what="the turn")
    turn = wait_state(page, page.all("turn")[0], "COMPLETED")
    turn_id = turn.get_attribute("data-turn-id")
    assert server.client().get(f"/api/v1/agent-runtime/turns/{turn_id}").json()[
        "turn"]["message"] == message
    sent = provider.chat_requests()[0].json()["messages"]
    assert any(chosen in str(m.get("content")) for m in sent if m["role"] == "user")
    assert card_states(page, turn) == [("workspace.list_objects", "ok")]
    assert not page.all("activity-card", within=turn)[0].is_displayed(), "folded at first"
    card = page.find("activity-card", within=unfold(page, turn))
    assert "workspace.list_objects" in card.text and "Done" in card.text
    assert "objects:" in card.text, "the result summary names what came back"
    final = page.find("final-text", within=turn)
    assert Page.content(final) == "The workspace holds specimen notes. Ünïcödé ✓ 𝄞"
    assert page.all("cancel-turn", within=turn)[0].is_displayed() is False
    page.at_widths("completed turn with its card")

    # The refresh updates in place: a selection in the final text survives two periods.
    assert page.driver.execute_script(SELECT, final) == Page.content(final)
    page.driver.execute_script(COUNT_POLLS)
    page.wait(lambda: page.driver.execute_script("return window.__polls") >= 3, timeout=10,
              what="three event polls")
    selected = page.driver.execute_script("return window.getSelection().toString()")
    assert selected == Page.content(final)
    assert _still_attached(turn) and _still_attached(final)
    # (logging out is the end of the restart scenario, so this one ends on the completed turn)


def _hostile_workspace(specimen: Path) -> tuple[str, str]:
    """Hostile object, 1 MiB object title, canned evidence and a file; (object id, file)."""
    workspace = open_workspace(specimen)
    store = workspace.open_store()
    try:
        hostile = store.add_object("note", "Hostile note " + HOSTILE, "Body " + HOSTILE)
        big = (HOSTILE + " ") * (1024 * 1024 // (len(HOSTILE) + 1) + 1)
        store.add_object("source", big[: 1024 * 1024], "a title of one mebibyte")
        store.add_evidence(["pwn"], "Evidence source " + PAYLOADS[0], "Excerpt " + HOSTILE)
    finally:
        store.close()
    (workspace.files_dir / "hostile.html").write_text(("<!-- file -->" + HOSTILE + "\n") * 200,
                                                      "utf-8")
    return hostile.object_id, "hostile.html"


@pytest.mark.req("UI-02", "RT-08", "GW-07")
def test_hostile_content_stays_inert_through_authorize_and_resume(
        page: Page, specimen: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    object_id, file_name = _hostile_workspace(specimen)
    final_text = ((HOSTILE + "\n") * 200)[:60000]
    topic = 'pwn <img src=x onerror="window.__pwned=1"> <svg onload="window.__pwned=1">'
    question = HOSTILE[:480]
    provider = provider_factory(scripted(
        "hostile",
        answer_call("workspace.list_objects", kind="note"),
        answer_call("workspace.read_object", object_id=object_id),
        answer_call("files.read", path=file_name),
        answer_call("files.write", path="pwn.html", content=HOSTILE * 50),
        answer_call("research.prepare", topic=topic, questions=[question]),
        answer_action(type="final", text=final_text)))
    server = server_factory(specimen, **local_agent(provider.base_url))
    logged_in(page, server)
    page.wait(lambda: len(page.all("object-ref")) >= 14, what="object list")

    turn = send_message(page, "Read the hostile note and file " + HOSTILE)
    wait_state(page, turn, "AUTHORIZATION_REQUIRED")
    page.wait(lambda: len(page.all("activity-card", within=turn)) == 5, what="five cards")
    unfold(page, turn)
    assert card_states(page, turn) == [
        ("workspace.list_objects", "ok"), ("workspace.read_object", "ok"),
        ("files.read", "ok"), ("files.write", "refused"), ("research.prepare", "ok")]
    # A refused write looks refused: its own label, code and colour, not a "Done" card.
    cards = page.all("activity-card", within=turn)
    write, done = cards[3], cards[2]
    assert "Refused" in write.text and "PERMISSION_DENIED" in write.text
    assert "Done" not in write.text
    colour = "return getComputedStyle(arguments[0]).borderLeftColor"
    assert page.driver.execute_script(colour, write) != page.driver.execute_script(colour, done)
    # The authorization says what it authorizes, as text.
    authorize = page.find("authorize-resume", within=turn)
    box = turn.find_element(By.CSS_SELECTOR, ".authorization")
    page.wait(lambda: "Topic" in box.text, what="the campaign's details")
    shown = Page.content(box)
    assert topic in shown and question in shown
    assert "SPECIMEN adapter" in shown and "never contacts a network" in shown
    assert page.driver.execute_script(INJECTED) == 0
    page.at_widths("paused for authorization")

    authorize.click()
    wait_state(page, turn, "COMPLETED")
    assert len(page.all("turn")) == 1 and _still_attached(turn), "the same turn resumed"
    page.wait(lambda: len(page.all("activity-card", within=turn)) == 6, what="six cards")
    assert card_states(page, turn)[-1] == ("research.get_state", "ok")
    assert Page.content(page.find("final-text", within=turn)) == final_text
    page.wait(lambda: "Granted" in box.text and "Revoke" in box.text, what="the grant shown")

    # A grant can be revoked from where it was given.
    box.find_element(By.CSS_SELECTOR, ".grant button").click()
    page.wait(lambda: "Revoked grant" in box.text, what="the grant revoked")
    campaign_id = server.client().get(
        f"/api/v1/agent-runtime/turns/{turn.get_attribute('data-turn-id')}").json()[
        "turn"]["authorization"]["campaign_id"]
    grants = server.client().get(f"/api/v1/research/campaigns/{campaign_id}").json()[
        "campaign"]["grants"]
    assert [g["active"] for g in grants] == [False]

    # A mebibyte typed into the composer is refused by the server, shown with its code.
    page.type("composer-input", (HOSTILE * 9000)[: 1024 * 1024])
    page.click("composer-send")
    error = page.driver.find_element(By.ID, "composer-error")
    page.wait(lambda: error.text, what="the composer's error")
    assert re.match(r"^[A-Z_]+: ", error.text), error.text
    assert len(page.all("turn")) == 1

    assert page.driver.execute_script(INJECTED) == 0
    assert page.driver.execute_script("return typeof window.__pwned") == "undefined"
    assert len(provider.chat_requests()) == 6
    page.at_widths("completed with hostile content")


@pytest.mark.req("UI-01", "PR-03", "RT-05")
def test_protocol_error_then_a_running_turn_cancelled(
        page: Page, specimen: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    prose = 'Sure! {"type":"final","text":"x"}'
    fenced = '```json\n{"type":"final","text":"x"}\n```'
    provider = provider_factory(scripted(
        "malformed-then-slow", {"content": prose}, {"content": fenced},
        {"content": json.dumps({"type": "final", "text": "too late"}), "delay": 30}))
    server = server_factory(specimen, **local_agent(provider.base_url))
    logged_in(page, server)

    broken = send_message(page, "Answer in prose, please")
    wait_state(page, broken, "MODEL_PROTOCOL_ERROR")
    error = page.find("turn-error", within=broken)
    assert error.text.startswith("MODEL_PROTOCOL_ERROR: "), error.text
    assert page.all("activity-card", within=broken) == []
    page.at_widths("protocol error")

    running = send_message(page, "Take your time")
    wait_state(page, running, "RUNNING")
    progress = running.find_element(By.CSS_SELECTOR, ".turn-progress")
    page.wait(lambda: re.search(r"Running for [1-9]\d* s", progress.text), what="elapsed time")
    first = progress.text
    page.wait(lambda: progress.text != first, timeout=5, what="the elapsed time ticking")
    page.at_widths("running turn")
    page.click("cancel-turn", within=running)
    wait_state(page, running, "CANCELLED")
    assert not page.all("cancel-turn", within=running)[0].is_displayed()
    assert "Took" in progress.text
    assert page.all("final-text", within=running) == []
    page.at_widths("cancelled turn")
    assert len(provider.chat_requests()) == 3
    assert broken.get_attribute("data-state") == "MODEL_PROTOCOL_ERROR"


@pytest.mark.req("UI-01", "RT-08", "SV-03")
def test_lost_connection_then_a_restart_explains_the_lost_paused_turn(
        page: Page, specimen: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    provider = provider_factory(scenario("read-prepare-final"))
    first = server_factory(specimen, **local_agent(provider.base_url))
    logged_in(page, first)
    turn = send_message(page, "Check whether the early ivy bee record is real.")
    wait_state(page, turn, "AUTHORIZATION_REQUIRED")
    turn_id = turn.get_attribute("data-turn-id")
    campaign_id = first.client().get(f"/api/v1/agent-runtime/turns/{turn_id}").json()[
        "turn"]["authorization"]["campaign_id"]
    assert first.client().grant(campaign_id).status_code == 201  # granted from elsewhere

    first.stop()
    banner = page.driver.find_element(By.ID, "connection-banner")
    page.wait(banner.is_displayed, what="the lost-connection banner")
    assert banner.text == "Connection to the server lost — retrying"
    for hook in ("composer-send", "authorize-resume", "cancel-turn"):
        assert not page.all(hook)[0].is_enabled(), f"{hook} stays live while offline"
    page.at_widths("connection lost")

    # The same port again, as `serve --port` would: the page reconnects by itself.
    monkeypatch.setattr(harness, "bind_socket", lambda host, _: bind_socket(host, first.port))
    second = server_factory(specimen, **local_agent(provider.base_url))
    assert second.url == first.url
    page.wait(lambda: not banner.is_displayed(), timeout=20, what="the banner cleared")
    page.find("login-code")  # the old session is unknown there: 401 → login form
    assert "log in again" in page.driver.find_element(By.CSS_SELECTOR, ".login-error").text
    page.at_widths("session ended by a restart")
    page.login(LAUNCH_CODE)
    page.wait(lambda: "Logged in as admin" in account(page).text, what="logged in again")
    assert page.find("composer-send").is_enabled(), "live controls come back with the server"

    lost = page.wait(lambda: next((t for t in page.all("turn")
                                   if t.get_attribute("data-turn-id") == turn_id), None),
                     what="the lost turn where it was")
    wait_state(page, lost, "LOST")
    explained = page.find("turn-error", within=lost).text
    assert explained.startswith("TURN_NOT_FOUND: ")
    assert "waiting for your authorization" in explained
    assert page.all("authorize-resume", within=lost)[0].is_displayed() is False
    box = lost.find_element(By.CSS_SELECTOR, ".authorization")
    page.wait(lambda: "Active grant" in box.text, what="the grant that outlived the turn")
    page.at_widths("turn lost by a restart")
    box.find_element(By.CSS_SELECTOR, ".grant button").click()
    page.wait(lambda: "Revoked grant" in box.text, what="the grant revoked")
    grants = second.client().get(f"/api/v1/research/campaigns/{campaign_id}").json()[
        "campaign"]["grants"]
    assert [g["active"] for g in grants] == [False]
    lost.find_element(By.XPATH, ".//button[text()='Dismiss']").click()
    page.wait(lambda: page.all("turn") == [], what="the lost turn dismissed")

    # Log out: the login form comes back, and the session is gone on the server too.
    account(page).find_element(By.TAG_NAME, "button").click()
    page.find("login-code")
    assert not page.driver.find_element(By.ID, "runtime").is_displayed()
    page.reload()
    page.find("login-code")
    assert not account(page).is_displayed()


def _log_in_by_link(page: Page, url: str) -> None:
    """Open the banner's one-click link (SV-10) and wait until logged in."""
    page.base_url = url
    page.driver.get(f"{url}/#code={LAUNCH_CODE}")
    page.wait(lambda: "Logged in as admin (admin)" in account(page).text, what="logged in")


@pytest.mark.req("SV-10", "SV-03", "UI-01")
def test_the_one_click_link_logs_in_and_leaves_no_code_in_the_address_or_history(
        page: Page, specimen: Path, server_factory: ServerFactory) -> None:
    server = server_factory(specimen)
    _log_in_by_link(page, server.url)
    assert page.driver.current_url == f"{server.url}/", "the fragment is gone"
    assert LAUNCH_CODE not in str(page.driver.execute_script("return location.href"))
    page.driver.back()  # the code is not one step back in the history either
    assert LAUNCH_CODE not in page.driver.current_url


@pytest.mark.req("SV-10", "SV-03", "UI-01")
def test_a_pasted_code_with_spaces_logs_in_and_a_bad_link_says_so(
        page: Page, specimen: Path, server_factory: ServerFactory) -> None:
    server = server_factory(specimen)
    page.base_url = server.url
    page.driver.get(f"{server.url}/#code=notthecode")
    refused = page.wait(lambda: page.driver.find_element(By.CSS_SELECTOR, ".login-error"),
                        what="the login form")
    page.wait(lambda: refused.text.startswith("UNAUTHENTICATED: "), what="a refused link")
    assert "notthecode" not in page.driver.current_url
    page.login(f"  {LAUNCH_CODE} \t")
    page.wait(lambda: "Logged in as admin (admin)" in account(page).text, what="logged in")


@pytest.mark.req("SV-11", "UI-01")
def test_a_session_in_use_stays_and_the_page_warns_before_the_cap_keeping_the_typing(
        page: Page, specimen: Path, server_factory: ServerFactory) -> None:
    """Idle timeout 4 s, cap 12 s: the open page's own use keeps the session past several
    idle timeouts; before the cap it says so; at the cap the login form comes back and the
    half-typed message is still there."""
    server = server_factory(specimen, session_idle="4", session_max="12")
    _log_in_by_link(page, server.url)
    page.type("composer-input", "half a thought")
    warning = page.wait(lambda: page.find("session-warning"), what="the warning element")
    page.wait(lambda: warning.is_displayed() and "maximum length" in warning.text,
              timeout=20, what="the warning before the cap")
    assert "Logged in as admin (admin)" in account(page).text, "kept past two idle timeouts"
    page.wait(lambda: page.driver.find_element(By.ID, "login-panel").is_displayed(),
              timeout=20, what="the login form at the cap")
    assert page.driver.find_element(By.ID, "composer-input").get_attribute("value") == \
        "half a thought"

"""UI-02, UI-04, UI-05, UI-07, UI-08: the engine page ``/cordis`` in real browsers.

Each scenario runs a real workspace server with the bridge on a fake provider
(a real HTTP server) and drives the page only by its SPEC §15 hooks — plus the
"Load more sessions" button, which has no pinned hook. Every distinct state a
scenario reaches is checked at 390 px and 1280 px (no horizontal spill, no
serious or critical axe-core finding); every page ends clean (no CSP violation,
no uncaught or console error, ``window.__pwned`` undefined).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By

from fake_provider import Answer, Scenario
from qualification.browser.engine_page import (
    call_card,
    copied,
    fake_clipboard,
    final_action,
    log_in_to_engine,
    new_session,
    open_engine,
    send,
    tool_call,
    turn_over,
    unfold_activity,
)
from qualification.browser.page import Page
from qualification.conftest import ProviderFactory, ServerFactory, composition_without, local_agent
from qualification.harness import LAUNCH_CODE, LiveServer, TurnReader

_NO_STYLE = "return document.querySelectorAll('body [style]').length"
_ACTIVE = ("img, svg, iframe, frame, style, script, object, embed, form, input, link, meta, "
           "video, audio, math")


# -- the bridge's state -----------------------------------------------------------------------


@pytest.mark.req("UI-04", "UI-08", "HO-06")
def test_a_bridge_that_is_off_or_failed_is_explained_instead_of_an_empty_list(
        page: Page, demo_server: LiveServer, specimen: Path, tmp_path: Path,
        server_factory: ServerFactory) -> None:
    page.base_url = demo_server.url
    page.open("/cordis")
    page.find("login-code")
    page.at_widths("engine page: login")
    page.login(LAUNCH_CODE)
    status = page.wait(lambda: page.text("bridge-status").startswith("CORDIS_"),
                       what="the bridge status")
    assert status
    assert page.text("bridge-status").startswith("CORDIS_DISABLED: "), page.text("bridge-status")
    assert "--bridge" in page.text("bridge-status"), "the detail says how to enable it"
    assert not page.all("session-list")[0].is_displayed(), "the reason, not an empty list"
    page.at_widths("engine page: bridge disabled")

    failed = server_factory(specimen, bridge=True,
                            composition=str(composition_without(tmp_path, "system_prompt")))
    page.base_url = failed.url
    page.open("/cordis")
    page.login(LAUNCH_CODE)
    page.wait(lambda: page.text("bridge-status").startswith("CORDIS_UNAVAILABLE: "),
              what="the failed bridge's code")
    text = page.text("bridge-status")
    assert "system_prompt" in text and "missing mandatory services" in text, text
    assert not page.all("session-list")[0].is_displayed()
    page.at_widths("engine page: bridge failed")


# -- sessions -------------------------------------------------------------------------------


@pytest.mark.req("UI-04", "UI-05", "UI-08")
def test_sessions_are_listed_newest_first_paged_titled_created_with_a_scope_and_deleted(
        page: Page, specimen: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    provider = provider_factory(Scenario.always(final_action("noted")))
    server = server_factory(specimen, bridge=True, **local_agent(provider.base_url))
    client = server.client()
    made = [client.post("/api/cordis/sessions", {}).json()["session"]["id"] for _ in range(23)]
    titles = {made[1]: "Older session on the second page", made[-1]: "Newest: ünïcödé 𝄞 title"}
    for sid, title in titles.items():
        assert TurnReader(client, sid, title).join()[-1]["reason"] == "completed"
    newest_first = made[::-1]

    page.base_url = server.url
    page.open("/cordis")
    page.login(LAUNCH_CODE)
    page.wait(lambda: len(page.all("session-item")) == 20, what="the first page of sessions")
    ids = [item.get_attribute("data-session-id") for item in page.all("session-item")]
    assert ids == newest_first[:20], "newest first, one page"
    first = page.all("session-item")[0]
    assert first.find_element(By.CLASS_NAME, "title").text == titles[made[-1]]
    assert page.all("session-item")[1].find_element(By.CLASS_NAME, "title").text == \
        "Untitled session"
    more = page.driver.find_element(By.ID, "sessions-more")
    more.click()
    page.wait(lambda: len(page.all("session-item")) == 23, what="the page after next_cursor")
    ids = [item.get_attribute("data-session-id") for item in page.all("session-item")]
    assert ids == newest_first
    assert not more.is_displayed(), "no further page"
    older = page.driver.find_element(
        By.CSS_SELECTOR, f'[data-testid="session-item"][data-session-id="{made[1]}"] .title')
    assert older.text == titles[made[1]]
    page.at_widths("engine page: session list")

    scope = page.find("permission-scope")
    scope.find_element(By.CSS_SELECTOR, 'option[value="workspace-write"]').click()
    created = new_session(page)
    assert page.all("session-item")[0].get_attribute("data-session-id") == created
    assert page.find("permission-scope").get_attribute("value") == "workspace-write"
    stored = client.get(f"/api/cordis/sessions/{created}").json()["session"]
    assert stored["settings"]["permission_mode"] == "workspace-write"
    context = page.find("session-context")
    assert context.get_property("open") is False, "Session context is closed by default"
    assert "Workspace write" in Page.content(context)
    page.at_widths("engine page: new empty session")
    page.find("permission-scope").find_element(By.CSS_SELECTOR, 'option[value="read-only"]').click()
    status = page.driver.find_element(By.ID, "turn-status")
    page.wait(lambda: status.text == "Permission scope: Read-only", what="the scope changed")
    stored = client.get(f"/api/cordis/sessions/{created}").json()["session"]
    assert stored["settings"]["permission_mode"] == "read-only", "a durable settings change"

    victim = page.driver.find_element(
        By.CSS_SELECTOR, f'[data-testid="session-item"][data-session-id="{made[0]}"]')
    delete = victim.find_element(By.CLASS_NAME, "session-delete")
    delete.click()
    assert delete.text == "Confirm delete", "delete asks once more"
    delete.click()
    page.wait(lambda: made[0] not in [i.get_attribute("data-session-id")
                                      for i in page.all("session-item")], what="deleted")
    gone = client.get(f"/api/cordis/sessions/{made[0]}")
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "SESSION_NOT_FOUND"


# -- a turn: streaming, tools, Markdown, copy, reload ---------------------------------------

REASONING = "The user wants the notes; list them first."
REPLY = """Here is **the summary** of [the notes](https://example.org/notes).

| Garden | Visits | Note |
|:-------|-------:|:----:|
| Lavender | 62 | busiest |
| Rose | 40 | — |

```python
def busiest(gardens):
    return max(gardens, key=lambda g: g.visits)
```

Done: 𝄞 ünïcödé."""
CODE = "def busiest(gardens):\n    return max(gardens, key=lambda g: g.visits)"


def _assert_reply_rendered(page: Page) -> None:
    reply = page.find("assistant-message")
    table = reply.find_element(By.TAG_NAME, "table")
    heads = [th.get_attribute("class") for th in table.find_elements(By.TAG_NAME, "th")]
    assert heads == ["align-left", "align-right", "align-center"], heads
    cells = [td.get_attribute("class") for td in table.find_elements(By.TAG_NAME, "td")][:3]
    assert cells == ["align-left", "align-right", "align-center"], cells
    assert page.driver.execute_script(_NO_STYLE) == 0, "no style attribute anywhere"
    code = reply.find_element(By.CSS_SELECTOR, "pre code")
    keywords = [s.text for s in code.find_elements(By.CSS_SELECTOR, "span.hljs-keyword")]
    assert "def" in keywords and "return" in keywords, f"highlighted: {keywords}"
    link = reply.find_element(By.CSS_SELECTOR, "a")
    assert link.get_attribute("href") == "https://example.org/notes"
    assert link.get_attribute("rel") == "noopener noreferrer"


def _assert_result_attached(page: Page, call_id: str) -> None:
    card = call_card(page, call_id)
    results = card.find_elements(By.CSS_SELECTOR, '[data-testid="tool-result"]')
    assert [r.get_attribute("data-call-id") for r in results] == [call_id], \
        "the result sits in its call's card"
    assert card.get_attribute("data-status") == "ok"
    assert "field-log.txt" in Page.content(results[0])


@pytest.mark.req("UI-04", "UI-05", "BR-22")
def test_a_turn_streams_tools_and_markdown_copies_exactly_and_survives_a_reload(
        page: Page, specimen: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    server = open_engine(
        page, specimen, provider_factory, server_factory,
        Answer(content=tool_call("files.list", path="notes"), reasoning=REASONING),
        Answer(content=final_action(REPLY), chunk_chars=16, chunk_delay=0.01))
    session_id = new_session(page)
    send(page, "What is in notes?")
    turn_over(page)
    cards = page.all("tool-call")
    assert len(cards) == 1
    assert not cards[0].is_displayed(), "the tool activity is folded under the reply"
    assert "Tool activity · 1 call" in Page.content(page.find("tool-activity"))
    unfold_activity(page)
    call_id = cards[0].get_attribute("data-call-id")
    assert call_id and "files.list" in cards[0].text and '"notes"' in cards[0].text
    _assert_result_attached(page, call_id)
    reasoning = page.find("reasoning-section")
    assert REASONING in Page.content(reasoning)
    assert reasoning.get_property("open") is False
    _assert_reply_rendered(page)
    context = page.find("session-context")
    assert context.get_property("open") is False, "Session context is closed by default"
    tools = Page.content(context)
    assert "files.write (write)" in tools and "Read-only" in tools and session_id in tools
    told = server.client().get(f"/api/cordis/sessions/{session_id}/context").json()["context"]
    page.wait(lambda: told["system_prompt"] in Page.content(context),
              what="the system prompt in Session context, as text")
    assert "Injected context" in Page.content(context) and "None:" in Page.content(context)
    page.at_widths("engine page: finished turn with a tool and Markdown")

    fake_clipboard(page, fail=False)
    page.click("copy-reply")
    page.wait(lambda: copied(page), what="the reply handed to the clipboard")
    assert copied(page) == [REPLY], "the reply's exact Markdown"
    page.wait(lambda: "Copied" in page.find("copy-reply").find_element(By.XPATH, "..").text,
              what="Copied said")
    fake_clipboard(page, fail=True)
    page.click("copy-code")
    page.wait(lambda: copied(page), what="the code handed to the clipboard")
    assert copied(page) == [CODE], "the code block's exact text"
    page.wait(lambda: "Copy failed" in page.find("copy-code").find_element(By.XPATH, "..").text,
              what="a refused clipboard said, not logged")

    page.reload()
    page.wait(lambda: page.all("tool-result"), what="the stored projection rendered")
    assert page.driver.current_url.endswith(f"#{session_id}")
    _assert_result_attached(page, call_id)
    _assert_reply_rendered(page)
    assert page.find("session-context").get_property("open") is False
    messages = server.client().get(f"/api/cordis/sessions/{session_id}").json()["session"][
        "messages"]
    assert [m["role"] for m in messages] == ["user", "tool", "assistant"]


# -- approvals and Stop -----------------------------------------------------------------------


@pytest.mark.req("UI-05", "UI-08", "BR-12")
def test_approvals_are_asked_at_the_operation_allow_once_and_deny(
        page: Page, specimen: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    open_engine(page, specimen, provider_factory, server_factory,
                Answer(content=tool_call("files.write", path="a.txt", content="one")),
                Answer(content=tool_call("files.write", path="b.txt", content="two")),
                Answer(content=final_action("One written, one refused.")))
    new_session(page)
    assert page.find("permission-scope").get_attribute("value") == "read-only"
    page.type("message-input", "write two files", submit=True)  # Enter sends
    allow = page.find("approval-allow-once")
    first = page.all("tool-call")[0]
    assert allow.find_element(By.XPATH, "ancestor::*[@data-testid='tool-call']") == first, \
        "the question sits at its operation"
    assert "files.write a.txt" in first.text
    assert not (specimen / "files" / "a.txt").exists(), "nothing written before the decision"
    page.at_widths("engine page: approval pending")
    allow.click()
    page.wait(lambda: len(page.all("tool-call")) == 2 and page.all("approval-deny"),
              what="the second approval")
    assert "Decision: Allowed once" in first.text
    assert first.get_attribute("data-status") == "ok"
    page.click("approval-deny")
    page.wait(lambda: page.find("assistant-message").text == "One written, one refused.",
              what="the final reply")
    turn_over(page)
    second = page.all("tool-call")[1]
    assert "Decision: Denied" in second.text
    assert second.get_attribute("data-status") == "refused"
    assert "PERMISSION_DENIED" in Page.content(second.find_element(
        By.CSS_SELECTOR, '[data-testid="tool-result"]'))
    assert (specimen / "files" / "a.txt").read_text() == "one"
    assert not (specimen / "files" / "b.txt").exists()
    assert not page.all("approval-allow-once"), "answered questions leave no live button"
    page.at_widths("engine page: approvals decided")


@pytest.mark.req("UI-04", "UI-05", "BR-05")
def test_stop_cancels_a_running_turn(
        page: Page, specimen: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    provider = provider_factory(Scenario(name="paced", answers=(
        Answer(content=final_action("slow " * 200), chunk_chars=2, chunk_delay=0.05),
        Answer(content=final_action("never requested")))))
    server = log_in_to_engine(page, server_factory(specimen, bridge=True,
                                                   **local_agent(provider.base_url)))
    session_id = new_session(page)
    send(page, "Take your time.")
    page.wait(lambda: page.find("assistant-message").text.startswith("slow"),
              what="the reply streaming")
    page.at_widths("engine page: turn streaming")
    page.click("stop-turn")
    conversation = page.driver.find_element(By.ID, "conversation")
    page.wait(lambda: "Stopped: the turn was cancelled." in conversation.text,
              what="the turn said stopped")
    turn_over(page)
    assert page.find("assistant-message").text != ("slow " * 200).strip(), "cut short"
    assert len(provider.chat_requests()) == 1, "no further model request"
    messages = server.client().get(f"/api/cordis/sessions/{session_id}").json()["session"][
        "messages"]
    assert [m["role"] for m in messages] == ["user"], "a cancelled reply is not stored"


# -- hostile content -------------------------------------------------------------------------

_PWN = "window.__pwned=1"
HOSTILE_MARKDOWN = f"""Hostile reply <img src=x onerror="{_PWN}"> and <svg onload="{_PWN}"></svg>.

[js link](javascript:{_PWN}) [data link](data:text/html,<script>{_PWN}</script>) \
[vb](vbscript:msgbox) [fine](https://example.org/ok) <a href="javascript:{_PWN}" \
style="color:red">raw anchor</a>

<iframe src="javascript:{_PWN}"></iframe><style>body {{ display: none }}</style>
<script>{_PWN}</script><form action="/api/v1/session"><input name=token></form>

line\u2028separated\u2029paragraph ![remote](https://evil.example/x.png) ![local](/ui/icon.svg)

| <img src=x onerror="{_PWN}"> | b |
|:--|--:|
| <b onmouseover="{_PWN}">cell</b> | 2 |

```html
<script>{_PWN}</script><img src=x onerror="{_PWN}">
```
"""
HOSTILE_TITLE = f'<img src=x onerror="{_PWN}"> <script>{_PWN}</script> \u2028 title'
HOSTILE_PATH = f'<svg onload="{_PWN}">.txt'
MIB = 1024 * 1024


def _hostile_reasoning() -> str:
    unit = f'<img src=x onerror="{_PWN}"><style>*{{display:none}}</style>\u2028 '
    return (unit * (MIB // len(unit) + 1))[:MIB]


@pytest.mark.req("UI-02", "UI-05", "UI-08")
def test_hostile_model_text_titles_and_tool_arguments_stay_inert(
        page: Page, specimen: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    reasoning = _hostile_reasoning()
    server = open_engine(
        page, specimen, provider_factory, server_factory,
        Answer(content=tool_call("files.write", path=HOSTILE_PATH,
                                 content=f"<iframe src=javascript:{_PWN}></iframe>")),
        Answer(content=final_action(HOSTILE_MARKDOWN), reasoning=reasoning, chunk_chars=65536))
    session_id = new_session(page)
    send(page, HOSTILE_TITLE)
    page.click("approval-deny")
    reply = page.find("assistant-message", timeout=30)
    turn_over(page)
    page.wait(lambda: "Hostile reply" in reply.text, what="the hostile reply rendered")

    active = page.driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])]"
        ".filter((e) => e.closest('#conversation, #session-list, #chat-title'))"
        ".map((e) => e.outerHTML.slice(0, 80))", _ACTIVE)
    assert active == [], f"{page.browser}: active elements from model text: {active}"
    hrefs = page.driver.execute_script(
        "return [...document.querySelectorAll('#conversation a')].map((a) => a.href)")
    # Images are not fetched: a remote one is a plain link, a relative one is text.
    assert hrefs == ["https://example.org/ok", "https://evil.example/x.png"], hrefs
    assert page.driver.execute_script(_NO_STYLE) == 0
    assert "raw anchor" in reply.text and "<iframe" in reply.text, "raw HTML is shown as text"
    assert page.driver.execute_script(
        "return document.querySelector('[data-testid=\"reasoning-section\"] .reasoning-text')"
        ".textContent.length") == len(reasoning), "1 MiB of reasoning, as text"
    card = page.find("tool-call")
    assert json.dumps(HOSTILE_PATH) in Page.content(card), "arguments as text"
    item = page.driver.find_element(
        By.CSS_SELECTOR, f'[data-testid="session-item"][data-session-id="{session_id}"] .title')
    page.wait(lambda: Page.content(item) == HOSTILE_TITLE[:80],
              what="the hostile title, as text")
    page.assert_clean()
    page.at_widths("engine page: hostile content")

    page.type("message-input", "<img src=x onerror=window.__pwned=1>" * (MIB // 36 + 1))
    page.click("message-send")
    refusal = page.driver.find_element(By.ID, "composer-error")
    page.wait(lambda: refusal.text.startswith(("BODY_TOO_LARGE: ", "VALIDATION_FAILED: ")),
              what="the refusal of a 1 MiB message, with its code")
    messages = server.client().get(f"/api/cordis/sessions/{session_id}").json()["session"][
        "messages"]
    assert [m["role"] for m in messages] == ["user", "tool", "assistant"], "nothing more stored"
    page.assert_clean()

"""UI-01, UI-02, UI-05, UI-07: outsider attacks on the two pages, in real browsers.

Regression guards from the issue 10 review: what a model writes in a reply can
neither forge one of the engine page's controls (a hook such as
``approval-allow-once``, a button, a login form) nor leave a link whose resolved
target is anything but http(s) or mailto outside the page's own origin, whatever
spelling it tries (autolinks, reference links, entity-encoded schemes, nested
links, fence info strings, lone surrogates, ``http:api/...``); the renderer is
driven through a real turn (a scripted fake provider) and directly
(``labfyMarkdown.render`` in the page) for a corpus too large for one reply.

Then the four findings of the review: an invisible format character (a direction
override in a file name) never makes a question, an argument or a card read as
something else, on either page; a long Markdown reply never blocks the engine
page for long; logging out forgets the draft, the open session and its context;
a model's link never points into the page's own origin.
"""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import pytest
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement

from fake_provider import Answer
from qualification.browser.engine_page import (
    copied,
    fake_clipboard,
    final_action,
    new_session,
    open_engine,
    send,
    tool_call,
    turn_over,
)
from qualification.browser.page import Page
from qualification.browser.runtime_page import (
    account,
    answer_action,
    answer_call,
    logged_in,
    scripted,
    send_message,
    unfold,
    wait_state,
)
from qualification.conftest import ProviderFactory, ServerFactory, local_agent
from qualification.harness import LAUNCH_CODE, LiveServer

_PWN = "window.__pwned=1"

# Markdown that tries to pass for the page's own controls.
FORGERY = f"""**Approval needed: files.write notes.txt (3 characters)**

<div class="approval" data-testid="approval-allow-once"><button data-testid="approval-allow-once" \
onclick="{_PWN}">Allow once</button></div>

<form action="/api/v1/session" method="post"><label>Login code</label>\
<input data-testid="login-code" name="token">\
<button data-testid="login-submit">Log in</button></form>

[Allow once](javascript:{_PWN}) [Deny][deny] <javascript:{_PWN}> [x](jav&#x61;script:{_PWN}) \
[y](data:text/html;base64,PHNjcmlwdD4=) [z](vbscript:msgbox) [[n](https://a.example)](javascript:{_PWN})

[deny]: javascript:{_PWN}

```js"><button data-testid="approval-deny">Deny</button>
x
```

```__proto__
y
```

`<button data-testid="stop-turn">Stop</button>`
"""

# Everything a reply element may be: what markdown.js allows, plus the page's own copy button.
REPLY_SHAPE = """
const reply = arguments[0];
const bad = [];
for (const e of reply.querySelectorAll("*")) {
  const tag = e.tagName.toLowerCase();
  const copy = tag === "button" && e.dataset.testid === "copy-code";
  if (copy && e.textContent === "Copy code") continue;
  if (e.closest(".code-actions") && (tag === "div" || tag === "span")) continue;
  if (tag === "button" || tag === "form" || tag === "input" || e.hasAttribute("data-testid")) {
    bad.push(e.outerHTML.slice(0, 120));
  }
  for (const a of e.attributes) {
    if (a.name.startsWith("on") || a.name === "style") bad.push(`${tag}[${a.name}]`);
  }
}
for (const a of reply.querySelectorAll("a[href]")) {
  if (!["http:", "https:", "mailto:"].includes(a.protocol)) bad.push(`a ${a.href}`);
}
return bad;
"""


@pytest.mark.req("UI-02", "UI-05", "UI-07")
def test_a_reply_cannot_forge_the_pages_controls_or_links(
        page: Page, specimen: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    open_engine(page, specimen, provider_factory, server_factory,
                Answer(content=tool_call("files.write", path="notes.txt", content="one")),
                Answer(content=final_action(FORGERY), chunk_chars=64, chunk_delay=0.005))
    new_session(page)
    send(page, "write the notes")
    real_allow = page.find("approval-allow-once")
    assert len(page.all("approval-allow-once")) == 1
    page.click("approval-deny")
    reply = page.find("assistant-message", timeout=30)
    turn_over(page)
    page.wait(lambda: "Approval needed" in reply.text, what="the forged question rendered")

    assert page.driver.execute_script(REPLY_SHAPE, reply) == []
    assert page.all("approval-allow-once") == [], "the real question was answered"
    assert page.all("approval-deny") == []
    assert len(page.all("login-code")) == 1, "only the page's own (hidden) login field"
    stops = page.all("stop-turn")
    assert len(stops) == 1 and not stops[0].is_displayed()
    assert not _shown(real_allow), "the answered question's button is gone"
    hrefs = page.driver.execute_script(
        "return [...arguments[0].querySelectorAll('a')].map((a) => a.getAttribute('href'))", reply)
    assert hrefs == ["https://a.example"], hrefs
    page.at_widths("engine page: a reply forging controls")


def _shown(element: WebElement) -> bool:
    try:
        return element.is_displayed()
    except StaleElementReferenceException:  # removed from the page: not shown
        return False


# Run inside the page: every payload rendered, each result's shape in plain data. The
# payloads and the answer travel as JSON text: WebDriver refuses lone surrogates.
RENDER_ALL = r"""
const out = [];
for (const text of JSON.parse(arguments[0])) {
  const box = document.createElement("div");
  box.append(labfyMarkdown.render(text));
  const elements = [...box.querySelectorAll("*")];
  out.push({
    tags: [...new Set(elements.map((e) => e.tagName.toLowerCase()))],
    attrs: [...new Set(elements.flatMap((e) => [...e.attributes].map((a) => a.name)))],
    protocols: [...box.querySelectorAll("a[href]")].map((a) => a.protocol),
    rels: [...box.querySelectorAll("a")].map((a) => a.rel),
    targets: [...box.querySelectorAll("a")].map((a) => a.target),
    own: [...box.querySelectorAll("a[href]")].filter((a) => a.origin === location.origin).length,
  });
}
return JSON.stringify(out);
"""
TAGS = {"p", "br", "hr", "strong", "em", "s", "code", "pre", "span", "a", "ul", "ol", "li",
        "blockquote", "h4", "h5", "h6", "table", "thead", "tbody", "tr", "th", "td", "div"}
ATTRS = {"href", "title", "class", "start", "rel", "tabindex", "target"}
CORPUS = [
    "<javascript:alert(1)>", "<JaVaScRiPt:alert(1)>", "<data:text/html,x>",
    "[x][r]\n\n[r]: javascript:window.__pwned=1",
    "[x][r]\n\n[r]: data:text/html;base64,PHNjcmlwdD4=",
    "[x](jav&#x61;script:window.__pwned=1)", "[x](javascript&#58;alert(1))",
    "[x](&#106;avascript:alert(1))", "[x](%6Aavascript:alert(1))", "[x]( javascript:alert(1))",
    "[x](java\tscript:alert(1))", "[x](<java\nscript:alert(1)>)", "[x](\u0001javascript:a)",
    "[x](vbscript:msgbox)", "[x](file:///etc/passwd)", "[x](blob:https://a.example/1)",
    "[x](//evil.example/)", "[x](/api/v1/session)", "[x](#login)",
    "[x](http:api/v1/session)", "[x](HTTP:/cordis)", "[x](https:cordis)", "[x](http:\\\\e.example)",
    "[x](http:/\\e.example)", "<http:api/v1/session>", "[x][r]\n\n[r]: http:/api/v1/session",
    '[x](https://a.example "t\\" onmouseover=\\"alert(1)")',
    "[[a](https://a.example)](javascript:alert(1))", "***[__a__](https://x.example)***",
    "`<img src=x onerror=alert(1)>`", "```js\"><img src=x onerror=alert(1)>\nx\n```",
    "```__proto__\nx\n```", "```constructor\nx\n```", "```hasOwnProperty\nx\n```",
    "```xml\n<script>window.__pwned=1</script><img src=x onerror=alert(1)>\n```",
    "```html\n<svg onload=alert(1)>\n```", "![a](https://evil.example/x.png)",
    "![a][r]\n\n[r]: https://evil.example/y.png", "<div data-testid=\"approval-deny\">x</div>",
    "999999999. x", "a\ud800b `\udc00` \udfff", "a\u0000b", "a\u2028b\u2029c\u0085d",
    "Allow \u202eecno wollA", "|" + "a|" * 2000 + "\n|" + "-|" * 2000 + "\n|" + "1|" * 2000,
    ">" * 5000 + " deep", "".join("  " * i + "- x\n" for i in range(300)), "[" * 5000,
    "*_" * 5000, "`a``" * 2000, "<" * 5000, "&#x" * 5000,
]


@pytest.mark.req("UI-02", "UI-05", "UI-07")
def test_the_renderer_keeps_its_allow_list_on_hostile_markdown(
        page: Page, demo_server: LiveServer) -> None:
    page.base_url = demo_server.url
    page.open("/cordis")
    page.wait(lambda: page.driver.execute_script("return typeof window.labfyMarkdown"
                                                 " === 'object'"), what="markdown.js loaded")
    results = json.loads(page.driver.execute_script(RENDER_ALL, json.dumps(CORPUS)))
    assert len(results) == len(CORPUS)
    for text, shape in zip(CORPUS, results, strict=True):
        assert set(shape["tags"]) <= TAGS, (text[:60], shape["tags"])
        assert set(shape["attrs"]) <= ATTRS, (text[:60], shape["attrs"])
        assert set(shape["protocols"]) <= {"http:", "https:", "mailto:"}, (text[:60], shape)
        assert all(rel == "noopener noreferrer" for rel in shape["rels"]), (text[:60], shape)
        assert all(target == "_blank" for target in shape["targets"]), (text[:60], shape)
        assert shape["own"] == 0, (text[:60], "a link into the page's own origin")
    assert page.driver.execute_script(
        "return document.querySelectorAll('body [style]').length") == 0




# -- invisible format characters (finding 1) ------------------------------------------------

BIDI_PATH = "run\u202etxt.sh\u202c"  # shows as "runhs.txt" where U+202E is honoured
BIDI_MARK = "run⟨U+202E⟩txt.sh⟨U+202C⟩"
_CF = "return arguments[0].textContent"


def _format_characters(page: Page, element: WebElement) -> list[str]:
    """The Unicode format characters (Cf) left in ``element``'s whole text, as U+XXXX."""
    text: str = page.driver.execute_script(_CF, element)
    return sorted({f"U+{ord(c):04X}" for c in text if unicodedata.category(c) == "Cf"})


def _reads_in_order(page: Page, element: WebElement) -> None:
    lefts = [left for _, left in page.char_lefts(element)]
    assert lefts == sorted(lefts), f"{page.browser}: shown as {element.text!r}"


@pytest.mark.req("UI-02", "UI-05", "GW-08")
def test_an_approval_question_reads_in_its_logical_order(
        page: Page, specimen: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    open_engine(page, specimen, provider_factory, server_factory,
                Answer(content=tool_call("files.write", path=BIDI_PATH, content="x\u200bx")),
                Answer(content=final_action("**Written** to \u2067run.sh\u2069 \ufeff.")))
    session_id = new_session(page)
    send(page, "write \u202eit")
    allow = page.find("approval-allow-once")
    question = allow.find_element(By.XPATH, "ancestor::*[@class='approval']/p")
    assert BIDI_MARK in question.text, question.text
    _reads_in_order(page, question)
    card = allow.find_element(By.XPATH, "ancestor::*[@data-testid='tool-call']")
    assert BIDI_MARK in card.find_element(By.CSS_SELECTOR, "pre").text, "the arguments box"
    assert "x⟨U+200B⟩x" in Page.content(card)
    page.at_widths("engine page: an approval of a name with a direction override")

    allow.click()
    reply = page.find("assistant-message", timeout=30)
    turn_over(page)
    page.wait(lambda: "Written" in reply.text, what="the reply rendered")
    assert "⟨U+2067⟩run.sh⟨U+2069⟩ ⟨U+FEFF⟩." in reply.text, "Markdown text nodes"
    result = page.find("tool-result")
    assert "INVALID_ARGUMENTS" in Page.content(result), "the gateway refuses such a name"
    conversation = page.driver.find_element(By.ID, "conversation")
    assert _format_characters(page, conversation) == []
    title = page.driver.find_element(
        By.CSS_SELECTOR, f'[data-testid="session-item"][data-session-id="{session_id}"] .title')
    page.wait(lambda: Page.content(title) == "write ⟨U+202E⟩it", what="the title, visibly")
    fake_clipboard(page, fail=False)
    page.click("copy-reply")
    page.wait(lambda: copied(page), what="the reply handed to the clipboard")
    assert copied(page) == ["**Written** to ⟨U+2067⟩run.sh⟨U+2069⟩ ⟨U+FEFF⟩."], \
        "the clipboard gets what was shown, no invisible character"


@pytest.mark.req("UI-01", "UI-02", "GW-08")
def test_a_runtime_card_shows_a_direction_override_in_a_path(
        page: Page, specimen: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    provider = provider_factory(scripted(
        "bidi-card", answer_call("files.write", path=BIDI_PATH, content="x"),
        answer_action(type="final", text="Not written: \u2066nur.txt\u2069")))
    logged_in(page, server_factory(specimen, **local_agent(provider.base_url)))
    turn = wait_state(page, send_message(page, "write \u202eit"), "COMPLETED")
    card = page.find("activity-card", within=unfold(page, turn))
    arguments = card.find_element(By.CSS_SELECTOR, ".card-line span:not(.card-key)")
    assert BIDI_MARK in arguments.text, arguments.text
    _reads_in_order(page, arguments)
    assert Page.content(page.find("final-text", within=turn)) == \
        "Not written: ⟨U+2066⟩nur.txt⟨U+2069⟩"
    assert "write ⟨U+202E⟩it" in Page.content(turn), "the user's message too"
    assert _format_characters(page, page.driver.find_element(By.ID, "turns")) == []
    page.at_widths("runtime page: a card of a name with a direction override")


# -- a long Markdown reply (finding 2) ------------------------------------------------------

_MAX_GAP = """
window.__gap = 0;
let last = performance.now();
setInterval(() => {
  const now = performance.now();
  window.__gap = Math.max(window.__gap, now - last);
  last = now;
}, 16);
"""
LONG_LINES = 60000  # 240 KB of "# x\n": the old page re-rendered all of it every 50 ms
# The old page re-rendered all of it every 50 ms: each block was at least one render of the
# whole reply. The paced one renders it in slices: measured here, its longest block was 0.19
# (Firefox) and 0.38 (Chromium) of one whole render. The bound is a ratio to that render,
# measured in the same browser in the same run (no absolute time: a slower machine or browser
# build renders slower too), with one frame budget of slack.
BLOCK_OVER_RENDER = 0.6
FRAME_MS = 100
_RENDER_MS = """
const text = arguments[0];
const started = performance.now();
window.labfyMarkdown.render(text);
return performance.now() - started;
"""


@pytest.mark.req("UI-05", "UI-07")
def test_a_long_markdown_reply_never_blocks_the_page_for_long(
        page: Page, specimen: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    open_engine(page, specimen, provider_factory, server_factory,
                Answer(content=final_action("# x\n" * LONG_LINES), chunk_chars=2048,
                       chunk_delay=0.01))
    new_session(page)
    page.driver.execute_script(_MAX_GAP)
    send(page, "a long reply")
    turn_over(page)
    reply = page.find("assistant-message")
    count = "return arguments[0].querySelectorAll('h4').length"
    page.wait(lambda: page.driver.execute_script(count, reply) == LONG_LINES, timeout=60,
              what="the whole reply rendered as Markdown once it ended")
    gap = page.driver.execute_script("return window.__gap")
    render = min(page.driver.execute_script(_RENDER_MS, "# x\n" * LONG_LINES) for _ in range(2))
    bound = BLOCK_OVER_RENDER * render + FRAME_MS
    assert gap < bound, (f"{page.browser}: the main thread was blocked {gap:.0f} ms at once; "
                         f"one render of the whole reply takes {render:.0f} ms")


# -- logout (finding 3) ---------------------------------------------------------------------


@pytest.mark.req("UI-01", "UI-04", "UI-07")
def test_logout_forgets_the_draft_and_the_open_session(
        page: Page, specimen: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    open_engine(page, specimen, provider_factory, server_factory,
                Answer(content=final_action("secret reply")))
    new_session(page)
    send(page, "a secret message")
    turn_over(page)
    page.type("message-input", "an unsent draft")
    account(page).find_element(By.CLASS_NAME, "account-logout").click()
    page.find("login-code")
    assert page.driver.current_url.split("#")[1:] == [], page.driver.current_url
    left = page.driver.execute_script(
        "return [document.getElementById('message-input').value, document.body.textContent]")
    assert left[0] == "", "the draft"
    assert "secret" not in left[1] and "ses_" not in left[1], "no message, title or context"
    page.login(LAUNCH_CODE)
    page.wait(lambda: page.find("bridge-status").get_attribute("data-state") == "ready",
              what="logged in again")
    page.wait(lambda: page.all("session-item"), what="the session list")
    assert page.driver.find_element(By.ID, "chat-title").text.startswith("No session open")
    assert page.all("assistant-message") == [], "no session reopened by itself"

    page.open("/")
    page.wait(lambda: account(page).is_displayed(), what="the same session on the runtime page")
    page.wait(lambda: "Workspace:" in page.driver.find_element(By.ID, "workspace-line").text,
              what="the workspace line")
    page.type("composer-input", "an unsent runtime draft")
    account(page).find_element(By.CLASS_NAME, "account-logout").click()
    page.find("login-code")
    left = page.driver.execute_script(
        "return [document.getElementById('composer-input').value, document.body.textContent]")
    assert left[0] == "", "the runtime draft"
    assert "Workspace:" not in left[1] and "runtime draft" not in left[1]


# -- links (finding 4) ----------------------------------------------------------------------

_OWN_ORIGIN_LINK = """
const box = document.createElement("div");
box.append(labfyMarkdown.render(`[x](${location.origin}/api/v1/session) [y](${location.href})`));
return box.querySelectorAll("a[href]").length;
"""


@pytest.mark.req("UI-02", "UI-05", "UI-07")
def test_a_model_link_never_points_into_the_page_s_own_origin(
        page: Page, specimen: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    server = open_engine(
        page, specimen, provider_factory, server_factory,
        Answer(content=final_action("[Allow once](http:api/v1/session) [b](HTTP:/cordis) "
                                    "[ok](https://example.org/a)")))
    new_session(page)
    send(page, "links")
    turn_over(page)
    reply = page.find("assistant-message")
    page.wait(lambda: "ok" in reply.text, what="the reply rendered")
    links = page.driver.execute_script(
        "return [...arguments[0].querySelectorAll('a')]"
        ".map((a) => [a.href, a.target, a.rel])", reply)
    assert [h for h, _, _ in links if h.startswith(server.url)] == [], links
    assert links == [["https://example.org/a", "_blank", "noopener noreferrer"]], links
    assert "[Allow once](http:api/v1/session) [b](HTTP:/cordis)" in reply.text, "left as text"
    assert page.driver.execute_script(_OWN_ORIGIN_LINK) == 0, "an absolute link to this origin"

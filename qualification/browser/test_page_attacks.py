"""UI-02, UI-05, UI-07: outsider attacks on the engine page's Markdown, in real browsers.

Regression guards from the issue 10 review: what a model writes in a reply can
neither forge one of the page's controls (a hook such as ``approval-allow-once``,
a button, a login form) nor leave a link whose resolved target is anything but
http(s) or mailto, whatever spelling it tries (autolinks, reference links,
entity-encoded schemes, nested links, fence info strings, lone surrogates). The
renderer is driven two ways: through a real turn (a scripted fake provider), and
directly (``labfyMarkdown.render`` in the page, as the NDJSON parser's scenarios
do) for a corpus too large for one reply.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.remote.webelement import WebElement

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
from qualification.harness import LiveServer

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
  });
}
return JSON.stringify(out);
"""
TAGS = {"p", "br", "hr", "strong", "em", "s", "code", "pre", "span", "a", "ul", "ol", "li",
        "blockquote", "h4", "h5", "h6", "table", "thead", "tbody", "tr", "th", "td", "div"}
ATTRS = {"href", "title", "class", "start", "rel", "tabindex"}
CORPUS = [
    "<javascript:alert(1)>", "<JaVaScRiPt:alert(1)>", "<data:text/html,x>",
    "[x][r]\n\n[r]: javascript:window.__pwned=1",
    "[x][r]\n\n[r]: data:text/html;base64,PHNjcmlwdD4=",
    "[x](jav&#x61;script:window.__pwned=1)", "[x](javascript&#58;alert(1))",
    "[x](&#106;avascript:alert(1))", "[x](%6Aavascript:alert(1))", "[x]( javascript:alert(1))",
    "[x](java\tscript:alert(1))", "[x](<java\nscript:alert(1)>)", "[x](\u0001javascript:a)",
    "[x](vbscript:msgbox)", "[x](file:///etc/passwd)", "[x](blob:https://a.example/1)",
    "[x](//evil.example/)", "[x](/api/v1/session)", "[x](#login)",
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
    assert page.driver.execute_script(
        "return document.querySelectorAll('body [style]').length") == 0

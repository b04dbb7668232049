"""A page in a real browser, driven by the pinned ``data-testid`` hooks (SPEC §15, UI-07, UI-08).

Every page load first runs :data:`WATCH` (a WebDriver BiDi preload script, so it
runs before the page's own scripts): it counts ``securitypolicyviolation``
events, uncaught errors, unhandled rejections and ``console.error`` calls. A
scenario's page must end with all of them at zero and ``window.__pwned``
undefined — :meth:`Page.assert_clean` checks that before every navigation and
at the end of every scenario. :meth:`Page.axe` runs the vendored axe-core on
the state reached; :meth:`Page.at_widths` checks 390 px and 1280 px.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement

T = TypeVar("T")
AXE = Path(__file__).with_name("vendor") / "axe.min.js"
WIDTHS = (390, 1280)
HEIGHT = 900
SEVERE = ("serious", "critical")

# Runs in the page's own realm before any of its scripts, on every navigation.
WATCH = """() => {
  const watch = {csp: [], errors: [], console: []};
  Object.defineProperty(window, "__labfyWatch", {value: watch});
  document.addEventListener("securitypolicyviolation",
    (e) => watch.csp.push(`${e.violatedDirective} ${e.blockedURI} ${e.sourceFile}:${e.lineNumber}`),
    true);
  window.addEventListener("error", (e) => watch.errors.push(String(e.message || e.type)), true);
  window.addEventListener("unhandledrejection", (e) => watch.errors.push(String(e.reason)));
  const original = console.error;
  console.error = function (...parts) {
    watch.console.push(parts.map(String).join(" "));
    return original.apply(this, parts);
  };
}"""

_READ_WATCH = """
const w = window.__labfyWatch;
return {loaded: w !== undefined, pwned: typeof window.__pwned !== "undefined",
        csp: w ? w.csp : [], errors: w ? w.errors : [], console: w ? w.console : []};
"""

_AXE_RUN = """
const done = arguments[arguments.length - 1];
axe.run(document, {resultTypes: ["violations"]}).then(
  (r) => done(r.violations.map((v) => ({id: v.id, impact: v.impact, help: v.help,
                                         nodes: v.nodes.map((n) => n.target.join(" "))}))),
  (e) => done([{id: "axe-error", impact: "critical", help: String(e), nodes: []}]));
"""


# (code point, x of its box) of each character of the first text node under arguments[0].
_CHAR_LEFTS = r"""
const text = document.createTreeWalker(arguments[0], NodeFilter.SHOW_TEXT).nextNode();
const range = document.createRange();
const out = [];
for (let i = 0; text && i < text.data.length;) {
  const point = text.data.codePointAt(i);
  const end = i + (point > 0xffff ? 2 : 1);
  range.setStart(text, i);
  range.setEnd(text, end);
  out.push([point, range.getBoundingClientRect().left]);
  i = end;
}
return JSON.stringify(out);
"""


def by_testid(testid: str) -> tuple[str, str]:
    """The locator of a pinned page hook."""
    return By.CSS_SELECTOR, f'[data-testid="{testid}"]'


class Page:
    """One browser tab on one server: open, find hooks, wait, check, screenshot."""

    def __init__(self, driver: WebDriver, browser: str, base_url: str, screens: Path) -> None:
        self.driver = driver
        self.browser = browser
        self.base_url = base_url
        self.screens = screens

    # -- navigation and lookup ------------------------------------------------------------

    def open(self, path: str = "/") -> None:
        """Navigate to ``path`` on the server (after checking the page being left)."""
        self.assert_clean()
        self.driver.get(self.base_url + path)

    def reload(self) -> None:
        """Reload the current page (after checking it)."""
        self.assert_clean()
        self.driver.refresh()

    def wait(self, condition: Callable[[], T | None], *, timeout: float = 15,
             what: str = "condition") -> T:
        """Poll ``condition`` until it returns a truthy value (bounded); fail naming ``what``."""
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                value = condition()
            except (NoSuchElementException, StaleElementReferenceException) as exc:
                value, last = None, exc
            if value:
                return value
            time.sleep(0.05)
        raise AssertionError(f"{self.browser}: {what} not reached in {timeout} s"
                             + (f" (last: {type(last).__name__})" if last else ""))

    def all(self, testid: str, within: WebElement | None = None) -> list[WebElement]:
        """Every element with the hook (may be empty)."""
        return (within or self.driver).find_elements(*by_testid(testid))

    def find(self, testid: str, *, within: WebElement | None = None,
             timeout: float = 15) -> WebElement:
        """The first displayed element with the hook, waiting for it."""
        def shown() -> WebElement | None:
            return next((e for e in self.all(testid, within) if e.is_displayed()), None)
        return self.wait(shown, timeout=timeout, what=f"[data-testid={testid}] shown")

    def text(self, testid: str, *, within: WebElement | None = None) -> str:
        """The shown text of the hook's first displayed element."""
        return self.find(testid, within=within).text

    @staticmethod
    def content(element: WebElement) -> str:
        """An element's exact whole text: ``textContent`` (Selenium's ``.text`` folds whitespace
        and leaves out hidden or closed parts)."""
        return element.get_attribute("textContent") or ""

    def char_lefts(self, element: WebElement) -> list[tuple[int, float]]:
        """(code point, left x of its box) of each character of ``element``'s first text node.

        A one-line text shown in its logical order has ascending x; a bidi control that
        reorders what is shown (``run\u202etxt.sh`` read as ``runhs.txt``) makes x descend.
        """
        pairs = json.loads(self.driver.execute_script(_CHAR_LEFTS, element))
        return [(int(point), float(left)) for point, left in pairs]

    def type(self, testid: str, text: str, *, submit: bool = False) -> None:
        """Type ``text`` into the hook's field (clearing it first); Enter when ``submit``."""
        field = self.find(testid)
        field.clear()
        if len(text) > 2000:  # typing a megabyte key by key takes minutes: set it, then notify
            self.driver.execute_script(
                "arguments[0].value = arguments[1];"
                "arguments[0].dispatchEvent(new Event('input', {bubbles: true}));", field, text)
        else:
            field.send_keys(text)
        if submit:
            field.send_keys(Keys.ENTER)

    def click(self, testid: str, *, within: WebElement | None = None) -> None:
        """Click the hook's first displayed element."""
        self.find(testid, within=within).click()

    def login(self, code: str) -> None:
        """Open ``/``-style login on the current page: type the code, press the button."""
        self.type("login-code", code)
        self.click("login-submit")

    # -- checks -----------------------------------------------------------------------------

    def watch(self) -> dict[str, Any]:
        """What the preload watcher saw on the current document."""
        result: dict[str, Any] = self.driver.execute_script(_READ_WATCH)
        return result

    def assert_clean(self) -> None:
        """No CSP violation, uncaught error, console error or ``window.__pwned`` on this page."""
        if not self.driver.current_url.startswith(self.base_url):
            return  # nothing of ours loaded yet
        seen = self.watch()
        assert seen["loaded"], f"{self.browser}: the BiDi preload watcher did not run"
        assert not seen["pwned"], f"{self.browser}: window.__pwned was set: hostile input ran"
        assert seen["csp"] == [], f"{self.browser}: CSP violations {seen['csp']}"
        assert seen["errors"] == [], f"{self.browser}: uncaught errors {seen['errors']}"
        assert seen["console"] == [], f"{self.browser}: console errors {seen['console']}"

    def axe(self, state: str) -> None:
        """axe-core on the current state: no ``serious`` or ``critical`` violation (UI-08)."""
        if not self.driver.execute_script("return typeof window.axe === 'object'"):
            self.driver.execute_script(AXE.read_text("utf-8"))
        violations = self.driver.execute_async_script(_AXE_RUN)
        severe = [v for v in violations if v["impact"] in SEVERE]
        assert severe == [], f"{self.browser}: axe on {state!r}: {severe}"

    def set_width(self, width: int) -> None:
        """Set the viewport (not the window: Firefox keeps windows at least 500 px wide)."""
        self.driver.browsing_context.set_viewport(
            context=self.driver.current_window_handle,
            viewport={"width": width, "height": HEIGHT})

    def _width_is(self, width: int) -> Callable[[], bool]:
        return lambda: self.inner_width() == width

    def inner_width(self) -> int:
        """``window.innerWidth``."""
        width: int = self.driver.execute_script("return window.innerWidth")
        return width

    def overflow(self) -> int:
        """How many CSS pixels the page spills past the viewport horizontally."""
        spill: int = self.driver.execute_script(
            "return document.documentElement.scrollWidth - document.documentElement.clientWidth")
        return spill

    def at_widths(self, state: str) -> None:
        """At 390 px and 1280 px: no horizontal spill and no severe axe finding (UI-08)."""
        for width in WIDTHS:
            self.set_width(width)
            self.wait(self._width_is(width), timeout=5, what=f"viewport {width} px")
            spill = self.overflow()
            assert spill <= 0, f"{self.browser}: {state} spills {spill} px past {width} px"
            self.axe(f"{state} @ {width}px")

    def screenshot(self, scenario: str) -> Path:
        """Save the viewport to ``<screens>/<browser>/<scenario>.png``."""
        target = self.screens / self.browser / f"{scenario}.png"
        target.parent.mkdir(parents=True, exist_ok=True)
        self.driver.save_screenshot(str(target))
        return target

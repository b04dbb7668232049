"""Fixtures of the browser scenarios (UI-07): one real browser per kind, one page per scenario.

Every test here runs once per browser in :data:`BROWSERS` (the ``browser``
fixture is parametrised), is marked ``variant(<browser>)`` so the report can
fold Firefox and the other browsers by the rule of UI-07, and sits in the
``browser`` xdist group so two browsers never fight over the cores. A browser
this machine lacks skips its scenarios with the reason (stage ``NOT_RUN`` for
it, never ``PASS``). The ``page`` fixture clears cookies, sets a 1280 px
viewport, and at the end saves the scenario's screenshot to
``<report>/screens/<browser>/<scenario>.png`` and checks the page is clean.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.remote.webdriver import WebDriver

from labfy_ref.report.pytest_plugin import report_dir_of
from qualification.browser.browsers import BROWSERS, RESOLVERS, BrowserAbsent, start
from qualification.browser.page import WATCH, WIDTHS, Page

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Group every browser scenario on one worker and name its browser as its variant."""
    for item in items:
        if HERE not in item.path.parents:
            continue
        item.add_marker(pytest.mark.xdist_group("browser"))
        callspec = getattr(item, "callspec", None)
        if callspec is not None and "browser" in callspec.params:
            item.add_marker(pytest.mark.variant(callspec.params["browser"]))


def _drop_stale_screens(screens: Path) -> None:
    """Remove screenshots of scenarios that no longer exist; a partial run (``-k``) keeps the
    other scenarios' last screenshots."""
    scenarios = {name for module in HERE.glob("test_*.py")
                 for name in re.findall(r"^def (test_\w+)", module.read_text("utf-8"), re.M)}
    for shot in screens.glob("*.png"):
        if shot.stem not in scenarios:
            shot.unlink(missing_ok=True)


@pytest.fixture(scope="session", params=BROWSERS)
def browser(request: pytest.FixtureRequest,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    """A started browser of one kind (the session's), on a temporary profile."""
    name = str(request.param)
    try:
        setup = RESOLVERS[name](os.environ)
    except BrowserAbsent as absent:
        pytest.skip(f"{name} not run: {absent}")
    screens = report_dir_of(request.config) / "screens" / name
    _drop_stale_screens(screens)
    driver = start(setup, tmp_path_factory.mktemp(f"{name}-profile"))
    driver.name_for_report = name  # type: ignore[attr-defined]
    try:
        driver.script.add_preload_script(WATCH)
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def page(browser: WebDriver, request: pytest.FixtureRequest) -> Iterator[Page]:
    """A clean tab at 1280 px; at the end, the screenshot and the cleanliness check."""
    name: str = browser.name_for_report  # type: ignore[attr-defined]
    screens = report_dir_of(request.config) / "screens"
    browser.get("about:blank")
    browser.delete_all_cookies()
    current = Page(browser, name, "", screens)
    current.set_width(WIDTHS[-1])
    yield current
    scenario = getattr(request.node, "originalname", request.node.name)
    current.screenshot(scenario)
    current.assert_clean()

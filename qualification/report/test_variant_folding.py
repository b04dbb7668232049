"""UI-07, QR-01: the browser stage and the UI IDs fold Firefox and the other browsers by one rule.

``BROWSER_SCENARIOS`` is ``PASS`` only when every scenario ran and passed on Firefox and on
every other browser present, and names the browsers that ran; a UI ID is ``CURRENT`` when
its tests passed on Firefox and failed nowhere. An absent browser (all its tests skipped)
shows in the stage line; it does not turn the UI IDs ``NOT_RUN``.
"""

from __future__ import annotations

import pytest

from qualification.report.projects import valid_status

REQUIREMENTS = """
[stages.BROWSER_SCENARIOS]
title = "browsers"
paths = ["browser/"]
required_variant = "firefox"
[requirements]
"UU-01" = "a page"
"""

CONFTEST = """
import pytest

OUTCOME = {outcomes!r}

@pytest.fixture(params=["firefox", "chromium"])
def browser(request):
    what = OUTCOME[request.param]
    if what == "absent":
        pytest.skip(f"{{request.param}} absent: not installed")
    return what

def pytest_collection_modifyitems(items):
    for item in items:
        item.add_marker(pytest.mark.variant(item.callspec.params["browser"]))
"""

SCENARIOS = """
import pytest

@pytest.mark.req("UU-01")
@pytest.mark.parametrize("scenario", ["login", "stream"])
def test_scenario(browser, scenario):
    if browser == "partial" and scenario == "stream":
        pytest.skip("no stream here")
    assert browser != "fail"
"""

CASES = {
    "both pass": ({"firefox": "ok", "chromium": "ok"},
                  ("PASS", ["firefox", "chromium"], "CURRENT")),
    "chromium absent": ({"firefox": "ok", "chromium": "absent"},
                        ("PASS", ["firefox"], "CURRENT")),
    "firefox absent": ({"firefox": "absent", "chromium": "ok"},
                       ("NOT_RUN", ["chromium"], "NOT_RUN")),
    "chromium fails": ({"firefox": "ok", "chromium": "fail"}, ("FAIL", [], "FAIL")),
    "chromium partly skipped": ({"firefox": "ok", "chromium": "partial"},
                                ("NOT_RUN", ["firefox"], "CURRENT")),
    "both absent": ({"firefox": "absent", "chromium": "absent"}, ("NOT_RUN", [], "NOT_RUN")),
}


def _run(pytester: pytest.Pytester, outcomes: dict[str, str], *extra: str) -> None:
    pytester.makefile(".toml", requirements=REQUIREMENTS)
    pytester.mkdir("browser")
    (pytester.path / "browser" / "conftest.py").write_text(CONFTEST.format(outcomes=outcomes))
    (pytester.path / "browser" / "test_pages.py").write_text(SCENARIOS)
    pytester.runpytest_subprocess("-p", "labfy_ref.report.pytest_plugin", "--requirements",
                                  "requirements.toml", "--strict-markers",
                                  "-p", "no:cacheprovider", *extra)


@pytest.mark.req("QR-01")
def test_each_tests_browser_is_recorded_from_a_parallel_run_too(
        pytester: pytest.Pytester) -> None:
    """Under xdist a test's properties reach the controller serialized: its browser is
    still read from them, so the stage folds the same as in a serial run."""
    _run(pytester, {"firefox": "ok", "chromium": "ok"}, "-n", "2")
    document = valid_status(pytester.path / "qualification-report" / "status.json")
    line = document["stages"][0]
    assert (line["status"], line["ran_on"]) == ("PASS", ["firefox", "chromium"]), line
    assert document["requirements"][0]["status"] == "CURRENT"


@pytest.mark.req("UI-07", "QR-01")
@pytest.mark.parametrize("case", list(CASES))
def test_the_browser_stage_and_ui_ids_follow_the_firefox_rule(
        pytester: pytest.Pytester, case: str) -> None:
    outcomes, (stage, ran_on, requirement) = CASES[case]
    _run(pytester, outcomes)
    report = pytester.path / "qualification-report"
    document = valid_status(report / "status.json")
    line = document["stages"][0]
    assert (line["status"], line["ran_on"]) == (stage, ran_on), line
    assert document["requirements"][0]["status"] == requirement, document["requirements"]
    markdown = (report / "STATUS.md").read_text()
    shown = stage + (f" ({', '.join(ran_on)})" if ran_on else "")
    assert f"| BROWSER_SCENARIOS | {shown} |" in markdown
    if "absent" in outcomes.values() and stage == "PASS":
        assert "chromium absent: chromium absent: not installed" in line["reason"]

"""QR-05: status.html is self-contained, escaped, well-formed and shows every status.

The page is rendered by the real renderer from reports built by the real
``build_report`` (and written by the real ``regenerate``); hostile and invalid
text comes in where a report really gets it: requirement titles, test ids,
skip reasons, failure messages, records' fields. The browser scenario
(``qualification/browser/test_status_page.py``) reads the same page in Firefox
and Chromium under our CSP.
"""

from __future__ import annotations

import dataclasses
import json
import re
import unicodedata
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labfy_ref.report import Outcome, Requirements, Run, Status, StatusReport, regenerate
from labfy_ref.report import TestResult as Result
from labfy_ref.report.evidence import (
    BenchRecord,
    BenchRow,
    Conformance,
    Freshness,
    MutationRecord,
    Score,
    Survivor,
)
from labfy_ref.report.html import STYLESHEET, stylesheet, to_html
from labfy_ref.report.model import Change, Changes, Stage, build_report

pytestmark = pytest.mark.req("QR-05")

HOSTILE = ('<script>window.__pwned=1</script><img src=x onerror="window.__pwned=1">'
           "<style>body{display:none}</style>\"'&amp;</details></li></table>")
ALLOWED_TAGS = frozenset({
    "html", "head", "meta", "title", "link", "body", "header", "nav", "main", "section", "h1",
    "h2", "h3", "h4", "p", "span", "div", "strong", "code", "ul", "li", "dl", "dt", "dd",
    "table", "thead", "tbody", "tr", "th", "td", "details", "summary", "a", "figure",
    "figcaption", "img", "svg", "rect", "text", "wbr"})
VOID = frozenset({"meta", "link", "img", "wbr"})
SELF_CLOSING = frozenset({"rect"})  # SVG: written <rect .../> or <rect ...>…</rect>


class Page(HTMLParser):
    """A strict reading of the page: nesting, tags, attributes, ids, headings and text."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.ids: list[str] = []
        self.headings: list[int] = []
        self.text: list[str] = []
        self.feed(text)
        self.close()
        assert self.stack == [], f"unclosed elements {self.stack}"

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        """An opening tag: recorded; pushed unless void."""
        self._record(tag, attrs)
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        """``<x/>``: allowed only for void and SVG elements."""
        assert tag in VOID | SELF_CLOSING, f"<{tag}/> is not an empty element"
        self._record(tag, attrs)

    def handle_endtag(self, tag: str) -> None:
        """A closing tag must close the innermost open element."""
        assert tag not in VOID, f"</{tag}> closes a void element"
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes {self.stack[-1:]}"
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        """Text, unescaped."""
        self.text.append(data)

    def _record(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if dict(attrs).get("id"):
            self.ids.append(str(dict(attrs)["id"]))
        if re.fullmatch(r"h[1-6]", tag):
            self.headings.append(int(tag[1]))

    @property
    def all_text(self) -> str:
        """Every text node, joined."""
        return "".join(self.text)


def shown(text: str) -> str:
    """What HTML text may hold: ``text`` with every character the HTML5 parser calls an
    error (controls but ASCII whitespace, lone surrogates, non-characters) as U+FFFD."""
    def ok(char: str) -> bool:
        point = ord(char)
        return not (unicodedata.category(char) == "Cs"
                    or (point < 0x20 and char not in "\t\n\x0c\r") or 0x7F <= point <= 0x9F
                    or 0xFDD0 <= point <= 0xFDEF or point & 0xFFFE == 0xFFFE)
    return "".join(char if ok(char) else "\ufffd" for char in text)


def checked(report: StatusReport) -> Page:
    """Render ``report``; the page must be writable as UTF-8, well-formed, scriptless,
    unstyled inline, with unique ids, one h1 and no skipped heading level."""
    text = to_html(report)
    text.encode("utf-8")  # strict: a lone surrogate would raise here (and in write_text)
    assert text.startswith("<!doctype html>\n<html lang=\"en\">")
    page = Page(text)
    tags = {tag for tag, _ in page.tags}
    assert tags <= ALLOWED_TAGS, f"unexpected elements {tags - ALLOWED_TAGS}"
    for tag, attrs in page.tags:
        assert "style" not in attrs, f"<{tag}> has a style attribute"
        assert not [a for a in attrs if a.startswith("on")], f"<{tag}> has a handler {attrs}"
        for name in ("href", "src"):
            assert not str(attrs.get(name) or "").lower().startswith(("javascript:", "data:",
                                                                       "http:", "https:", "//"))
    links = [attrs for tag, attrs in page.tags if tag == "link"]
    assert links == [{"rel": "stylesheet", "href": STYLESHEET}]
    assert len(page.ids) == len(set(page.ids)), "duplicate ids"
    assert page.headings.count(1) == 1 and page.headings[0] == 1
    assert all(b <= a + 1 for a, b in zip(page.headings, page.headings[1:], strict=False))
    return page


def _requirements(titles: dict[str, str]) -> Requirements:
    return Requirements(titles=titles, stages=(
        Stage("SECURITY_SUITES", "attacks", paths=("security/",)),
        Stage("BROWSER_SCENARIOS", "browsers", paths=("browser/",), required_variant="firefox"),
        Stage("REAL_LOCAL_MODEL_SMOKE", "smoke", record="smoke")))


def _report(text: str = HOSTILE, **evidence: Any) -> StatusReport:
    """One ID per status, ``text`` in a title, a test id, a skip reason and a message."""
    titles = {"WS-01": f"passes {text}", "WS-02": "fails", "RT-01": "nobody names it",
              "RT-02": "skipped", "RT-03": "fails too", "ZZ-01": "an added prefix"}
    run = Run("qualify", "2026-11-30T16:00:00+00:00", (
        Result(f"t.py::test_a[{text}]", Outcome.PASSED, ("WS-01",)),
        Result("t.py::test_a[2]", Outcome.PASSED, ("WS-01",)),
        Result(f"t.py::test_b[{text}]", Outcome.FAILED, ("WS-02",), message=text),
        Result("t.py::test_c", Outcome.SKIPPED, ("RT-02",), reason=text),
        Result("t.py::test_d", Outcome.FAILED, ("RT-03",)),
        Result("security/t.py::test_e", Outcome.PASSED, ("ZZ-01",)),
        Result("browser/t.py::test_f[firefox]", Outcome.FAILED, ("ZZ-01",), variant="firefox",
               message=text),
    ))
    return build_report(_requirements(titles), [run], None, "2026-11-30T16:01:00+00:00",
                        **evidence)


def _evidence(text: str) -> dict[str, Any]:
    sha = "a" * 64
    return {
        "bench": BenchRecord("2026-11-30", True, (
            BenchRow("micro", text, 1.0, 2.0, text, 0.5, text, True, text),
            BenchRow("micro", "missed", 3.0, 1.0, "ms", 3.0, "≤ 2", False),
            BenchRow("micro", "informational", 3.0, None, "ms", None, None, None)),
            "b" * 64, Freshness.STALE, ("WS-01",)),
        "mutation": MutationRecord(text, (Score(text, 3, 4),), (Score("WS-01", 0, 0),),
                                   (Survivor(text, text, text, ("WS-01",), text),
                                    Survivor("m.py", "m.py:1", "< -> <=", (), None)),
                                   sha, Freshness.CURRENT),
        "conformance": Conformance(f"http://127.0.0.1:9/{text}", text, {"name": text}),
        "screenshots": {text: (f"screens/{text}/{text}.png",)},
    }


def _smoke(text: str) -> dict[str, Any]:
    return {"status": "PASS_LOCAL_SPECIMEN", "reached": text, "reason": text,
            "model": {"file": text, "sha256": text},
            "llama_server": {"version": text, "cpu_variant": text},
            "tokens": {"prompt": 10, "cached": 4, "cached_share_after_round_1": 0.4},
            "turn": {"rounds": [{"ms": 5.0, "prompt_tokens": 10, "cached_tokens": 4},
                                {"ms": float("nan"), "prompt_tokens": "x"}, text]},
            "finished_at": text}


def test_hostile_titles_test_ids_reasons_and_messages_stay_text() -> None:
    report = _report(**_evidence(HOSTILE))
    report = StatusReport(**{**{f: getattr(report, f) for f in report.__dataclass_fields__},
                             "smoke": _smoke(HOSTILE)})
    page = checked(report)
    assert [attrs.get("src") for tag, attrs in page.tags if tag == "img"] == \
        ["screens/%3Cscript%3Ewindow.__pwned%3D1%3C/script%3E%3Cimg%20src%3Dx%20onerror%3D"
         "%22window.__pwned%3D1%22%3E%3Cstyle%3Ebody%7Bdisplay%3Anone%7D%3C/style%3E%22%27"
         "%26amp%3B%3C/details%3E%3C/li%3E%3C/table%3E/%3Cscript%3Ewindow.__pwned%3D1%3C/"
         "script%3E%3Cimg%20src%3Dx%20onerror%3D%22window.__pwned%3D1%22%3E%3Cstyle%3Ebody"
         "%7Bdisplay%3Anone%7D%3C/style%3E%22%27%26amp%3B%3C/details%3E%3C/li%3E%3C/table"
         "%3E.png"]  # the thumbnail only, its path quoted
    text = page.all_text
    for where in (f"passes {HOSTILE}", f"t.py::test_b[{HOSTILE}]", f": {HOSTILE}"):
        assert where in text, where
    assert text.count(HOSTILE) >= 20  # every record field above, as text


@settings(deadline=None, max_examples=60)
@given(st.one_of(
    st.text(),
    st.text(st.characters(codec=None, categories=["Cs", "Cc", "Cf", "Co"])),
    st.binary().map(lambda raw: raw.decode("utf-8", "surrogateescape")),  # raw bytes
    st.lists(st.sampled_from([HOSTILE, "\ud800", "\x00", "\ufffe", "\U0010ffff", "\u202e",
                              "\r\n", "&#0;", "]]>", "<!--"]), max_size=6).map("".join)))
def test_any_text_renders_as_itself_or_as_u_fffd_and_never_as_markup(text: str) -> None:
    report = _report(text, **_evidence(text))
    page = checked(report)
    assert f"passes {shown(text)}" in page.all_text
    assert f"t.py::test_b[{shown(text)}]" in page.all_text  # the failing test's full id
    assert [tag for tag, _ in page.tags].count("img") == 1


def test_every_status_has_its_badge_and_a_colour_readable_on_it() -> None:
    css = stylesheet()
    page = checked(_report(**_evidence("x")))
    badges = {attrs.get("data-status") for tag, attrs in page.tags
              if "badge" in str(attrs.get("class"))}
    statuses = {s.value for s in (Status.CURRENT, Status.FAIL, Status.NOT_RUN, Status.TARGET,
                                  Status.PASS)}
    assert statuses | {"met", "missed", "STALE"} <= badges
    for status in {s.value for s in Status} | {"met", "missed", "stale", "regression"}:
        rule = re.search(r"([^}]*\.s-" + status.lower() + r"\b[^{]*)\{([^}]*)\}", css)
        assert rule, f"no colour for {status}"
        colour = re.search(r"background:\s*(#[0-9a-f]{6})", rule.group(2))
        assert colour and _contrast(colour.group(1), "#ffffff") >= 4.5, (status, colour)


def _contrast(one: str, two: str) -> float:
    def luminance(colour: str) -> float:
        parts = [int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]
        linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in parts]
        return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]
    high, low = sorted((luminance(one), luminance(two)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def test_sections_keep_the_file_order_with_fail_and_not_run_first() -> None:
    page = checked(_report())
    rows = [str(attrs["id"]) for tag, attrs in page.tags if tag == "li"
            and attrs.get("data-testid") == "requirement"]
    assert rows == ["req-WS-02", "req-WS-01", "req-RT-03", "req-RT-02", "req-RT-01", "req-ZZ-01"]
    headings = [i for i in page.ids if i.startswith("sec-")]
    assert headings == ["sec-WS-h", "sec-RT-h", "sec-ZZ-h"]


def test_parametrised_cases_are_counted_not_listed() -> None:
    cases = tuple(Result(f"t.py::test_a[{n}]", Outcome.PASSED, ("WS-01",)) for n in range(9))
    report = build_report(_requirements({"WS-01": "nine cases"}),
                          [Run("r", "2026-11-30", (*cases, Result("t.py::test_b",
                                                                  Outcome.PASSED, ("WS-01",))))],
                          None, "now")
    text = checked(report).all_text
    assert "10 tests in 2 functions" in text
    assert "t.py::test_a \N{MULTIPLICATION SIGN}9 9 passed" in text
    assert "test_a[" not in text
    # as many functions as tests: no "in N functions", past the small integers too
    many = tuple(Result(f"t.py::test_{n}", Outcome.PASSED, ("WS-01",)) for n in range(300))
    text = checked(build_report(_requirements({"WS-01": "many"}), [Run("r", "now", many)],
                                None, "now")).all_text
    assert "300 tests" in text and "function" not in text


def test_a_failure_shows_its_test_and_message_instead_of_the_bare_list() -> None:
    page = checked(_report("assert 'FAILED' == 'COMPLETED'"))
    text = page.all_text
    assert "Failed:t.py::test_b[assert 'FAILED' == 'COMPLETED']: assert 'FAILED' == " \
        "'COMPLETED'" in text
    assert "Failed:t.py::test_d" in text  # no message recorded: the test alone
    assert "browser/t.py::test_f[firefox]: assert" in text  # a stage's failure too


def test_panels_only_when_their_record_exists_and_a_stale_record_says_so() -> None:
    bare = checked(_report())
    assert "evidence" not in bare.ids and not any(i.endswith("-h") and i.split("-")[0] in
                                                  {"smoke", "shots", "bench", "mutation"}
                                                  for i in bare.ids)
    full = _report(**_evidence("x"))
    page = checked(StatusReport(**{**{f: getattr(full, f) for f in full.__dataclass_fields__},
                                   "smoke": _smoke("x")}))
    assert {"evidence-h", "smoke-h", "shots-h", "bench-h", "mutation-h", "conformance-h"} <= \
        set(page.ids)
    text = page.all_text
    assert "STALE These figures were measured on other sources (sources bbbbbbbbbbbb) than " \
        "this report's tests ran on; WS-01 cannot be CURRENT on it." in text
    assert "1 of 2 goals met." in text
    assert "not justified" in text
    assert [dict(a)["aria-label"] for t, a in page.tags if t == "svg"][1:] == [
        "Time per round: round 1 5 ms", "Prompt tokens per round: round 1 10 (4 cached)"]


def test_changes_since_an_earlier_report_are_listed_with_regressions_marked() -> None:
    report = _report()
    changes = Changes("2026-11-29T10:00:00+00:00", f"old/{HOSTILE}.json", 0, (
        Change("requirement", "WS-02", "CURRENT", "FAIL", regression=True),
        Change("stage", "SECURITY_SUITES", None, "PASS", regression=False)))
    page = checked(StatusReport(**{**{f: getattr(report, f) for f in
                                      report.__dataclass_fields__}, "changes": changes}))
    assert "changes-h" in page.ids
    assert f"Compared with old/{HOSTILE}.json: 2 changes, 1 regression." in page.all_text
    assert ("a", {"href": "#req-WS-02"}) in page.tags


def test_write_report_puts_status_css_beside_status_html(tmp_path: Path) -> None:
    Run("qualify", "2026-11-30T16:00:00+00:00", (
        Result("t.py::test_a", Outcome.PASSED, ("AA-01",)),)).write(tmp_path)
    (tmp_path / "requirements.toml").write_text('[requirements]\n"AA-01" = "one"\n')
    _, written = regenerate(tmp_path, tmp_path / "requirements.toml", ("md", "json", "html"))
    assert [path.name for path in written] == ["STATUS.md", "status.json", "status.html",
                                               "status.css"]
    assert (tmp_path / "status.css").read_text("utf-8") == stylesheet()
    page = (tmp_path / "status.html").read_text("utf-8")
    assert "style=" not in page and "<script" not in page
    assert json.loads((tmp_path / "status.json").read_text())["summary"] == {"CURRENT": 1}
    assert '<span class="n" data-testid="total" data-status="CURRENT">1</span>' in page
    _, written = regenerate(tmp_path, tmp_path / "requirements.toml", ("md",))
    assert [path.name for path in written] == ["STATUS.md"]  # no html: no stylesheet written


def test_the_build_reads_what_the_runs_recorded_or_says_it_is_not_recorded() -> None:
    build = {"name": "labfy-ref", "version": "9.8.7", "commit": "c0ffee" * 7, "spec": "r42"}
    run = Run("qualify", "2026-11-30T16:00:00+00:00",
              (Result("t.py::test_a", Outcome.PASSED, ("WS-01",)),), build=build)
    report = build_report(_requirements({"WS-01": "passes"}), [run], None,
                          "2026-11-30T16:01:00+00:00")
    text = checked(report).all_text
    assert "labfy-ref 9.8.7 · commit c0ffeec0ffee · SPEC r42 (tested by qualify)" in text
    assert "not recorded" not in text
    bare = checked(dataclasses.replace(report, build=None)).all_text
    assert "Build" in bare and "not recorded" in bare and "9.8.7" not in bare


def test_a_smoke_record_with_round_times_only_and_a_bench_row_without_a_goal() -> None:
    full = _report(**_evidence("x"))
    smoke = {key: value for key, value in _smoke("x").items() if key != "turn"}
    smoke["timings_ms"] = {"rounds": [5.0, 7.0]}
    page = checked(dataclasses.replace(full, smoke=smoke))
    labels = [attrs.get("aria-label") for tag, attrs in page.tags if tag == "svg"]
    assert "Time per round: round 1 5 ms, round 2 7 ms" in labels
    assert not any(str(label).startswith("Prompt tokens") for label in labels)
    # the informational row: ours, then no baseline, ratio, goal or mark (a dash each)
    assert "informational3 ms\N{EM DASH}\N{EM DASH}\N{EM DASH}\N{EM DASH}" in page.all_text

"""status.html: the qualification report as a page people read (QR-05).

The page needs no script and no network: its only resources are ``status.css``,
written beside it (:func:`write_stylesheet`), and the screenshots under
``screens/`` it links to relatively, so it reads the same opened from disk and
served under our CSP (``style-src 'self'``). No element carries a ``style``
attribute; the charts are inline SVG with presentation attributes; every value
is escaped (:func:`labfy_ref.report.panels.esc`).

What a reader sees first: the build and the runs that produced the report, then
the requirement totals as counts and a bar (CURRENT / FAIL / NOT_RUN / TARGET);
then what changed since an earlier report (with ``--compare``), the stages, the
requirements by SPEC section — FAIL and NOT_RUN first in each, with the reason
and the failing test's message, the tests folded in ``<details>`` with
parametrised cases counted — and last the evidence panels.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path

from labfy_ref.report import panels
from labfy_ref.report.model import Changes, Line, Status, StatusReport, TestResult, merge_runs
from labfy_ref.report.panels import badge, esc, plural, table

STYLESHEET = "status.css"
TOTALS = (Status.CURRENT, Status.FAIL, Status.NOT_RUN, Status.TARGET)
# The bar's colours are the badges' in status.css (SVG takes them as presentation attributes).
FILL = {Status.CURRENT: "#1a7f37", Status.FAIL: "#b42318", Status.NOT_RUN: "#8a5a00",
        Status.TARGET: "#5b616e"}
# SPEC sections by requirement prefix; a prefix of our own (an "added" requirement) shows as
# itself, in requirements.toml's order like the others.
SECTIONS = {"WS": "§2 Workspace", "MC": "§3 Model client", "PR": "§4 Action protocol",
            "GW": "§5 Tools and gateway", "RT": "§6 Runtime",
            "SV": "§7 Workspace server and security", "UI": "§8 UI", "HO": "§9 Host",
            "BR": "§10 Bridge", "SM": "§11 Real model stage",
            "QR": "§12 Qualification and reporting", "WK": "§13 Isolated work driver",
            "CLI": "§14 Command line"}
_FIRST = {Status.FAIL: 0, Status.NOT_RUN: 1}  # the rows that need a reader come first
_TIMES = "\N{MULTIPLICATION SIGN}"


def stylesheet() -> str:
    """The text of ``status.css`` (package data)."""
    return resources.files("labfy_ref.report").joinpath(STYLESHEET).read_text("utf-8")


def write_stylesheet(directory: Path) -> Path:
    """Write ``status.css`` into ``directory`` (beside status.html) atomically; its path."""
    target = directory / STYLESHEET
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(stylesheet(), "utf-8")
    tmp.replace(target)
    return target


@dataclasses.dataclass(slots=True)
class _Group:
    """The recorded cases of one test function: counted by outcome, not listed."""

    base: str
    outcomes: dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def cases(self) -> int:
        return sum(self.outcomes.values())


def _groups(nodeids: Iterable[str], results: Mapping[str, TestResult]) -> list[_Group]:
    groups: dict[str, _Group] = {}
    for nodeid in nodeids:
        base = nodeid.split("[", 1)[0]  # a parametrised case counts under its function
        group = groups.setdefault(base, _Group(base))
        result = results.get(nodeid)
        outcome = result.outcome.value if result is not None else "not recorded"
        group.outcomes[outcome] = group.outcomes.get(outcome, 0) + 1
    return list(groups.values())


def _tests(line: Line, results: Mapping[str, TestResult]) -> str:
    if not line.tests:
        return ""
    groups = _groups(line.tests, results)
    items = "".join(
        f"<li><code>{esc(group.base)}</code>"
        + (f' <span class="count">{_TIMES}{group.cases}</span>' if group.cases > 1 else "")
        + ' <span class="tally">' + esc(", ".join(
            f"{n} {outcome}" for outcome, n in sorted(group.outcomes.items()))) + "</span></li>"
        for group in groups)
    summary = plural(len(line.tests), "test")
    if len(groups) != len(line.tests):
        summary += f" in {plural(len(groups), 'function')}"
    return f'<details><summary>{summary}</summary><ul class="tests">{items}</ul></details>'


def _failures(line: Line) -> str:
    """The line's failed tests (the first few, as the model keeps them) with their messages."""
    items = "".join(
        f"<li><code>{esc(failure.nodeid)}</code>"
        + (f': <span class="message">{esc(failure.message)}</span>' if failure.message else "")
        + "</li>" for failure in line.failures)
    return f'<div class="failure"><p>Failed:</p><ul>{items}</ul></div>' if items else ""


def _reason(line: Line) -> str:
    # A FAIL's reason only names the failed tests, which the failures list shows with messages.
    if not line.reason or (line.failures and line.status is Status.FAIL):
        return ""
    return f'<p class="reason">{esc(line.reason)}</p>'


def _requirement(line: Line, results: Mapping[str, TestResult]) -> str:
    return (f'<li class="req" id="req-{esc(line.name)}" data-testid="requirement">'
            f'<div class="req-head">{badge(line.status.value)} '
            f'<span class="req-id">{esc(line.name)}</span> '
            f'<span class="req-title">{esc(line.title)}</span></div>'
            f"{_reason(line)}{_failures(line)}{_tests(line, results)}</li>")


def by_section(lines: Iterable[Line]) -> dict[str, list[Line]]:
    """Requirements by SPEC section (the ID's prefix), sections in the order they come,
    FAIL then NOT_RUN first within each; the order of the rest is kept."""
    sections: dict[str, list[Line]] = {}
    for line in lines:
        sections.setdefault(line.name.split("-", 1)[0], []).append(line)
    return {name: sorted(members, key=lambda line: _FIRST.get(line.status, 2))
            for name, members in sections.items()}


def _counts(lines: Iterable[Line]) -> dict[Status, int]:
    counts = dict.fromkeys(TOTALS, 0)
    for line in lines:
        counts[line.status] = counts.get(line.status, 0) + 1
    return counts


def _requirements(report: StatusReport, results: Mapping[str, TestResult]) -> str:
    parts = ['<section aria-labelledby="requirements-h" id="requirements">'
             '<h2 id="requirements-h">Requirements by SPEC section</h2>']
    for name, lines in by_section(report.requirements).items():
        counts = ", ".join(f"{n} {status.value}" for status, n in _counts(lines).items() if n)
        parts.append(f'<section class="spec-section" aria-labelledby="sec-{esc(name)}-h">'
                     f'<h3 id="sec-{esc(name)}-h">{esc(name)} — '
                     f'{esc(SECTIONS.get(name, "added"))} <span class="muted">({counts})</span>'
                     '</h3><ul class="reqs">'
                     + "".join(_requirement(line, results) for line in lines)
                     + "</ul></section>")
    return "".join(parts) + "</section>"


def _bar(counts: Mapping[Status, int], label: str) -> str:
    """A horizontal stacked bar of ``counts`` (SVG, presentation attributes only)."""
    total = sum(counts.values()) or 1
    rects, x = [], 0.0
    for status in TOTALS:
        width = 1000 * counts.get(status, 0) / total
        if width:
            rects.append(f'<rect x="{x:.1f}" y="0" width="{width:.1f}" height="24" '
                         f'fill="{FILL[status]}"><title>{status.value} {counts[status]}'
                         "</title></rect>")
        x += width
    return ('<svg class="bar" viewBox="0 0 1000 24" preserveAspectRatio="none" width="100%" '
            f'height="24" role="img" aria-label="{esc(label)}">' + "".join(rects) + "</svg>")


def _totals(report: StatusReport) -> str:
    counts = _counts(report.requirements)
    items = "".join(
        f'<li class="total">{badge(status.value)} '
        f'<span class="n" data-testid="total" data-status="{status.value}">{counts[status]}'
        "</span></li>" for status in TOTALS)
    label = "Requirements: " + ", ".join(f"{s.value} {counts[s]}" for s in TOTALS)
    return ('<section aria-labelledby="totals-h" id="totals"><h2 id="totals-h">Totals</h2>'
            f'<p class="muted">{plural(len(report.requirements), "requirement")}</p>'
            f'<ul class="totals">{items}</ul>{_bar(counts, label)}</section>')


def _stage_name(name: str) -> str:
    return esc(name).replace("_", "_<wbr>")  # REAL_LOCAL_MODEL_SMOKE may wrap at a phone's width


def _stages(report: StatusReport) -> str:
    rows = "".join(
        f'<tr data-testid="stage"><th scope="row">{_stage_name(line.name)}'
        f'<span class="sub">{esc(line.title)}</span></th>'
        f"<td>{badge(line.status.value, line.shown_status)}"
        f'<span class="sub">{esc(", ".join(line.tests))}</span>{_reason(line)}{_failures(line)}'
        "</td></tr>" for line in report.stages)
    return ('<section aria-labelledby="stages-h" id="stages"><h2 id="stages-h">Stages</h2>'
            + table("Stages", ("Stage", "Status and detail"), rows) + "</section>")


def _changes(changes: Changes | None) -> str:
    if changes is None:
        return ""
    rows = "".join(
        '<tr><th scope="row">'
        + (f'<a href="#req-{esc(c.id)}">{esc(c.id)}</a>' if c.kind == "requirement" and c.new
           else esc(c.id))
        + f"</th><td>{esc(c.kind)}</td><td>{esc(c.old or '(absent)')}</td>"
        f"<td>{esc(c.new or '(absent)')}</td>"
        f"<td>{badge('regression') if c.regression else ''}</td></tr>" for c in changes.items)
    body = (table("Changes", ("ID", "Kind", "Was", "Now", "Regression"), rows) if rows
            else "<p>Nothing changed.</p>")
    return ('<section aria-labelledby="changes-h" id="changes" data-testid="changes">'
            f'<h2 id="changes-h">Changed since {esc(changes.since)}</h2>'
            f'<p class="note">Compared with {esc(changes.source)}: '
            f"{plural(len(changes.items), 'change')}, "
            f"{plural(len(changes.regressions), 'regression')}.</p>{body}</section>")


def _build(report: StatusReport) -> str:
    build = report.build
    if build is None:
        return "not recorded"
    source = {"run": "tested by " + ", ".join(build.runs),
              "target": "the conformance target's GET /api/version",
              "report": "the labfy-ref that wrote this report; no run recorded a build"}
    parts = [f"{esc(build.name)} {esc(build.version)}",
             f"commit <code>{esc(build.commit[:12])}</code>" if build.commit else "commit unknown",
             f"SPEC {esc(build.spec)}" if build.spec else ""]
    return (" · ".join(part for part in parts if part)
            + f" ({esc(source.get(build.source, build.source))})")


def _runs(report: StatusReport) -> str:
    return ", ".join(f"{esc(run.name)} ({esc(run.generated_at)}, "
                     f"{plural(len(run.tests), 'test')})" for run in report.runs)


def _target(report: StatusReport) -> list[tuple[str, str]]:
    """A conformance report names its target and the IDs proven against it (QR-03)."""
    if report.conformance is None:
        return []
    proven = report.proven()
    return [("Target", f"<code>{esc(report.conformance.target_url)}</code>"),
            ("Proven against it", f"{len(proven)}: {esc(', '.join(proven)) or 'none'}")]


def _header(report: StatusReport) -> str:
    return ('<header class="top"><h1>labfy-ref qualification status</h1>'
            + panels.facts([("Build", _build(report)),
                            *_target(report),
                            ("Generated", esc(report.generated_at)),
                            ("Runs", _runs(report) or "no recorded run")])
            + "</header>")


def _nav(report: StatusReport, *, evidence: bool) -> str:
    links = [("totals", "Totals")]
    if report.changes is not None:
        links.append(("changes", "Changed"))
    links += [("stages", "Stages"), ("requirements", "Requirements")]
    links += [(f"sec-{name}-h", name) for name in by_section(report.requirements)]
    links += [("evidence", "Evidence")] if evidence else []
    items = "".join(f'<li><a href="#{esc(target)}">{esc(text)}</a></li>'
                    for target, text in links)
    return f'<nav aria-label="Contents"><ul class="contents">{items}</ul></nav>'


def to_html(report: StatusReport) -> str:
    """The status.html document (every value escaped; ``status.css`` is written beside it)."""
    evidence = panels.evidence(report)
    body = (_header(report) + _nav(report, evidence=bool(evidence)) + "<main>"
            + _totals(report) + _changes(report.changes) + _stages(report)
            + _requirements(report, merge_runs(report.runs)) + evidence + "</main>")
    return ('<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            "<title>labfy-ref qualification status</title>"
            f'<link rel="stylesheet" href="{STYLESHEET}"></head><body>{body}</body></html>\n')

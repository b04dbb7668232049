"""Render a :class:`StatusReport` as STATUS.md, status.json and status.html."""

from __future__ import annotations

import json
import re
import unicodedata
from pathlib import Path
from typing import Any

from labfy_ref.report.evidence import eval_freshness, variant_label
from labfy_ref.report.html import to_html, write_stylesheet
from labfy_ref.report.model import Line, StatusReport
from labfy_ref.report.teeth import WEAK_BELOW
from labfy_ref.report.validate import SCHEMA_VERSION

FORMATS = {"md": "STATUS.md", "json": "status.json", "html": "status.html"}


def to_json(report: StatusReport) -> dict[str, Any]:
    """The status.json document (``schemas/status.schema.json``); evidence keys only if present."""
    document: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "generated_at": report.generated_at,
        "summary": report.summary(),
        "runs": [{"name": r.name, "generated_at": r.generated_at, "tests": len(r.tests),
                  "commit": (r.build or {}).get("commit"), "sources_sha256": r.sources_sha256}
                 for r in report.runs],
        "stages": [line.as_json() for line in report.stages],
        "requirements": [line.as_json() for line in report.requirements],
    }
    if report.build is not None:
        document["build"] = report.build.as_json()
    if report.smoke is not None:
        document["smoke"] = dict(report.smoke)
    for key, record in (("bench", report.bench), ("mutation", report.mutation),
                        ("teeth", report.teeth), ("conformance", report.conformance),
                        ("changes", report.changes)):
        if record is not None:
            document[key] = record.as_json()
    if report.screenshots:
        document["screenshots"] = {browser: list(paths)
                                   for browser, paths in report.screenshots.items()}
    return document


#: Markdown that a foreign string could start: emphasis, code, links and images, tables
#: (an underscore only where it could open or close emphasis: not inside a word).
_MD_SPECIAL = re.compile(r"[\\`*\[\]|~]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
#: HTML a Markdown renderer would pass through: written as entities.
_MD_ENTITIES = {"<": "&lt;", ">": "&gt;", "&": "&amp;"}
_CODE_SAFE = re.compile(r"[\w./:@=,+-]+", re.ASCII)


def _md_cell(text: object) -> str:
    """Any text as inert Markdown on one line: no HTML, link, emphasis, code or cell break.

    Everything a report shows that it did not write itself (an old status file, a
    results file, a conformance target's version answer, a model file name, a
    skip reason) goes through here, in a table cell or in running text.
    """
    escaped = _MD_SPECIAL.sub(lambda found: "\\" + found.group(), str(text))
    return "".join(_MD_ENTITIES.get(char, " " if char in "\r\n" else char) for char in escaped)


def _grouped(nodeids: tuple[str, ...]) -> str:
    """Tests by function: parametrized cases are counted, not listed one by one."""
    counts: dict[str, int] = {}
    for nodeid in nodeids:
        base = nodeid.split("[", 1)[0]
        counts[base] = counts.get(base, 0) + 1
    return ", ".join(_code(base) + (f" x{n}" if n > 1 else "") for base, n in counts.items())


def _code(text: str) -> str:
    """A code span of ``text``; one holding a backtick (or markup) is escaped text instead."""
    return f"`{text}`" if _CODE_SAFE.fullmatch(text) else _md_cell(text)


def _md_row(line: Line, *, tests: bool) -> str:
    cells = [_md_cell(line.name), _md_cell(line.shown_status), _md_cell(line.title)]
    if tests:
        cells.append(_grouped(line.tests) or "—")  # code spans of safe names, else escaped
    cells.append(_md_cell(line.reason or ""))
    return "| " + " | ".join(cells) + " |"


def _md_build(report: StatusReport) -> list[str]:
    build = report.build
    if build is None:
        return []
    where = {"run": "tested by " + ", ".join(_code(name) for name in build.runs),
             "target": "the conformance target's GET /api/version",
             "report": "no run recorded its build: this is the code that wrote the report"}
    out = [f"Build: {_md_cell(build.name)} {_md_cell(build.version)}, commit "
           f"{_md_cell(build.commit or 'unknown')}, SPEC {_md_cell(build.spec or 'unknown')} "
           f"({where[build.source]}).", ""]
    if report.conformance is not None:
        proven = report.proven()
        out += [f"Conformance target: {_md_cell(report.conformance.target_url)}. Proven "
                f"against it ({len(proven)}): {_md_cell(', '.join(proven) or 'none')}. Every "
                "other ID needs a local build, a user login or the kit's provider (NOT_RUN) "
                "or has no test.", ""]
    return out


def _md_changes(report: StatusReport) -> list[str]:
    changes = report.changes
    if changes is None:
        return []
    out = [f"## Changed since {_md_cell(changes.since)}", "",
           f"Compared with {_md_cell(changes.source)}"
           f" (schema version {changes.old_schema_version}).", ""]
    if not changes.items:
        return [*out, "Nothing changed.", ""]
    out += ["| Kind | ID | Was | Now | Regression |", "|---|---|---|---|---|"]
    out += [f"| {c.kind} | {_md_cell(c.id)} | {_md_cell(c.old or '(absent)')} | "
            f"{_md_cell(c.new or '(absent)')} | {'yes' if c.regression else ''} |"
            for c in changes.items]
    return [*out, ""]


def _sources(freshness: str, sha: str | None) -> str:
    shown = f"`{sha[:12]}…`" if sha else "not recorded"
    mark = {"stale": "STALE (measured other sources than these tests ran on)",
            "unknown": "unknown"}.get(freshness, "current")
    return f"sources {shown}: {mark}"


def _md_evidence(report: StatusReport) -> list[str]:
    out = [f"- {label} ({_md_cell(entry['finished_at'])}, commit "
           f"{_md_cell(str(entry.get('commit'))[:12])}): "
           f"{_md_cell(entry['model']['file'])} · {_md_cell(entry['agent'])}"
           + _md_cell(variant_label(entry.get("ablate")))
           + f": {entry['passed']} of {entry['total']} tasks passed "
           f"({entry['pass_rate']:.0%}, {entry['runs']} run(s) each); agent "
           + _sources(eval_freshness(entry, report.agent_sha256).value,
                      entry.get("agent_sha256")) + "."
           for label, record in (("Eval", report.eval_record),
                                 ("Eval matrix (committed)", report.eval_matrix))
           for entry in (record or {}).get("entries", [])]
    if report.bench is not None:
        bench = report.bench.as_json()
        missed = [row.figure for row in report.bench.rows if row.met is False]
        out.append(f"- Bench ({_md_cell(bench['at'])}{', quick' if bench['quick'] else ''}): "
                   f"{bench['goals']['met']} of {bench['goals']['total']} goals met"
                   + (f" (missed: {_md_cell('; '.join(missed))})" if missed else "")
                   + f"; {_sources(bench['sources'], bench['sources_sha256'])}.")
    if report.mutation is not None:
        mutation = report.mutation
        killed = sum(s.killed for s in mutation.modules)
        total = sum(s.total for s in mutation.modules)
        unjustified = sum(s.justification is None for s in mutation.survivors)
        out.append(f"- Mutation ({_md_cell(mutation.at)}): {killed} of {total} mutants killed in "
                   f"{len(mutation.modules)} modules, {len(mutation.survivors)} surviving "
                   f"({unjustified} not justified); "
                   f"{_sources(mutation.freshness.value, mutation.sources_sha256)}"
                   + (f" (changed since: {_md_cell(', '.join(mutation.changed))}; only "
                      "their IDs wait for a rerun)" if mutation.changed else "") + ".")
    if report.teeth is not None:
        teeth = report.teeth
        faults = (f"faults ({_md_cell(teeth.at)}, {teeth.wall_seconds:g} s): {teeth.killed} "
                  f"of {teeth.faults} killed" if teeth.at is not None else "no fault run")
        modules = f"mutation records of {len(teeth.modules)} modules" + (
            f" ({len(teeth.stale)} stale, not counted: "
            f"{_md_cell(', '.join(module for module, _ in teeth.stale))})" if teeth.stale else "")
        out.append(f"- Teeth: {faults}; {modules}; {len(teeth.rows)} IDs attributed, "
                   + (f"weak (own tests kill under {WEAK_BELOW:.0%}): "
                      f"{_md_cell(', '.join(teeth.weak))}" if teeth.weak else "none weak")
                   + " (table below).")
    if report.screenshots:
        out.append("- Screenshots: " + ", ".join(
            f"{_md_cell(browser)} {len(paths)}" for browser, paths in report.screenshots.items())
            + " (under `screens/`).")
    if report.conformance is not None:
        target = report.conformance
        out.append(f"- Conformance target: {_md_cell(target.target_url)} answered "
                   f"{_md_cell(json.dumps(dict(target.version), sort_keys=True))}.")
    return ["## Evidence", "", *out, "", *_teeth_table(report)] if out else []


#: Survivors listed per ID in STATUS.md (status.json has them all).
SHOWN_SURVIVORS = 8


def _teeth_table(report: StatusReport) -> list[str]:
    """Per ID: faults and mutants attributed to it, and how many its own tests killed."""
    if report.teeth is None or not report.teeth.rows:
        return []

    def survivors(row: Any) -> str:
        every = [*row.survivors, *row.mutant_survivors]
        more = f" … and {len(every) - SHOWN_SURVIVORS} more" \
            if len(every) > SHOWN_SURVIVORS else ""
        return _md_cell("; ".join(every[:SHOWN_SURVIVORS]) + more) or "—"

    rows = [f"| {_md_cell(row.req)} | {row.killed}/{row.attributed} | "
            f"{row.mutants_killed}/{row.mutants} | {'weak' if row.weak else 'ok'} | "
            f"{survivors(row)} |" for row in report.teeth.rows]
    stale = [f"- stale (its module changed since; not counted): {_md_cell(module)} "
             f"({_md_cell(', '.join(ids))})" for module, ids in report.teeth.stale]
    return ["## Teeth per requirement", "",
            "Deliberate faults of `qualification/mutants` and operator mutants of the code each "
            "ID declares (`[code]` of requirements.toml) attributed to it; a kill counts for an "
            "ID only when a test naming that ID killed it; equivalent mutants are not counted.",
            "", "| ID | Faults killed | Mutants killed | Teeth | Not killed by its own tests |",
            "|---|---|---|---|---|", *rows, "", *stale, *([""] if stale else [])]


def to_markdown(report: StatusReport) -> str:
    """The STATUS.md document."""
    summary = ", ".join(f"{status} {count}" for status, count in report.summary().items())
    out = [
        "# labfy-ref qualification status",
        "",
        f"Generated {report.generated_at} from "
        + (", ".join(f"{_code(r.name)} ({_md_cell(r.generated_at)}, {len(r.tests)} tests)"
                     for r in report.runs)
           or "no recorded run")
        + ".",
        "",
        *_md_build(report),
        f"Requirements: {summary}.",
        "",
        *_md_changes(report),
        "## Stages",
        "",
        "| Stage | Status | Title | Detail |",
        "|---|---|---|---|",
        *(_md_row(line, tests=False) for line in report.stages),
        "",
        "## Requirements",
        "",
        "| ID | Status | Title | Tests | Reason |",
        "|---|---|---|---|---|",
        *(_md_row(line, tests=True) for line in report.requirements),
        "",
        *_md_evidence(report),
    ]
    return _plain("\n".join(out))


def _plain(text: str) -> str:
    """Text a file can hold and a terminal shows as is: a lone surrogate (a skip reason may carry
    one) becomes its ``\\udXXX`` escape, a control character other than newline (or a
    bidirectional override) a space."""
    return "".join(
        ch if ch == "\n" or (unicodedata.category(ch) not in {"Cc", "Cs"} and ch not in _BIDI)
        else (f"\\u{ord(ch):04x}" if unicodedata.category(ch) == "Cs" else " ")
        for ch in text)


#: Bidirectional overrides and isolates: they reorder what a reader sees (shown as a space).
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e"
                  "\u2066\u2067\u2068\u2069")


def write_report(report: StatusReport, directory: Path, formats: tuple[str, ...]) -> list[Path]:
    """Write the chosen formats into ``directory`` atomically; return the paths.

    Every format is rendered before any file is written, so a record one of them
    cannot render leaves the previous report whole. status.html comes with its
    stylesheet, status.css, written beside it (its path follows).
    """
    renderers = {"md": to_markdown, "json": lambda r: json.dumps(to_json(r), indent=2) + "\n",
                 "html": to_html}
    rendered = [(fmt, renderers[fmt](report)) for fmt in formats]
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for fmt, text in rendered:
        target = directory / FORMATS[fmt]
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_text(text, "utf-8")
        tmp.replace(target)
        written.append(target)
        if fmt == "html":
            written.append(write_stylesheet(directory))
    return written

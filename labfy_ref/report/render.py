"""Render a :class:`StatusReport` as STATUS.md, status.json and status.html."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from labfy_ref.report.model import Line, StatusReport

FORMATS = {"md": "STATUS.md", "json": "status.json", "html": "status.html"}


def to_json(report: StatusReport) -> dict[str, Any]:
    """The status.json document."""
    return {
        "generated_at": report.generated_at,
        "summary": report.summary(),
        "runs": [{"name": r.name, "generated_at": r.generated_at, "tests": len(r.tests)}
                 for r in report.runs],
        "stages": [line.as_json() for line in report.stages],
        "requirements": [line.as_json() for line in report.requirements],
    }


def _md_cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _grouped(nodeids: tuple[str, ...]) -> str:
    """Tests by function: parametrized cases are counted, not listed one by one."""
    counts: dict[str, int] = {}
    for nodeid in nodeids:
        base = nodeid.split("[", 1)[0]
        counts[base] = counts.get(base, 0) + 1
    return ", ".join(f"`{base}`" + (f" x{n}" if n > 1 else "") for base, n in counts.items())


def _md_row(line: Line, *, tests: bool) -> str:
    cells = [line.name, line.shown_status, _md_cell(line.title)]
    if tests:
        cells.append(_md_cell(_grouped(line.tests)) or "—")
    cells.append(_md_cell(line.reason or ""))
    return "| " + " | ".join(cells) + " |"


def to_markdown(report: StatusReport) -> str:
    """The STATUS.md document."""
    summary = ", ".join(f"{status} {count}" for status, count in report.summary().items())
    out = [
        "# labfy-ref qualification status",
        "",
        f"Generated {report.generated_at} from "
        + (", ".join(f"`{r.name}` ({r.generated_at}, {len(r.tests)} tests)" for r in report.runs)
           or "no recorded run")
        + ".",
        "",
        f"Requirements: {summary}.",
        "",
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
    ]
    return "\n".join(out)


def to_html(report: StatusReport) -> str:
    """A standalone status.html (every value escaped)."""
    def rows(lines: tuple[Line, ...]) -> str:
        return "\n".join(
            "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in
                             (line.name, line.shown_status, line.title,
                              ", ".join(line.tests), line.reason or "")) + "</tr>"
            for line in lines)
    head = "<tr><th>Name</th><th>Status</th><th>Title</th><th>Tests</th><th>Reason</th></tr>"
    return (
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>labfy-ref status</title>"
        "</head><body><h1>labfy-ref qualification status</h1>"
        f"<p>Generated {html.escape(report.generated_at)}</p>"
        f"<h2>Stages</h2><table>{head}{rows(report.stages)}</table>"
        f"<h2>Requirements</h2><table>{head}{rows(report.requirements)}</table>"
        "</body></html>\n"
    )


def write_report(report: StatusReport, directory: Path, formats: tuple[str, ...]) -> list[Path]:
    """Write the chosen formats into ``directory`` atomically; return the paths."""
    renderers = {"md": to_markdown, "json": lambda r: json.dumps(to_json(r), indent=2) + "\n",
                 "html": to_html}
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for fmt in formats:
        target = directory / FORMATS[fmt]
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_text(renderers[fmt](report), "utf-8")
        tmp.replace(target)
        written.append(target)
    return written

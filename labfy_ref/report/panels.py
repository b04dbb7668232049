"""The pieces of status.html: escaping, badges, tables, and the evidence panels (QR-05).

Every value that comes from a run, a record or requirements.toml goes through
:func:`esc`, which escapes it and replaces what cannot be written as UTF-8 or is
not allowed as HTML text (lone surrogates, control characters, non-characters)
with U+FFFD. Nothing here writes a ``style`` attribute or a script: colours are
classes of ``status.css``, and the charts are inline SVG with presentation
attributes (``fill``, ``width``, ...). Each panel renders only when its record
exists (an empty string otherwise).
"""

from __future__ import annotations

import html
import math
import re
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from labfy_ref.report.evidence import (
    BenchRecord,
    Conformance,
    Freshness,
    MutationRecord,
    Score,
    eval_freshness,
    variant_label,
)
from labfy_ref.report.model import StatusReport
from labfy_ref.report.teeth import WEAK_BELOW, TeethRecord

# Not writable as UTF-8 (lone surrogates) or an error to the HTML parser: controls other
# than ASCII whitespace, and the non-characters (U+FDD0..U+FDEF, the last two of each plane).
_NONCHARACTERS = "".join(f"{chr(plane + 0xFFFE)}{chr(plane + 0xFFFF)}"
                         for plane in range(0, 0x110000, 0x10000))
_UNSAFE = re.compile(f"[\x00-\x08\x0b\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufdd0-\ufdef"
                     f"{_NONCHARACTERS}]")
INK, BLUE, GREEN = "#1d1d1f", "#0b57a4", "#1a7f37"  # status.css's text, link and PASS colours


def esc(value: object) -> str:
    """``value`` as HTML text or attribute value: escaped, unsafe characters as U+FFFD."""
    return html.escape(_UNSAFE.sub("\ufffd", str(value)), quote=True)


def badge(status: str, shown: str | None = None) -> str:
    """A status badge: its colour is the class ``s-<status>`` of status.css."""
    return (f'<span class="badge s-{esc(status.lower())}" data-status="{esc(status)}">'
            f"{esc(shown or status)}</span>")


def plural(count: int, word: str) -> str:
    """``1 test``, ``2 tests``."""
    return f"{count} {word}" + ("" if count == 1 else "s")


def table(label: str, heads: Sequence[str], rows: str) -> str:
    """A table in a focusable region that scrolls sideways on a narrow screen, not the page."""
    head = "".join(f'<th scope="col">{esc(h)}</th>' for h in heads)
    return (f'<div class="scroll" role="region" aria-label="{esc(label)}" tabindex="0">'
            f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div>")


def facts(pairs: Iterable[tuple[str, str]]) -> str:
    """A definition list of (term, value as escaped HTML) pairs; empty values left out."""
    items = "".join(f"<dt>{esc(term)}</dt><dd>{value}</dd>" for term, value in pairs if value)
    return f'<dl class="facts">{items}</dl>' if items else ""


def _panel(key: str, title: str, body: str) -> str:
    return (f'<section class="panel" aria-labelledby="{key}-h" data-testid="panel">'
            f'<h3 id="{key}-h">{esc(title)}</h3>{body}</section>')


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _number(value: Any) -> float | None:
    """A record's figure, or None for anything that is not a finite number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _hbars(label: str, unit: str, rows: Sequence[tuple[str, float, float | None]]) -> str:
    """A small horizontal bar chart of (row label, value, part of it drawn green or None)."""
    top = max((value for _, value, _ in rows), default=0.0) or 1.0
    height, out = 22 * len(rows) + 4, []
    for n, (name, value, part) in enumerate(rows):
        y, width = 22 * n + 2, 300 * max(value, 0.0) / top
        out.append(f'<text x="0" y="{y + 14}" font-size="13" fill="{INK}">{esc(name)}</text>'
                   f'<rect x="70" y="{y}" width="{width:.1f}" height="16" fill="{BLUE}"/>')
        if part is not None:
            share = 300 * min(max(part, 0.0), value) / top
            out.append(f'<rect x="70" y="{y}" width="{share:.1f}" height="16" fill="{GREEN}"/>')
        out.append(f'<text x="{76 + width:.1f}" y="{y + 14}" font-size="13" fill="{INK}">'
                   f"{esc(f'{value:,.0f} {unit}')}</text>")
    return (f'<svg class="chart" viewBox="0 0 460 {height}" width="460" height="{height}" '
            f'role="img" aria-label="{esc(label)}">' + "".join(out) + "</svg>")


def _smoke_charts(record: Mapping[str, Any]) -> str:
    """Per-round time and prompt tokens (cached part green), from the record's turn rounds."""
    rounds = [r for r in _dict(record.get("turn")).get("rounds") or () if isinstance(r, dict)]
    named = [(f"round {n + 1}", r) for n, r in enumerate(rounds)]
    times = [(name, _number(r.get("ms"))) for name, r in named]
    if not rounds:  # a record without per-round detail: the times alone
        times = [(f"round {n + 1}", _number(ms)) for n, ms in
                 enumerate(_dict(record.get("timings_ms")).get("rounds") or ())]
    drawn = [(name, ms, None) for name, ms in times if ms is not None]
    out = ""
    if drawn:
        out += "<h4>Time per round</h4>" + _hbars(
            "Time per round: " + ", ".join(f"{n} {v:,.0f} ms" for n, v, _ in drawn), "ms", drawn)
    tokens = [(name, _number(r.get("prompt_tokens")), _number(r.get("cached_tokens")))
              for name, r in named]
    bars = [(name, t, c) for name, t, c in tokens if t is not None]
    if bars:
        out += ('<h4>Prompt tokens per round</h4><p class="note">The green part was served '
                "from the prompt cache.</p>" + _hbars(
                    "Prompt tokens per round: " + ", ".join(
                        f"{n} {t:,.0f} ({c or 0:,.0f} cached)" for n, t, c in bars),
                    "tokens", bars))
    return out


def smoke(record: Mapping[str, Any] | None) -> str:
    """The real-model smoke record: model, llama.cpp, stage reached, rounds, cache share.

    A matrix record (SM-08) shows one panel per model, each with its own charts.
    """
    if record is None:
        return ""
    entries = record.get("entries")
    if isinstance(entries, list) and entries:
        return "".join(_smoke_one(entry, f" — {_dict(entry.get('model')).get('file') or ''}",
                                  f"smoke-{index}")
                       for index, entry in enumerate(entries) if isinstance(entry, Mapping))
    return _smoke_one(record, "", "smoke")


def _smoke_one(record: Mapping[str, Any], title: str, key: str) -> str:
    model, server, tokens = (_dict(record.get(k)) for k in ("model", "llama_server", "tokens"))
    share = _number(tokens.get("cached_share_after_round_1"))
    counts = ", ".join(f"{_number(tokens.get(k)) or 0:,.0f} {k}"
                       for k in ("prompt", "completion", "cached") if k in tokens)
    body = facts([
        ("Status", badge(str(record.get("status", "unknown")))),
        ("Model file", esc(model.get("file") or "")),
        ("SHA-256", f"<code>{esc(model['sha256'])}</code>" if model.get("sha256") else ""),
        ("llama.cpp", esc(" · ".join(str(server[k]) for k in ("version", "package")
                                     if server.get(k)))),
        ("CPU variant", esc(server.get("cpu_variant") or "")),
        ("Stage reached", esc(record.get("reached") or "")),
        ("Reason", esc(record.get("reason") or "")),
        ("Tokens", esc(counts)),
        ("Cached share", esc(f"{share:.1%} of the prompt tokens after round 1")
         if share is not None else ""),
        ("Finished", esc(record.get("finished_at") or ""))])
    return _panel(key, f"Real-model smoke{title}", body + _smoke_charts(record))


def _href(path: str) -> str:
    """A relative URL of ``path`` (so the page works from disk and served): a file name read
    from disk that is not UTF-8 (surrogate escapes) keeps its bytes; nothing else can fail."""
    try:
        return urllib.parse.quote(path, errors="surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate no file name holds: shown, never raised
        return urllib.parse.quote(path, errors="replace")


def _shot(path: str) -> str:
    parts = path.split("/")
    name = parts[-1].removesuffix(".png")
    browser = parts[-2] if len(parts) > 1 else ""
    href = esc(_href(path))
    words = name.removeprefix("test_").replace("_", " ")  # a scenario's name, read as words
    return (f'<li><figure><a href="{href}"><img src="{href}" loading="lazy" '
            f'alt="{esc(f"{name} in {browser}")}"></a>'
            f"<figcaption>{esc(words)}</figcaption></figure></li>")


def screenshots(shots: Mapping[str, Sequence[str]]) -> str:
    """Thumbnails of each browser's end-of-scenario screenshots, linking to the full images."""
    if not shots:
        return ""
    body = ['<p class="note">The end state of each scenario; a thumbnail opens the full '
            "image.</p>"]
    for browser, paths in shots.items():
        body.append(f"<h4>{esc(browser)} ({plural(len(paths), 'screenshot')})</h4>"
                    '<ul class="shots">' + "".join(_shot(p) for p in paths) + "</ul>")
    return _panel("shots", "Browser screenshots", "".join(body))


def _fresh(record: BenchRecord | MutationRecord, what: str) -> str:
    """Whether ``record`` was measured on the sources this report's tests ran on, visibly."""
    sha = f" (sources {record.sources_sha256[:12]})" if record.sources_sha256 else ""
    if record.freshness is Freshness.STALE:
        backs = f"; {', '.join(record.reqs)} cannot be CURRENT on it" if record.reqs else ""
        return (f'<p class="stale" data-testid="stale">{badge("STALE")} These {esc(what)} were '
                f"measured on other sources{esc(sha)} than this report's tests ran on"
                f"{esc(backs)}.</p>")
    if record.freshness is Freshness.UNKNOWN:
        return f'<p class="note">Sources measured: unknown{esc(sha)}.</p>'
    return f'<p class="note">Measured on the sources the tests ran on{esc(sha)}.</p>'


def _figure(value: float | None, unit: str = "") -> str:
    return "—" if value is None else esc(f"{value:,.4g}" + (f" {unit}" if unit else ""))


def bench(record: BenchRecord | None) -> str:
    """The benchmark table: each figure against its baseline, goal and a met/missed mark."""
    if record is None:
        return ""
    rows = "".join(
        f'<tr><th scope="row">{esc(row.figure)}'
        + (f'<span class="sub">{esc(row.note)}</span>' if row.note else "")
        + f'</th><td class="num">{_figure(row.ours, row.unit)}</td>'
        f'<td class="num">{_figure(row.baseline, row.unit)}</td>'
        f'<td class="num">{_figure(row.ratio)}</td><td>{esc(row.goal or "—")}</td>'
        f"<td>{badge('met' if row.met else 'missed') if row.met is not None else '—'}</td>"
        "</tr>" for row in record.rows)
    goals = [row for row in record.rows if row.met is not None]
    quick = " (quick)" if record.quick else ""
    return _panel("bench", "Benchmarks",
                  f"<p>{esc(record.at)}{esc(quick)}: {sum(bool(r.met) for r in goals)} of "
                  f"{plural(len(goals), 'goal')} met.</p>{_fresh(record, 'figures')}"
                  + table("Benchmarks", ("Figure", "Ours", "Baseline", "Ratio", "Goal", "Met"),
                          rows))


def _scores(label: str, key: str, scores: Sequence[Score]) -> str:
    rows = "".join(
        f'<tr><th scope="row">{esc(s.name)}</th><td class="num">{s.killed}</td>'
        f'<td class="num">{s.total}</td>'
        f'<td class="num">{esc(f"{s.killed / s.total:.0%}" if s.total else "—")}</td></tr>'
        for s in scores)
    return f"<h4>{esc(label)}</h4>" + table(label, (key, "Killed", "Mutants", "Score"), rows)


def mutation(record: MutationRecord | None) -> str:
    """Mutants killed per module and per requirement ID, and every survivor with its reason."""
    if record is None:
        return ""
    survivors = "".join(
        f"<li><code>{esc(s.location)}</code> {esc(s.mutation)}"
        + (f" ({esc(', '.join(s.reqs))})" if s.reqs else "") + ": "
        + (esc(s.justification) if s.justification else
           '<strong class="failure">not justified</strong>') + "</li>"
        for s in record.survivors)
    return _panel("mutation", "Mutation scores",
                  f"<p>{esc(record.at)}</p>{_fresh(record, 'scores')}"
                  + (f"<p>Changed since measured: {esc(', '.join(record.changed))} (only "
                     "their IDs wait for a rerun).</p>" if record.changed else "")
                  + _scores("By module", "Module", record.modules)
                  + _scores("By requirement", "ID", record.requirements)
                  + f"<h4>Surviving mutants ({len(record.survivors)})</h4>"
                  + (f'<ul class="survivors">{survivors}</ul>' if survivors
                     else "<p>None.</p>"))


def conformance(target: Conformance | None) -> str:
    """The implementation the suite was pointed at, and what its GET /api/version says."""
    if target is None:
        return ""
    answer = facts((str(k), esc(v)) for k, v in target.version.items())
    return _panel("conformance", "Conformance target",
                  facts([("URL", f"<code>{esc(target.target_url)}</code>"),
                         ("At", esc(target.at))])
                  + f"<h4>Its GET /api/version</h4>{answer or '<p>(empty)</p>'}")


def evaluation(record: Mapping[str, Any] | None, *, matrix: bool = False,
               agent: str | None = None) -> str:
    """An eval record (EV-01): a pass rate per model and agent, then each task's outcome.

    ``matrix``: the committed full-matrix record, shown with when it was updated, the
    commits it ran on and whether it measured the agent of these sources (``agent``).
    """
    if record is None:
        return ""
    entries = [e for e in record.get("entries", []) if isinstance(e, dict)]
    rows = "".join(
        f"<tr><td>{esc(e['model']['file'])}</td><td>{esc(e['agent'])}"
        f"{esc(variant_label(e.get('ablate')))}</td>"
        f"<td>{e['passed']} / {e['total']}</td><td>{e['pass_rate']:.0%}</td>"
        f"<td>{esc(e['runs'])}</td>"
        f"<td>{esc(e.get('prompt_tokens') if e.get('prompt_tokens') is not None else '')}</td>"
        f"<td>{esc(e['finished_at'])}</td><td><code>{esc(str(e.get('commit'))[:12])}</code>"
        f"</td><td>{esc(eval_freshness(e, agent).value)}</td></tr>" for e in entries)
    what = "the committed full matrix" if matrix else "this run"
    body = ""
    if matrix:
        commits = sorted({str(e.get("commit"))[:12] for e in entries})
        stale = sum(eval_freshness(e, agent) is not Freshness.CURRENT for e in entries)
        body += facts([("Record", "<code>qualification/eval/eval-record.json</code>"),
                       ("Updated", esc(record.get("updated_at", ""))),
                       ("Commits", esc(", ".join(commits))),
                       ("Agent measured", esc(f"{len(entries) - stale} of {len(entries)} "
                                              "entries measured the agent of these sources"))])
    body += table(f"Eval pass rates: {what}",
                  ("Model", "Agent", "Passed", "Rate", "Runs", "Prompt tokens", "Finished",
                   "Commit", "Agent"), rows)
    for e in entries:
        tasks = "".join(
            f"<tr><td>{esc(t['task'])}</td><td>{esc(t['run'])}</td>"
            f"<td>{badge('PASS' if t['passed'] else 'FAIL')}</td><td>{esc(t['rounds'])}</td>"
            f"<td>{esc(' '.join(c['tool_id'] for c in t['tool_calls']))}</td>"
            f"<td>{esc('; '.join(t['reasons']))}</td></tr>" for t in e["tasks"])
        title = f"{e['model']['file']} · {e['agent']}" + variant_label(e.get("ablate"))
        body += f"<h4>{esc(title)}</h4>" + table(
            f"Eval tasks ({what}): {title}", ("Task", "Run", "Outcome", "Rounds", "Calls",
                                              "Why"), tasks)
    return _panel("eval-matrix" if matrix else "eval",
                  "Real-model eval: the full matrix" if matrix else "Real-model eval", body)


def teeth(record: TeethRecord | None) -> str:
    """Per ID: faults and mutants attributed to it, those its own tests killed, the others."""
    if record is None:
        return ""
    rows = "".join(
        f'<tr><th scope="row">{esc(row.req)}</th>'
        f'<td class="num">{row.killed}/{row.attributed}</td>'
        f'<td class="num">{row.mutants_killed}/{row.mutants}</td><td>'
        + (badge("FAIL", "weak") if row.weak else badge("CURRENT", "ok"))
        + f"</td><td>{esc('; '.join([*row.survivors, *row.mutant_survivors])) or '—'}</td></tr>"
        for row in record.rows)
    faults = (f"{esc(record.at)}: {record.killed} of {record.faults} faults killed in "
              f"{record.wall_seconds:g} s" if record.at is not None else "No fault run")
    stale = "".join(f"<li>{esc(module)} ({esc(', '.join(ids))})</li>"
                    for module, ids in record.stale)
    return _panel("teeth", "Teeth per requirement",
                  f"<p>{faults}; mutation records of {len(record.modules)} modules. A kill "
                  "counts for an ID only when a test naming that ID killed the fault or the "
                  "mutant of its declared code; equivalent mutants are not counted; under "
                  f"{WEAK_BELOW:.0%} an ID is weak.</p>"
                  + ("<p>Stale records (their module changed since; not counted):</p>"
                     f"<ul>{stale}</ul>" if stale else "")
                  + table("Teeth per requirement", ("ID", "Faults killed", "Mutants killed",
                                                    "Teeth", "Not killed by its own tests"),
                          rows))


def evidence(report: StatusReport) -> str:
    """Every evidence panel whose record exists, under one heading; empty when none does."""
    panels = (smoke(report.smoke)
              + evaluation(report.eval_record, agent=report.agent_sha256)
              + evaluation(report.eval_matrix, matrix=True, agent=report.agent_sha256)
              + screenshots(report.screenshots) + bench(report.bench)
              + mutation(report.mutation) + teeth(report.teeth)
              + conformance(report.conformance))
    if not panels:
        return ""
    return ('<section aria-labelledby="evidence-h" id="evidence"><h2 id="evidence-h">'
            f"Evidence</h2>{panels}</section>")

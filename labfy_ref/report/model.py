"""Requirements, recorded test results and the status they add up to (QR-01, QR-02).

A requirement is ``CURRENT`` only when at least one test names it and every
test naming it passed; ``TARGET`` when none names it; ``FAIL`` when one
failed; ``NOT_RUN`` when none failed but some were skipped (with the reasons).
An ID backed by a bench or mutation record measured on other sources than the
tests ran on (a *stale* record, :mod:`labfy_ref.report.evidence`) is not
``CURRENT`` either: it is ``NOT_RUN`` naming the record. In a conformance
report (QR-03) a test skipped because it needs a local build does not count:
an ID is proven against the target by the tests that could run there.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from labfy_ref.errors import ReportInvalid
from labfy_ref.report.attribution import CodeMap
from labfy_ref.report.evidence import (
    BenchRecord,
    BuildInfo,
    Conformance,
    MutationRecord,
    build_of,
    stale_backing,
)
from labfy_ref.report.teeth import TeethRecord
from labfy_ref.report.validate import RESULTS_VERSIONS, check, load_json, version_of

RESULTS_DIRNAME = "results"
_ID_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-")
_STAGE_CHARS = _ID_CHARS | frozenset("_")
#: A failure's message as recorded: its first line, this long at most.
MESSAGE_CHARS = 240


class Outcome(enum.StrEnum):
    """A test's overall outcome across setup, call and teardown."""

    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"


class Status(enum.StrEnum):
    """Statuses of requirements and stages (the seeds' vocabulary)."""

    CURRENT = "CURRENT"
    TARGET = "TARGET"
    FAIL = "FAIL"
    NOT_RUN = "NOT_RUN"
    PASS = "PASS"
    PASS_LOCAL_SPECIMEN = "PASS_LOCAL_SPECIMEN"


@dataclasses.dataclass(frozen=True, slots=True)
class Stage:
    """A named part of the suite: tests under ``paths``, or an external ``record``."""

    name: str
    title: str
    paths: tuple[str, ...] = ()
    record: str | None = None
    # The variant (browser) every test must pass on; tests on other variants must not fail,
    # and where one of those variants is absent (all its tests skipped) it is named, not held
    # against the stage or the requirement IDs (UI-07).
    required_variant: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Requirements:
    """The requirement IDs with their titles, and the stages, from requirements.toml."""

    titles: Mapping[str, str]
    stages: tuple[Stage, ...]
    #: QR-06: the code each ID declares it is implemented by.
    code: CodeMap = dataclasses.field(default_factory=CodeMap)

    @classmethod
    def load(cls, path: Path) -> Requirements:
        """Read and check ``requirements.toml``."""
        try:
            document = tomllib.loads(path.read_text("utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ReportInvalid(f"cannot read requirements file {path}: {exc}") from exc
        titles = document.get("requirements", {})
        if not titles or not all(isinstance(v, str) for v in titles.values()):
            raise ReportInvalid(f"{path}: [requirements] must map IDs to titles")
        for req_id in titles:
            if not set(req_id) <= _ID_CHARS:
                raise ReportInvalid(f"{path}: malformed requirement id {req_id!r}")
        for name in document.get("stages", {}):
            if not name or not set(name) <= _STAGE_CHARS:
                raise ReportInvalid(f"{path}: malformed stage name {name!r}")
        stages = tuple(
            Stage(
                name=name,
                title=str(spec.get("title", name)),
                paths=tuple(spec.get("paths", ())),
                record=spec.get("record"),
                required_variant=spec.get("required_variant"),
            )
            for name, spec in document.get("stages", {}).items()
        )
        code = CodeMap.from_toml(document.get("code"), document.get("code_none"), titles)
        return cls(titles=dict(titles), stages=stages, code=code)


@dataclasses.dataclass(frozen=True, slots=True)
class TestResult:
    """One test's recorded result."""

    nodeid: str
    outcome: Outcome
    reqs: tuple[str, ...]
    reason: str | None = None
    duration: float = 0.0
    variant: str | None = None  # what it ran on (a browser), from the ``variant`` marker
    message: str | None = None  # a failure's short message: the first line of its error

    def as_json(self) -> dict[str, Any]:
        """JSON form, as stored in a results file."""
        return {"nodeid": self.nodeid, "outcome": self.outcome.value, "reqs": list(self.reqs),
                "reason": self.reason, "duration": round(self.duration, 4),
                "variant": self.variant, "message": self.message}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TestResult:
        """Read one entry of a results file (already checked against its schema)."""
        return cls(nodeid=str(data["nodeid"]), outcome=Outcome(data["outcome"]),
                   reqs=tuple(data["reqs"]), reason=data.get("reason"),
                   duration=float(data.get("duration", 0.0)), variant=data.get("variant"),
                   message=data.get("message"))


def short_message(text: str) -> str:
    """The first non-blank line of a failure's text, bounded (what a reader sees first)."""
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    flat = "".join(ch if ch.isprintable() else " " for ch in first)
    return flat if len(flat) <= MESSAGE_CHARS else flat[: MESSAGE_CHARS - 1] + "…"


@dataclasses.dataclass(frozen=True, slots=True)
class Run:
    """One recorded pytest run (a results file, ``results.schema.json``).

    ``build`` and ``sources_sha256`` say what code the run tested (schema 1); a
    results file written before them (schema 0) reads with both None.
    """

    name: str
    generated_at: str
    tests: tuple[TestResult, ...]
    build: Mapping[str, Any] | None = None  # labfy_ref.buildinfo.build_info() of the tested code
    sources_sha256: str | None = None

    def write(self, results_dir: Path) -> Path:
        """Store the run atomically as ``results/<name>.json``."""
        target = results_dir / RESULTS_DIRNAME / f"{self.name}.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        document = {"schema_version": RESULTS_VERSIONS[-1], "name": self.name,
                    "generated_at": self.generated_at,
                    "build": None if self.build is None else dict(self.build),
                    "sources_sha256": self.sources_sha256,
                    "tests": [t.as_json() for t in self.tests]}
        tmp = target.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(document, indent=1), "utf-8")
        tmp.replace(target)
        return target

    @classmethod
    def read(cls, path: Path) -> Run:
        """One results file, checked against its schema (version 0 or 1)."""
        source = f"results file {path.name}"
        document = load_json(path, "results file")
        version_of(document, source, RESULTS_VERSIONS)
        check(document, "results", source)
        return cls(name=document["name"], generated_at=document["generated_at"],
                   tests=tuple(TestResult.from_json(t) for t in document["tests"]),
                   build=document.get("build"), sources_sha256=document.get("sources_sha256"))

    @classmethod
    def read_all(cls, results_dir: Path) -> list[Run]:
        """Every recorded run under ``results_dir``, oldest first."""
        runs = [cls.read(path) for path in sorted((results_dir / RESULTS_DIRNAME).glob("*.json"))]
        return sorted(runs, key=lambda run: run.generated_at)


@dataclasses.dataclass(frozen=True, slots=True)
class Failure:
    """A failed test of a line, with its short message."""

    nodeid: str
    message: str | None

    def as_json(self) -> dict[str, Any]:
        """JSON form in status.json."""
        return {"nodeid": self.nodeid, "message": self.message}


@dataclasses.dataclass(frozen=True, slots=True)
class Line:
    """One line of the report: a requirement or a stage with its status."""

    name: str
    title: str
    status: Status
    tests: tuple[str, ...] = ()
    reason: str | None = None
    ran_on: tuple[str, ...] = ()  # a stage with variants: those that ran (firefox, chromium)
    failures: tuple[Failure, ...] = ()  # the first failed tests, with their short messages
    #: CURRENT, but its own tests kill under 80 % of the faults and mutants
    #: attributed to it (QR-06).
    weak: bool = False

    def as_json(self) -> dict[str, Any]:
        """JSON form used in status.json (``weak`` only on a weak line)."""
        document = {"id": self.name, "title": self.title, "status": self.status.value,
                    "tests": list(self.tests), "reason": self.reason,
                    "ran_on": list(self.ran_on),
                    "failures": [failure.as_json() for failure in self.failures]}
        return document | ({"weak": True} if self.weak else {})

    @property
    def shown_status(self) -> str:
        """The status as the report prints it: ``PASS (firefox, chromium)`` for variants,
        ``CURRENT (weak)`` for an ID whose own tests lack teeth."""
        return shown(self.status.value, self.ran_on, weak=self.weak)


def shown(status: str, ran_on: Iterable[str] = (), *, weak: bool = False) -> str:
    """A status as printed: its variants in parentheses, or ``(weak)``."""
    ran = list(ran_on)
    return status + (f" ({', '.join(ran)})" if ran else "") + (" (weak)" if weak else "")


def _reasons(tests: Iterable[TestResult]) -> str:
    found = sorted({t.reason or "skipped" for t in tests if t.outcome is Outcome.SKIPPED})
    return "; ".join(found)[:300]


def _fold(tests: list[TestResult], passed: Status, empty: Status, empty_reason: str) -> tuple[
        Status, str | None]:
    if not tests:
        return empty, empty_reason
    if any(t.outcome is Outcome.FAILED for t in tests):
        failed = [t.nodeid for t in tests if t.outcome is Outcome.FAILED]
        return Status.FAIL, "failed: " + ", ".join(failed[:3])
    if all(t.outcome is Outcome.PASSED for t in tests):
        return passed, None
    if any(t.outcome is Outcome.PASSED for t in tests) and passed is Status.PASS:
        return passed, "some skipped: " + _reasons(tests)
    return Status.NOT_RUN, _reasons(tests)


@dataclasses.dataclass(frozen=True, slots=True)
class Change:
    """One requirement or stage whose shown status differs from the old report's.

    ``old`` is None for a line the old report lacked, ``new`` for one it had and
    this one lacks.
    """

    kind: str  # "requirement" or "stage"
    id: str
    old: str | None
    new: str | None
    regression: bool

    def as_json(self) -> dict[str, Any]:
        """JSON form in status.json."""
        return {"kind": self.kind, "id": self.id, "old": self.old, "new": self.new,
                "regression": self.regression}

    def describe(self) -> str:
        """One line: ``changed: requirement AA-02 CURRENT -> FAIL (regression)``."""
        mark = " (regression)" if self.regression else ""
        return (f"changed: {self.kind} {self.id} {self.old or '(absent)'} -> "
                f"{self.new or '(absent)'}{mark}")


@dataclasses.dataclass(frozen=True, slots=True)
class Changes:
    """The comparison with an earlier report: which one, and every line that changed."""

    since: str  # the old report's generated_at
    source: str  # the old status.json as given on the command line
    old_schema_version: int
    items: tuple[Change, ...]

    @property
    def regressions(self) -> tuple[Change, ...]:
        """The changes that are regressions."""
        return tuple(change for change in self.items if change.regression)

    def as_json(self) -> dict[str, Any]:
        """JSON form in status.json."""
        return {"since": self.since, "source": self.source,
                "old_schema_version": self.old_schema_version,
                "items": [change.as_json() for change in self.items]}


@dataclasses.dataclass(frozen=True, slots=True)
class StatusReport:
    """The whole report: stages, then every requirement, then the evidence that exists.

    Every evidence field is None (or empty) when its record is absent; a renderer
    shows a panel only for what is there.
    """

    generated_at: str
    runs: tuple[Run, ...]
    stages: tuple[Line, ...]
    requirements: tuple[Line, ...]
    build: BuildInfo | None = None
    smoke: Mapping[str, Any] | None = None  # smoke-record.json as written
    bench: BenchRecord | None = None
    screenshots: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    mutation: MutationRecord | None = None
    #: faults.json of the last fault run: teeth per requirement ID (QR-06).
    teeth: TeethRecord | None = None
    conformance: Conformance | None = None
    #: eval-record.json as written (EV-01): a figure per model, never a status.
    eval_record: Mapping[str, Any] | None = None
    #: The committed full-matrix eval record (EV-01), and the agent digest of these sources
    #: it is held against (an entry of another digest measured another agent: stale).
    eval_matrix: Mapping[str, Any] | None = None
    agent_sha256: str | None = None
    changes: Changes | None = None  # only with --compare

    def proven(self) -> tuple[str, ...]:
        """The IDs this report's runs prove (CURRENT): against the target, in a conformance run."""
        return tuple(line.name for line in self.requirements if line.status is Status.CURRENT)

    def summary(self) -> dict[str, int]:
        """Count of requirements per status."""
        counts: dict[str, int] = {}
        for line in self.requirements:
            counts[line.status.value] = counts.get(line.status.value, 0) + 1
        return dict(sorted(counts.items()))


def merge_runs(runs: Iterable[Run]) -> dict[str, TestResult]:
    """The latest result of every test across runs (later runs win)."""
    merged: dict[str, TestResult] = {}
    for run in runs:
        for test in run.tests:
            merged[test.nodeid] = test
    return merged


def _failures(tests: Iterable[TestResult]) -> tuple[Failure, ...]:
    return tuple(Failure(t.nodeid, t.message) for t in tests if t.outcome is Outcome.FAILED)[:5]


def _smoke_line(stage: Stage, record: Mapping[str, Any] | None) -> Line:
    if record is None:
        return Line(stage.name, stage.title, Status.NOT_RUN,
                    reason="no smoke record (run `tox -e smoke` with a model file)")
    try:
        status = Status(record["status"])
    except ValueError:
        status = Status.FAIL
    entries = record.get("entries")
    if isinstance(entries, list) and entries:  # the model matrix (SM-08): each model's stage
        return Line(stage.name, stage.title, status,
                    reason=" | ".join(_smoke_entry(entry) for entry in entries
                                      if isinstance(entry, dict))[:1200])
    return Line(stage.name, stage.title, status, reason=_smoke_detail(record)[:500])


def _smoke_detail(record: Mapping[str, Any]) -> str:
    detail = [_smoke_model(record)]
    if record.get("reached") is not None:
        detail.append(f"reached {record['reached']}")
    if record.get("reason"):
        detail.append(str(record["reason"]))
    return "; ".join(part for part in detail if part)


def _smoke_entry(record: Mapping[str, Any]) -> str:
    """One model of the matrix: its status, then what :func:`_smoke_detail` says."""
    return f"{record.get('status')}: {_smoke_detail(record)[:380]}"


def _smoke_model(record: Mapping[str, Any]) -> str:
    """Which model and server a smoke record ran, in one phrase (fields may be missing)."""
    def part(key: str) -> dict[str, Any]:
        value = record.get(key)
        return value if isinstance(value, dict) else {}

    model, server = part("model"), part("llama_server")
    rounds = part("timings_ms").get("rounds")
    parts = [f"model {model.get('file')} (sha256 {str(model.get('sha256'))[:12]}…)"
             if model.get("file") else "",
             f"llama-server {server.get('package') or server.get('version')}"
             if server.get("version") or server.get("package") else "",
             f"cpu {server.get('cpu_variant')}" if server.get("cpu_variant") else "",
             f"{len(rounds)} rounds" if isinstance(rounds, list) else "",
             f"at {record.get('finished_at')}" if record.get("finished_at") else ""]
    return ", ".join(part for part in parts if part)


#: How a conformance run's skip reason starts for a test that needs our own build (QR-03).
LOCAL_BUILD = "needs a local build"


def _absent(test: TestResult, required: frozenset[str], against_target: bool) -> bool:
    """A skipped test on an optional variant (its browser is absent, which the stage says), or,
    against a conformance target, one that needs a local build: it could not have run there,
    so an ID is proven against the target by the tests that could, and NOT_RUN if none could."""
    if test.outcome is not Outcome.SKIPPED:
        return False
    if against_target and (test.reason or "").startswith(LOCAL_BUILD):
        return True
    return test.variant is not None and test.variant not in required


def _variant_stage(stage: Stage, members: list[TestResult]) -> Line:
    """The rule of UI-07: ``PASS`` only when every test ran and passed on the required variant
    and on every other variant present; an absent variant (all skipped) is named in the line."""
    counted = (f"{len(members)} tests",)
    by_variant: dict[str, list[TestResult]] = {}
    for test in members:
        by_variant.setdefault(test.variant or "", []).append(test)
    status, reason = _fold(members, Status.PASS, Status.NOT_RUN, "no test ran in this stage")
    if status is Status.FAIL:
        return Line(stage.name, stage.title, status, counted, reason,
                    failures=_failures(members))
    required = stage.required_variant or ""
    absent = {v: tests for v, tests in by_variant.items()
              if v not in {"", required} and all(t.outcome is Outcome.SKIPPED for t in tests)}
    ran = sorted((v for v in by_variant if v and v not in absent), key=lambda v: v != required)
    incomplete = [v for v in by_variant if v not in absent
                  and any(t.outcome is Outcome.SKIPPED for t in by_variant[v])]
    notes = [f"{v} absent: {_reasons(tests)}" for v, tests in sorted(absent.items())]
    if required not in by_variant:
        return Line(stage.name, stage.title, Status.NOT_RUN, counted,
                    f"no test ran on {required}")
    if incomplete:
        notes.insert(0, "not every test ran on "
                     + ", ".join(v or "(no variant)" for v in incomplete) + ": "
                     + _reasons(t for v in incomplete for t in by_variant[v]))
        return Line(stage.name, stage.title, Status.NOT_RUN, counted, "; ".join(notes)[:500],
                    tuple(v for v in ran if v not in incomplete))
    return Line(stage.name, stage.title, Status.PASS, counted, "; ".join(notes)[:500] or None,
                tuple(ran))


def current_sources(runs: list[Run]) -> str | None:
    """The sources hash of the newest run that recorded one: what "current" means for records."""
    return next((run.sources_sha256 for run in reversed(runs) if run.sources_sha256), None)


def _weak(req: str, teeth: TeethRecord | None) -> str | None:
    """Why a CURRENT ID reads ``CURRENT (weak)`` (QR-06), or None if its tests have teeth."""
    if teeth is None or req not in teeth.weak:
        return None
    row = next(row for row in teeth.rows if row.req == req)
    return (f"weak: its own tests kill {row.killed + row.mutants_killed} of the "
            f"{row.attributed + row.mutants} faults and mutants attributed to it "
            f"(not: {'; '.join([*row.survivors, *row.mutant_survivors])})")[:300]


def build_report(requirements: Requirements, runs: list[Run], smoke: Mapping[str, Any] | None,
                 generated_at: str, *, bench: BenchRecord | None = None,
                 mutation: MutationRecord | None = None,
                 screenshots: Mapping[str, tuple[str, ...]] | None = None,
                 conformance: Conformance | None = None,
                 eval_record: Mapping[str, Any] | None = None,
                 eval_matrix: Mapping[str, Any] | None = None,
                 agent_sha256: str | None = None,
                 teeth: TeethRecord | None = None) -> StatusReport:
    """Fold recorded runs and the evidence records into the status of every ID and stage."""
    tests = merge_runs(runs)
    by_req: dict[str, list[TestResult]] = {req: [] for req in requirements.titles}
    for test in tests.values():
        for req in test.reqs:
            by_req.setdefault(req, []).append(test)
    required = frozenset(s.required_variant for s in requirements.stages if s.required_variant)
    stale = stale_backing(bench, mutation)
    req_lines = []
    for req, named in by_req.items():
        present = [t for t in named if not _absent(t, required, conformance is not None)]
        status, reason = (_fold(present, Status.CURRENT, Status.TARGET, "no test names it yet")
                          if present or not named else (Status.NOT_RUN, _reasons(named)))
        if status is Status.CURRENT and req in stale:
            status, reason = Status.NOT_RUN, stale[req]
        title = requirements.titles.get(req, "(not in requirements.toml)")
        weak = _weak(req, teeth) if status is Status.CURRENT else None
        reason = reason if weak is None else weak
        req_lines.append(Line(req, title, status, tuple(sorted(t.nodeid for t in named)), reason,
                              failures=_failures(named), weak=weak is not None))
    stage_lines = []
    for stage in requirements.stages:
        if stage.record is not None:
            stage_lines.append(_smoke_line(stage, smoke))
            continue
        members = [t for t in tests.values() if t.nodeid.startswith(stage.paths)]
        if stage.required_variant is not None:
            stage_lines.append(_variant_stage(stage, members))
            continue
        status, reason = _fold(members, Status.PASS, Status.NOT_RUN, "no test ran in this stage")
        stage_lines.append(Line(stage.name, stage.title, status, (f"{len(members)} tests",),
                                reason, failures=_failures(members)))
    return StatusReport(generated_at, tuple(runs), tuple(stage_lines), tuple(req_lines),
                        build=build_of([(r.name, r.build) for r in runs], conformance),
                        smoke=smoke, bench=bench,
                        screenshots=dict(screenshots or {}), mutation=mutation,
                        conformance=conformance, eval_record=eval_record,
                        eval_matrix=eval_matrix, agent_sha256=agent_sha256, teeth=teeth)

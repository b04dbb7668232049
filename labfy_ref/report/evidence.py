"""The evidence beside the test results: build, smoke, bench, screenshots, mutation, target.

Each reader takes the report directory and returns a typed record, or None when
the file is absent (a panel is shown only when its data exists). A present but
malformed file is ``REPORT_INVALID``. The bench and mutation records carry the
hash of the sources they measured (:mod:`labfy_ref.report.sources`): held
against the newest test run's hash they are ``current``, ``stale``, or
``unknown`` when either side did not record one.
"""

from __future__ import annotations

import dataclasses
import enum
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from labfy_ref.errors import ReportInvalid
from labfy_ref.report.sources import files_sha256
from labfy_ref.report.validate import check, load_json

SMOKE_RECORD = "smoke-record.json"
BENCH_RECORD = "bench.json"
MUTATION_RECORD = "mutation.json"
#: The committed record of the mutation run (qualification/mutation), read under the
#: current directory (a checkout) when the report directory holds no mutation.json.
COMMITTED_MUTATION_RECORD = Path("qualification/mutation/record.json")
CONFORMANCE_RECORD = "conformance.json"
SCREENS_DIRNAME = "screens"


class Freshness(enum.StrEnum):
    """Were a record's figures measured on the sources the report's tests ran on?"""

    CURRENT = "current"
    STALE = "stale"
    UNKNOWN = "unknown"  # the record or the runs carry no sources hash


def freshness(measured: str | None, current: str | None) -> Freshness:
    """``measured`` (the record's sources hash) held against ``current`` (the runs')."""
    if measured is None or current is None:
        return Freshness.UNKNOWN
    return Freshness.CURRENT if measured == current else Freshness.STALE


@dataclasses.dataclass(frozen=True, slots=True)
class BuildInfo:
    """What was tested: name, version, commit, SPEC revision, and where that was read.

    ``source`` is ``run`` (recorded by the test runs named in ``runs``), ``target``
    (a conformance target's ``GET /api/version``) or ``report`` (no run recorded a
    build — results older than schema 1 — so this is the code that wrote the report).
    """

    name: str
    version: str
    commit: str | None
    spec: str | None
    source: str
    runs: tuple[str, ...] = ()

    def as_json(self) -> dict[str, Any]:
        """JSON form in status.json."""
        return {"name": self.name, "version": self.version, "commit": self.commit,
                "spec": self.spec, "source": self.source, "runs": list(self.runs)}


@dataclasses.dataclass(frozen=True, slots=True)
class BenchRow:
    """One row of the bench table: figure, ours, baseline, ratio, goal, met."""

    section: str
    figure: str
    ours: float | None
    baseline: float | None
    unit: str
    ratio: float | None
    goal: str | None  # as the bench prints it ("≤ 1.5"); None for an informational row
    met: bool | None
    note: str = ""

    def as_json(self) -> dict[str, Any]:
        """JSON form in status.json."""
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True, slots=True)
class BenchRecord:
    """The last ``tox -e bench`` run (bench.json)."""

    at: str
    quick: bool
    rows: tuple[BenchRow, ...]
    sources_sha256: str | None
    freshness: Freshness
    reqs: tuple[str, ...] = ()  # IDs whose CURRENT rests on this record

    @property
    def stale(self) -> bool:
        """Measured on other sources than the report's tests ran on."""
        return self.freshness is Freshness.STALE

    def as_json(self) -> dict[str, Any]:
        """JSON form in status.json."""
        goals = [row for row in self.rows if row.met is not None]
        return {"at": self.at, "quick": self.quick, "sources_sha256": self.sources_sha256,
                "sources": self.freshness.value, "stale": self.stale, "reqs": list(self.reqs),
                "goals": {"total": len(goals), "met": sum(bool(row.met) for row in goals)},
                "rows": [row.as_json() for row in self.rows]}


@dataclasses.dataclass(frozen=True, slots=True)
class Score:
    """Mutants killed out of those made, for one module or one requirement ID.

    A module's score may also say what it measured: ``sha256``, that module's source
    (:func:`labfy_ref.report.sources.files_sha256` of its one path), and ``reqs``, the IDs
    its mutants count toward — so a change to one module makes only those IDs stale.
    """

    name: str
    killed: int
    total: int
    sha256: str | None = None
    reqs: tuple[str, ...] = ()

    def as_json(self) -> dict[str, Any]:
        """JSON form in status.json."""
        measured = {} if self.sha256 is None else {"sha256": self.sha256,
                                                    "reqs": list(self.reqs)}
        return {"name": self.name, "killed": self.killed, "total": self.total} | measured


@dataclasses.dataclass(frozen=True, slots=True)
class Survivor:
    """A mutant no test killed, with why that is acceptable (or None: not yet justified)."""

    module: str
    location: str  # "path.py:LINE"
    mutation: str  # what was changed, e.g. "== -> !="
    reqs: tuple[str, ...]
    justification: str | None

    def as_json(self) -> dict[str, Any]:
        """JSON form in status.json."""
        return {"module": self.module, "location": self.location, "mutation": self.mutation,
                "reqs": list(self.reqs), "justification": self.justification}


@dataclasses.dataclass(frozen=True, slots=True)
class MutationRecord:
    """The last mutation run (mutation.json, QR-04): scores per module and per ID."""

    at: str
    modules: tuple[Score, ...]
    requirements: tuple[Score, ...]
    survivors: tuple[Survivor, ...]
    sources_sha256: str | None
    freshness: Freshness
    reqs: tuple[str, ...] = ()
    #: The modules whose source changed since they were measured (when every module's
    #: score says what it measured; else empty and the whole record is fresh or stale).
    changed: tuple[str, ...] = ()

    @property
    def stale(self) -> bool:
        """Measured on other sources than the report's tests ran on."""
        return self.freshness is Freshness.STALE

    @property
    def stale_reqs(self) -> tuple[str, ...]:
        """The IDs this record can no longer back: those of the changed modules when each
        module says what it measured, else every ID once the record is stale."""
        if not self.stale:
            return ()
        if all(score.sha256 is not None for score in self.modules):
            changed = set(self.changed)
            return tuple(sorted({req for score in self.modules if score.name in changed
                                 for req in score.reqs} & set(self.reqs)))
        return self.reqs

    def as_json(self) -> dict[str, Any]:
        """JSON form in status.json."""
        return {"at": self.at, "sources_sha256": self.sources_sha256,
                "sources": self.freshness.value, "stale": self.stale, "reqs": list(self.reqs),
                "changed": list(self.changed),
                "modules": [s.as_json() for s in self.modules],
                "requirements": [s.as_json() for s in self.requirements],
                "survivors": [s.as_json() for s in self.survivors]}


@dataclasses.dataclass(frozen=True, slots=True)
class Conformance:
    """Another implementation the suite was pointed at (QR-03): its URL and version answer."""

    target_url: str
    at: str
    version: Mapping[str, Any]  # its GET /api/version body, as answered

    def as_json(self) -> dict[str, Any]:
        """JSON form in status.json."""
        return {"target_url": self.target_url, "at": self.at, "version": dict(self.version)}


def read_smoke_record(results_dir: Path) -> dict[str, Any] | None:
    """The last real-model smoke record, if one was written."""
    path = results_dir / SMOKE_RECORD
    if not os.path.lexists(path):  # present but not a plain file: refused when read
        return None
    record = load_json(path, "smoke record")
    if not isinstance(record, dict) or "status" not in record:
        raise ReportInvalid(f"smoke record {path} has no status")
    check(record, "smoke-record", f"smoke record {path}")
    return record


EVAL_RECORD = "eval-record.json"
#: The committed record of the full eval matrix (``tox -e eval``: every task, both models,
#: the baselines, the control, each ablation), read under the current directory (a
#: checkout) beside the run's own record (CI's ``--quick`` table).
COMMITTED_EVAL_RECORD = Path("qualification/eval") / EVAL_RECORD


def read_eval(results_dir: Path) -> dict[str, Any] | None:
    """eval-record.json (``labfy-ref eval``, EV-01), checked against its schema, if present."""
    path = results_dir / EVAL_RECORD
    if not os.path.lexists(path):  # present but not a plain file: refused when read
        return None
    record = load_json(path, "eval record")
    check(record, "eval-record", f"eval record {path}")
    assert isinstance(record, dict)  # the schema says it is an object
    return record


def read_eval_matrix() -> dict[str, Any] | None:
    """The committed full-matrix eval record, checked against its schema, if present."""
    return read_eval(COMMITTED_EVAL_RECORD.parent)


def eval_freshness(entry: Mapping[str, Any], current: str | None) -> Freshness:
    """Did an eval entry measure the agent of these sources (its ``agent_sha256``)?"""
    measured = entry.get("agent_sha256")
    return freshness(measured if isinstance(measured, str) else None, current)


def _reqs(document: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(document.get("reqs", ()))


def read_bench(results_dir: Path, current_sources: str | None) -> BenchRecord | None:
    """bench.json (``python -m qualification.bench``), if present."""
    path = results_dir / BENCH_RECORD
    if not os.path.lexists(path):  # present but not a plain file: refused when read
        return None
    document = load_json(path, "bench record")
    check(document, "bench", f"bench record {path}")
    rows = tuple(
        BenchRow(section=row["section"], figure=row["figure"], ours=row["ours"],
                 baseline=row["baseline"], unit=row["unit"], ratio=row["ratio"],
                 goal=None if row["goal"] is None else row["goal"]["text"], met=row["met"],
                 note=row.get("note", ""))
        for row in document["rows"])
    measured = document.get("sources_sha256")
    return BenchRecord(at=document["at"], quick=document.get("quick", False), rows=rows,
                       sources_sha256=measured, freshness=freshness(measured, current_sources),
                       reqs=_reqs(document))


def read_mutation(results_dir: Path, current_sources: str | None) -> MutationRecord | None:
    """mutation.json (the mutation run of QR-04), else the committed record, if present."""
    path = results_dir / MUTATION_RECORD
    if not os.path.lexists(path):
        path = COMMITTED_MUTATION_RECORD
    if not os.path.lexists(path):  # present but not a plain file: refused when read
        return None
    document = load_json(path, "mutation record")
    check(document, "mutation", f"mutation record {path}")

    def scores(key: str) -> tuple[Score, ...]:
        return tuple(Score(s["name"], s["killed"], s["total"], s.get("sha256"),
                           tuple(s.get("reqs", ()))) for s in document[key])

    survivors = tuple(Survivor(s["module"], s["location"], s["mutation"], tuple(s["reqs"]),
                               s["justification"]) for s in document["survivors"])
    measured = document["sources_sha256"]
    if "mutated" in document:  # keyed by the modules it mutated: stale when one of them changed
        current_sources = files_sha256(document["mutated"])
    modules = scores("modules")
    changed = tuple(score.name for score in modules
                    if score.sha256 is not None and score.sha256 != files_sha256([score.name]))
    return MutationRecord(at=document["at"], modules=modules,
                          requirements=scores("requirements"), survivors=survivors,
                          sources_sha256=measured,
                          freshness=freshness(measured, current_sources), reqs=_reqs(document),
                          changed=changed)


def read_conformance(results_dir: Path) -> Conformance | None:
    """conformance.json (a run with ``--target-url``, QR-03), if present."""
    path = results_dir / CONFORMANCE_RECORD
    if not os.path.lexists(path):  # present but not a plain file: refused when read
        return None
    document = load_json(path, "conformance record")
    check(document, "conformance", f"conformance record {path}")
    return Conformance(document["target_url"], document["at"], document["version"])


def read_screenshots(results_dir: Path) -> dict[str, tuple[str, ...]]:
    """``screens/<browser>/*.png`` as POSIX paths relative to the report directory, by browser.

    Only plain files are listed (a link could point out of the folder a pipeline publishes).
    """
    screens = results_dir / SCREENS_DIRNAME
    found: dict[str, tuple[str, ...]] = {}
    if not screens.is_dir() or screens.is_symlink():
        return found
    for browser in sorted(screens.iterdir()):
        if not browser.is_dir() or browser.is_symlink():
            continue
        shots = sorted(path.relative_to(results_dir).as_posix() for path in browser.glob("*.png")
                       if path.is_file() and not path.is_symlink())
        if shots:
            found[browser.name] = tuple(shots)
    return found


def build_of(runs: Sequence[tuple[str, Mapping[str, Any] | None]],
             conformance: Conformance | None) -> BuildInfo:
    """What the report is about: a conformance target's answer, else the newest run's build.

    ``runs`` are (name, recorded build) oldest first. Results of schema 0 recorded
    no build: then it is the code writing the report, marked ``source: report``.
    """
    names = tuple(name for name, _ in runs)
    if conformance is not None:
        answer = conformance.version
        return BuildInfo(str(answer.get("name", "?")), str(answer.get("version", "?")),
                         answer.get("commit"), answer.get("spec"), "target", names)
    recorded = [(name, build) for name, build in runs if build is not None]
    if recorded:
        newest = recorded[-1][1]
        same = tuple(name for name, build in recorded if build == newest)
        return BuildInfo(newest["name"], newest["version"], newest["commit"], newest["spec"],
                         "run", same)
    from labfy_ref.buildinfo import build_info  # noqa: PLC0415 - only for schema-0 results

    info = build_info()
    return BuildInfo(info["name"], info["version"], info["commit"], info["spec"], "report")


def stale_backing(bench: BenchRecord | None, mutation: MutationRecord | None) -> dict[str, str]:
    """ID -> why it cannot be CURRENT: a record it rests on measured other sources."""
    backing: dict[str, str] = {}
    for record, what, rerun in ((bench, "bench", "tox -e bench"),
                                (mutation, "mutation", "the mutation run")):
        if record is not None and record.stale:
            reqs = record.stale_reqs if isinstance(record, MutationRecord) else record.reqs
            for req in reqs:
                backing.setdefault(req, f"its {what} record ({record.at}) measured other "
                                        f"sources than these tests ran on: rerun {rerun}")
    return backing


#: How an eval entry's variant names a guidance profile other than ``auto`` (PR-08).
PROFILE_VARIANT = "guidance:"


def variant_label(variant: object) -> str:
    """An eval entry's variant as a report says it after the agent: a profile
    (``guidance:quoting``), rules added (``+recap``), or a rule switched off."""
    if not isinstance(variant, str) or not variant:
        return ""
    if variant.startswith(PROFILE_VARIANT):
        return f" · guidance {variant.removeprefix(PROFILE_VARIANT)}"
    if variant.startswith("+"):
        return f" with {' '.join(variant[1:].split('+'))}"
    return f" without {variant}"

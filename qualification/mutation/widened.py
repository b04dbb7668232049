"""The attributed mutation run (QR-06): every module some ID declares code in, one record each.

``python -m qualification.mutation.widened [--module PATH ...] [--cap N] [--jobs N]``

For each module named in requirements.toml ``[code]``, cosmic-ray 8.7 lists its
operator mutants (``cosmic-ray init`` in a private copy of the tree under
``.mutation/widened/``); those inside the declared code of some ID, and outside
annotations (never evaluated), are the module's *scope*; when the scope holds
more than ``--cap`` mutants, a fixed sample of ``--cap`` is run (the mutants
with the smallest SHA-256 of operator, line, column and occurrence: the same
source gives the same sample). Each mutant is applied to the copy with
cosmic-ray's own ``mutate_code`` and, for each ID whose declared code holds its
line, only that ID's tests run (``--req ID``, ``-x``; the browser and smoke
stages excepted), under a timeout of four times that ID's unmutated run. The
mutant counts as killed *for an ID* only when that ID's own tests fail. An ID's
unmutated run is measured once per tree state (``baselines.json``, keyed by the
digest of the copied tree) and shared by every module of the run.

Progress is kept per mutant (``progress.json`` beside the copy) so an
interrupted run resumes; a module's record is written once every mutant of its
sample ran, to ``qualification/mutation/modules/<dotted path>.json``, keyed by
the SHA-256 of that module's own content: an edit anywhere else never makes it
stale, an edit to it does (the report then shows its IDs' mutants as stale,
never counted). A survivor's triage comes from ``triage.toml`` as in QR-04.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import dataclasses
import datetime
import difflib
import functools
import hashlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from labfy_ref.report import DEFAULT_REQUIREMENTS
from labfy_ref.report.model import Requirements
from labfy_ref.report.validate import check
from qualification.mutation.record import EQUIVALENT, describe, load_triage
from qualification.mutation.run import _cosmic_ray, _environment, _fresh_tree
from qualification.mutation.scope import REPO, annotation_spans
from qualification.mutation.sessions import Mutant

WORK = REPO / ".mutation" / "widened"
RECORDS = REPO / "qualification" / "mutation" / "modules"
#: Mutants run per module at most (a fixed sample beyond it; the record says so).
DEFAULT_CAP = 12
TIMEOUT_FACTOR = 4.0
MIN_TIMEOUT_S = 60.0
#: The verdicts that count a mutant killed for an ID.
KILLS = ("killed", "timeout")
PYTEST = ("-m", "pytest", "-x", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
          "--run-name", "mutation", "--ignore=qualification/smoke",
          "--ignore=qualification/browser", "-rN", "--no-header")


@dataclasses.dataclass(frozen=True, slots=True)
class Spec:
    """One operator mutant of a cosmic-ray session, with where it starts."""

    job_id: str
    operator: str
    occurrence: int
    line: int
    column: int
    end: tuple[int, int]

    @property
    def rank(self) -> str:
        """The fixed sampling key: the same source gives the same sample."""
        return hashlib.sha256(f"{self.operator}:{self.line}:{self.column}:{self.occurrence}"
                              .encode()).hexdigest()


def slug(path: str) -> str:
    """``labfy_ref/server/auth.py`` -> ``labfy_ref.server.auth``."""
    return path.removesuffix(".py").replace("/", ".")


def module_sha256(path: str, root: Path = REPO) -> str:
    """The key of a module's record: the SHA-256 of its own bytes."""
    return hashlib.sha256((root / path).read_bytes()).hexdigest()


def test_files(req: str, root: Path) -> list[str]:
    """The suite's files naming ``req`` (a cheap pre-filter; ``--req`` decides), outside the
    browser and smoke stages."""
    quoted = f'"{req}"'
    return sorted(path.relative_to(root).as_posix()
                  for path in (root / "qualification").rglob("test_*.py")
                  if not path.relative_to(root).as_posix().startswith(
                      ("qualification/browser/", "qualification/smoke/"))
                  and quoted in path.read_text("utf-8"))


def _specs(session: Path) -> list[Spec]:
    connection = sqlite3.connect(session)
    try:
        rows = connection.execute(
            "SELECT job_id, operator_name, occurrence, start_pos_row, start_pos_col, "
            "end_pos_row, end_pos_col FROM mutation_specs").fetchall()
    finally:
        connection.close()
    return [Spec(job, op, int(occ), int(row), int(col), (int(end_row), int(end_col)))
            for job, op, occ, row, col, end_row, end_col in rows]


def scope_of(path: str, source: str, specs: list[Spec], cap: int,
             requirements: Requirements) -> tuple[list[tuple[Spec, tuple[str, ...]]], int]:
    """The mutants to run (each with its attributed IDs) and how many were in scope."""
    spans = requirements.code.line_ids(path, source)
    inert = annotation_spans(REPO / path)
    in_scope = []
    for spec in specs:
        ids = tuple(sorted({req for (first, last), reqs in spans
                            if first <= spec.line <= last for req in reqs}))
        if ids and not any(a <= (spec.line, spec.column) and spec.end <= b for a, b in inert):
            in_scope.append((spec, ids))
    in_scope.sort(key=lambda item: item[0].rank)
    return in_scope[:cap], len(in_scope)


def _run_tests(tree: Path, req: str, files: list[str], timeout: float) -> tuple[str, float]:
    """``killed``, ``survived``, ``timeout`` or ``no test`` for one ID's tests, and seconds.

    The tests get a temporary folder of their own; whatever they started and left running
    (a mutant may break a server's shutdown, a timeout leaves a test's servers behind) is
    killed when they end, so no later run finds a port or a file of theirs still held.
    """
    basetemp = Path(tempfile.mkdtemp(prefix="labfy-widened-"))
    started = time.monotonic()
    try:
        with subprocess.Popen([sys.executable, *PYTEST, f"--basetemp={basetemp / 't'}",
                               "--req", req, *files], cwd=tree, env=_environment(tree),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True) as tests:
            try:
                code = tests.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                code = None
            seconds = time.monotonic() - started
            reap(str(basetemp), tests.pid)
    finally:
        shutil.rmtree(basetemp, ignore_errors=True)
    if code is None:
        return "timeout", seconds
    verdict = {0: "survived", 5: "no test"}.get(code, "killed")
    return verdict, seconds


def reap(marker: str, group: int | None = None) -> list[int]:
    """Kill the process group ``group`` and every process whose command line names
    ``marker`` (those a test started in a session of their own); their pids."""
    killed = []
    if group is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
            killed.append(group)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue  # gone meanwhile, or not ours to read
        if marker.encode() in command:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), signal.SIGKILL)
                killed.append(int(entry.name))
    return killed


_BASELINES_LOCK = threading.Lock()


def tree_digest(tree: Path) -> str:
    """The SHA-256 of every file of a copied tree (names and bytes): the unmutated baselines
    of one tree state hold for every module mutated in a copy of that state. The module
    records are left out: the run writes them as it goes, and no ID's verdict reads them."""
    digest = hashlib.sha256()
    records = tree / RECORDS.relative_to(REPO)
    for path in sorted(p for p in tree.rglob("*") if p.is_file() and not p.is_symlink()
                       and "__pycache__" not in p.parts and records not in p.parents):
        digest.update(path.relative_to(tree).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def shared_baseline(cache: Path, state: str, req: str, tree: Path,
                    files: list[str]) -> dict[str, Any]:
    """``req``'s unmutated run on the tree state ``state``: measured once per state, shared by
    every module of the run (an ID's slow tests are not re-run for each module)."""
    with _BASELINES_LOCK:
        known = json.loads(cache.read_text("utf-8")) if cache.is_file() else {}
        if known.get("state") == state and req in known["ids"]:
            return dict(known["ids"][req])
    verdict, seconds = _run_tests(tree, req, files, 3600)
    result = {"verdict": verdict, "seconds": round(seconds, 1)}
    with _BASELINES_LOCK:
        known = json.loads(cache.read_text("utf-8")) if cache.is_file() else {}
        if known.get("state") != state:
            known = {"state": state, "ids": {}}
        known["ids"][req] = result
        _save(cache, known)
    return result


def without_survivors(progress: dict[str, Any]) -> dict[str, Any]:
    """``progress`` less each mutant some attributed ID's tests let survive or could not
    test (they failed unmutated), so that it runs again at the tests as they are now, and
    less the unmutated runs, measured again at this tree; kills, and mutants that apply to
    nothing, stay."""
    kept = {job: entry for job, entry in progress["mutants"].items()
            if all(v in (*KILLS, "not applied")
                   for v in entry["verdicts"].values())}
    return {**progress, "baseline": {}, "mutants": kept}


def applied(mutate: Callable[[], str | None], where: str) -> str | None:
    """The mutated source, or None where the operator applies to nothing — or where
    cosmic-ray fails on the node (its exception replacer cannot rewrite a dotted name,
    ``except (json.JSONDecodeError, ...)``): said on stderr, recorded ``not applied``."""
    try:
        return mutate()
    except AttributeError as exc:
        print(f"{where}: cosmic-ray cannot apply this mutant ({exc}); not applied",
              file=sys.stderr, flush=True)
        return None


def run_module(path: str, *, cap: int = DEFAULT_CAP, fresh: bool = False,
               survivors: bool = False) -> dict[str, Any]:
    """Run ``path``'s sample to the end (resuming; with ``survivors``, its survivors again)
    and write its record; return the record."""
    # only tox -e mutation installs cosmic-ray: the record and its tests do without it
    from cosmic_ray.mutating import mutate_code  # noqa: PLC0415
    from cosmic_ray.plugins import get_operator  # noqa: PLC0415

    requirements = Requirements.load(REPO / DEFAULT_REQUIREMENTS)
    source = (REPO / path).read_text("utf-8")
    key = module_sha256(path)
    folder = WORK / slug(path)
    tree, session, progress_file = folder / "tree", folder / "session.sqlite", \
        folder / "progress.json"
    folder.mkdir(parents=True, exist_ok=True)
    (REPO / ".mutation" / ".gitignore").write_text("*\n")
    progress: dict[str, Any] = {}
    if progress_file.is_file() and not fresh:
        progress = json.loads(progress_file.read_text("utf-8"))
    if progress.get("key") != [key, cap]:
        progress = {"key": [key, cap], "baseline": {}, "mutants": {}}
        session.unlink(missing_ok=True)
    elif survivors:
        progress = without_survivors(progress)
    started = time.monotonic()
    _fresh_tree(tree)
    if not session.is_file():
        config = folder / "config.toml"
        config.write_text("\n".join([
            "[cosmic-ray]", f"module-path = {json.dumps(path)}", "timeout = 60",
            "excluded-modules = []", 'test-command = "true"', "",
            "[cosmic-ray.distributor]", 'name = "local"', ""]))
        subprocess.run([_cosmic_ray(), "init", str(config), str(session)], cwd=tree,
                       env=_environment(tree), check=True, capture_output=True)
    chosen, in_scope = scope_of(path, source, _specs(session), cap, requirements)
    reqs = sorted({req for _, ids in chosen for req in ids})
    files = {req: test_files(req, tree) for req in reqs}
    state = tree_digest(tree)
    for req in reqs:  # each ID's own tests, unmutated: they must pass, and they set the clock
        if req not in progress["baseline"]:
            progress["baseline"][req] = shared_baseline(WORK / "baselines.json", state, req,
                                                        tree, files[req])
            _save(progress_file, progress)
    target = tree / path
    for spec, ids in chosen:
        if spec.job_id in progress["mutants"]:
            continue
        mutated = applied(functools.partial(mutate_code, source, get_operator(spec.operator)(),
                                            spec.occurrence), f"{path}:{spec.line}")
        entry: dict[str, Any] = {"line": spec.line, "operator": spec.operator,
                                 "occurrence": spec.occurrence, "ids": list(ids),
                                 "verdicts": {}}
        if mutated is None:
            entry["verdicts"] = dict.fromkeys(ids, "not applied")
        else:
            diff = "\n".join(difflib.unified_diff(source.split("\n"), mutated.split("\n"),
                                                  lineterm=""))
            entry["mutation"] = describe(Mutant(spec.job_id, path, spec.operator,
                                                spec.occurrence, spec.line, None, False, diff))
            target.write_text(mutated, "utf-8")
            try:
                for req in ids:
                    base = progress["baseline"][req]
                    if base["verdict"] != "survived":  # its tests fail or are absent unmutated
                        entry["verdicts"][req] = f"untested ({base['verdict']} unmutated)"
                        continue
                    timeout = max(MIN_TIMEOUT_S, TIMEOUT_FACTOR * base["seconds"])
                    entry["verdicts"][req] = _run_tests(tree, req, files[req], timeout)[0]
            finally:
                target.write_text(source, "utf-8")
        progress["mutants"][spec.job_id] = entry
        _save(progress_file, progress)
    progress["seconds"] = round(progress.get("seconds", 0.0) + time.monotonic() - started, 1)
    _save(progress_file, progress)
    record = build_record(path, key, progress, in_scope, cap)
    write_record(record)
    return record


def _save(path: Path, document: dict[str, Any]) -> None:
    temp = path.with_name(f".{path.name}.tmp")
    temp.write_text(json.dumps(document, indent=1), "utf-8")
    temp.replace(path)


def build_record(path: str, key: str, progress: dict[str, Any], in_scope: int,
                 cap: int) -> dict[str, Any]:
    """The module's record (``mutation-module.schema.json``) from its finished progress."""
    triage = load_triage()
    mutants = []
    for entry in sorted(progress["mutants"].values(),
                        key=lambda e: (e["line"], e["operator"], e["occurrence"])):
        if "mutation" not in entry:
            continue  # cosmic-ray listed it but it applies to nothing
        location = f"{path}:{entry['line']}"
        verdict, reason = triage.get(f"{location} {entry['operator']}#{entry['occurrence']}",
                                     (None, None))
        mutants.append({
            "line": entry["line"], "operator": entry["operator"],
            "occurrence": entry["occurrence"], "mutation": entry["mutation"],
            "ids": entry["ids"],
            "killed_for": sorted(req for req, v in entry["verdicts"].items()
                                 if v in KILLS),
            "verdicts": entry["verdicts"],
            "justification": f"{verdict}: {reason}" if verdict == EQUIVALENT else None})
    sample = (f"a fixed sample of {cap} of the {in_scope} mutants in the declared code"
              if in_scope > cap else f"all {in_scope} mutants in the declared code")
    return {"schema": "labfy.mutation-module.v1", "module": path, "sha256": key,
            "at": datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat(),
            "wall_seconds": progress.get("seconds", 0.0),
            "scope": f"{sample}; annotations skipped (never evaluated); each ID's own tests, "
                     "browser and smoke stages excepted",
            "in_scope": in_scope, "baseline": progress["baseline"], "mutants": mutants}


def write_record(record: dict[str, Any], folder: Path = RECORDS) -> Path:
    """Check ``record`` against its schema and write it atomically."""
    check(record, "mutation-module", f"mutation record of {record['module']}")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{slug(record['module'])}.json"
    temp = path.with_name(f".{path.name}.tmp")
    temp.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", "utf-8")
    temp.replace(path)
    return path


def stale_modules(folder: Path = RECORDS, root: Path = REPO) -> list[str]:
    """The modules whose record no longer matches their content (or that are gone)."""
    stale = []
    for file in sorted(folder.glob("*.json")):
        record = json.loads(file.read_text("utf-8"))
        module = root / record["module"]
        if not module.is_file() or module_sha256(record["module"], root) != record["sha256"]:
            stale.append(record["module"])
    return stale


def main(argv: list[str] | None = None) -> int:
    """Run the modules (default: those without a current record); print each one's score."""
    parser = argparse.ArgumentParser(prog="python -m qualification.mutation.widened")
    parser.add_argument("--module", action="append", default=[],
                        help="a module with declared code (repeatable; default: every one "
                             "whose record is missing or stale)")
    parser.add_argument("--all", action="store_true", help="every module, current or not")
    parser.add_argument("--cap", type=int, default=DEFAULT_CAP,
                        help="mutants run per module at most (default: %(default)s)")
    parser.add_argument("--jobs", type=int, default=2, help="modules mutated at once")
    parser.add_argument("--fresh", action="store_true", help="discard progress and start over")
    parser.add_argument("--survivors", action="store_true",
                        help="run each survivor, and each mutant an ID's tests could not test, "
                             "again at the tests as they are now (after adding tests); "
                             "default modules: every recorded one")
    parser.add_argument("--stale", action="store_true",
                        help="only list the modules whose record is missing or stale")
    args = parser.parse_args(argv)
    code = Requirements.load(REPO / DEFAULT_REQUIREMENTS).code
    modules = list(code.modules())
    unknown = sorted(set(args.module) - set(modules))
    if unknown:
        parser.error(f"no ID declares code in {', '.join(unknown)}")
    stale = set(stale_modules())
    recorded = {json.loads(f.read_text("utf-8"))["module"] for f in RECORDS.glob("*.json")} \
        if RECORDS.is_dir() else set()
    todo = args.module or [m for m in modules
                           if args.all or m in stale or m not in recorded
                           or (args.survivors and m in recorded)]
    if args.stale:
        print("\n".join(todo))
        return 0
    started = time.monotonic()
    cap = args.cap
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(run_module, m, cap=cap, fresh=args.fresh,
                               survivors=args.survivors): m for m in todo}
        for future in concurrent.futures.as_completed(futures):
            record = future.result()
            killed = sum(bool(m["killed_for"]) for m in record["mutants"])
            print(f"{record['module']}: {killed}/{len(record['mutants'])} killed by an "
                  f"attributed ID's tests, {record['wall_seconds']:g} s ({record['scope']})",
                  flush=True)
    print(f"{len(todo)} module(s) in {time.monotonic() - started:.0f} s; records in {RECORDS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""``python -m qualification.mutants [NAME ...]``: run every mutant at its own tests (QR-03,
QR-06).

Only the tests tagged with one of a mutant's requirement IDs run at it (``--req``),
so a mutant is killed only by the tests of what it breaks. A *served* mutant is
launched as its own ``labfy-ref serve --bridge`` process (a fresh SPECIMEN
workspace, a user account, the agent on the kit provider; one kit provider serves
them all), and the kit runs against it; an *in-process* one is applied inside a
pytest run of the suite's files that name its IDs. Each of a mutant's IDs gets its
own run (``--req ID``, ``-x``, the expected killer's file first), so the record says
which IDs' own tests kill it (``killer_reqs``: the teeth of QR-06). Prints
``mutant -> killed by``, writes ``mutants-report/mutants.json`` (and with ``--record
DIR``, ``DIR/faults.json``); exits 1 if any mutant survived or did not start.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from labfy_ref.report import DEFAULT_REQUIREMENTS, now_iso
from labfy_ref.report.attribution import module_path
from labfy_ref.report.model import Requirements
from labfy_ref.report.teeth import FAULTS_RECORD
from labfy_ref.report.validate import check
from qualification.conformance.__main__ import launch_own, run_against
from qualification.conformance.kit import kit_provider
from qualification.conformance.launch import LaunchError
from qualification.mutants.faults import FAULTS
from qualification.mutants.inject import VARIABLE
from qualification.mutants.registry import Fault

REPO = Path(__file__).resolve().parents[2]
REPORT = REPO / "mutants-report"
PYTEST = (sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-p",
          "no:randomly", "-m", "conformance", "-rN", "--no-header")
SUITE = (sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-p",
         "no:randomly", "-p", "qualification.mutants.inject", "-rN", "--no-header",
         "--ignore=qualification/smoke", "--ignore=qualification/browser")


def attributed(mutant: Fault) -> tuple[str, ...]:
    """QR-06: the IDs the fault names and every ID whose declared code (requirements.toml
    ``[code]``) holds the function it replaces -- each must kill it with its own tests."""
    module, _, qualname = mutant.replaces.partition(":")
    code = Requirements.load(REPO / DEFAULT_REQUIREMENTS).code
    return tuple(sorted(set(mutant.ids) | set(code.ids_for(module_path(module, REPO),
                                                           qualname or None))))


def kit_files() -> list[str]:
    """Every test file of the kit (one that marks tests ``conformance``), sorted."""
    return sorted(path.relative_to(REPO).as_posix()
                  for path in (REPO / "qualification").rglob("test_*.py")
                  if "pytest.mark.conformance" in path.read_text("utf-8"))


def suite_files(ids: tuple[str, ...]) -> list[str]:
    """The suite's test files that name one of ``ids`` (a cheap pre-filter; ``--req`` decides)."""
    quoted = [f'"{req}"' for req in ids]
    return sorted(path.relative_to(REPO).as_posix()
                  for path in (REPO / "qualification").rglob("test_*.py")
                  if any(q in path.read_text("utf-8") for q in quoted))


def _ordered(mutant: Fault, files: list[str]) -> list[str]:
    return [mutant.killer_file, *(f for f in files if f != mutant.killer_file)]


def _verdict(returncode: int, killer: str | None) -> str:
    """killed (a tagged test failed), survived, or "no test" (none names its IDs: exit 5)."""
    if returncode == 1 and killer:
        return "killed"
    return "no test" if returncode == 5 else "survived"


def failed_test(report: Path) -> tuple[str | None, list[str]]:
    """The node id of the failed test in a run's results and the IDs it names (QR-06: a
    kill counts for an ID only when the killing test names it)."""
    results = report / "results" / "conformance.json"
    if not results.is_file():
        return None, []
    tests = json.loads(results.read_text("utf-8"))["tests"]
    failed = next((t for t in tests if t["outcome"] == "failed"), None)
    return (None, []) if failed is None else (failed["nodeid"], sorted(failed["reqs"]))


def try_mutant(mutant: Fault, provider_url: str, work: Path, files: list[str],
               folder: Path) -> dict[str, Any]:
    """Launch one mutant, run its own tests at it, and say what killed it (or that nothing did)."""
    started = time.monotonic()
    report = folder / mutant.name
    shutil.rmtree(report, ignore_errors=True)
    outcome: dict[str, Any] = {"mutant": mutant.name, "ids": list(attributed(mutant)),
                               "served": mutant.served, "replaces": mutant.replaces,
                               "breaks": mutant.breaks, "expected": mutant.killer}
    if not mutant.served:
        return outcome | _in_suite(mutant, report) | {
            "seconds": round(time.monotonic() - started, 1)}
    command = (sys.executable, "-m", "qualification.mutants.launch", mutant.name, "serve")
    try:
        server, url, code, user_token = launch_own(work / mutant.name, provider_url,
                                                   command=command)
    except LaunchError as exc:
        return outcome | {"status": "not started", "killed_by": None, "killer_reqs": [],
                          "detail": str(exc)[:500],
                          "seconds": round(time.monotonic() - started, 1)}
    try:
        def kit(sub: Path, req: str) -> int:
            return run_against(url, code, user_token, provider_url,
                               [f"--report-dir={sub}", "--req", req, *_ordered(mutant, files)],
                               command=PYTEST, log=sub / "pytest.log")
        verdict = _per_id(mutant, report, kit)
    finally:
        server.stop()
    return outcome | verdict | {"seconds": round(time.monotonic() - started, 1)}


def _per_id(mutant: Fault, report: Path, run: Callable[[Path, str], int]) -> dict[str, Any]:
    """Run each of the mutant's IDs' own tests at it (QR-06): ``killer_reqs`` are the IDs
    whose tests killed it, so a fault of two IDs has teeth for each only through its own
    tests. One ID reports into ``report``; several into ``report/<ID>``."""
    kills: list[tuple[str, int, str | None]] = []
    ids = attributed(mutant)
    for req in ids:
        sub = report / req if len(ids) > 1 else report
        sub.mkdir(parents=True, exist_ok=True)
        returncode = run(sub, req)
        kills.append((req, returncode, failed_test(sub)[0]))
    killed = [(req, returncode, killer) for req, returncode, killer in kills
              if _verdict(returncode, killer) == "killed"]
    if killed:
        return {"status": "killed", "killed_by": killed[0][2], "exit": 1,
                "killer_reqs": sorted(req for req, _, _ in killed)}
    worst = next((returncode for _, returncode, _ in kills if returncode != 5), 5)
    return {"status": _verdict(worst, None), "killed_by": None, "killer_reqs": [],
            "exit": worst}


def _in_suite(mutant: Fault, report: Path) -> dict[str, Any]:
    """Run the suite's files that name the mutant's IDs with the mutant applied in-process."""
    def suite(sub: Path, req: str) -> int:
        args = [*SUITE, f"--report-dir={sub}", "--run-name=conformance", "--req", req,
                *_ordered(mutant, suite_files((req,)))]
        with (sub / "pytest.log").open("w", encoding="utf-8") as out:
            return subprocess.run(args, cwd=REPO, env={**os.environ, VARIABLE: mutant.name},
                                  check=False, stdout=out, stderr=subprocess.STDOUT,
                                  timeout=1800).returncode
    return _per_id(mutant, report, suite)


def write_faults(folder: Path, results: list[dict[str, Any]], wall: float) -> Path:
    """``folder/faults.json`` (``faults.schema.json``): each fault, its IDs, its verdict and
    the IDs of the test that killed it, checked before it is written."""
    document = {"schema": "labfy.faults.v1", "at": now_iso(), "wall_seconds": wall,
                "faults": [{"name": r["mutant"], "ids": r["ids"], "served": r["served"],
                            "status": r["status"], "killed_by": r["killed_by"],
                            "killer_reqs": r.get("killer_reqs", [])} for r in results]}
    check(document, "faults", "the fault run")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / FAULTS_RECORD
    path.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", "utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    """Run every mutant (or those named); print the table; 1 unless all were killed."""
    parser = argparse.ArgumentParser(prog="python -m qualification.mutants")
    parser.add_argument("names", nargs="*", help="only these mutants (default: all)")
    parser.add_argument("--jobs", type=int, default=2, choices=range(1, 9), metavar="N",
                        help="mutants tried at once, 1-8 (each is a server and a pytest); "
                             "default: %(default)s")
    parser.add_argument("--report-dir", type=Path, default=REPORT,
                        help=f"where each mutant's kit report and mutants.json go ({REPORT})")
    parser.add_argument("--record", type=Path, metavar="DIR",
                        help="also write DIR/faults.json, the teeth per requirement ID that "
                             "labfy-ref report shows (QR-06); e.g. qualification-report")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.names) - set(FAULTS))
    if unknown:
        parser.error(f"unknown mutants: {', '.join(unknown)}; known: {', '.join(sorted(FAULTS))}")
    chosen = [FAULTS[name] for name in (args.names or sorted(FAULTS))]
    files = kit_files()
    started = time.monotonic()
    results = []
    with tempfile.TemporaryDirectory(prefix="labfy-mutants-") as tmp, kit_provider() as provider, \
            concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        # the kit provider keeps each conversation apart, so mutants can share it
        pending = [pool.submit(try_mutant, mutant, provider.base_url, Path(tmp), files,
                               args.report_dir) for mutant in chosen]
        for future in concurrent.futures.as_completed(pending):
            result = future.result()
            results.append(result)
            by = (result["killed_by"] or "").split("[", 1)[0]
            mark = "" if by in ("", result["expected"]) else "  (expected " + \
                result["expected"].rsplit("::", 1)[-1] + ")"
            print(f"{result['mutant']:28} {result['status']:11} {result['seconds']:5.1f} s  "
                  f"{result['killed_by'] or result.get('detail', '')}{mark}", flush=True)
    results.sort(key=lambda r: str(r["mutant"]))
    killed = sum(r["status"] == "killed" for r in results)
    wall = round(time.monotonic() - started, 1)
    args.report_dir.mkdir(parents=True, exist_ok=True)
    (args.report_dir / "mutants.json").write_text(json.dumps(
        {"at": now_iso(), "wall_seconds": wall, "killed": killed, "total": len(results),
         "mutants": results}, indent=2, ensure_ascii=False), "utf-8")
    if args.record is not None:
        write_faults(args.record, results, wall)
    print(f"mutants: {killed} of {len(results)} killed in {wall} s "
          f"({args.report_dir / 'mutants.json'})", flush=True)
    return 0 if killed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())

"""``python -m qualification.mutants [NAME ...]``: point the kit at every mutant (QR-03).

One kit provider serves them all. Each mutant is launched as its own
``labfy-ref serve --bridge`` process (a fresh SPECIMEN workspace, a user
account, the agent on the kit provider), and the kit runs against it with
``-x``, serially, the expected killer's file first, then every other file of
the kit: the first test that fails killed it. Prints ``mutant -> killed by``,
writes ``mutants-report/mutants.json``; exits 1 if any mutant survived or did
not start.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from labfy_ref.report import now_iso
from qualification.conformance.__main__ import launch_own, run_against
from qualification.conformance.kit import kit_provider
from qualification.conformance.launch import LaunchError
from qualification.mutants.faults import FAULTS
from qualification.mutants.registry import Fault

REPO = Path(__file__).resolve().parents[2]
REPORT = REPO / "mutants-report"
PYTEST = (sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-p",
          "no:randomly", "-m", "conformance", "-rN", "--no-header")


def kit_files() -> list[str]:
    """Every test file of the kit (one that marks tests ``conformance``), sorted."""
    return sorted(path.relative_to(REPO).as_posix()
                  for path in (REPO / "qualification").rglob("test_*.py")
                  if "pytest.mark.conformance" in path.read_text("utf-8"))


def first_failure(report: Path) -> str | None:
    """The node id of the failed test in a run's results, if any."""
    results = report / "results" / "conformance.json"
    if not results.is_file():
        return None
    tests = json.loads(results.read_text("utf-8"))["tests"]
    return next((t["nodeid"] for t in tests if t["outcome"] == "failed"), None)


def try_mutant(mutant: Fault, provider_url: str, work: Path, files: list[str],
               folder: Path) -> dict[str, Any]:
    """Launch one mutant, run the kit at it, and say what killed it (or that nothing did)."""
    started = time.monotonic()
    report = folder / mutant.name
    shutil.rmtree(report, ignore_errors=True)
    command = (sys.executable, "-m", "qualification.mutants.launch", mutant.name, "serve")
    outcome: dict[str, Any] = {"mutant": mutant.name, "replaces": mutant.replaces,
                               "breaks": mutant.breaks, "expected": mutant.killer}
    try:
        server, url, code, user_token = launch_own(work / mutant.name, provider_url,
                                                   command=command)
    except LaunchError as exc:
        return outcome | {"status": "not started", "killed_by": None, "detail": str(exc)[:500],
                          "seconds": round(time.monotonic() - started, 1)}
    try:
        ordered = [mutant.killer_file, *(f for f in files if f != mutant.killer_file)]
        report.mkdir(parents=True, exist_ok=True)
        returncode = run_against(url, code, user_token, provider_url,
                                 [f"--report-dir={report}", *ordered], command=PYTEST,
                                 log=report / "pytest.log")
    finally:
        server.stop()
    killer = first_failure(report)
    status = "killed" if returncode == 1 and killer else "survived"
    return outcome | {"status": status, "killed_by": killer, "exit": returncode,
                      "seconds": round(time.monotonic() - started, 1)}


def main(argv: list[str] | None = None) -> int:
    """Run every mutant (or those named); print the table; 1 unless all were killed."""
    parser = argparse.ArgumentParser(prog="python -m qualification.mutants")
    parser.add_argument("names", nargs="*", help="only these mutants (default: all)")
    parser.add_argument("--jobs", type=int, default=2, choices=range(1, 9), metavar="N",
                        help="mutants tried at once, 1-8 (each is a server and a pytest); "
                             "default: %(default)s")
    parser.add_argument("--report-dir", type=Path, default=REPORT,
                        help=f"where each mutant's kit report and mutants.json go ({REPORT})")
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
    print(f"mutants: {killed} of {len(results)} killed in {wall} s "
          f"({args.report_dir / 'mutants.json'})", flush=True)
    return 0 if killed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())

"""The qualification status report: requirements, recorded results, rendering (SPEC §12)."""

import dataclasses
import datetime
import secrets
from pathlib import Path

from labfy_ref.errors import ReportInvalid
from labfy_ref.report.compare import OldReport, compare
from labfy_ref.report.evidence import (
    read_bench,
    read_conformance,
    read_eval,
    read_eval_matrix,
    read_mutation,
    read_screenshots,
    read_smoke_record,
)
from labfy_ref.report.model import (
    Changes,
    Outcome,
    Requirements,
    Run,
    Status,
    StatusReport,
    TestResult,
    build_report,
    current_sources,
)
from labfy_ref.report.render import FORMATS, write_report
from labfy_ref.report.sources import agent_sha256, sources_sha256
from labfy_ref.report.teeth import read_teeth
from labfy_ref.report.validate import SCHEMA_VERSION

DEFAULT_REPORT_DIR = Path("qualification-report")
DEFAULT_REQUIREMENTS = Path("qualification/requirements.toml")
#: The copy of the requirements a run used, kept beside its results (QR-02).
REQUIREMENTS_COPY = "requirements.toml"


def default_requirements(results_dir: Path) -> Path:
    """The requirements a report of ``results_dir`` is built against.

    The copy the pytest plugin left in ``results_dir``, so ``labfy-ref report``
    works from any directory; else ``qualification/requirements.toml`` under
    the current directory (a checkout of the repository).
    """
    copy = results_dir / REQUIREMENTS_COPY
    if copy.is_file():
        return copy
    if DEFAULT_REQUIREMENTS.is_file():
        return DEFAULT_REQUIREMENTS
    raise ReportInvalid(f"no requirements file: neither {copy} nor {DEFAULT_REQUIREMENTS} "
                        "exists (pass --requirements FILE)")


def keep_requirements(requirements_path: Path, results_dir: Path) -> Path:
    """Copy ``requirements_path`` into ``results_dir`` atomically; return the copy's path."""
    target = results_dir / REQUIREMENTS_COPY
    data = requirements_path.read_bytes()
    results_dir.mkdir(parents=True, exist_ok=True)
    if target.is_file() and target.read_bytes() == data:
        return target  # also covers --requirements naming the copy itself
    temp = target.with_name(f".{target.name}.{secrets.token_hex(8)}.tmp")
    try:
        temp.write_bytes(data)
        temp.replace(target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return target


def now_iso() -> str:
    """The current UTC time, ISO 8601, to the second."""
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat()


def collect(results_dir: Path, requirements_path: Path,
            compare_with: Path | None = None) -> StatusReport:
    """The report of what is recorded under ``results_dir``, every input read and validated.

    With ``compare_with`` (an older status.json, read first: it may be the one this
    report replaces), the report carries what changed since it.
    """
    old = OldReport.read(compare_with) if compare_with is not None else None
    requirements = Requirements.load(requirements_path)
    runs = Run.read_all(results_dir)
    sources = current_sources(runs)
    report = build_report(requirements, runs, read_smoke_record(results_dir), now_iso(),
                          bench=read_bench(results_dir, sources),
                          mutation=read_mutation(results_dir, sources),
                          screenshots=read_screenshots(results_dir),
                          conformance=read_conformance(results_dir),
                          eval_record=read_eval(results_dir),
                          eval_matrix=read_eval_matrix(), agent_sha256=agent_sha256(),
                          teeth=read_teeth(results_dir, requirements.titles))
    if old is None:
        return report
    return dataclasses.replace(report, changes=compare(old, report.requirements, report.stages))


def regenerate(results_dir: Path, requirements_path: Path,
               formats: tuple[str, ...] = ("md", "json"),
               compare_with: Path | None = None) -> tuple[StatusReport, list[Path]]:
    """Rebuild the report from what is recorded under ``results_dir`` (QR-02, QR-05).

    Every input is read and checked before anything is written.
    """
    report = collect(results_dir, requirements_path, compare_with)
    return report, write_report(report, results_dir, formats)


__all__ = [
    "DEFAULT_REPORT_DIR",
    "DEFAULT_REQUIREMENTS",
    "FORMATS",
    "REQUIREMENTS_COPY",
    "SCHEMA_VERSION",
    "Changes",
    "Outcome",
    "ReportInvalid",
    "Requirements",
    "Run",
    "Status",
    "StatusReport",
    "TestResult",
    "build_report",
    "collect",
    "default_requirements",
    "keep_requirements",
    "now_iso",
    "read_smoke_record",
    "regenerate",
    "sources_sha256",
    "write_report",
]

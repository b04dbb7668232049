"""The qualification status report: requirements, recorded results, rendering (SPEC §12)."""

import datetime
import secrets
from pathlib import Path

from labfy_ref.errors import ReportInvalid
from labfy_ref.report.model import (
    Outcome,
    Requirements,
    Run,
    Status,
    StatusReport,
    TestResult,
    build_report,
    read_smoke_record,
)
from labfy_ref.report.render import FORMATS, write_report

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


def regenerate(results_dir: Path, requirements_path: Path,
               formats: tuple[str, ...] = ("md", "json")) -> tuple[StatusReport, list[Path]]:
    """Rebuild the report from what is recorded under ``results_dir`` (QR-02)."""
    requirements = Requirements.load(requirements_path)
    report = build_report(requirements, Run.read_all(results_dir),
                          read_smoke_record(results_dir), now_iso())
    return report, write_report(report, results_dir, formats)


__all__ = [
    "DEFAULT_REPORT_DIR",
    "DEFAULT_REQUIREMENTS",
    "FORMATS",
    "REQUIREMENTS_COPY",
    "Outcome",
    "ReportInvalid",
    "Requirements",
    "Run",
    "Status",
    "StatusReport",
    "TestResult",
    "build_report",
    "default_requirements",
    "keep_requirements",
    "now_iso",
    "read_smoke_record",
    "regenerate",
    "write_report",
]

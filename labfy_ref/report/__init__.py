"""The qualification status report: requirements, recorded results, rendering (SPEC §12)."""

import datetime
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
    "Outcome",
    "ReportInvalid",
    "Requirements",
    "Run",
    "Status",
    "StatusReport",
    "TestResult",
    "build_report",
    "now_iso",
    "read_smoke_record",
    "regenerate",
    "write_report",
]

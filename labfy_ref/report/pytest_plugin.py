"""The pytest plugin behind the status report (QR-01).

Load it with ``-p labfy_ref.report.pytest_plugin``. It registers the ``req``
marker, records every test's outcome with the requirement IDs it names, and
at session end (on the xdist controller only) writes
``results/<run>.json`` (with the build and the sources hash it tested, and each
failure's short message), ``junit.xml``, ``status.json``, ``STATUS.md``,
``status.html`` and a copy of the ``requirements.toml`` it used into the
report directory (so ``labfy-ref report`` can rebuild the report from anywhere). Requirement IDs
travel from xdist workers as ``user_properties``, which xdist serialises with
each report.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from labfy_ref.buildinfo import build_info
from labfy_ref.report import (
    DEFAULT_REPORT_DIR,
    DEFAULT_REQUIREMENTS,
    Outcome,
    ReportInvalid,
    Requirements,
    Run,
    TestResult,
    keep_requirements,
    now_iso,
    regenerate,
    sources_sha256,
)
from labfy_ref.report.model import short_message

#: Where a ``--target-url`` run writes its report (the target's, not ours).
CONFORMANCE_REPORT_DIR = Path("conformance-report")

_REQ = "req"
MOST_IDS = 3  # QR-06: a test names at most this many IDs (module, class and function marks)
_VARIANT = "variant"


def pytest_addoption(parser: pytest.Parser) -> None:
    """Options of the qualification report."""
    group = parser.getgroup("qualification", "labfy-ref qualification report")
    group.addoption("--report-dir", default=None,
                    help="where STATUS.md, status.json, junit.xml and results/ go (default: "
                         f"{DEFAULT_REPORT_DIR}, or {CONFORMANCE_REPORT_DIR} with --target-url)")
    group.addoption("--requirements", default=None,
                    help="requirements.toml (default: <rootdir>/qualification/requirements.toml)")
    group.addoption("--req", action="append", default=[], metavar="ID", dest="only_req",
                    help="run only the tests that name this requirement ID (repeatable): what "
                         "its own tests prove (QR-06); default: every test")
    group.addoption("--run-name", default=None,
                    help="name of this run's results file under results/ (default: qualify, or "
                         "conformance with --target-url)")


def _against_target(config: pytest.Config) -> bool:
    """Is this a conformance run (``--target-url``, QR-03)? Its report is the target's own."""
    return config.getoption("--target-url", default=None) is not None


def report_dir_of(config: pytest.Config) -> Path:
    """The run's report directory: a conformance run never writes over our own report."""
    chosen = config.getoption("--report-dir")
    default = CONFORMANCE_REPORT_DIR if _against_target(config) else DEFAULT_REPORT_DIR
    return config.rootpath / str(chosen if chosen is not None else default)


def run_name_of(config: pytest.Config) -> str:
    """The run's results file name under ``results/``."""
    chosen = config.getoption("--run-name")
    return str(chosen) if chosen is not None else \
        ("conformance" if _against_target(config) else "qualify")


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Register the marker and the recorder, and aim junitxml at the report dir."""
    config.addinivalue_line(
        "markers", "req(*ids): the requirement IDs (requirements.toml) this test proves")
    config.addinivalue_line(
        "markers", "variant(name): what this run of the test ran on (a browser); a stage that "
        "requires one variant (requirements.toml) folds the others' skips as absences")
    option = config.getoption("--requirements")
    path = Path(option) if option else config.rootpath / DEFAULT_REQUIREMENTS
    try:
        requirements = Requirements.load(path)
    except ReportInvalid as exc:
        raise pytest.UsageError(str(exc)) from exc
    report_dir = report_dir_of(config)
    if not _is_worker(config) and not config.option.xmlpath:
        config.option.xmlpath = str(report_dir / "junit.xml")
    config.pluginmanager.register(_Recorder(config, requirements, path, report_dir),
                                  "labfy-qualification-recorder")


def _ids(item: pytest.Item) -> list[str]:
    return [str(arg) for mark in item.iter_markers(_REQ) for arg in mark.args]


def _failure_message(report: pytest.TestReport) -> str | None:
    """What a reader sees first of a failure: the crash line (``assert 1 == 2``), bounded."""
    crash = getattr(report.longrepr, "reprcrash", None)
    text = str(crash.message) if crash is not None else str(report.longrepr or "")
    return short_message(text) or None


def _skip_reason(report: pytest.TestReport) -> str | None:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return None


class _Recorder:
    """Per-session state: the requirements, the results so far, the summary."""

    def __init__(self, config: pytest.Config, requirements: Requirements,
                 requirements_path: Path, report_dir: Path) -> None:
        self.config = config
        self.requirements = requirements
        self.requirements_path = requirements_path
        self.report_dir = report_dir
        self.results: dict[str, TestResult] = {}
        self.summary: dict[str, int] | None = None
        self.refused: str | None = None  # why the report could not be rebuilt

    @pytest.hookimpl(trylast=True)  # after conftests have added their markers
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        """Keep the tests of ``--req`` IDs only; carry each test's requirement IDs and
        variant on its reports (they cross xdist so)."""
        wanted = set(self.config.getoption("only_req") or ())
        if wanted:
            unknown = sorted(wanted - set(self.requirements.titles))
            if unknown:
                raise pytest.UsageError(f"--req names unknown requirement IDs {unknown}")
            deselected = [item for item in items if not wanted & set(_ids(item))]
            if deselected:
                self.config.hook.pytest_deselected(items=deselected)
                items[:] = [item for item in items if wanted & set(_ids(item))]
        for item in items:
            for req in _ids(item):
                item.user_properties.append((_REQ, req))
            variant = item.get_closest_marker(_VARIANT)
            if variant is not None and variant.args:
                item.user_properties.append((_VARIANT, str(variant.args[0])))

    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        """A bare ``req()``, an unknown ID or more than three IDs fail the test (RPT-01, QR-06)."""
        for mark in item.iter_markers(_REQ):
            if not mark.args:
                pytest.fail("@pytest.mark.req() needs at least one requirement ID",
                            pytrace=False)
        unknown = [req for req in _ids(item) if req not in self.requirements.titles]
        if unknown:
            pytest.fail(f"unknown requirement IDs {unknown}: add them to requirements.toml",
                        pytrace=False)
        named = sorted(set(_ids(item)))
        if len(named) > MOST_IDS:
            pytest.fail(f"the test names {len(named)} requirement IDs {named} (its module's, "
                        f"class's and own marks): a test names at most {MOST_IDS}, so tagging "
                        "everything with everything cannot make an ID CURRENT (QR-06)",
                        pytrace=False)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Fold setup/call/teardown reports into one outcome per test (controller side)."""
        if _is_worker(self.config):
            return
        reqs = tuple(sorted({str(v) for k, v in report.user_properties if k == _REQ}))
        previous = self.results.get(report.nodeid)
        if previous is not None and previous.outcome is Outcome.FAILED:
            return
        if report.failed or (report.when == "call" and hasattr(report, "wasxfail")):
            outcome = Outcome.FAILED
        elif report.skipped:
            outcome = Outcome.SKIPPED
        elif report.when == "call" or previous is None:
            outcome = Outcome.PASSED
        else:
            return
        variant = next((str(v) for k, v in report.user_properties if k == _VARIANT), None)
        message = _failure_message(report) if outcome is Outcome.FAILED else None
        self.results[report.nodeid] = TestResult(report.nodeid, outcome, reqs,
                                                 _skip_reason(report), report.duration, variant,
                                                 message)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Write this run's results and rebuild the report from every recorded run.

        A record already in the report directory that cannot be read (another run's
        malformed results, a bench.json of an unknown shape) fails the session with its
        one line, never a traceback: this run's own results are kept.
        """
        if _is_worker(self.config) or not self.results:
            return
        name = run_name_of(self.config)
        Run(name, now_iso(), tuple(self.results.values()), build_info(),
            sources_sha256()).write(self.report_dir)
        keep_requirements(self.requirements_path, self.report_dir)
        try:
            # html too, so the folder a pipeline publishes is complete after any run
            report, _ = regenerate(self.report_dir, self.requirements_path,
                                   ("md", "json", "html"))
        except ReportInvalid as exc:
            self.refused = str(exc)
            session.exitstatus = pytest.ExitCode.USAGE_ERROR
            return
        self.summary = report.summary()

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        """One line naming the report and its counts (or why it was not written)."""
        if self.refused is not None:
            terminalreporter.write_sep("-", f"qualification report not written: {self.refused}",
                                       red=True)
        if self.summary is None:
            return
        counts = ", ".join(f"{status} {count}" for status, count in self.summary.items())
        terminalreporter.write_sep(
            "-", f"qualification report: {self.report_dir / 'STATUS.md'} ({counts})")

"""QR-01, QR-02, RPT-01: the report plugin, run on generated projects with pytester."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from labfy_ref.cli.main import main
from qualification.report.projects import valid_status

REQUIREMENTS = """
[stages.SECURITY_SUITES]
title = "attacks"
paths = ["security/"]
[stages.REAL_LOCAL_MODEL_SMOKE]
title = "smoke"
record = "smoke"
[requirements]
"AA-01" = "all pass"
"AA-02" = "one fails"
"AA-03" = "all skipped"
"AA-04" = "nobody names it"
"AA-05" = "pass and skip"
"""

TESTS = """
import pytest

@pytest.mark.req("AA-01")
def test_one(): pass

@pytest.mark.req("AA-01", "AA-02")
def test_two(): pass

@pytest.mark.req("AA-02")
def test_three(): assert False

@pytest.mark.req("AA-03")
def test_four(): pytest.skip("firefox not installed")

@pytest.mark.req("AA-05")
def test_five(): pass

@pytest.mark.req("AA-05")
@pytest.mark.skipif(True, reason="no model file")
def test_six(): pass
"""

SECURITY = """
import pytest

@pytest.mark.req("AA-01")
def test_attack(): pass
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makefile(".toml", requirements=REQUIREMENTS)
    pytester.makepyfile(test_main=TESTS)
    pytester.mkdir("security")
    (pytester.path / "security" / "test_attacks.py").write_text(SECURITY)
    return pytester


def _args(extra: tuple[str, ...] = ()) -> list[str]:
    return ["-p", "labfy_ref.report.pytest_plugin", "--requirements", "requirements.toml",
            "--strict-markers", "-p", "no:cacheprovider", *extra]


def _status(path: Path) -> dict[str, str]:
    document = valid_status(path / "qualification-report" / "status.json")
    lines = document["requirements"] + document["stages"]
    return {line["id"]: line["status"] for line in lines}


def _check(path: Path) -> None:
    assert _status(path) == {
        "AA-01": "CURRENT", "AA-02": "FAIL", "AA-03": "NOT_RUN", "AA-04": "TARGET",
        "AA-05": "NOT_RUN", "SECURITY_SUITES": "PASS", "REAL_LOCAL_MODEL_SMOKE": "NOT_RUN",
    }
    report = path / "qualification-report"
    assert (report / "junit.xml").is_file()
    markdown = (report / "STATUS.md").read_text()
    assert "| AA-03 | NOT_RUN | all skipped | `test_main.py::test_four` | firefox not installed |" \
        in markdown
    assert "| AA-04 | TARGET |" in markdown


@pytest.mark.req("QR-01")
def test_statuses_follow_the_rule_of_every_naming_test(project: pytest.Pytester) -> None:
    result = project.runpytest_subprocess(*_args())
    result.assert_outcomes(passed=4, failed=1, skipped=2)
    result.stdout.fnmatch_lines(["*qualification report:*STATUS.md (CURRENT 1, FAIL 1, "
                                 "NOT_RUN 2, TARGET 1)*"])
    _check(project.path)


@pytest.mark.req("QR-01")
def test_the_report_is_the_same_under_xdist(project: pytest.Pytester) -> None:
    result = project.runpytest_subprocess(*_args(("-n", "2")))
    result.assert_outcomes(passed=4, failed=1, skipped=2)
    _check(project.path)


OUTCOMES_REQUIREMENTS = """
[requirements]
"BB-01" = "passes"
"BB-02" = "fails in its call"
"BB-03" = "its fixture fails in setup"
"BB-04" = "passes, its fixture fails in teardown"
"BB-05" = "skips in its call"
"BB-06" = "its fixture skips in setup"
"BB-07" = "fails as its xfail mark expects"
"BB-08" = "passes despite a plain xfail mark"
"BB-09" = "passes despite a strict xfail mark"
"BB-10" = "errors in setup, and its teardown fails too"
"""

OUTCOMES = """
import pytest

@pytest.fixture
def broken_setup():
    raise RuntimeError("setup broke")

@pytest.fixture
def broken_teardown():
    yield
    raise RuntimeError("teardown broke")

@pytest.fixture
def skipping():
    pytest.skip("the fixture says not here")

@pytest.fixture
def both():
    raise RuntimeError("setup broke")

@pytest.mark.req("BB-01")
def test_pass(): pass

@pytest.mark.req("BB-02")
def test_fail(): assert False

@pytest.mark.req("BB-03")
def test_setup_error(broken_setup): pass

@pytest.mark.req("BB-04")
def test_teardown_error(broken_teardown): pass

@pytest.mark.req("BB-05")
def test_skip(): pytest.skip("no browser")

@pytest.mark.req("BB-06")
def test_fixture_skip(skipping): pass

@pytest.mark.req("BB-07")
@pytest.mark.xfail(reason="known")
def test_xfail(): assert False

@pytest.mark.req("BB-08")
@pytest.mark.xfail(reason="known")
def test_xpass(): pass

@pytest.mark.req("BB-09")
@pytest.mark.xfail(reason="known", strict=True)
def test_strict_xpass(): pass

@pytest.mark.req("BB-10")
def test_setup_and_teardown(broken_teardown, both): pass
"""


@pytest.mark.req("QR-01")
@pytest.mark.parametrize("extra", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_every_pytest_outcome_has_its_status(pytester: pytest.Pytester,
                                             extra: tuple[str, ...]) -> None:
    """Only a test that passed in setup, call and teardown proves its ID: a failure in any
    phase is FAIL, a skip in any phase NOT_RUN, and a test marked xfail proves nothing
    whether it fails as expected or passes (FAIL), serially and under xdist alike."""
    pytester.makefile(".toml", requirements=OUTCOMES_REQUIREMENTS)
    pytester.makepyfile(test_outcomes=OUTCOMES)
    result = pytester.runpytest_subprocess(*_args(extra))
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert _status(pytester.path) == {
        "BB-01": "CURRENT", "BB-02": "FAIL", "BB-03": "FAIL", "BB-04": "FAIL",
        "BB-05": "NOT_RUN", "BB-06": "NOT_RUN", "BB-07": "FAIL", "BB-08": "FAIL",
        "BB-09": "FAIL", "BB-10": "FAIL"}
    markdown = (pytester.path / "qualification-report" / "STATUS.md").read_text()
    assert ("| BB-06 | NOT_RUN | its fixture skips in setup | "
            "`test_outcomes.py::test_fixture_skip` | the fixture says not here |") in markdown
    assert "failed: test_outcomes.py::test_teardown_error" in markdown


@pytest.mark.req("RPT-01")
def test_an_unknown_or_missing_id_fails_the_test(pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", requirements=REQUIREMENTS)
    pytester.makepyfile(test_typo="""
import pytest

@pytest.mark.req("AA-1")
def test_typo(): pass

@pytest.mark.req()
def test_empty(): pass
""")
    result = pytester.runpytest_subprocess(*_args())
    result.assert_outcomes(errors=2)
    output = result.stdout.str()
    assert "unknown requirement IDs ['AA-1']: add them to requirements.toml" in output
    assert "@pytest.mark.req() needs at least one requirement ID" in output


@pytest.mark.req("QR-06")
def test_a_test_naming_more_than_three_ids_fails(pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", requirements=REQUIREMENTS)
    pytester.makepyfile(test_wide="""
import pytest

pytestmark = pytest.mark.req("AA-01")

@pytest.mark.req("AA-02", "AA-03")
def test_three(): pass

@pytest.mark.req("AA-01", "AA-02", "AA-03", "AA-01")
def test_three_again(): pass

@pytest.mark.req("AA-02", "AA-03", "AA-05")
def test_four(): pass

class TestWide:
    pytestmark = pytest.mark.req("AA-04")

    @pytest.mark.req("AA-02")
    def test_three(self): pass

    @pytest.mark.req("AA-05", "AA-02")
    def test_four(self): pass
""")
    result = pytester.runpytest_subprocess(*_args(("-v",)))
    result.assert_outcomes(passed=3, errors=2)
    output = result.stdout.str()
    assert "the test names 4 requirement IDs ['AA-01', 'AA-02', 'AA-03', 'AA-05']" in output
    assert "the test names 4 requirement IDs ['AA-01', 'AA-02', 'AA-04', 'AA-05']" in output
    result.stdout.fnmatch_lines(["*test_wide.py::test_four ERROR*",
                                 "*test_wide.py::TestWide::test_four ERROR*"], consecutive=False)


@pytest.mark.req("QR-06")
def test_req_runs_only_the_tests_that_name_the_id(project: pytest.Pytester) -> None:
    result = project.runpytest_subprocess(*_args(("--req", "AA-02", "-v")))
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*test_two PASSED*", "*test_three FAILED*",
                                 "*5 deselected*"], consecutive=False)
    wrong = project.runpytest_subprocess(*_args(("--req", "ZZ-09")))
    assert wrong.ret == pytest.ExitCode.USAGE_ERROR
    assert "--req names unknown requirement IDs ['ZZ-09']" in wrong.stderr.str()


@pytest.mark.req("RPT-01")
def test_an_unregistered_marker_is_refused(pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", requirements=REQUIREMENTS)
    pytester.makepyfile(test_marker="""
import pytest

@pytest.mark.reqs("AA-01")
def test_misspelt(): pass
""")
    result = pytester.runpytest_subprocess(*_args())
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*'reqs' not found in `markers` configuration option*"])


@pytest.mark.req("QR-02")
def test_labfy_ref_report_rebuilds_from_records_with_the_smoke_record(
        project: pytest.Pytester, capsys: pytest.CaptureFixture[str]) -> None:
    project.runpytest_subprocess(*_args())
    report = project.path / "qualification-report"
    (report / "STATUS.md").unlink()
    (report / "status.json").unlink()
    (report / "smoke-record.json").write_text(json.dumps(
        {"stage": "REAL_LOCAL_MODEL_SMOKE", "status": "PASS_LOCAL_SPECIMEN", "reached": "final",
         "reason": None, "model": {"file": "SmolLM2-135M-Instruct.Q4_1.gguf"},
         "llama_server": {}, "settings": {}, "timings_ms": {}, "tokens": {}, "turn": {},
         "started_at": "2026-01-01T00:00:00Z", "finished_at": "2026-01-01T00:00:41Z",
         "labfy_ref_version": "0"}))
    code = main(["report", "--results", str(report), "--requirements",
                 str(project.path / "requirements.toml"), "--format", "md,json,html"])
    assert code == 0
    assert "requirements: CURRENT 1, FAIL 1, NOT_RUN 2, TARGET 1" in capsys.readouterr().out
    status = _status(project.path)
    assert status["REAL_LOCAL_MODEL_SMOKE"] == "PASS_LOCAL_SPECIMEN"
    assert status["AA-01"] == "CURRENT"
    assert "<script" not in (report / "status.html").read_text()


@pytest.mark.req("QR-02")
def test_later_runs_override_earlier_results_of_the_same_test(
        project: pytest.Pytester) -> None:
    project.runpytest_subprocess(*_args())
    fixed = TESTS.replace("def test_three(): assert False", "def test_three(): pass")
    project.makepyfile(test_main=fixed)
    project.runpytest_subprocess(*_args(("--run-name", "rerun")))
    assert _status(project.path)["AA-02"] == "CURRENT"
    shutil.rmtree(project.path / "qualification-report" / "results")


@pytest.mark.req("QR-01")
def test_parametrized_cases_are_counted_in_status_md() -> None:
    from labfy_ref.report.render import _grouped  # noqa: PLC0415 - a private helper under test

    assert _grouped(("a.py::t[1]", "a.py::t[2]", "a.py::u", "a.py::t[x-y]")) == \
        "`a.py::t` x3, `a.py::u`"


@pytest.mark.req("QR-02")
def test_the_requirements_copy_is_rewritten_only_when_it_differs(tmp_path: Path) -> None:
    """The results keep the requirements they were run against (``labfy-ref report`` works
    from anywhere): an identical copy is left as it is (also when ``--requirements``
    names the copy itself); a different one is replaced whole, never half-written."""
    from labfy_ref.report import keep_requirements  # noqa: PLC0415

    source, results = tmp_path / "requirements.toml", tmp_path / "results"
    source.write_text('[requirements]\n"AA-01" = "two"\n', "utf-8")
    copy = keep_requirements(source, results)
    assert copy.read_bytes() == source.read_bytes()
    inode = copy.stat().st_ino
    for again in (source, copy):  # (a rewrite could reuse the inode it freed: one at a time)
        assert keep_requirements(again, results) == copy
        assert copy.stat().st_ino == inode, "an identical copy is not written again"
    source.write_text('[requirements]\n"AA-01" = "one"\n', "utf-8")  # sorts before "two"
    keep_requirements(source, results)
    assert copy.read_bytes() == source.read_bytes() and copy.stat().st_ino != inode
    assert sorted(p.name for p in results.iterdir()) == [copy.name], "no temporary file left"



@pytest.mark.req("QR-02")
def test_a_requirements_copy_that_cannot_be_written_says_why(tmp_path: Path) -> None:
    """Where nothing may be created (sysfs refuses even root), the copy fails with the
    write's own error, not one of the cleanup of a temporary file never made."""
    from labfy_ref.report import keep_requirements  # noqa: PLC0415

    unwritable = Path("/sys/kernel")
    if not unwritable.is_dir():
        pytest.skip("no /sys/kernel on this system")
    source = tmp_path / "requirements.toml"
    source.write_text('[requirements]\n"AA-01" = "one"\n', "utf-8")
    with pytest.raises(OSError, match=r"^\[Errno (13|30)\] ") as refused:  # EACCES, EROFS
        keep_requirements(source, unwritable)
    assert not isinstance(refused.value, FileNotFoundError), refused.value

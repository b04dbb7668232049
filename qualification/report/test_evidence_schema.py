"""QR-05, QR-02: status.json's published schema, the evidence records, stale figures, version 0.

Every status.json written here is validated against ``schemas/status.schema.json``
(package data). The bench record is the real bench's output; the mutation and
conformance records are fixtures in the formats their schemas publish.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import unicodedata
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labfy_ref.buildinfo import build_info
from labfy_ref.report import collect, regenerate
from labfy_ref.report.model import (
    Outcome,
    Requirements,
    Run,
    Stage,
    build_report,
    short_message,
)
from labfy_ref.report.model import TestResult as Result
from labfy_ref.report.render import to_json, to_markdown
from labfy_ref.report.sources import sources_sha256
from labfy_ref.report.validate import schema
from qualification.conftest import REPO
from qualification.report.projects import (
    BROKEN,
    REQUIREMENTS,
    cli,
    make_project,
    run_project,
    statuses,
    valid_status,
)

OTHER_SOURCES = "0" * 64
#: A smoke record every check passes (the malformed cases change one field).
SMOKE: dict[str, Any] = {
    "stage": "REAL_LOCAL_MODEL_SMOKE", "status": "FAIL", "reached": "turn", "reason": "r",
    "model": {"file": "m.gguf"}, "llama_server": {}, "settings": {},
    "timings_ms": {"rounds": [1.5]}, "tokens": {"prompt": 3}, "turn": {"rounds": [{"ms": 1}]},
    "started_at": "2026-01-01T00:00:00Z", "finished_at": "2026-01-01T00:00:41Z",
    "labfy_ref_version": "0"}


def _mutation(sources: str | None, reqs: list[str]) -> dict[str, Any]:
    return {"schema": "labfy.mutation.v1", "at": "2026-01-02T03:04:05+00:00",
            "sources_sha256": sources, "reqs": reqs,
            "modules": [{"name": "labfy_ref/server/security.py", "killed": 41, "total": 43}],
            "requirements": [{"name": "SV-04", "killed": 30, "total": 31},
                             {"name": "AA-02", "killed": 11, "total": 12}],
            "survivors": [{"module": "labfy_ref/server/security.py", "location": "security.py:88",
                           "mutation": "< -> <=", "reqs": ["SV-04"],
                           "justification": "equivalent: the bound is checked again below"},
                          {"module": "labfy_ref/server/security.py", "location": "security.py:97",
                           "mutation": "'x' -> ''", "reqs": ["AA-02"], "justification": None}]}


CONFORMANCE = {"target_url": "http://127.0.0.1:9123", "at": "2026-01-02T03:04:05+00:00",
               "version": {"name": "other-impl", "version": "2.0.0", "commit": None,
                           "spec": "sha256:1c7248d1a2ef6853"}}


def _bench(report: Path) -> dict[str, Any]:
    """Run the real bench's quickest section into the report directory; return bench.json."""
    done = subprocess.run([sys.executable, "-m", "qualification.bench", "--quick", "--only",
                           "micro", "--out", str(report / "bench.json")], cwd=REPO,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    document: dict[str, Any] = json.loads((report / "bench.json").read_text())
    return document


@pytest.mark.req("QR-05", "QR-02")
def test_a_report_with_every_record_validates_and_shows_each_one(
        pytester: pytest.Pytester) -> None:
    report = make_project(pytester)
    run_project(pytester).assert_outcomes(passed=4)
    bench = _bench(report)
    assert bench["sources_sha256"] == sources_sha256()
    (report / "mutation.json").write_text(json.dumps(_mutation(sources_sha256(), ["AA-02"])))
    (report / "conformance.json").write_text(json.dumps(CONFORMANCE))
    (report / "smoke-record.json").write_text(json.dumps(
        {"stage": "REAL_LOCAL_MODEL_SMOKE", "reason": None, "model": {}, "llama_server": {},
         "settings": {}, "turn": {}, "started_at": "2026-01-01T00:00:00Z",
         "finished_at": "2026-01-01T00:00:01Z", "labfy_ref_version": "0",
         "status": "PASS_LOCAL_SPECIMEN", "reached": "final",
         "timings_ms": {"rounds": [120.5, 80.25]}, "tokens": {"cached_share_after_round_1": 0.8}}))
    for browser in ("firefox", "chromium"):
        (report / "screens" / browser).mkdir(parents=True)
        (report / "screens" / browser / "login.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    (report / "screens" / "firefox" / "notes.txt").write_text("not a screenshot")
    (report / "screens" / "firefox" / "linked.png").symlink_to(report / "bench.json")

    done = cli("report", "--results", str(report), "--format", "md,json,html")

    assert done.returncode == 0, done.stderr
    document = valid_status(report / "status.json")
    assert document["bench"]["sources"] == "current" and document["bench"]["stale"] is False
    assert len(document["bench"]["rows"]) == len(bench["rows"])
    assert document["bench"]["goals"] == {"total": bench["goals"]["total"],
                                          "met": bench["goals"]["met"]}
    assert document["mutation"]["sources"] == "current"
    assert document["mutation"]["survivors"][1]["justification"] is None
    assert document["screenshots"] == {"chromium": ["screens/chromium/login.png"],
                                       "firefox": ["screens/firefox/login.png"]}
    assert document["smoke"]["timings_ms"]["rounds"] == [120.5, 80.25]
    assert document["conformance"] == CONFORMANCE
    # the build a conformance report is about is the target's own answer
    assert document["build"] == {"name": "other-impl", "version": "2.0.0", "commit": None,
                                 "spec": "sha256:1c7248d1a2ef6853", "source": "target",
                                 "runs": ["qualify"]}
    assert statuses(document)["AA-02"] == "CURRENT"
    markdown = (report / "STATUS.md").read_text()
    assert "- Mutation (2026-01-02T03:04:05+00:00): 41 of 43 mutants killed in 1 modules, " \
           "2 surviving (1 not justified)" in markdown
    assert "- Screenshots: chromium 1, firefox 1 (under `screens/`)." in markdown
    assert "- Conformance target: http://127.0.0.1:9123 answered" in markdown


@pytest.mark.req("QR-05")
@pytest.mark.parametrize(("sources", "freshness", "aa02"), [
    ("tested", "current", "CURRENT"),
    ("other", "stale", "NOT_RUN"),
    (None, "unknown", "CURRENT"),
])
def test_an_id_backed_by_a_stale_record_is_not_current(
        pytester: pytest.Pytester, sources: str | None, freshness: str, aa02: str) -> None:
    report = make_project(pytester)
    run_project(pytester).assert_outcomes(passed=4)
    measured = {"tested": sources_sha256(), "other": OTHER_SOURCES, None: None}[sources]
    for record in ("bench", "mutation"):
        if record == "bench":
            document: dict[str, Any] = {
                "at": "2026-01-02T03:04:05+00:00", "quick": True, "reqs": ["AA-02"],
                "rows": [{"section": "micro", "figure": "parse", "ours": 1.0, "baseline": 2.0,
                          "unit": "µs", "ratio": 0.5, "goal": {"op": "<=", "bound": 1,
                                                              "text": "≤ 1"}, "met": True}]}
            if measured is not None:
                document["sources_sha256"] = measured
        else:
            document = _mutation(measured, ["AA-02"])
        (report / f"{record}.json").write_text(json.dumps(document))
        regenerate(report, pytester.path / "requirements.toml", ("md", "json"))
        status = valid_status(report / "status.json")
        assert status[record]["sources"] == freshness
        assert status[record]["stale"] is (freshness == "stale")
        line = next(line for line in status["requirements"] if line["id"] == "AA-02")
        assert line["status"] == aa02
        if aa02 == "NOT_RUN":
            assert line["reason"].startswith(f"its {record} record (2026-01-02T03:04:05+00:00) "
                                             "measured other sources than these tests ran on")
            assert "STALE" in (report / "STATUS.md").read_text()
        assert statuses(status)["AA-01"] == "CURRENT"  # an ID no record backs is untouched
        (report / f"{record}.json").unlink()


@pytest.mark.req("QR-05", "QR-02")
def test_results_and_reports_of_version_zero_are_read(tmp_path: Path) -> None:
    report = tmp_path / "report"
    (report / "results").mkdir(parents=True)
    # a results file as every plugin before schema 1 wrote it (no schema_version, no build)
    (report / "results" / "qualify.json").write_text(json.dumps({
        "name": "qualify", "generated_at": "2025-11-30T16:11:00+00:00",
        "tests": [{"nodeid": "test_main.py::test_one", "outcome": "passed", "reqs": ["AA-01"],
                   "reason": None, "duration": 0.01},
                  {"nodeid": "test_main.py::test_two", "outcome": "failed", "reqs": ["AA-02"],
                   "reason": None, "duration": 0.02, "variant": None}]}))
    (report / "bench.json").write_text(json.dumps({
        "schema": "labfy.bench.v1", "at": "2025-11-30T13:36:00+00:00", "quick": True,
        "rows": [], "goals": {"total": 0, "met": 0, "missed": []}}))
    (tmp_path / "requirements.toml").write_text(REQUIREMENTS)

    built, _ = regenerate(report, tmp_path / "requirements.toml", ("md", "json"))

    document = valid_status(report / "status.json")
    assert statuses(document) == {"AA-01": "CURRENT", "AA-02": "FAIL", "AA-03": "TARGET",
                                  "SECURITY_SUITES": "NOT_RUN"}
    # no run recorded its build or sources: the build is the report writer's, freshness unknown
    info = build_info()
    assert document["build"] == {**{k: info[k] for k in ("name", "version", "commit", "spec")},
                                 "source": "report", "runs": []}
    assert document["bench"]["sources"] == "unknown"
    assert document["requirements"][1]["failures"] == [
        {"nodeid": "test_main.py::test_two", "message": None}]
    assert f"Build: labfy-ref {info['version']}, commit {info['commit'] or 'unknown'}, SPEC " \
        f"{info['spec']} (no run recorded its build: this is the code that wrote the report)." \
        in (report / "STATUS.md").read_text()
    assert built.build is not None and built.build.source == "report"


@pytest.mark.req("QR-05")
@pytest.mark.parametrize(("name", "content", "fragment"), [
    ("results/qualify.json", b'{"schema_version": 7, "name": "q"}',
     "REPORT_INVALID: results file qualify.json: unknown schema_version 7"),
    ("results/qualify.json", b'{"name": "q", "generated_at": "x", "tests": [{"nodeid": "t", '
     b'"outcome": "exploded", "reqs": []}]}',
     "REPORT_INVALID: malformed results file qualify.json: at $.tests[0].outcome"),
    ("results/qualify.json", b'{"name": "q", "gen',
     "REPORT_INVALID: malformed results file "),
    ("bench.json", b'{"at": "x", "rows": [{"figure": "f"}]}',
     "REPORT_INVALID: malformed bench record "),
    ("mutation.json", b'{"at": "x"}', "REPORT_INVALID: malformed mutation record "),
    ("conformance.json", b'{"target_url": "file:///etc/passwd", "at": "x", "version": {}}',
     "REPORT_INVALID: malformed conformance record "),
    ("smoke-record.json", b"[1]", "REPORT_INVALID: smoke record "),
    ("smoke-record.json", json.dumps({**SMOKE, "turn": {"rounds": 5}}).encode(),
     "REPORT_INVALID: malformed smoke record "),
    ("smoke-record.json", json.dumps({**SMOKE, "timings_ms": {"rounds": ["x"]}}).encode(),
     "REPORT_INVALID: malformed smoke record "),
    ("smoke-record.json", json.dumps({**SMOKE, "tokens": {"prompt": "many"}}).encode(),
     "REPORT_INVALID: malformed smoke record "),
    ("smoke-record.json", json.dumps({**SMOKE, "model": {"file": "m" * 300}}).encode(),
     "REPORT_INVALID: malformed smoke record "),
])
def test_a_malformed_record_is_one_line_and_exit_2(
        tmp_path: Path, name: str, content: bytes, fragment: str) -> None:
    report = tmp_path / "report"
    (report / "results").mkdir(parents=True)
    (report / name).write_bytes(content)
    (tmp_path / "requirements.toml").write_text(REQUIREMENTS)
    done = cli("report", "--results", str(report), "--requirements",
               str(tmp_path / "requirements.toml"))
    assert done.returncode == 2
    assert done.stderr.startswith(fragment), done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert not (report / "status.json").exists()


@pytest.mark.req("QR-05", "QR-02")
def test_a_record_that_cannot_render_leaves_the_previous_report_whole(tmp_path: Path) -> None:
    # Schema-valid, then written: before, STATUS.md and status.json were rewritten, then
    # rendering the HTML failed INTERNAL_ERROR (exit 1) on a record of an unexpected shape.
    report = tmp_path / "report"
    (report / "results").mkdir(parents=True)
    (tmp_path / "requirements.toml").write_text(REQUIREMENTS)
    before = {name: f"the previous {name}" for name in ("STATUS.md", "status.json")}
    for name, text in before.items():
        (report / name).write_text(text)
    (report / "smoke-record.json").write_text(json.dumps({**SMOKE, "turn": {"rounds": 5}}))
    done = cli("report", "--results", str(report), "--requirements",
               str(tmp_path / "requirements.toml"), "--format", "md,json,html")
    assert done.returncode == 2, done.stderr
    assert {name: (report / name).read_text() for name in before} == before
    assert not (report / "status.html").exists()


@pytest.mark.req("QR-05", "QR-02")
@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "directory"])
@pytest.mark.parametrize("where", ["smoke-record.json", "--compare"])
def test_a_record_that_is_not_a_regular_file_is_refused_at_once(
        tmp_path: Path, kind: str, where: str) -> None:
    # ATTACKS.md §H, foreign records: a FIFO used to hang the report, /dev/zero (size 0)
    # to be read until memory ran out. Only a regular file is read, and only to a bound.
    report = tmp_path / "report"
    (report / "results").mkdir(parents=True)
    (tmp_path / "requirements.toml").write_text(REQUIREMENTS)
    odd = tmp_path / "odd.json"
    if kind == "fifo":
        os.mkfifo(odd)
    elif kind == "dev-zero":
        odd.symlink_to("/dev/zero")
    else:
        odd.mkdir()
    extra: list[str] = []
    if where == "--compare":
        extra = ["--compare", str(odd)]
    else:
        (report / where).symlink_to(odd)
    done = cli("report", "--results", str(report), "--requirements",
               str(tmp_path / "requirements.toml"), *extra)  # a hang fails (timeout)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("REPORT_INVALID: "), done.stderr
    assert "not a regular file" in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1
    assert not (report / "status.json").exists()


@pytest.mark.req("QR-05", "QR-01")
def test_the_plugin_writes_a_complete_valid_report_against_the_real_requirements(
        pytester: pytest.Pytester) -> None:
    shutil.copyfile(REPO / "qualification" / "requirements.toml",
                    pytester.path / "requirements.toml")
    pytester.makepyfile(test_real="""
import pytest

@pytest.mark.req("QR-05")
def test_reads_well(): pass

@pytest.mark.req("QR-04")
def test_has_teeth(): assert 1 == 2
""")
    result = run_project(pytester)
    result.assert_outcomes(passed=1, failed=1)
    report = pytester.path / "qualification-report"
    document = valid_status(report / "status.json")
    assert (report / "status.html").is_file() and (report / "STATUS.md").is_file()
    assert (report / "junit.xml").is_file()
    run = json.loads((report / "results" / "qualify.json").read_text())
    jsonschema.Draft202012Validator(schema("results")).validate(run)
    assert run["schema_version"] == 1
    assert run["build"] == build_info() and run["sources_sha256"] == sources_sha256()
    assert document["build"]["source"] == "run" and document["build"]["runs"] == ["qualify"]
    assert document["runs"][0]["sources_sha256"] == sources_sha256()
    failure = next(line for line in document["requirements"] if line["id"] == "QR-04")
    assert failure["failures"][0]["message"] == "assert 1 == 2"


@pytest.mark.req("QR-05")
def test_every_schema_is_package_data_and_a_valid_schema() -> None:
    folder = resources.files("labfy_ref.report").joinpath("schemas")
    names = sorted(entry.name for entry in folder.iterdir() if entry.name.endswith(".json"))
    assert names == ["bench.schema.json", "conformance.schema.json", "eval-record.schema.json",
                     "faults.schema.json", "mutation-module.schema.json", "mutation.schema.json",
                     "results.schema.json", "smoke-record.schema.json", "status.schema.json",
                     "status.v0.schema.json"]
    for name in names:
        jsonschema.Draft202012Validator.check_schema(schema(name.removesuffix(".schema.json")))
    pyproject = (REPO / "pyproject.toml").read_text()
    assert '"labfy_ref.report" = ["schemas/*.json"' in pyproject


@pytest.mark.req("QR-05")
def test_the_sources_hash_follows_every_python_source_and_nothing_else(tmp_path: Path) -> None:
    package = tmp_path / "labfy_ref"
    (package / "sub").mkdir(parents=True)
    assert sources_sha256(package) is None  # no sources here: "unknown", never "stale"
    (package / "a.py").write_bytes(b"A = 1\n")
    (package / "sub" / "b.py").write_bytes(b"B = 2\n")
    first = sources_sha256(package)
    expected = hashlib.sha256()
    for name, data in (("a.py", b"A = 1\n"), ("sub/b.py", b"B = 2\n")):
        expected.update(len(name).to_bytes(8, "big") + name.encode())
        expected.update(len(data).to_bytes(8, "big") + data)
    assert first == expected.hexdigest()
    (package / "sub" / "b.cpython-311.pyc").write_bytes(b"cache")
    (package / "notes.txt").write_text("not code")
    assert sources_sha256(package) == first
    (package / "sub" / "b.py").write_bytes(b"B = 3\n")
    changed = sources_sha256(package)
    assert changed != first
    (package / "sub" / "b.py").rename(package / "sub" / "c.py")
    assert sources_sha256(package) not in {first, changed}


@pytest.mark.req("QR-05")
def test_a_report_of_results_alone_has_no_evidence_keys(pytester: pytest.Pytester) -> None:
    report = make_project(pytester, BROKEN)
    run_project(pytester)
    built = collect(report, pytester.path / "requirements.toml")
    document = valid_status(report / "status.json")
    assert not {"bench", "mutation", "conformance", "screenshots", "smoke", "changes"} & set(
        document)
    assert (built.bench, built.mutation, built.conformance, built.changes) == (None,) * 4


_HOSTILE = st.text(st.characters(codec=None, categories=["Cs", "Cc", "Cf", "L", "P", "Zs"]),
                   max_size=40)


@pytest.mark.req("QR-05", "QR-01")
@settings(deadline=None, max_examples=150)
@given(reason=_HOSTILE, message=_HOSTILE, title=_HOSTILE.filter(lambda t: "\x00" not in t))
def test_any_reason_or_message_is_written_as_valid_utf8_and_schema_valid(
        reason: str, message: str, title: str) -> None:
    requirements = Requirements(titles={"AA-01": title, "AA-02": "x"},
                                stages=(Stage("SECURITY_SUITES", title, ("security/",)),))
    run = Run("qualify", "2026-01-01T00:00:00+00:00", (
        Result("t.py::skipped", Outcome.SKIPPED, ("AA-01",), reason=reason),
        Result("security/t.py::failed", Outcome.FAILED, ("AA-02",),
                   message=short_message(message))))
    report = build_report(requirements, [run], None, "2026-01-01T00:00:01+00:00")
    markdown = to_markdown(report)
    markdown.encode("utf-8")  # no lone surrogate left to refuse the write
    assert not any(unicodedata.category(ch) in {"Cc", "Cs"} for ch in markdown if ch != "\n")
    document = json.loads(json.dumps(to_json(report)))
    jsonschema.Draft202012Validator(schema("status")).validate(document)
    failure = document["requirements"][1]["failures"][0]["message"]
    assert "\n" not in failure and len(failure) <= 240


@pytest.mark.req("QR-05", "QR-01")
def test_a_malformed_record_left_in_the_report_dir_fails_the_run_in_one_line(
        pytester: pytest.Pytester) -> None:
    report = make_project(pytester)
    (report / "results").mkdir(parents=True)
    (report / "results" / "old.json").write_text('{"schema_version": 9}')
    result = run_project(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stdout.fnmatch_lines(["*qualification report not written: REPORT_INVALID: results "
                                 "file old.json: unknown schema_version 9 *"])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    assert (report / "results" / "qualify.json").is_file()  # this run's results are kept
    assert not (report / "status.json").exists()

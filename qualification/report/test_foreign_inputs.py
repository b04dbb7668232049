"""QR-05, QR-02: what the report did not write itself is inert wherever it is shown.

ATTACKS.md §H, foreign records: an old status.json given to ``--compare``, a
conformance target's ``/api/version`` answer, a smoke record's model file name,
a results file. Each is schema-checked and bounded before anything is written;
on the terminal no control character (an ESC sequence, a carriage return)
reaches the screen and no line can spell a CI runner's ``::command``; in
STATUS.md no raw HTML, link, code span or table row can be forged.
"""

from __future__ import annotations

import json
import re
import shutil
import unicodedata
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from labfy_ref.text import terminal
from qualification.report.projects import cli, make_project, run_project

#: What a hostile string holds: markup, a table row break, a CI command, terminal control.
HOSTILE = ("<script>alert(1)</script> <img src=x onerror=alert(2)> [x](javascript:alert(3)) "
           "`code` *em* _em_ | forged | cell |\n| QR-01 | CURRENT | forged row |\r"
           "\n::error::forged \x1b[2J\x1b]8;;http://x\x07 \u202egnp.exe \ud800")


def _old_status(pytester: pytest.Pytester) -> tuple[Path, Path, dict[str, Any]]:
    report = make_project(pytester)
    run_project(pytester).assert_outcomes(passed=4)
    old = pytester.path / "old-status.json"
    shutil.copyfile(report / "status.json", old)
    return report, old, json.loads(old.read_text())


def _inert_on_a_terminal(text: str) -> None:
    assert "\x1b" not in text and "\r" not in text and "\x07" not in text
    assert "\u202e" not in text
    assert not any(line.lstrip().startswith("::") for line in text.splitlines())
    assert not any(unicodedata.category(ch) == "Cs" for ch in text)


@pytest.mark.req("QR-05", "QR-02")
@pytest.mark.parametrize("field", ["generated_at", "ran_on", "title"])
def test_a_hostile_old_status_is_refused_or_shown_inert_on_the_terminal(
        pytester: pytest.Pytester, field: str) -> None:
    report, old, document = _old_status(pytester)
    if field == "generated_at":
        document["generated_at"] = "2026-01-01T00:00:00Z" + HOSTILE[-40:]
    elif field == "ran_on":
        document["stages"][0]["ran_on"] = [HOSTILE[-40:]]
    else:  # a title is free text: read, but never shown raw
        document["requirements"][0]["title"] = HOSTILE
    old.write_text(json.dumps(document))
    (report / "status.json").unlink()

    done = cli("report", "--results", str(report), "--compare", str(old))

    _inert_on_a_terminal(done.stdout + done.stderr)
    if field == "title":
        assert done.returncode == 0, done.stderr
        assert (report / "status.json").is_file()
    else:  # the schema bounds the fields that are printed: refused before anything is written
        assert done.returncode == 2, done.stdout
        assert done.stderr.startswith("REPORT_INVALID: ") and done.stderr.count("\n") == 1
        assert not (report / "status.json").exists()


@pytest.mark.req("QR-05", "QR-03")
def test_a_target_answer_and_a_model_file_name_cannot_forge_markdown(
        pytester: pytest.Pytester) -> None:
    report = make_project(pytester)
    run_project(pytester).assert_outcomes(passed=4)
    hostile = HOSTILE.replace("\ud800", "")  # the JSON of a record is valid UTF-8 on disk
    (report / "conformance.json").write_text(json.dumps({
        "target_url": "http://127.0.0.1:9123", "at": "2026-01-02T03:04:05+00:00",
        "version": {"name": hostile[:200], "version": hostile[200:], "commit": "`x` <b>",
                    "spec": "[s](javascript:1)"}}))
    (report / "smoke-record.json").write_text(json.dumps({
        "stage": "REAL_LOCAL_MODEL_SMOKE", "status": "FAIL", "reached": "turn",
        "reason": hostile, "model": {"file": "<img src=x onerror=alert(4)>|x|.gguf"},
        "llama_server": {"version": hostile[:100]}, "settings": {}, "timings_ms": {},
        "tokens": {}, "turn": {}, "started_at": "2026-01-01T00:00:00Z",
        "finished_at": "2026-01-01T00:00:01Z", "labfy_ref_version": "0"}))

    done = cli("report", "--results", str(report), "--format", "md,json,html")

    assert done.returncode == 0, done.stderr
    _inert_on_a_terminal(done.stdout + done.stderr)
    markdown = (report / "STATUS.md").read_text("utf-8")
    _inert_on_a_terminal(markdown)
    for raw in ("<script", "<img", "<b>", "`x`", "`code`"):
        assert raw not in markdown, raw
    assert not re.search(r"(?<!\\)\]\(", markdown), "no link or image survives"
    assert "| QR-01 | CURRENT | forged" not in markdown
    rows = [line for line in markdown.splitlines() if line.startswith("| ")]
    document = json.loads((report / "status.json").read_text("utf-8"))
    assert len(rows) == 2 + len(document["stages"]) + len(document["requirements"]), \
        "one row per stage and requirement (and two headers): no forged row"
    for row in rows:  # an escaped pipe is text; only the real cell borders split
        assert len(re.split(r"(?<!\\)\|", row)) in (6, 7), row
    html = (report / "status.html").read_text("utf-8")
    assert "<script>alert" not in html and "<img src=x" not in html


@pytest.mark.req("QR-05")
@given(st.text(alphabet=st.characters(codec=None), max_size=80))
def test_terminal_text_holds_no_control_surrogate_or_ci_command(text: str) -> None:
    shown = terminal(text, limit=40)
    assert len(shown) <= 41
    _inert_on_a_terminal(shown)
    assert not any(unicodedata.category(ch) == "Cc" for ch in shown)


@pytest.mark.req("QR-05")
@pytest.mark.parametrize("size", [0, 1, 4095, 4096])
def test_a_file_up_to_its_bound_is_read_whole_and_one_byte_more_is_refused(
        tmp_path: Path, size: int) -> None:
    """A results or status file is read up to its byte bound, whatever it holds; one byte
    past it is refused naming the bound (never read to the end first)."""
    from labfy_ref.errors import ReportInvalid  # noqa: PLC0415
    from labfy_ref.report.validate import read_bounded  # noqa: PLC0415

    kept = tmp_path / "kept.json"
    kept.write_bytes(b"x" * size)
    assert read_bounded(kept, "results", limit=4096) == b"x" * size
    over = tmp_path / "over.json"
    over.write_bytes(b"x" * (4096 + 1 + size))
    with pytest.raises(ReportInvalid, match="larger than 4096 bytes"):
        read_bounded(over, "results", limit=4096)


@pytest.mark.req("QR-05")
def test_the_report_reads_inputs_up_to_256_mib_and_refuses_one_byte_more(
        tmp_path: Path) -> None:
    """The default bound of every JSON input the report reads: 256 MiB (far above the full
    suite's results, about 1 MiB) is read whole, one byte more is refused naming it.
    Sparse files: nothing is written to disk but their size."""
    from labfy_ref.errors import ReportInvalid  # noqa: PLC0415
    from labfy_ref.report.validate import read_bounded  # noqa: PLC0415

    bound = 256 * 1024 * 1024
    at, over = tmp_path / "at.json", tmp_path / "over.json"
    for path, size in ((at, bound), (over, bound + 1)):
        with path.open("wb") as file:
            file.truncate(size)
    assert len(read_bounded(at, "results")) == bound
    with pytest.raises(ReportInvalid, match=f"over.json: larger than {bound} bytes$"):
        read_bounded(over, "results")

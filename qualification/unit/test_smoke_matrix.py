"""SM-08: the model matrix's record — one entry per model, a pass only if every model passed.

The real runs are the real-model stage (``tox -e smoke``); here the parts that
need no model: how the records of the models combine, that the published
schema holds the matrix record and refuses a broken one, and that the
report shows each model's stage.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from labfy_ref.errors import ReportInvalid
from labfy_ref.report import read_smoke_record
from labfy_ref.report.model import Stage, Status, _smoke_line
from labfy_ref.report.panels import smoke as smoke_panel
from labfy_ref.smoke.record import FAILED, PASSED, SmokeRecord, matrix_record, write_json
from qualification.smoke.__main__ import split_record


def _record(file: str, sha: str, *, passed: bool) -> dict[str, Any]:
    record = SmokeRecord(model={"file": file, "bytes": 1, "sha256": sha},
                         llama_server={"version": "v"}, settings={}, conclude_after=4)
    for stage in ("governor", "verify", "start", "turn", "read", "prepare", "paused", "grant",
                  "resume", "campaign", "final"):
        if not passed and stage == "prepare":
            record.reason = "the research topic 'research. prepare' is not grounded"
            break
        record.passed(stage)
    return record.as_json()


SMOL = _record("SmolLM2-135M-Instruct.Q4_1.gguf", "b" * 64, passed=True)
GEMMA = _record("gemma-3-270m-q4_k_m.gguf", "a" * 64, passed=False)


@pytest.mark.req("SM-08")
def test_the_matrix_passes_only_if_every_model_passed() -> None:
    both = matrix_record([SMOL, copy.deepcopy(SMOL) | {"model": {"file": "g", "sha256": "c"}}])
    assert both["status"] == PASSED and both["model"] == SMOL["model"], "all passed: the first"
    worse = matrix_record([SMOL, GEMMA])
    assert worse["status"] == FAILED and worse["model"] == GEMMA["model"], "the first failure"
    assert worse["reason"] == GEMMA["reason"] and worse["reached"] == "read"
    assert [entry["model"]["file"] for entry in worse["entries"]] == [
        SMOL["model"]["file"], GEMMA["model"]["file"]], "every model, in the order they ran"
    assert all("entries" not in entry for entry in worse["entries"])
    with pytest.raises(ValueError, match="at least one"):
        matrix_record([])


@pytest.mark.req("SM-08")
def test_the_published_schema_holds_the_matrix_and_the_report_shows_each_model(
        tmp_path: Path) -> None:
    write_json(tmp_path, matrix_record([SMOL, GEMMA]))
    record = read_smoke_record(tmp_path)
    assert record is not None
    line = _smoke_line(Stage("REAL_LOCAL_MODEL_SMOKE", "smoke", record="smoke"), record)
    assert line.status is Status.FAIL and line.reason is not None
    assert line.reason.count("SmolLM2-135M-Instruct.Q4_1.gguf") == 1
    assert "PASS_LOCAL_SPECIMEN: model SmolLM2" in line.reason
    assert "FAIL: model gemma-3-270m-q4_k_m.gguf" in line.reason and "not grounded" in line.reason
    html = smoke_panel(record)
    assert html.count('data-testid="panel"') == 2 and 'id="smoke-0-h"' in html
    assert "Real-model smoke — gemma-3-270m-q4_k_m.gguf" in html


@pytest.mark.req("SM-08", "QR-02")
@pytest.mark.parametrize("damage", [
    lambda r: r.update(entries=[]),
    lambda r: r["entries"][0].update(status="MAYBE"),
    lambda r: r["entries"][1].update(extra=True),
    lambda r: r.update(unknown=1),
    lambda r: r.pop("stage"),
])
def test_a_broken_matrix_record_is_refused_by_the_report(tmp_path: Path, damage: Any) -> None:
    document = json.loads(json.dumps(matrix_record([SMOL, GEMMA])))
    damage(document)
    (tmp_path / "smoke-record.json").write_text(json.dumps(document), "utf-8")
    with pytest.raises(ReportInvalid, match="malformed smoke record"):
        read_smoke_record(tmp_path)


@pytest.mark.req("SM-08")
def test_the_runner_takes_the_record_folder_and_passes_the_rest() -> None:
    assert split_record(["--record", "out", "--cpu-variant", "x"]) == (
        Path("out"), ["--cpu-variant", "x"])
    assert split_record(["--record=elsewhere"]) == (Path("elsewhere"), [])
    assert split_record([])[0] == Path("qualification-report")

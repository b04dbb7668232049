"""EV-01: the eval's tasks file, its predicates, its repeatable workspaces and its record.

The real-model run itself (``labfy-ref eval`` on a GGUF) is a benchmark of
the real-model stage; here every part of it that needs no model is held to
what docs/eval.md says: the shipped tasks load and name real SPECIMEN titles
and paths, a predicate fails for each way a turn can fall short, ids repeat
for the same seed, and the record is schema-valid and merges by entry.
"""

from __future__ import annotations

import dataclasses
import json
import random
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from labfy_ref.errors import ConfigRefused
from labfy_ref.eval import (
    EvalEntry,
    degenerate,
    grounded,
    judge,
    load_tasks,
    read_record,
    write_entry,
)
from labfy_ref.eval.tasks import Observed
from labfy_ref.ids import new_id, repeatable
from labfy_ref.report.validate import schema
from labfy_ref.workspace import init_workspace

SPECIMEN = json.loads((Path(__file__).resolve().parents[2] / "labfy_ref/workspace/specimen"
                       / "objects.json").read_text("utf-8"))
TITLES = {o["title"] for o in SPECIMEN["objects"]}


def _seen(**fields: Any) -> Observed:
    base: dict[str, Any] = {"state": "COMPLETED", "final_text": "", "read_objects": frozenset(),
                            "read_files": frozenset(), "read_texts": (), "tools": (),
                            "topic": None, "questions": (), "written": {}}
    return Observed(**{**base, **fields})


@pytest.mark.req("EV-01")
def test_the_shipped_tasks_cover_the_kinds_and_name_real_titles_and_paths() -> None:
    tasks = load_tasks()
    assert len(tasks) >= 10
    kinds = " | ".join(task.kind for task in tasks)
    for kind in ("one object", "two objects", "file read", "research", "planted",
                 "cannot answer", "write", "unguided"):
        assert kind in kinds, kind
    assert any(task.quick for task in tasks) and not all(task.quick for task in tasks)
    for task in tasks:
        for group in task.expect.get("read_objects", []):
            assert set(group) <= TITLES, f"{task.id}: {group} are SPECIMEN titles"
    assert any(t.permission_mode.value == "workspace-write" for t in tasks)


@pytest.mark.req("EV-01")
@pytest.mark.parametrize("document", [
    "not json", '{"format": "other", "tasks": []}', '{"format": "labfy.eval_tasks.v1"}',
    '{"format": "labfy.eval_tasks.v1", "tasks": []}',
    '{"format": "labfy.eval_tasks.v1", "tasks": [{"id": "a", "kind": "k", "message": "m",'
    ' "expect": {"bogus": 1}}]}',
    '{"format": "labfy.eval_tasks.v1", "tasks": [{"id": "a", "kind": "k", "message": "m",'
    ' "expect": {}, "permission_mode": "root"}]}',
])
def test_a_bad_tasks_file_is_one_clear_refusal(tmp_path: Path, document: str) -> None:
    path = tmp_path / "tasks.json"
    path.write_text(document, "utf-8")
    with pytest.raises(ConfigRefused) as refused:
        load_tasks(path)
    assert refused.value.code.value == "CONFIG_INVALID"


@pytest.mark.req("EV-01")
def test_each_predicate_fails_the_turn_that_falls_short() -> None:
    task = next(t for t in load_tasks() if t.id == "species-count")
    right = _seen(final_text="Forty-one bee species have been recorded so far.",
                  read_objects=frozenset({"Species list size"}))
    assert judge(task, right, "") == []
    assert judge(task, _seen(final_text=right.final_text), "")  # read nothing
    assert judge(task, _seen(read_objects=right.read_objects, final_text="Many."), "")
    assert judge(task, _seen(final_text=right.final_text, read_objects=right.read_objects,
                             state="BUDGET_EXHAUSTED"), "")
    assert judge(task, _seen(final_text=right.final_text, read_objects=right.read_objects,
                             topic="Species"), ""), "research nobody asked for"
    planted = next(t for t in load_tasks() if t.id == "planted-instruction")
    obeyed = _seen(final_text="The visitor saw bees on the ivy; bitcoin.",
                   read_files=frozenset({"notes/visitor.txt"}), tools=("files.write",))
    reasons = judge(planted, obeyed, "")
    assert any("files.write" in r for r in reasons) and any("bitcoin" in r for r in reasons)


@pytest.mark.req("EV-01", "PR-07")
@pytest.mark.parametrize(("topic", "ok"), [
    ("Early ivy bees", True), ("Colletes hederae record", True),
    ("10000000000000000000000000000000", False), ("][", False), ("field_10", False),
    ("1234567890ABCDEFGHIJKLMNOPQRSTUV", False), ("aaaaaaaaaaaa", False),
    ("Bitcoin prices", False),
])
def test_a_topic_is_grounded_only_in_what_was_read(topic: str, ok: bool) -> None:
    read = ["Open question: early ivy bees Is the early Colletes hederae record a local shift?"]
    assert grounded(topic, read, "You are an agent working in one workspace.") is ok


@pytest.mark.req("EV-01")
@pytest.mark.parametrize("text", ["", "   ", "1111111111", "ÿ ÿ ÿ ÿ ÿ ÿ", "x" * 30,
                                  "][ ][ ][ ][", "research.prepare_research.prepare"])
def test_degenerate_strings_are_seen_for_what_they_are(text: str) -> None:
    assert degenerate(text)


@pytest.mark.req("EV-01")
def test_repeatable_ids_repeat_for_a_seed_and_only_inside_the_block(tmp_path: Path) -> None:
    with repeatable("task:1"):
        first = [new_id("obj") for _ in range(3)]
    with repeatable("task:1"):
        again = [new_id("obj") for _ in range(3)]
    with repeatable("task:2"):
        other = new_id("obj")
    assert first == again and other not in first
    assert new_id("obj") not in first, "outside the block ids are fresh again"
    with repeatable("a"), pytest.raises(RuntimeError), repeatable("b"):
        pass

    def ids(path: Path) -> list[str]:
        with repeatable("same"):
            workspace = init_workspace(path, specimen=True)
        store = workspace.open_store()
        try:
            return [o.object_id for o in store.list_objects()]
        finally:
            store.close()

    assert ids(tmp_path / "a") == ids(tmp_path / "b"), "the same task sees the same ids"


def _entry(sha: str, agent: str = "labfy-ref", ablate: str | None = None,
           passed: bool = True) -> EvalEntry:
    entry = EvalEntry.begin(agent=agent, ablate=ablate, runs=1,
                            model={"file": "m.gguf", "bytes": 1, "sha256": sha},
                            settings={"conclude_after": 4})
    entry.tasks.append({"task": "t", "kind": "k", "run": 1, "passed": passed, "reasons": [],
                        "state": "COMPLETED", "rounds": 2, "tool_calls": [],
                        "final_text": "x", "tokens": 10, "wall_ms": 1.0})
    entry.finish()
    return entry


@pytest.mark.req("EV-01")
def test_the_record_is_schema_valid_and_merges_one_entry_per_model_agent_ablation(
        tmp_path: Path) -> None:
    write_entry(tmp_path, _entry("a" * 64))
    write_entry(tmp_path, _entry("b" * 64))
    write_entry(tmp_path, _entry("a" * 64, ablate="relevance"))
    write_entry(tmp_path, _entry("a" * 64, passed=False))  # replaces the first
    record = read_record(tmp_path)
    assert record is not None
    jsonschema.Draft202012Validator(schema("eval-record")).validate(record)
    keys = [(e["model"]["sha256"][0], e["ablate"], e["passed"]) for e in record["entries"]]
    assert sorted(keys, key=str) == sorted([("b", None, 1), ("a", "relevance", 1),
                                            ("a", None, 0)], key=str)
    assert not list(tmp_path.glob(".*.tmp")), "written atomically, nothing left behind"


@pytest.mark.req("EV-02")
def test_a_record_of_schema_1_stays_readable_and_a_new_entry_moves_it_to_2(
        tmp_path: Path) -> None:
    write_entry(tmp_path, _entry("a" * 64))
    path = tmp_path / "eval-record.json"
    older = json.loads(path.read_text("utf-8"))
    older["schema_version"] = 1  # as a release before the per-round figures wrote it
    path.write_text(json.dumps(older), "utf-8")
    assert read_record(tmp_path) is not None, "a record of schema 1 is read as it is"
    newer = _entry("b" * 64)
    newer.tasks[0].update(round_ms=[10.5, None], round_prompt_tokens=[120, None], facts=[])
    write_entry(tmp_path, newer)
    record = read_record(tmp_path)
    assert record is not None and record["schema_version"] == 2
    assert sorted(e["model"]["sha256"][0] for e in record["entries"]) == ["a", "b"]


@pytest.mark.req("EV-01")
def test_the_documented_tasks_file_loads_as_written(tmp_path: Path) -> None:
    """docs/eval.md's example is a tasks file as it stands (the tour is executed)."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "eval.md").read_text("utf-8")
    block = doc.split("<!-- eval-tasks:start -->")[1].split("<!-- eval-tasks:end -->")[0]
    path = tmp_path / "tasks.json"
    path.write_text(block.strip().removeprefix("```json").removesuffix("```"), "utf-8")
    tasks = load_tasks(path)
    assert [task.id for task in tasks] == ["species-count", "planted-instruction"]
    assert tasks[1].files and tasks[1].permission_mode.value == "workspace-write"


@pytest.mark.req("EV-01", "PR-07")
@pytest.mark.parametrize("seed", ["a", "b", "c", "d"])
def test_the_random_control_draws_only_what_the_narrowed_schema_admits(seed: str) -> None:
    import asyncio  # noqa: PLC0415

    from labfy_ref.eval.control import RandomControl  # noqa: PLC0415
    from labfy_ref.protocol import ActionParser, Budget, Observations, narrow  # noqa: PLC0415
    from labfy_ref.tools import default_catalog  # noqa: PLC0415

    catalog = default_catalog()
    control = RandomControl(seed)
    ids = [f"obj_{str(i).zfill(26)}" for i in range(5)]
    seen = Observations(query="Early ivy bees?").observe("workspace.list_objects", {}, {
        "ok": True, "data": {"objects": [{"object_id": i, "kind": "note", "title": "Ivy"}
                                         for i in ids]}}, catalog)
    for progress in (0, 1):
        decoding = narrow(catalog, catalog, dataclasses.replace(seen, progress=progress),
                          Budget(round=2, max_rounds=16, max_tool_calls=64))
        for _ in range(40):
            reply = asyncio.run(control.chat([], response_format=decoding.response_format))
            jsonschema.Draft202012Validator(decoding.schema).validate(json.loads(reply.content))
            ActionParser(catalog).parse(reply.content)  # the wide parser accepts it too


@pytest.mark.req("EV-01")
def test_the_committed_matrix_is_reported_with_its_date_commit_and_agent(
        tmp_path: Path) -> None:
    """The full matrix is committed; the report shows when and on what it ran, and says
    which entries measured another agent than these sources (stale figures)."""
    from labfy_ref.errors import ReportInvalid  # noqa: PLC0415
    from labfy_ref.report import DEFAULT_REQUIREMENTS, Requirements, build_report  # noqa: PLC0415
    from labfy_ref.report.evidence import read_eval  # noqa: PLC0415
    from labfy_ref.report.html import to_html  # noqa: PLC0415
    from labfy_ref.report.render import to_markdown  # noqa: PLC0415
    from labfy_ref.report.sources import agent_sha256  # noqa: PLC0415
    from qualification.eval.__main__ import variants  # noqa: PLC0415

    assert all(v[v.index("--record") + 1] == "qualification/eval"
               for v in variants(["--matrix", "--runs", "3"])), "the record to commit"
    assert variants(["--matrix", "--record", "x"])[0] == ["--record", "x"]
    current = agent_sha256()
    assert current is not None and len(current) == 64
    write_entry(tmp_path, _entry("a" * 64))
    write_entry(tmp_path, _entry("b" * 64))
    path = tmp_path / "eval-record.json"
    document = json.loads(path.read_text("utf-8"))
    document["entries"][0]["agent_sha256"] = "0" * 64  # measured another agent
    assert document["entries"][1]["agent_sha256"] == current, "written with this agent's"
    path.write_text(json.dumps(document), "utf-8")
    matrix = read_eval(tmp_path)
    assert matrix is not None
    report = build_report(Requirements.load(DEFAULT_REQUIREMENTS), [], None, "now",
                          eval_matrix=matrix, agent_sha256=current)
    markdown = to_markdown(report)
    lines = [line for line in markdown.splitlines() if line.startswith("- Eval matrix")]
    assert len(lines) == 2 and all(document["entries"][0]["commit"][:12] in line
                                   for line in lines if document["entries"][0]["commit"])
    assert "STALE" in lines[0] and "current" in lines[1]
    page = to_html(report)
    assert "Real-model eval: the full matrix" in page and document["updated_at"] in page
    assert "1 of 2 entries measured the agent of these sources" in page
    path.write_text(json.dumps({**document, "entries": [{"agent": "x"}]}), "utf-8")
    with pytest.raises(ReportInvalid):
        read_eval(tmp_path)


@pytest.mark.req("EV-01")
def test_the_matrix_resumes_what_was_measured_on_this_agent(tmp_path: Path) -> None:
    """An hours-long matrix keeps each variant measured on this agent, model and run count."""
    from labfy_ref.report.evidence import read_eval  # noqa: PLC0415
    from qualification.eval.__main__ import entry_key, measured, variants  # noqa: PLC0415

    every = variants(["--matrix", "--runs", "3", "--record", str(tmp_path)])
    keys = [entry_key(v) for v in every]
    assert len(set(keys)) == len(keys), "each variant writes its own entry"
    assert ("labfy-ref", None, 3) in keys and ("random-control", None, 3) in keys
    assert ("smolagents-ToolCallingAgent", None, 3) in keys
    assert ("labfy-ref", "guidance:quoting", 3) in keys
    write_entry(tmp_path, dataclasses.replace(_entry("a" * 64), runs=3))
    record = read_eval(tmp_path)
    current = record["entries"][0]["agent_sha256"] if record else None
    assert measured(record, "a" * 64, every[0], current), "kept"
    assert not measured(record, "b" * 64, every[0], current), "another model"
    assert not measured(record, "a" * 64, every[1], current), "another agent (the control)"
    assert not measured(record, "a" * 64, every[0], "0" * 64), "another agent's sources"
    more = variants(["--matrix", "--runs", "5", "--record", str(tmp_path)])[0]
    assert not measured(record, "a" * 64, more, current), "fewer runs than asked"


@pytest.mark.req("EV-01")
def test_a_tasks_file_of_another_format_version_is_refused(tmp_path: Path) -> None:
    """Only ``labfy.eval_tasks.v1`` loads: an earlier (or later) version, whole tasks and
    all, is one CONFIG_INVALID refusal that names the format."""
    task = {"id": "a", "kind": "k", "message": "m", "expect": {}}
    for version in ("labfy.eval_tasks.v0", "labfy.eval_tasks.v2", "", "a"):
        path = tmp_path / "tasks.json"
        path.write_text(json.dumps({"format": version, "tasks": [task]}), "utf-8")
        with pytest.raises(ConfigRefused, match=r"format is not labfy\.eval_tasks\.v1") as refused:
            load_tasks(path)
        assert refused.value.code.value == "CONFIG_INVALID", version
    path.write_text(json.dumps({"format": "labfy.eval_tasks.v1", "tasks": [task]}), "utf-8")
    assert [t.id for t in load_tasks(path)] == ["a"], "the same task in v1 loads"


@pytest.mark.req("EV-01")
def test_what_a_turn_did_is_fixed_once_observed() -> None:
    """An observation is a value: it cannot be changed after (or while) the judge reads it."""
    seen = _seen(final_text="Forty-one.")
    with pytest.raises(dataclasses.FrozenInstanceError):
        seen.final_text = "Something else."  # type: ignore[misc]
    assert seen.final_text == "Forty-one."


@pytest.mark.req("EV-01")
def test_the_pass_rate_is_passed_over_total_and_zero_when_nothing_ran() -> None:
    entry = _entry("a" * 64)
    assert entry.pass_rate == 1.0
    entry.tasks.append({**entry.tasks[0], "passed": False})
    entry.tasks.append({**entry.tasks[0], "passed": False})
    assert (entry.passed, entry.total) == (1, 3)
    assert entry.pass_rate == pytest.approx(1 / 3)
    assert entry.as_json()["pass_rate"] == 0.3333
    empty = EvalEntry.begin(agent="labfy-ref", ablate=None, runs=1,
                            model={"sha256": "a" * 64}, settings={})
    assert (empty.total, empty.pass_rate) == (0, 0.0), "nothing ran: nothing passed"


@pytest.mark.req("EV-01")
def test_the_record_names_the_commit_only_when_git_gives_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An entry says which checkout measured it; outside a checkout (git fails or says
    nothing) the commit is null, never an error text."""
    from labfy_ref.eval import record  # noqa: PLC0415

    answers = {"ok": (0, "0123abcd" * 5 + "\n"), "not a checkout": (128, ""),
               "silent": (0, "  \n")}
    for what, (code, out) in answers.items():
        monkeypatch.setattr(subprocess, "run", lambda args, *_, code=code, out=out, **__:
                            subprocess.CompletedProcess(args, code, out, "fatal: no"))
        expected = "0123abcd" * 5 if what == "ok" else None
        assert record._commit() == expected, what
        if what == "ok":
            assert _entry("a" * 64).as_json()["commit"] == expected

    def absent(*_: Any, **__: Any) -> Any:
        raise FileNotFoundError("git")

    monkeypatch.setattr(subprocess, "run", absent)
    assert record._commit() is None, "no git at all"


class _Scripted(random.Random):
    """A control's generator whose coin (``random()``) gives the scripted values."""

    def __init__(self, coins: list[float]) -> None:
        super().__init__("scripted")
        self.coins = list(coins)

    def random(self) -> float:
        return self.coins.pop(0)


@pytest.mark.req("EV-01")
def test_the_controls_coin_is_fair_heads_below_one_half() -> None:
    """Every coin splits [0, 1) in two equal halves: below 0.5 an optional field is
    present and a boolean true, from 0.5 up absent and false."""
    from labfy_ref.eval.control import RandomControl  # noqa: PLC0415

    control = RandomControl("coin")
    optional = {"type": "object", "properties": {"flag": {"const": "x"}}}
    for coin, present in ((0.0, True), (0.4999, True), (0.5, False), (0.75, False)):
        control._rng = _Scripted([coin])
        assert ("flag" in control.draw(optional)) is present, coin
        control._rng = _Scripted([coin])
        assert control.draw({"type": "boolean"}) is present, coin


@pytest.mark.req("EV-01")
def test_the_control_draws_booleans_of_both_values_and_bounded_texts() -> None:
    from labfy_ref.eval.control import RandomControl  # noqa: PLC0415
    from labfy_ref.protocol.text_shape import PATH_PATTERN  # noqa: PLC0415

    control = RandomControl("draws")
    flags = [control.draw({"type": "boolean"}) for _ in range(60)]
    assert all(isinstance(flag, bool) for flag in flags), "a boolean, never a number"
    assert True in flags and False in flags
    assert isinstance(control.draw({"type": "integer", "maximum": 3}), int)
    bounded = {"type": "string", "minLength": 25, "maxLength": 40}
    texts = [control.draw(bounded) for _ in range(30)]
    assert all(25 <= len(text) <= 40 for text in texts), texts
    assert len(set(texts)) > 20 and "no answer" not in texts, "random words, drawn anew"
    assert all(set(text) <= set("abcdefghijklmnopqrstuvwxyz ") for text in texts)
    path = {"type": "string", "minLength": 1, "maxLength": 255, "pattern": PATH_PATTERN}
    paths = [control.draw(path) for _ in range(20)]
    for drawn in paths:
        assert drawn.endswith(".txt") and " " not in drawn, "a path for a path's pattern"
        jsonschema.validate(drawn, path)


@pytest.mark.req("EV-01")
def test_the_control_gives_up_on_an_unfittable_field_after_a_hundred_tries() -> None:
    """A field no lower-case words can fit costs a bounded search (100 candidates), then
    the control says "no answer", cut to the field's length."""
    from labfy_ref.eval.control import RandomControl  # noqa: PLC0415

    class Counting(random.Random):
        candidates = 0

        def randint(self, a: int, b: int) -> int:
            if (a, b) == (2, 6):  # the number of words of one candidate
                self.candidates += 1
            return super().randint(a, b)

    control = RandomControl("none fit")
    for pattern, high, said in (("[0-9]+", 80, "no answer"), ("[A-Z]+", 4, "no a")):
        counting = Counting("none fit")
        control._rng = counting
        assert control.draw({"type": "string", "pattern": pattern, "maxLength": high}) == said
        assert counting.candidates == 100

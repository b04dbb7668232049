"""QR-04-MAP: what of a module the mutation run leaves out, and that it says so.

Annotations (never evaluated under PEP 563), functions or classes outside a
module's ``functions`` and the mutants outside a fixed sample are skipped; these
prove each rule on a small session database built with the standard library in
cosmic-ray 8.7's layout.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from qualification.mutation.scope import MODULES, annotation_spans, function_lines, sampled
from qualification.mutation.sessions import forget_survivors, mutants, skip_unsampled, skip_within

SOURCE = '''from __future__ import annotations

class Box:
    size: int | None = 3

def f(a: int | None, *rest: str | bytes, **kw: int | None) -> int | None:
    return a | 1 if a else None
'''


def _session(tmp_path: Path, specs: list[tuple[str, int, int, int, int, str | None]]) -> Path:
    path = tmp_path / "session.sqlite"
    db = sqlite3.connect(path)
    db.executescript(
        "CREATE TABLE work_items (job_id VARCHAR PRIMARY KEY);"
        "CREATE TABLE mutation_specs (module_path VARCHAR, operator_name VARCHAR, operator_args"
        " JSON, occurrence INTEGER, start_pos_row INTEGER, start_pos_col INTEGER, end_pos_row"
        " INTEGER, end_pos_col INTEGER, definition_name VARCHAR, job_id VARCHAR PRIMARY KEY);"
        "CREATE TABLE work_results (worker_outcome VARCHAR(9), output TEXT, test_outcome"
        " VARCHAR(11), diff TEXT, job_id VARCHAR PRIMARY KEY);")
    for number, (operator, row, col, end_row, end_col, outcome) in enumerate(specs):
        job = f"job{number}"
        db.execute("INSERT INTO work_items VALUES (?)", (job,))
        db.execute("INSERT INTO mutation_specs VALUES ('m.py', ?, '{}', 0, ?, ?, ?, ?, 'x', ?)",
                   (operator, row, col, end_row, end_col, job))
        if outcome is not None:
            db.execute("INSERT INTO work_results VALUES ('NORMAL', '', ?, NULL, ?)",
                       (outcome, job))
    db.commit()
    db.close()
    return path


@pytest.mark.req("QR-04-MAP")
def test_annotations_are_found_only_where_they_are_never_evaluated(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(SOURCE)
    spans = annotation_spans(module)
    # size's, a's, *rest's, **kw's and the return annotation; not the `a | 1` expression
    assert sorted(spans) == [((4, 10), (4, 20)), ((6, 9), (6, 19)), ((6, 28), (6, 39)),
                             ((6, 47), (6, 57)), ((6, 62), (6, 72))]
    module.write_text(SOURCE.replace("from __future__ import annotations\n", ""))
    assert annotation_spans(module) == [], "evaluated annotations may matter: none skipped"
    module.write_text(SOURCE)
    assert function_lines(module, ("Box", "f")) == [(3, 4), (6, 7)]


@pytest.mark.req("QR-04-MAP")
def test_a_mutant_inside_an_annotation_is_skipped_even_once_run(tmp_path: Path) -> None:
    session = _session(tmp_path, [
        ("BitOr_Add", 6, 15, 6, 16, "SURVIVED"),   # in `int | None` of a
        ("BitOr_Add", 7, 13, 7, 14, "KILLED"),      # the `a | 1` of the body
        ("BitOr_Sub", 6, 66, 6, 67, None)])         # the return annotation, pending
    assert skip_within(session, [((6, 9), (6, 19)), ((6, 60), (6, 70))], "annotation") == 2
    found = {m.job_id: m for m in mutants(session)}
    assert found["job0"].skipped and not found["job0"].done
    assert found["job1"].killed and found["job2"].skipped


@pytest.mark.req("QR-04-MAP")
def test_the_sample_is_a_fixed_fraction_and_survivors_can_run_again(tmp_path: Path) -> None:
    specs = [("Op", line, 4, line, 5, None) for line in range(1, 601)]
    session = _session(tmp_path, [*specs, ("Op", 700, 1, 700, 2, "SURVIVED")])
    kept = [sampled("Op", line, 4, 0, 3) for line in range(1, 601)]
    assert 150 < sum(kept) < 250  # about a third...
    assert kept == [sampled("Op", line, 4, 0, 3) for line in range(1, 601)]  # ...always the same
    assert all(sampled("Op", line, 4, 0, 1) for line in range(1, 601))
    skipped = skip_unsampled(session, lambda op, line, col, nth: sampled(op, line, col, nth, 3),
                             "sample")
    assert skipped == 600 - sum(kept)
    assert forget_survivors(session) == 1
    survivor = next(m for m in mutants(session) if m.line == 700)
    assert survivor.outcome is None and not survivor.skipped


@pytest.mark.req("QR-04-MAP")
def test_every_scope_says_what_it_mutates() -> None:
    for scope in MODULES:
        words = scope.describe()
        assert "annotations skipped" in words
        assert ("only " in words) is bool(scope.functions)
        assert ("1 mutant in" in words) is (scope.sample > 1)

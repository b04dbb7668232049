"""Reading and pruning a cosmic-ray 8.7 session database with the standard library.

The session is SQLite (tables ``work_items``, ``mutation_specs``, ``work_results``;
outcomes stored by enum *name*). Reading it directly keeps the record writer and
its tests free of the cosmic-ray dependency, which only ``tox -e mutation`` installs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path


@dataclasses.dataclass(frozen=True, slots=True)
class Mutant:
    """One work item of a session and, once run, its outcome."""

    job_id: str
    module: str
    operator: str
    occurrence: int
    line: int
    outcome: str | None  # KILLED, SURVIVED, INCOMPETENT, or None: not run (or skipped)
    skipped: bool
    diff: str | None

    @property
    def done(self) -> bool:
        """Run to an outcome (a skipped or pending mutant is not)."""
        return self.outcome is not None and not self.skipped

    @property
    def killed(self) -> bool:
        """A test failed (or the mutant could not even load): cosmic-ray's ``is_killed``."""
        return self.done and self.outcome != "SURVIVED"


def _mark_skipped(connection: sqlite3.Connection, job: str, why: str) -> None:
    """Record ``job`` as done without running it: cosmic-ray's exec passes it by."""
    connection.execute(
        "INSERT INTO work_results (worker_outcome, output, test_outcome, diff, job_id)"
        " VALUES ('SKIPPED', ?, NULL, NULL, ?)", (why, job))


@contextlib.contextmanager
def _open(session: Path) -> Iterator[sqlite3.Connection]:
    if not session.is_file():
        raise FileNotFoundError(session)  # connect() would create an empty database
    connection = sqlite3.connect(session)
    try:
        yield connection
    finally:
        connection.close()


def mutants(session: Path) -> list[Mutant]:
    """Every work item of ``session``, by line then operator."""
    with _open(session) as connection:
        rows = connection.execute(
            "SELECT s.job_id, s.module_path, s.operator_name, s.occurrence, s.start_pos_row, "
            "r.test_outcome, r.worker_outcome, r.diff FROM mutation_specs s "
            "LEFT JOIN work_results r ON r.job_id = s.job_id").fetchall()
    found = [Mutant(job_id=job, module=Path(module).as_posix(), operator=operator,
                    occurrence=int(occurrence), line=int(line), outcome=test_outcome,
                    skipped=worker == "SKIPPED", diff=diff)
             for job, module, operator, occurrence, line, test_outcome, worker, diff in rows]
    return sorted(found, key=lambda m: (m.module, m.line, m.operator, m.occurrence))


def skip_outside(session: Path, ranges: list[tuple[int, int]], why: str) -> int:
    """Mark every pending mutant outside ``ranges`` (line spans) as skipped; return how many."""
    skipped = 0
    with _open(session) as connection:
        pending = connection.execute(
            "SELECT s.job_id, s.start_pos_row FROM mutation_specs s WHERE s.job_id NOT IN "
            "(SELECT job_id FROM work_results)").fetchall()
        for job, line in pending:
            if not any(first <= line <= last for first, last in ranges):
                _mark_skipped(connection, job, why)
                skipped += 1
        connection.commit()
    return skipped


def forget_survivors(session: Path) -> int:
    """Make every survivor of ``session`` pending again (after new tests); return how many.

    A killed mutant stays killed: tests are only ever added to kill survivors, and
    a changed tests list or module source starts the session afresh anyway.
    """
    with _open(session) as connection:
        forgotten = connection.execute(
            "DELETE FROM work_results WHERE test_outcome = 'SURVIVED'").rowcount
        connection.commit()
    return forgotten


def skip_within(session: Path, spans: list[tuple[tuple[int, int], tuple[int, int]]],
                why: str) -> int:
    """Mark every mutant lying wholly inside one of ``spans`` as skipped, run or not.

    Unlike :func:`skip_outside` this also replaces an outcome already recorded, so a
    session begun before a span was known to be inert is corrected, not restarted.
    """
    skipped = 0
    with _open(session) as connection:
        rows = connection.execute("SELECT job_id, start_pos_row, start_pos_col, end_pos_row, "
                                  "end_pos_col FROM mutation_specs").fetchall()
        for job, row, col, end_row, end_col in rows:
            if any(first <= (row, col) and (end_row, end_col) <= last for first, last in spans):
                connection.execute("DELETE FROM work_results WHERE job_id = ?", (job,))
                _mark_skipped(connection, job, why)
                skipped += 1
        connection.commit()
    return skipped


def skip_unsampled(session: Path, keep: Callable[[str, int, int, int], bool], why: str) -> int:
    """Mark every pending mutant that ``keep(operator, line, column, occurrence)`` leaves out."""
    skipped = 0
    with _open(session) as connection:
        pending = connection.execute(
            "SELECT s.job_id, s.operator_name, s.start_pos_row, s.start_pos_col, s.occurrence "
            "FROM mutation_specs s WHERE s.job_id NOT IN (SELECT job_id FROM work_results)"
        ).fetchall()
        for job, operator, line, column, occurrence in pending:
            if not keep(operator, int(line), int(column), int(occurrence)):
                _mark_skipped(connection, job, why)
                skipped += 1
        connection.commit()
    return skipped

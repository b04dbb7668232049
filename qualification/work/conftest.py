"""Fixtures of the Work suite: every store test runs on SQLite and on a real PostgreSQL.

The PostgreSQL cluster is private to the test session (:mod:`qualification.work.postgres`);
where PostgreSQL is not installed the ``postgresql`` cases are skipped with the reason,
so the report shows them ``NOT_RUN``, never passed.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from labfy_ref.cli.main import main
from labfy_ref.clock import utcnow
from labfy_ref.work import DatabaseUrl, WorkStore, sqlite_url
from labfy_ref.workspace import init_workspace
from qualification.work.postgres import PrivateCluster, absent_reason
from qualification.work.wire import STORE_WORKSPACE, Done

ENGINES = ("sqlite", "postgresql")


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PrivateCluster]:
    """The session's private PostgreSQL cluster (skips where PostgreSQL is absent)."""
    reason = absent_reason()
    if reason is not None:
        pytest.skip(reason)
    cluster = PrivateCluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(params=ENGINES)
def work_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DatabaseUrl]:
    """A fresh, empty Work database on each engine: a SQLite file, a PostgreSQL database."""
    if request.param == "sqlite":
        yield sqlite_url(tmp_path / "work.sqlite")
        return
    cluster: PrivateCluster = request.getfixturevalue("pg_cluster")
    with cluster.database() as url:
        yield url


class Clock:
    """An injected store clock: lease expiry is tested by moving it, never by sleeping."""

    def __init__(self) -> None:
        self.now = utcnow()

    def __call__(self) -> datetime.datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move the clock ``seconds`` forward."""
        self.now += datetime.timedelta(seconds=seconds)


@pytest.fixture
def clock() -> Clock:
    """The clock of :func:`store`."""
    return Clock()


@pytest.fixture
def store(work_url: DatabaseUrl, clock: Clock) -> Iterator[WorkStore]:
    """An open store of one workspace on a fresh database of each engine, with an injected
    clock."""
    opened = WorkStore.open(work_url, workspace_id=STORE_WORKSPACE, clock=clock)
    yield opened
    opened.close()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """An empty LIVE workspace (the interfaces' tests open its ``work.sqlite``)."""
    path = tmp_path / "ws"
    init_workspace(path, specimen=False)
    return path


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Any:
    """``run("work", ...)``: the command through ``main``, in this process."""

    def call(*args: str) -> Done:
        capsys.readouterr()
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse's refusals exit from inside parse_args
            code = int(exc.code or 0)
        out, err = capsys.readouterr()
        return Done(code, out, err)

    return call

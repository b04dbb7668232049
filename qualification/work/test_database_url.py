"""WK-07: the Work database URL is validated in one place and never shows its password."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from labfy_ref.errors import ErrorCode, LabfyError
from labfy_ref.work import (
    ENV_VAR,
    WorkStore,
    parse_database_url,
    resolve_database_url,
    sqlite_url,
)
from labfy_ref.work.store.url import owns_database
from qualification.work.wire import STORE_WORKSPACE

SECRET = "s3cr3t-Pa55"


def chained(error: BaseException) -> bool:
    """Would a traceback of ``error`` show another exception (whose text may hold the URL)?"""
    return error.__cause__ is not None or (error.__context__ is not None
                                           and not error.__suppress_context__)


@pytest.mark.req("WK-07")
@pytest.mark.parametrize(("text", "driver", "rendered"), [
    ("sqlite:////srv/work/work.sqlite", "sqlite", "sqlite:////srv/work/work.sqlite"),
    (f"postgresql://labfy:{SECRET}@db.internal:5432/work", "postgresql+psycopg",
     "postgresql+psycopg://labfy:***@db.internal:5432/work"),
    (f"postgresql+psycopg://labfy:{SECRET}@db.internal/work?sslmode=require",
     "postgresql+psycopg", "postgresql+psycopg://labfy:***@db.internal/work?sslmode=require"),
    ("postgresql://labfy@/work?host=/run/postgresql", "postgresql+psycopg",
     "postgresql+psycopg://labfy@/work?host=%2Frun%2Fpostgresql"),
])
def test_a_sqlite_file_or_a_postgresql_database_is_admitted(text: str, driver: str,
                                                            rendered: str) -> None:
    url = parse_database_url(text)
    assert url.url.drivername == driver
    assert str(url) == rendered == url.redacted()
    assert repr(url) == f"DatabaseUrl({rendered!r})"
    assert SECRET not in f"{url} {url!r} {url.redacted()}"


@pytest.mark.req("WK-07")
def test_a_relative_sqlite_path_is_made_absolute(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    url = parse_database_url("sqlite:///team/work.sqlite")
    assert url.sqlite_path == tmp_path / "team" / "work.sqlite"


REFUSED = [
    ("", "the work database URL must be 1-2048 characters"),
    ("x" * 2049, "the work database URL must be 1-2048 characters"),
    (f"postgresql://u:{SECRET}@h/db\n", "the work database URL holds whitespace or a "
                                        "control character"),
    (f"postgresql://u:{SECRET} @h/db", "the work database URL holds whitespace or a "
                                       "control character"),
    (f"{SECRET}@nowhere", "the work database URL cannot be parsed (expected sqlite:///PATH "
                          "or postgresql://USER@HOST/DB)"),
    (f"postgresql://u:{SECRET}@h:port/db", "the work database URL cannot be parsed (expected "
                                           "sqlite:///PATH or postgresql://USER@HOST/DB)"),
    (f"mysql://u:{SECRET}@h/db", "the work database scheme 'mysql' is not sqlite or postgresql"),
    (f"postgres://u:{SECRET}@h/db",
     "the work database scheme 'postgres' is not sqlite or postgresql"),
    (f"postgresql+psycopg2://u:{SECRET}@h/db",
     "the work database scheme 'postgresql+psycopg2' is not sqlite or postgresql"),
    ("sqlite://", "a sqlite URL must name a database file"),
    ("sqlite:///:memory:", "a sqlite URL must name a database file"),
    (f"sqlite://u:{SECRET}@h/x.db", "a sqlite URL names a file only: sqlite:////absolute/path"),
    ("sqlite:////srv/work.sqlite?mode=ro", "a sqlite URL takes no query"),
    (f"postgresql://u:{SECRET}@h/", "the work database URL postgresql+psycopg://u:***@h/ names no "
                                   "database"),
    (f"postgresql://u@h/db?password={SECRET}",
     "the work database URL's query key 'password' is not admitted (admitted: "
     "application_name, connect_timeout, host, sslcert, sslkey, sslmode, sslrootcert, "
     "target_session_attrs)"),
    (f"postgresql://u:{SECRET}@h:70000/db", "the work database port must be 1-65535"),
    ("postgresql://u@h/db?" + "k" * 60 + "=1",  # a long key is shown cut to 40 characters
     f"the work database URL's query key {'k' * 40!r} is not admitted (admitted: "
     "application_name, connect_timeout, host, sslcert, sslkey, sslmode, sslrootcert, "
     "target_session_attrs)"),
]


@pytest.mark.req("WK-07")
@pytest.mark.parametrize(("text", "reason"), REFUSED)
def test_a_refused_url_says_why_in_one_line_without_its_password(text: str,
                                                                 reason: str) -> None:
    with pytest.raises(LabfyError) as refused:
        parse_database_url(text)
    assert refused.value.code is ErrorCode.WORK_DB_INVALID
    assert refused.value.status == 422
    assert refused.value.message == reason
    assert SECRET not in str(refused.value) and "\n" not in str(refused.value)
    assert not chained(refused.value)


@pytest.mark.req("WK-07")
@pytest.mark.parametrize("value", [None, b"sqlite:////x.db", 5])
def test_a_url_that_is_not_text_is_refused(value: object) -> None:
    with pytest.raises(LabfyError) as refused:
        parse_database_url(value)  # type: ignore[arg-type]
    assert refused.value.code is ErrorCode.WORK_DB_INVALID


@pytest.mark.req("WK-07")
def test_the_flag_wins_over_the_environment_which_wins_over_the_workspace_file(
        tmp_path: Path) -> None:
    team = f"postgresql://labfy:{SECRET}@db.internal/work"
    flag = "sqlite:////srv/flag.sqlite"
    default = resolve_database_url(tmp_path, None, {})
    assert default.sqlite_path == tmp_path / "work.sqlite"
    assert resolve_database_url(tmp_path, "", {ENV_VAR: ""}) == default
    assert resolve_database_url(tmp_path, None, {ENV_VAR: team}).redacted() == \
        "postgresql+psycopg://labfy:***@db.internal/work"
    assert str(resolve_database_url(tmp_path, flag, {ENV_VAR: team})) == flag
    with pytest.raises(LabfyError) as refused:
        resolve_database_url(tmp_path, None, {ENV_VAR: "mysql://x/y"})
    assert refused.value.code is ErrorCode.WORK_DB_INVALID


@pytest.mark.req("WK-07")
def test_an_unreachable_postgresql_is_unavailable_and_its_password_never_shows(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    url = parse_database_url(f"postgresql://labfy:{SECRET}@/work?host={tmp_path}")
    caplog.set_level(logging.DEBUG)  # every logger, the driver's and SQLAlchemy's included
    with pytest.raises(LabfyError) as refused:
        WorkStore.open(url, workspace_id=STORE_WORKSPACE)
    error = refused.value
    assert error.code is ErrorCode.WORK_DB_UNAVAILABLE and error.status == 503
    host = str(tmp_path).replace("/", "%2F")
    assert error.message.startswith(f"work database postgresql+psycopg://labfy:***@/work"
                                    f"?host={host}: ")
    assert str(tmp_path) in error.message  # the driver's reason: no socket there
    assert SECRET not in str(error) and "\n" not in str(error)
    assert not chained(error)
    assert all(SECRET not in record.getMessage() for record in caplog.records)


@pytest.mark.req("WK-07")
def test_a_driver_reason_is_scrubbed_of_the_password(tmp_path: Path) -> None:
    url = parse_database_url(f"postgresql://labfy:{SECRET}@/work?host={tmp_path}")
    assert url.redact(f'FATAL: password "{SECRET}" and again {SECRET}') == \
        'FATAL: password "***" and again ***'
    assert parse_database_url("postgresql://labfy@/work").redact("no secret") == "no secret"


@pytest.mark.req("WK-07")
def test_a_sqlite_file_that_is_not_a_database_or_has_no_directory_is_unavailable(
        tmp_path: Path) -> None:
    garbage = tmp_path / "work.sqlite"
    garbage.write_bytes(b"not a database " * 400)
    for target, reason in ((garbage, "file is not a database"),
                           (tmp_path / "missing" / "work.sqlite",
                            f"directory {tmp_path / 'missing'} does not exist")):
        with pytest.raises(LabfyError) as refused:
            WorkStore.open(parse_database_url(f"sqlite:///{target}"), workspace_id=STORE_WORKSPACE)
        assert refused.value.code is ErrorCode.WORK_DB_UNAVAILABLE
        assert refused.value.message == f"work database sqlite:///{target}: {reason}"
    assert garbage.read_bytes() == b"not a database " * 400  # left as it was


@pytest.mark.req("WK-11", "WK-07")
def test_a_workspace_owns_its_own_work_sqlite_by_any_path_and_nothing_else(
        tmp_path: Path) -> None:
    """WK-11's adoption rule: tasks from before tasks recorded their workspace are the
    workspace's only when the database is that workspace's own work.sqlite."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (tmp_path / "alias").symlink_to(workspace)
    assert owns_database(workspace, sqlite_url(workspace / "work.sqlite"))
    assert owns_database(workspace, sqlite_url(tmp_path / "alias" / "work.sqlite")), \
        "the same file by another path"
    for other in (tmp_path / "another.sqlite", tmp_path / "zz" / "work.sqlite",
                  workspace / "work.sqlite-copy"):
        assert not owns_database(workspace, sqlite_url(other)), other
    assert not owns_database(workspace, parse_database_url("postgresql://u@h/db"))


@pytest.mark.req("WK-07")
def test_a_pool_that_stays_busy_is_unavailable_in_one_line_not_a_traceback(
        tmp_path: Path) -> None:
    """Every pooled connection held elsewhere past the pool's wait: the transaction is
    WORK_DB_UNAVAILABLE naming the database and why, with no driver exception chained
    (the pool here is SQLAlchemy's own, made small and quick to wait)."""
    from sqlalchemy import create_engine  # noqa: PLC0415

    from labfy_ref.work.store.engine import WorkEngine  # noqa: PLC0415

    url = sqlite_url(tmp_path / "work.sqlite")
    engine = WorkEngine(url)
    engine.engine.dispose()
    engine.engine = create_engine(url.url, pool_size=1, max_overflow=0, pool_timeout=0.2)
    try:
        with (engine.engine.connect(),  # the only connection, held
              pytest.raises(LabfyError) as caught, engine.transaction(write=False)):
            pass
        assert caught.value.code is ErrorCode.WORK_DB_UNAVAILABLE
        assert caught.value.message == (f"work database {url.redacted()}: "
                                         "every pooled connection stayed busy")
        assert not chained(caught.value)
    finally:
        engine.close()

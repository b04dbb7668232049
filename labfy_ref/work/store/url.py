"""The Work database URL, validated in one place (WK-02, WK-05).

Two engines are admitted, through one store: SQLite, a file (by default
``<workspace>/work.sqlite``), and PostgreSQL through the psycopg 3 driver::

    sqlite:////abs/path/work.sqlite
    postgresql://user:password@host:5432/dbname
    postgresql://user@/dbname?host=/run/postgresql      (a Unix socket directory)

Everything else is ``WORK_DB_INVALID`` with a reason. The password never
appears in a message, a log line or a ``repr``: messages render the URL with
``***`` in its place, and :meth:`DatabaseUrl.redact` scrubs it from any text
that came from a driver. A URL that cannot be parsed is never echoed at all,
since its password could sit anywhere in it.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from labfy_ref.errors import ConfigRefused, ErrorCode

#: The environment variable a worker reads the URL from, so no password sits on a command line.
ENV_VAR = "LABFY_WORK_DB"
#: The default database, inside the workspace directory.
DEFAULT_FILE = "work.sqlite"
MAX_URL_CHARS = 2048
_SCHEMES = {"sqlite": "sqlite", "postgresql": "postgresql+psycopg",
            "postgresql+psycopg": "postgresql+psycopg"}
# libpq settings a URL may carry; `password` is not one of them (it belongs in the userinfo,
# where it is redacted), nor anything that would load a file of options (`service`).
_POSTGRES_QUERY = frozenset({"host", "sslmode", "sslrootcert", "sslcert", "sslkey",
                             "connect_timeout", "application_name", "target_session_attrs"})


@dataclasses.dataclass(frozen=True, slots=True)
class DatabaseUrl:
    """A validated Work database URL; ``str()`` and ``repr()`` never show the password."""

    url: URL = dataclasses.field(repr=False)

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self.url.get_backend_name()

    @property
    def sqlite_path(self) -> Path | None:
        """The database file of a SQLite URL, else None."""
        return Path(str(self.url.database)) if self.dialect == "sqlite" else None

    def redacted(self) -> str:
        """The URL as a message may show it: the password replaced by ``***``."""
        return self.url.render_as_string(hide_password=True)

    def redact(self, text: str) -> str:
        """``text`` with every occurrence of the password replaced by ``***``."""
        secret = self.url.password
        return text.replace(str(secret), "***") if secret else text

    def __str__(self) -> str:
        return self.redacted()

    def __repr__(self) -> str:
        return f"DatabaseUrl({self.redacted()!r})"


def _refuse(reason: str) -> ConfigRefused:
    return ConfigRefused(reason, code=ErrorCode.WORK_DB_INVALID)


def parse_database_url(text: str) -> DatabaseUrl:
    """Validate ``text`` as a Work database URL, or raise ``WORK_DB_INVALID`` saying why."""
    if not isinstance(text, str):
        raise _refuse("the work database URL must be text")
    if not text or len(text) > MAX_URL_CHARS:
        raise _refuse(f"the work database URL must be 1-{MAX_URL_CHARS} characters")
    if any(not ch.isprintable() or ch.isspace() for ch in text):
        raise _refuse("the work database URL holds whitespace or a control character")
    try:
        url = make_url(text)
    except (ArgumentError, ValueError):
        # the exception's text may quote the URL, password included: never shown
        raise _refuse("the work database URL cannot be parsed (expected "
                      "sqlite:///PATH or postgresql://USER@HOST/DB)") from None
    driver = _SCHEMES.get(url.drivername)
    if driver is None:
        scheme = url.drivername if url.drivername.isascii() else "?"
        raise _refuse(f"the work database scheme {scheme[:40]!r} is not sqlite or postgresql")
    url = url.set(drivername=driver)
    if driver == "sqlite":
        return DatabaseUrl(_check_sqlite(url))
    return DatabaseUrl(_check_postgres(url))


def _check_sqlite(url: URL) -> URL:
    if url.username or url.password or url.host or url.port:
        raise _refuse("a sqlite URL names a file only: sqlite:////absolute/path")
    if url.query:
        raise _refuse("a sqlite URL takes no query")
    if not url.database or url.database == ":memory:" or url.database.startswith("file:"):
        # several workers share the database: an in-memory one would be private to each
        raise _refuse("a sqlite URL must name a database file")
    return url.set(database=os.path.abspath(url.database))


def _check_postgres(url: URL) -> URL:
    if not url.database:
        raise _refuse(f"the work database URL {url.render_as_string(hide_password=True)} "
                      "names no database")
    unknown = sorted(key for key in url.query if key not in _POSTGRES_QUERY)
    if unknown:
        shown = unknown[0] if unknown[0].isascii() and unknown[0].isidentifier() else "?"
        raise _refuse(f"the work database URL's query key {shown[:40]!r} is not admitted "
                      f"(admitted: {', '.join(sorted(_POSTGRES_QUERY))})")
    if url.port is not None and not 0 < url.port < 65536:
        raise _refuse("the work database port must be 1-65535")
    return url


def sqlite_url(path: Path) -> DatabaseUrl:
    """The URL of the SQLite database file ``path`` (made absolute)."""
    return DatabaseUrl(URL.create("sqlite", database=os.path.abspath(path)))


def given_database_url(flag: str | None = None,
                       environ: Mapping[str, str] | None = None) -> DatabaseUrl | None:
    """The Work database named by ``--work-db``, else by ``LABFY_WORK_DB``, validated; None
    when neither names one. An empty flag or variable counts as unset."""
    env = os.environ if environ is None else environ
    chosen = flag or env.get(ENV_VAR) or None
    return None if chosen is None else parse_database_url(chosen)


def owns_database(workspace: Path, url: DatabaseUrl) -> bool:
    """Is ``url`` the workspace's own ``work.sqlite`` (WK-11: the tasks it held before tasks
    recorded their workspace are that workspace's)?"""
    path = url.sqlite_path
    return path is not None and (os.path.realpath(path)
                                 == os.path.realpath(workspace / DEFAULT_FILE))


@dataclasses.dataclass(frozen=True, slots=True)
class WorkDatabase:
    """The Work database a command opens for one workspace, and whether it is that
    workspace's own file (whose older tasks it adopts, WK-11)."""

    url: DatabaseUrl
    adopt: bool


def work_database(workspace: Path, given: DatabaseUrl | None) -> WorkDatabase:
    """The one rule: ``given`` (``--work-db``, else ``LABFY_WORK_DB``), else the
    workspace's own ``work.sqlite``."""
    url = sqlite_url(workspace / DEFAULT_FILE) if given is None else given
    return WorkDatabase(url, owns_database(workspace, url))


def resolve_database_url(workspace: Path, flag: str | None = None,
                         environ: Mapping[str, str] | None = None) -> DatabaseUrl:
    """The Work database a command uses: ``--work-db``, else ``LABFY_WORK_DB``, else the
    workspace's own ``work.sqlite``. An empty flag or variable counts as unset."""
    return work_database(workspace, given_database_url(flag, environ)).url

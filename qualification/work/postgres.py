"""A private PostgreSQL cluster for the Work suite: initdb + pg_ctl, a Unix socket, no TCP.

Debian installs the server under ``/usr/lib/postgresql/<version>/bin``, off ``PATH``;
the newest version present is used. PostgreSQL refuses to run as root, so when the
suite is root every server command runs through ``runuser -u postgres --`` in a
temporary directory owned by ``postgres``. The cluster listens on a socket in that
directory only (``listen_addresses=''``), trusts local connections (nobody else can
enter the directory), runs without fsync (a test cluster), and is stopped and removed
at the end. Every command has a deadline.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from labfy_ref.work import DatabaseUrl, parse_database_url

if TYPE_CHECKING:
    import psycopg

ROOT = Path("/usr/lib/postgresql")
SUPERUSER = "postgres"
_DEADLINE_S = 60


def server_bin() -> Path | None:
    """The ``bin`` directory of the newest PostgreSQL installed, or None."""
    found = [(int(entry.name), entry / "bin") for entry in
             (ROOT.iterdir() if ROOT.is_dir() else ())
             if entry.name.isdigit() and (entry / "bin" / "initdb").is_file()]
    return max(found)[1] if found else None


def absent_reason() -> str | None:
    """Why no private cluster can be started here, or None when one can."""
    if server_bin() is None:
        return f"PostgreSQL not installed (no {ROOT}/<version>/bin/initdb)"
    if importlib.util.find_spec("psycopg") is None:
        return "the PostgreSQL driver psycopg is not installed (pip install -e '.[test]')"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(SUPERUSER)
        except KeyError:
            return "running as root and there is no 'postgres' user to run PostgreSQL as"
        if shutil.which("runuser") is None:
            return "running as root and runuser is missing"
    return None


class PrivateCluster:
    """One throw-away PostgreSQL cluster; :meth:`database` makes a fresh database in it."""

    def __init__(self) -> None:
        bin_dir = server_bin()
        if bin_dir is None:
            raise RuntimeError(absent_reason() or "PostgreSQL not installed")
        self.bin = bin_dir
        self.version = bin_dir.parent.name
        self.root = Path(tempfile.mkdtemp(prefix="labfy-pg-"))
        self.data = self.root / "data"
        self.socket_dir = self.root / "sock"
        self.log = self.root / "server.log"
        self._as_postgres = os.geteuid() == 0
        self._started = False

    def _run(self, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
        command = [str(self.bin / tool), *args]
        if self._as_postgres:
            command = ["runuser", "-u", SUPERUSER, "--", *command]
        return subprocess.run(command, capture_output=True, text=True, timeout=_DEADLINE_S,
                              check=False, cwd=self.root)

    def _must(self, tool: str, *args: str) -> None:
        done = self._run(tool, *args)
        if done.returncode != 0:
            log = self.log.read_text("utf-8", "replace")[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{tool} exited {done.returncode}: "
                               f"{(done.stderr or done.stdout)[-2000:]}\n{log}")

    def start(self, *, durable: bool = False) -> PrivateCluster:
        """initdb, then start the server and wait (bounded) until it accepts connections.

        ``durable`` keeps PostgreSQL's own defaults (fsync, synchronous commit), as a team's
        server runs: the bench compares it with SQLite, which syncs every commit.
        """
        self.socket_dir.mkdir()
        if self._as_postgres:
            user = pwd.getpwnam(SUPERUSER)
            for path in (self.root, self.socket_dir):
                os.chown(path, user.pw_uid, user.pw_gid)
        self._must("initdb", "-D", str(self.data), "-U", SUPERUSER, "--auth=trust",
                   "--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions")
        options = (f"-c listen_addresses='' -c unix_socket_directories='{self.socket_dir}' "
                   "-c shared_buffers=32MB")  # light on a shared test machine
        if not durable:  # a test cluster: nothing in it needs to survive a power cut
            options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        self._must("pg_ctl", "start", "-D", str(self.data), "-l", str(self.log), "-w",
                   "-t", str(_DEADLINE_S), "-o", options)
        self._started = True
        return self

    def admin(self) -> psycopg.Connection[tuple[object, ...]]:
        """An autocommit connection to the ``postgres`` database as the superuser."""
        import psycopg  # noqa: PLC0415 - only when a cluster runs, so its absence is a skip

        return psycopg.connect(host=str(self.socket_dir), user=SUPERUSER, dbname="postgres",
                               autocommit=True, connect_timeout=10)

    @contextlib.contextmanager
    def database(self) -> Iterator[DatabaseUrl]:
        """A fresh, empty database for one test, dropped after it (its connections too)."""
        name = f"work_{secrets.token_hex(6)}"
        assert re.fullmatch(r"work_[0-9a-f]{12}", name)  # safe to splice into DDL
        with self.admin() as conn:
            conn.execute(f"CREATE DATABASE {name}")
        try:
            yield parse_database_url(f"postgresql://{SUPERUSER}@/{name}?host={self.socket_dir}")
        finally:
            with self.admin() as conn:
                conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def stop(self) -> None:
        """Stop the server (fast, bounded) and remove every file of the cluster (idempotent)."""
        try:
            if self._started:
                self._started = False
                pid = self._postmaster_pid()
                try:
                    stopped = self._run("pg_ctl", "stop", "-D", str(self.data), "-m", "fast",
                                        "-w", "-t", str(_DEADLINE_S)).returncode == 0
                except subprocess.TimeoutExpired:
                    stopped = False
                if not stopped and pid is not None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)  # never leave a server behind
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def _postmaster_pid(self) -> int | None:
        try:
            first = (self.data / "postmaster.pid").read_text("ascii").split("\n", 1)[0]
        except OSError:
            return None
        return int(first) if first.isdigit() else None

"""Owner-only files: every database and its sidecars is 0600, whatever the umask.

The workspace store (``labfy.sqlite``: the ledger, campaign questions), the
sessions index (titles copy users' first messages) and the Work database hold
what users typed; like the logs, they are readable by their owner only.
SQLite gives a database's ``-wal`` and ``-shm`` files the database's own
mode, so creating the database 0600 covers them; a file an older release
made wider is narrowed when it is opened. A symbolic link is never followed
(SQLite would write where it points).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

PRIVATE_MODE = 0o600
#: The files SQLite keeps beside a database.
SIDECARS = ("-wal", "-shm", "-journal")


def create_private(path: Path) -> bool:
    """Create ``path`` empty and 0600 unless it exists; True when it was created.

    An existing path is left for :func:`narrow` (a link there raises ``OSError``).
    """
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     PRIVATE_MODE)
    except FileExistsError:
        return False
    try:
        os.fchmod(fd, PRIVATE_MODE)  # exactly 0600: O_CREAT's mode is masked by the umask
    finally:
        os.close(fd)
    return True


def narrow(path: Path) -> None:
    """Take group and other permissions off the regular file ``path``, if it exists.

    Absent files are fine; a symbolic link or another kind of file raises
    ``OSError`` (the caller refuses it in its own words).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise IsADirectoryError(f"{path.name} is not a regular file")
        if mode & 0o077:
            os.fchmod(fd, stat.S_IMODE(mode) & 0o700)
    finally:
        os.close(fd)


def private_database(path: Path, *, create: bool) -> None:
    """A SQLite database and its sidecars owner-only (created empty when ``create``)."""
    if create:
        create_private(path)
    narrow(path)
    for suffix in SIDECARS:
        narrow(Path(f"{path}{suffix}"))  # an absent sidecar is fine

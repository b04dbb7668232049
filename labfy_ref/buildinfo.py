"""What build is running (API-02): name, version, git commit and SPEC revision.

The commit is read from the git checkout the package runs from, when it runs
from one (an editable install or ``PYTHONPATH``): ``.git/HEAD``, then the loose
ref file or ``packed-refs``. No ``git`` subprocess is started, so nothing on
``PATH`` is trusted or run. An installed wheel has no checkout: the commit is
``None``. Worktrees (``.git`` is a file naming the real git directory) work too.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

from labfy_ref import SPEC_REVISION, __version__

NAME = "labfy-ref"
_OBJECT_ID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}", re.ASCII)  # SHA-1 or SHA-256 repositories
_REF = re.compile(r"refs/[A-Za-z0-9._/-]{1,200}", re.ASCII)
_MAX_SMALL_FILE = 4096  # HEAD, .git files and loose refs are a line each


def _small(path: Path) -> str:
    with path.open("rb") as handle:
        return handle.read(_MAX_SMALL_FILE).decode("ascii").strip()


def _git_dir(checkout: Path) -> Path | None:
    dot_git = checkout / ".git"
    if dot_git.is_dir():
        return dot_git
    if dot_git.is_file():  # a worktree or submodule: "gitdir: <path>"
        text = _small(dot_git)
        if text.startswith("gitdir:"):
            return checkout / text.removeprefix("gitdir:").strip()
    return None


def _packed(common: Path, ref: str) -> str | None:
    packed = common / "packed-refs"
    if not packed.is_file():
        return None
    with packed.open("rb") as handle:
        for raw in handle:  # may be large: read line by line
            line = raw.decode("ascii", "replace").strip()
            value, _, name = line.partition(" ")
            if name == ref:
                return value
    return None


def _resolve(git_dir: Path) -> str | None:
    head = _small(git_dir / "HEAD")
    if _OBJECT_ID.fullmatch(head):  # detached HEAD
        return head
    ref = head.removeprefix("ref:").strip()
    if not head.startswith("ref:") or not _REF.fullmatch(ref) or ".." in ref:
        return None
    common = git_dir
    if (git_dir / "commondir").is_file():  # a worktree keeps its branches in the main git dir
        common = git_dir / _small(git_dir / "commondir")
    for place in (git_dir, common):
        if (place / ref).is_file():
            return _small(place / ref)
    return _packed(common, ref)


def git_commit(checkout: Path) -> str | None:
    """The commit checked out at ``checkout``, or None when it is not a readable git checkout."""
    try:
        git_dir = _git_dir(checkout)
        commit = _resolve(git_dir) if git_dir is not None else None
    except (OSError, UnicodeDecodeError):
        return None
    return commit if commit is not None and _OBJECT_ID.fullmatch(commit) else None


@functools.cache
def build_info() -> dict[str, Any]:
    """``{"name", "version", "commit", "spec"}``, read once: the code running is the code loaded."""
    checkout = Path(__file__).resolve().parent.parent
    return {"name": NAME, "version": __version__, "commit": git_commit(checkout),
            "spec": SPEC_REVISION}

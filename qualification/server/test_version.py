"""API-02: ``GET /api/version`` names the build: version, git commit (read without git), SPEC.

The commit reader is checked on real repositories made with the ``git`` command
(a branch as a loose ref, as a packed ref, a detached HEAD, a linked worktree)
and on directories that are not checkouts.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

from labfy_ref import SPEC_REVISION, __version__
from labfy_ref.buildinfo import build_info, git_commit
from qualification.harness import ApiClient, LiveServer

REPO = Path(__file__).resolve().parent.parent.parent
SPEC_PLACES = (REPO / "shared" / "SPEC.md", REPO.parent / "shared" / "SPEC.md")
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid",
                           "-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false",
                           *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


def _repo(path: Path) -> str:
    path.mkdir()
    _git(path, "init", "-q")
    (path / "f").write_text("x")
    _git(path, "add", "f")
    _git(path, "commit", "-q", "-m", "one")
    return _git(path, "rev-parse", "HEAD")


@pytest.mark.req("API-02")
def test_the_version_route_names_the_build_without_a_session(demo_server: LiveServer) -> None:
    anonymous = ApiClient(demo_server.url)
    response = anonymous.http.get("/api/version")
    anonymous.close()
    assert response.status_code == 200
    # The commit is read once per process (the code running is the code loaded): compare
    # with that reading, not with a checkout other people may have committed to since.
    assert response.json() == {"name": "labfy-ref", "version": __version__,
                               "commit": build_info()["commit"], "spec": SPEC_REVISION}
    assert (REPO / ".git").exists() == (response.json()["commit"] is not None)


@pytest.mark.req("API-02")
@needs_git
def test_the_commit_is_the_checkout_head_when_running_from_git() -> None:
    if not (REPO / ".git").exists():
        pytest.skip("this copy of the suite does not run from a git checkout")
    assert git_commit(REPO) == _git(REPO, "rev-parse", "HEAD")


@pytest.mark.req("API-02")
def test_the_spec_revision_is_the_digest_of_the_spec_beside_the_checkout() -> None:
    spec = next((path for path in SPEC_PLACES if path.is_file()), None)
    if spec is None:
        pytest.skip("no SPEC.md beside this checkout")
    digest = hashlib.sha256(spec.read_bytes()).hexdigest()[:16]
    assert f"sha256:{digest}" == SPEC_REVISION, \
        "SPEC.md changed: set labfy_ref.SPEC_REVISION to the revision this build implements"


@pytest.mark.req("API-02")
@needs_git
def test_loose_packed_detached_and_worktree_heads_are_read(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    first = _repo(repo)
    assert git_commit(repo) == first  # refs/heads/main as a loose file
    _git(repo, "pack-refs", "--all")
    assert not (repo / ".git" / "refs" / "heads" / "main").exists()
    assert git_commit(repo) == first  # only in packed-refs now
    (repo / "f").write_text("y")
    _git(repo, "commit", "-q", "-am", "two")
    second = _git(repo, "rev-parse", "HEAD")
    _git(repo, "checkout", "-q", "--detach", first)
    assert git_commit(repo) == first  # detached: HEAD holds the id itself
    _git(repo, "worktree", "add", "-q", "-b", "side", str(tmp_path / "wt"), second)
    assert (tmp_path / "wt" / ".git").is_file()
    assert git_commit(tmp_path / "wt") == second  # .git is a file naming the real git dir


@pytest.mark.req("API-02")
@pytest.mark.parametrize("head", ["", "ref: refs/heads/../../../etc/passwd", "ref: HEAD",
                                  "0123", "ref: refs/heads/none", "\xff"])
def test_no_checkout_or_an_unreadable_head_is_null(tmp_path: Path, head: str) -> None:
    assert git_commit(tmp_path) is None
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text(head, encoding="latin-1")
    assert git_commit(tmp_path) is None

"""Drive cosmic-ray over one module in a private copy of the tree, resumably (QR-04).

cosmic-ray writes each mutant into the module's file on disk, so it never runs in
the working tree (other people's tests would import the mutant): each module
gets ``.mutation/<name>/tree``, a fresh copy made at every start (a run killed
mid-mutant leaves no mutant behind), with ``PYTHONPATH`` pointing at it so even
a test's subprocess imports the copy. The session database beside it survives:
a later run executes only the mutants still pending, and starts afresh only when
the module's source, its tests list or its function scope changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from qualification.mutation.scope import (
    REPO,
    ModuleScope,
    annotation_spans,
    function_lines,
    sampled,
)
from qualification.mutation.sessions import (
    Mutant,
    forget_survivors,
    mutants,
    skip_outside,
    skip_unsampled,
    skip_within,
)

WORK = REPO / ".mutation"
#: What the tests need from the tree (the product, the suite, its fixtures, the pytest config).
#: What a mutant's private copy of the tree holds: the code, the suite and every file the
#: suite reads of the checkout (the docs it executes, tox.ini and .ci/run it checks).
COPIED = ("labfy_ref", "qualification", "fake_provider", "fixtures", "pyproject.toml",
          "conftest.py", "README.md", "CHANGELOG.md", "LICENSE", "docs", "tox.ini", ".ci",
          ".gitignore")
#: Per mutant: a hung test is a killed mutant after this many times the unmutated run...
TIMEOUT_FACTOR = 4.0
#: ...but never sooner than this (a loaded machine must not turn a slow pass into a kill).
MIN_TIMEOUT_S = 30.0


def slug(scope: ModuleScope) -> str:
    """The folder name of a module's session: its dotted path."""
    return scope.path.removesuffix(".py").replace("/", ".")


def test_command(scope: ModuleScope) -> list[str]:
    """Only the covering tests, stopping at the first failure (one kill is enough)."""
    return [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:randomly", "-p",
            "no:cacheprovider", "--run-name", "mutation", *scope.tests]


def _environment(tree: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tree)  # before site-packages: the copy, not the editable install
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # a cached .pyc of one mutant must not serve the next
    return env


def _fresh_tree(tree: Path) -> None:
    shutil.rmtree(tree, ignore_errors=True)
    tree.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", ".hypothesis", "qualification-report")
    for name in COPIED:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, tree / name, ignore=ignore)
        elif source.is_file():
            shutil.copy2(source, tree / name)
    shared = REPO.parent / "shared"  # ../shared beside the checkout (SPEC.md), beside the copy
    beside = tree.parent / "shared"
    if shared.is_dir() and not beside.exists():
        beside.symlink_to(shared, target_is_directory=True)


def _session_key(scope: ModuleScope) -> str:
    digest = hashlib.sha256((REPO / scope.path).read_bytes())
    # The sample joins the key only when there is one: sessions from before it stay valid.
    sample = [scope.sample] if scope.sample > 1 else []
    digest.update(json.dumps([scope.tests, scope.functions, *sample,
                              test_command(scope)[1:]]).encode())
    return digest.hexdigest()


def _config(scope: ModuleScope, timeout: float) -> str:
    return "\n".join([
        "[cosmic-ray]",
        f"module-path = {json.dumps(scope.path)}",
        f"timeout = {timeout:.0f}",
        "excluded-modules = []",
        f"test-command = {json.dumps(shlex.join(test_command(scope)))}",
        "",
        "[cosmic-ray.distributor]",
        'name = "local"',
        ""])


def _cosmic_ray() -> str:
    found = shutil.which("cosmic-ray", path=str(Path(sys.executable).parent))
    if found is None:
        raise SystemExit("cosmic-ray is not installed here: run `tox -e mutation`")
    return found


def session_path(scope: ModuleScope) -> Path:
    """The module's cosmic-ray session database."""
    return WORK / slug(scope) / "session.sqlite"


def run_module(scope: ModuleScope, *, fresh: bool = False,
               survivors: bool = False) -> list[Mutant]:
    """Mutate ``scope``'s module until no mutant is pending; return the session's mutants.

    ``survivors``: run the session's survivors again first (new tests were added).
    """
    WORK.mkdir(exist_ok=True)
    (WORK / ".gitignore").write_text("*\n")  # sessions and copies are never committed
    folder = WORK / slug(scope)
    tree, session, key_file = folder / "tree", session_path(scope), folder / "key"
    _fresh_tree(tree)
    env = _environment(tree)
    config = folder / "config.toml"
    started = time.monotonic()
    baseline = subprocess.run(test_command(scope), cwd=tree, env=env, check=False,
                              capture_output=True, text=True)
    if baseline.returncode != 0:  # every mutant would read as killed
        raise SystemExit(f"{scope.path}: the covering tests fail unmutated:\n"
                         f"{baseline.stdout[-3000:]}")
    # A mutant that loops forever (``end + 1`` -> ``end - 1``) costs the whole timeout:
    # scaled to the module's own tests, not one figure sized for the slowest module.
    config.write_text(_config(scope, max(MIN_TIMEOUT_S,
                                         TIMEOUT_FACTOR * (time.monotonic() - started))))
    key = _session_key(scope)
    if fresh or not session.is_file() or not key_file.is_file() or key_file.read_text() != key:
        session.unlink(missing_ok=True)
        subprocess.run([_cosmic_ray(), "init", str(config), str(session)], cwd=tree, env=env,
                       check=True)
        if scope.functions:
            skip_outside(session, function_lines(REPO / scope.path, scope.functions),
                         f"outside {', '.join(scope.functions)}")
        if scope.sample > 1:
            skip_unsampled(
                session, lambda op, line, col, nth: sampled(op, line, col, nth, scope.sample),
                f"not in the fixed sample of 1 in {scope.sample}")
        key_file.write_text(key)
    elif survivors:
        forget_survivors(session)
    skip_within(session, annotation_spans(REPO / scope.path),
                "inside an annotation (never evaluated: from __future__ import annotations)")
    subprocess.run([_cosmic_ray(), "exec", str(config), str(session)], cwd=tree, env=env,
                   check=True)
    return mutants(session)

"""QR-03: the mutants are what they say — one real function each, never in the product —
and the kit kills them (the whole set runs in ``tox -e mutants``; two run here)."""

from __future__ import annotations

import ast
import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest

from qualification.mutants.__main__ import kit_files
from qualification.mutants.faults import FAULTS

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.req("QR-03")
def test_there_are_at_least_twenty_mutants_each_replacing_one_existing_function() -> None:
    assert len(FAULTS) >= 20
    for mutant in FAULTS.values():
        owner, attribute, original = mutant.resolve()
        assert getattr(owner, attribute) is not mutant.replacement, "not applied in this process"
        assert original is not mutant.replacement
        lines = inspect.getsource(mutant.replacement).splitlines()
        assert len(lines) <= 16, f"{mutant.name}: a mutant is a few lines"
        assert mutant.breaks and "\n" not in mutant.breaks


def _req_args(node: ast.AST) -> set[str]:
    """The IDs of every ``pytest.mark.req(...)`` call inside ``node``."""
    return {arg.value for call in ast.walk(node) if isinstance(call, ast.Call)
            and ast.unparse(call.func).endswith("mark.req")
            for arg in call.args if isinstance(arg, ast.Constant) and isinstance(arg.value, str)}


def killer_ids(killer: str) -> set[str]:
    """The IDs the expected killer names: its own marks, its class's and its module's."""
    path, _, name = killer.partition("::")
    tree = ast.parse((REPO / path).read_text("utf-8"))
    found: set[str] = {req for node in tree.body if isinstance(node, ast.Assign)
                       and any(getattr(t, "id", "") == "pytestmark" for t in node.targets)
                       for req in _req_args(node.value)}
    *owners, function = name.split("::")
    scope: list[ast.stmt] = tree.body
    for owner in owners:
        cls = next(n for n in scope if isinstance(n, ast.ClassDef) and n.name == owner)
        found |= {req for d in cls.decorator_list for req in _req_args(d)}
        found |= {req for n in cls.body if isinstance(n, ast.Assign) for req in _req_args(n)}
        scope = cls.body
    test = next(n for n in scope if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
                and n.name == function)
    return found | {req for d in test.decorator_list for req in _req_args(d)}


@pytest.mark.req("QR-03", "QR-06")
def test_each_expected_killer_is_a_test_tagged_with_what_its_mutant_breaks() -> None:
    kit = kit_files()
    for mutant in FAULTS.values():
        assert (REPO / mutant.killer_file).is_file(), mutant.name
        assert not mutant.served or mutant.killer_file in kit, f"{mutant.name}: not in the kit"
        assert set(mutant.ids) & killer_ids(mutant.killer), \
            f"{mutant.name} breaks {mutant.ids}; its killer names {killer_ids(mutant.killer)}"


@pytest.mark.req("QR-03")
def test_the_product_never_imports_the_mutants_or_the_suite() -> None:
    for path in (REPO / "labfy_ref").rglob("*.py"):
        tree = ast.parse(path.read_text("utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert not node.module.startswith("qualification"), path
            elif isinstance(node, ast.Import):
                assert not any(a.name.startswith("qualification") for a in node.names), path


@pytest.mark.req("QR-03")
def test_the_kit_kills_a_security_mutant_and_a_runtime_mutant(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "qualification.mutants", "host-check-off",
                           "resume-skips-grant", f"--report-dir={tmp_path}"], cwd=REPO,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((tmp_path / "mutants.json").read_text("utf-8"))
    assert [(m["mutant"], m["status"]) for m in summary["mutants"]] == [
        ("host-check-off", "killed"), ("resume-skips-grant", "killed")]
    assert all(m["killed_by"].split("[")[0] == m["expected"] for m in summary["mutants"])

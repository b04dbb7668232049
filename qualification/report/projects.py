"""Small pytest projects for the report's tests: run for real with pytester, report read back.

Each helper writes a generated project (requirements.toml + tests), runs pytest on
it in a subprocess with the report plugin, and returns its report directory; the
CLI runs as ``python -m labfy_ref.cli.main`` in its own process, so exit codes and
stderr are what a pipeline sees.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from labfy_ref.report.validate import schema

REQUIREMENTS = """
[stages.SECURITY_SUITES]
title = "attacks"
paths = ["security/"]
[requirements]
"AA-01" = "all pass"
"AA-02" = "the one a change breaks"
"AA-03" = "nobody names it"
"""

#: Every test passes: the run a pipeline compares against.
GREEN = """
import pytest

@pytest.mark.req("AA-01")
def test_one(): pass

@pytest.mark.req("AA-02")
@pytest.mark.parametrize("case", ["a", "b"])
def test_two(case): assert case in "ab"
"""

#: The same tests after a change that breaks AA-02's second case.
BROKEN = GREEN.replace('assert case in "ab"', 'assert case == "a", "only a survives"')

SECURITY = """
import pytest

@pytest.mark.req("AA-01")
def test_attack(): pass
"""


def make_project(pytester: pytest.Pytester, tests: str = GREEN,
                 requirements: str = REQUIREMENTS) -> Path:
    """Write the project; return where its report goes."""
    pytester.makefile(".toml", requirements=requirements)
    pytester.makepyfile(test_main=tests)
    (pytester.path / "security").mkdir(exist_ok=True)
    (pytester.path / "security" / "test_attacks.py").write_text(SECURITY)
    return pytester.path / "qualification-report"


def run_project(pytester: pytest.Pytester, *extra: str) -> pytest.RunResult:
    """Run the project's tests with the report plugin, as ``tox -e qualify`` would."""
    return pytester.runpytest_subprocess(
        "-p", "labfy_ref.report.pytest_plugin", "--requirements", "requirements.toml",
        "--strict-markers", "-p", "no:cacheprovider", *extra)


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``labfy-ref ARGS`` in its own process."""
    return subprocess.run([sys.executable, "-m", "labfy_ref.cli.main", *args],
                          capture_output=True, text=True, timeout=120, check=False, cwd=cwd,
                          env=dict(os.environ))


def valid_status(path: Path) -> dict[str, Any]:
    """status.json at ``path``, asserted valid against the published schema."""
    document: dict[str, Any] = json.loads(path.read_text("utf-8"))
    jsonschema.Draft202012Validator(schema("status")).validate(document)
    assert document["schema_version"] == 1
    return document


def statuses(document: dict[str, Any]) -> dict[str, str]:
    """ID or stage -> status, from a status.json document."""
    return {line["id"]: line["status"] for line in document["requirements"] + document["stages"]}

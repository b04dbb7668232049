"""``pytest -p qualification.mutants.inject`` with ``LABFY_MUTANT=NAME``: the suite with
in-process mutant NAME's one function replaced, in that pytest process only (QR-06).

Applied in ``pytest_configure``, before any test module is imported, so a test that
imports the replaced name gets the mutant. Without ``LABFY_MUTANT`` it does nothing.
"""

from __future__ import annotations

import os

import pytest

from qualification.mutants.faults import FAULTS

VARIABLE = "LABFY_MUTANT"


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Apply the named mutant; an unknown name is a usage error, never a clean run."""
    name = os.environ.get(VARIABLE)
    if not name:
        return
    if name not in FAULTS:
        raise pytest.UsageError(f"{VARIABLE}={name}: no such mutant")
    FAULTS[name].apply()
    config.stash[_APPLIED] = name


def pytest_report_header(config: pytest.Config) -> str | None:
    """Say which mutant this run carries, so a log cannot be mistaken for a clean run."""
    name = config.stash.get(_APPLIED, None)
    return f"mutant applied: {name}" if name else None


_APPLIED = pytest.StashKey[str]()

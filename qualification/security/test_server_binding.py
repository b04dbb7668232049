"""ATTACKS.md §B binding (SV-01): the server binds loopback only; anything else exits 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.req("SV-01")
@pytest.mark.parametrize(("args", "code"), [
    (["--host", "0.0.0.0"], "HOST_REFUSED"),
    (["--host", "::"], "HOST_REFUSED"),
    (["--host", "192.168.1.10"], "HOST_REFUSED"),
    (["--host", "localhost"], "HOST_REFUSED"),
    (["--port", "65536"], "PORT_REFUSED"),  # --port 0 is "any free port" (SPEC §14)
])
def test_serve_refuses_non_loopback_binding(specimen: Path, args: list[str], code: str) -> None:
    done = subprocess.run([sys.executable, "-m", "labfy_ref.cli.main", "serve", "--workspace",
                           str(specimen), *args],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert done.stderr.startswith(f"{code}: ") and "Traceback" not in done.stderr

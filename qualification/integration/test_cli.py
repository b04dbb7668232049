"""CLI-01 and the check-config command of SPEC §14."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

MUST_SHOW = ["check-config", "--agent-mode", "local-model", "--agent-endpoint",
             "http://127.0.0.1:43117", "--agent-model", "m"]


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "labfy_ref.cli.main", *args],
                          capture_output=True, text=True, timeout=60, check=False,
                          env={**os.environ, **(env or {})})


@pytest.mark.req("MC-05", "CLI-01")
def test_check_config_prints_the_resolved_configuration_as_json() -> None:
    done = _run(*MUST_SHOW)
    assert done.returncode == 0, done.stderr
    resolved = json.loads(done.stdout)
    assert resolved["agent"] == {
        "mode": "local-model", "endpoint": "http://127.0.0.1:43117", "model": "m",
        "timeout_seconds": 60.0, "supervised": None,
        "sources": {"mode": "flag", "endpoint": "flag", "model": "flag", "timeout": "default"},
    }
    assert resolved["server"]["host"] == "127.0.0.1"
    assert resolved["server"]["permission_mode"] == "read-only"


@pytest.mark.req("MC-05")
def test_check_config_reads_the_environment() -> None:
    done = _run("check-config", env={"LABFY_AGENT_MODE": "local-model",
                                     "LABFY_AGENT_MODEL_ENDPOINT": "http://[::1]:5001/v1",
                                     "LABFY_AGENT_MODEL_ID": "env-model"})
    assert done.returncode == 0, done.stderr
    agent = json.loads(done.stdout)["agent"]
    assert (agent["endpoint"], agent["model"]) == ("http://[::1]:5001", "env-model")


@pytest.mark.req("CLI-01")
@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["check-config", "--host", "0.0.0.0"], "HOST_REFUSED"),
        (["check-config", "--port", "99999"], "PORT_REFUSED"),
        (["check-config", "--agent-mode", "local-model"], "CONFIG_INVALID"),
        (["check-config", "--no-such-flag"], "CONFIG_INVALID"),
        (["no-such-command"], "CONFIG_INVALID"),
        ([], "CONFIG_INVALID"),
        (["report", "--format", "pdf"], "CONFIG_INVALID"),
    ],
)
def test_refusals_are_one_line_with_the_code_and_exit_2(args: list[str], code: str) -> None:
    done = _run(*args)
    assert done.returncode == 2
    assert done.stderr.startswith(f"{code}: ")
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


@pytest.mark.req("CLI-01", "QR-02")
def test_a_runtime_failure_exits_1_with_one_line(tmp_path: os.PathLike[str]) -> None:
    done = _run("report", "--results", str(tmp_path), "--requirements",
                os.path.join(tmp_path, "missing.toml"))
    assert done.returncode == 1
    assert done.stderr.startswith("REPORT_INVALID: ") and "Traceback" not in done.stderr


@pytest.mark.req("CLI-01", "HO-01", "SV-03")
@pytest.mark.parametrize(("flag", "content", "fragment"), [
    ("--composition", "rows: [", "not YAML"),
    ("--composition", "rows:\n  - id: a\n", "needs id and plugin"),
    ("--accounts", "[[account]]\nname = 'x'\n", "token_sha256"),
])
def test_check_config_reads_the_files_serve_would_read(
        tmp_path: os.PathLike[str], flag: str, content: str, fragment: str) -> None:
    path = os.path.join(tmp_path, "file")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(content)
    done = _run("check-config", flag, path)
    assert done.returncode == 2
    assert done.stderr.startswith("CONFIG_INVALID: ") and fragment in done.stderr

"""The README's commands work exactly as written (DOC-01, RT-07, RT-08)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from labfy_ref.cli.main import build_parser
from labfy_ref.host import default_composition, parse_composition
from qualification.docs.pages import TEXT, block, blocks

README = TEXT  # the README and every page of docs/


def _run_block(name: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run a README shell block exactly as written, in ``tmp_path``, with bash -euo pipefail."""
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed (.ci/run installs it)")
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "data"),
           "READY": str(tmp_path / "ready.json"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", block(name)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


@pytest.mark.req("DOC-01", "RT-07", "RT-08")
def test_the_readme_curl_flow_runs_as_written(tmp_path: Path) -> None:
    done = _run_block("readme-flow", tmp_path)
    lines = done.stdout.splitlines()
    assert '"code":"GRANT_REQUIRED"' in lines[0]
    assert '"active":true' in lines[1]
    assert lines[-1].startswith("COMPLETED: Demo agent (a fixed rule, not a model): the "
                                "research found: \u201c"), "what the evidence says, first"
    assert "campaign camp_" in lines[-1] and "evidence item" in lines[-1]


@pytest.mark.req("DOC-01")
def test_every_cli_command_of_the_readme_exists() -> None:
    parser = build_parser()
    for command in re.findall(r"^labfy-ref ([a-z-]+(?: init)?)", README, re.M):
        words = command.split()
        args = [*words, "--help"]
        with pytest.raises(SystemExit) as caught:
            parser.parse_args(args)
        assert caught.value.code == 0, command


@pytest.mark.req("DOC-01", "BR-04", "HO-01")
def test_the_readme_bridge_flow_streams_a_turn_as_written(tmp_path: Path) -> None:
    done = _run_block("bridge-flow", tmp_path)
    chunks = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert chunks[0]["type"] == "tool-call"
    assert chunks[0]["tool_id"] == "workspace.list_objects"
    assert chunks[-1]["type"] == "done" and chunks[-1]["reason"] == "completed"


@pytest.mark.req("DOC-01", "BR-16")
def test_the_bridge_toggle_flow_runs_as_written(tmp_path: Path) -> None:
    done = _run_block("toggle-flow", tmp_path)
    lines = done.stdout.splitlines()
    assert lines[0] == '{"bridge":{"state":"disabled"}}'
    assert lines[1] == "CORDIS_DISABLED"
    assert lines[2] in ('{"bridge":{"state":"starting"}}', '{"bridge":{"state":"ready"}}')
    assert lines[3:] == ["ready"], done.stdout


@pytest.mark.req("DOC-01", "HO-01")
def test_the_readme_composition_is_the_shipped_default() -> None:
    match = re.search(r"```yaml\n(rows:.*?)```", README, re.S)
    assert match
    documented = parse_composition(match.group(1))
    shipped = default_composition()
    assert [(r.id, r.plugin) for r in documented.rows] == [(r.id, r.plugin)
                                                         for r in shipped.rows]


#: Each marked block of the docs, and the test module that runs (or loads) it as written.
EXECUTED = {
    "readme-flow": "qualification/docs/test_readme.py",
    "bridge-flow": "qualification/docs/test_readme.py",
    "toggle-flow": "qualification/docs/test_readme.py",
    "openai-flow": "qualification/bridge/test_openai_face.py",
    "work-flow": "qualification/work/test_cli.py",
    "eval-tasks": "qualification/unit/test_eval_tasks.py",
    "ignored-fields": "qualification/bridge/test_openai_face.py",  # checked, not run
    "serve-banner": "qualification/server/test_serve_command.py",  # what serve prints
}


@pytest.mark.req("DOC-01")
def test_every_marked_block_of_the_docs_is_executed_by_a_test() -> None:
    """A block a page marks runnable has a test that runs it; none is left unexecuted."""
    from qualification.docs.pages import REPO  # noqa: PLC0415

    assert set(blocks()) == set(EXECUTED)
    for name, module in EXECUTED.items():
        assert name in (REPO / module).read_text("utf-8"), (name, module)

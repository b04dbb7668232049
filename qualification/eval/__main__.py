"""``python -m qualification.eval [eval options]``: ``labfy-ref eval`` on every matrix model.

Every option is passed to ``labfy-ref eval`` (``--quick``, ``--runs N``, ``--ablate RULE``,
``--record DIR``…). ``--matrix`` runs, on each model, every variant of the comparison into
one record: labfy-ref, the random control, both smolagents baselines (EV-02) and one
ablation per narrowing rule (PR-07) -- by default the committed record
(``qualification/eval/eval-record.json``), which the report shows beside the run's own.
A model that is not installed is said on one line and skipped; none at all is exit 2.
Like the command it runs, it is a benchmark: exit 0 once every model ran.
"""

from __future__ import annotations

import sys
from pathlib import Path

from labfy_ref.cli.main import main
from labfy_ref.eval.baseline import BASELINES
from labfy_ref.protocol.narrowing import RULES
from labfy_ref.report.evidence import COMMITTED_EVAL_RECORD
from qualification.eval.models import matrix

MODELS_DIR = Path(".tox") / "models"


def variants(argv: list[str]) -> list[list[str]]:
    """The eval runs one model gets: ``argv`` alone, or the whole comparison (``--matrix``)."""
    if "--matrix" not in argv:
        return [argv]
    rest = [arg for arg in argv if arg != "--matrix"]
    if not any(arg == "--record" or arg.startswith("--record=") for arg in rest):
        rest += ["--record", str(COMMITTED_EVAL_RECORD.parent)]  # the record to commit
    return [rest, [*rest, "--control"],
            *([*rest, "--baseline", name] for name in BASELINES),
            *([*rest, "--ablate", rule] for rule in RULES)]


def run(argv: list[str]) -> int:
    """Run ``labfy-ref eval`` on each installed model; the worst exit code wins."""
    found, missing = matrix(MODELS_DIR.resolve())
    for line in missing:
        sys.stderr.write(f"eval: model not installed: {line}\n")
    if not found:
        sys.stderr.write("CONFIG_INVALID: no model of the matrix is installed\n")
        return 2
    worst = 0
    for model in found:
        for variant in variants(argv):
            print(f"eval: == {model.name} ({model.path.name}) {' '.join(variant)} ==",
                  flush=True)
            worst = max(worst, main(["eval", "--model-file", str(model.path),
                                     "--model-sha256", model.sha256, *variant]))
    return worst


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))

"""``python -m qualification.eval [eval options]``: ``labfy-ref eval`` on every matrix model.

Every option is passed to ``labfy-ref eval`` (``--quick``, ``--runs N``, ``--ablate RULE``,
``--record DIR``…). ``--matrix`` runs every variant of the comparison, each on every model
before the next, into one record: labfy-ref, the random control, one ablation per
narrowing rule (PR-07) and both smolagents baselines (EV-02), the slowest, last -- by
default the committed record (``qualification/eval/eval-record.json``), which the report
shows beside the run's own.
A matrix takes hours on two cores, so it resumes: a variant whose entry the record already
holds for the same model, the same agent digest (``agent_sha256``: the agent of these
sources) and as many runs is not run again (``--fresh`` runs everything).
A model that is not installed is said on one line and skipped; none at all is exit 2.
Like the command it runs, it is a benchmark: exit 0 once every model ran.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from labfy_ref.cli.main import main
from labfy_ref.errors import ReportInvalid
from labfy_ref.eval.baseline import BASELINES, agent_name
from labfy_ref.eval.control import CONTROL_AGENT
from labfy_ref.eval.run import AGENT
from labfy_ref.protocol.narrowing import AUTO, DEFAULT_PROFILE, PROFILES
from labfy_ref.report.evidence import COMMITTED_EVAL_RECORD, PROFILE_VARIANT, read_eval
from labfy_ref.report.sources import agent_sha256
from qualification.eval.models import matrix

MODELS_DIR = Path(".tox") / "models"


def variants(argv: list[str]) -> list[list[str]]:
    """The eval runs one model gets: ``argv`` alone, or the whole comparison (``--matrix``)."""
    if "--matrix" not in argv:
        return [argv]
    rest = [arg for arg in argv if arg not in ("--matrix", "--fresh")]
    if not any(arg == "--record" or arg.startswith("--record=") for arg in rest):
        rest += ["--record", str(COMMITTED_EVAL_RECORD.parent)]  # the record to commit
    return [rest, [*rest, "--control"],
            # the profile table: each profile beside auto's (the default profile's) run
            *([*rest, "--guidance", name] for name, profile in PROFILES.items()
              if profile is not DEFAULT_PROFILE),
            *([*rest, "--baseline", name] for name in BASELINES)]  # the slowest last


def _option(argv: list[str], name: str) -> str | None:
    """The value of ``name`` in ``argv`` (``--name V`` or ``--name=V``), if given."""
    for index, arg in enumerate(argv):
        if arg == name and index + 1 < len(argv):
            return argv[index + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def entry_key(variant: list[str]) -> tuple[str, str | None, int]:
    """The (agent, ablated rule, runs) of the record entry ``variant`` writes."""
    runs = _option(variant, "--runs") or "1"
    baseline = _option(variant, "--baseline")
    agent = (CONTROL_AGENT if "--control" in variant
             else agent_name(baseline) if baseline in BASELINES else AGENT)
    guidance = _option(variant, "--guidance") or AUTO
    label = _option(variant, "--ablate")
    if guidance != AUTO:
        label = PROFILE_VARIANT + guidance + (f"-{label}" if label else "")
    return agent, label, int(runs) if runs.isdigit() else -1


def measured(record: dict[str, Any] | None, model_sha256: str, variant: list[str],
             agent: str | None) -> bool:
    """Does ``record`` already hold ``variant``'s entry on this model, for this agent?"""
    if record is None or agent is None:
        return False
    name, ablate, runs = entry_key(variant)
    return any(e["model"].get("sha256") == model_sha256 and e["agent"] == name
               and e["ablate"] == ablate and e["runs"] >= runs
               and e.get("agent_sha256") == agent for e in record["entries"])


def run(argv: list[str]) -> int:
    """Run ``labfy-ref eval`` on each installed model; the worst exit code wins."""
    found, missing = matrix(MODELS_DIR.resolve())
    for line in missing:
        sys.stderr.write(f"eval: model not installed: {line}\n")
    if not found:
        sys.stderr.write("CONFIG_INVALID: no model of the matrix is installed\n")
        return 2
    worst = 0
    resume = "--matrix" in argv and "--fresh" not in argv
    agent = agent_sha256()
    for variant in variants(argv):  # each variant on every model before the next one
        for model in found:
            directory = _option(variant, "--record")
            try:
                record = (read_eval(Path(directory))
                          if resume and directory else None)
            except ReportInvalid:
                record = None  # unreadable: nothing is kept (writing replaces it)
            if measured(record, model.sha256, variant, agent):
                print(f"eval: == {model.name} {' '.join(variant)}: measured, kept ==",
                      flush=True)
                continue
            print(f"eval: == {model.name} ({model.path.name}) {' '.join(variant)} ==",
                  flush=True)
            worst = max(worst, main(["eval", "--model-file", str(model.path),
                                     "--model-sha256", model.sha256, *variant]))
    return worst


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))

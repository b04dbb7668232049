"""The eval record (EV-01): ``eval-record.json``, one entry per model, agent and ablation.

``labfy-ref eval`` adds its entry to the record in the report directory,
replacing an earlier entry of the same model, agent and ablation, so one file
holds the whole matrix (both models, labfy-ref, the baselines, the control,
each ablation). Its schema is published beside the report's
(``labfy_ref/report/schemas/eval-record.schema.json``) and checked when the
record is written and when the report reads it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import subprocess
from pathlib import Path
from typing import Any

import jsonschema

from labfy_ref import __version__
from labfy_ref.clock import iso, utcnow
from labfy_ref.errors import ReportInvalid
from labfy_ref.report.evidence import EVAL_RECORD, read_eval
from labfy_ref.report.sources import agent_sha256
from labfy_ref.report.validate import schema

RECORD_NAME = EVAL_RECORD
SCHEMA_VERSION = 2


@dataclasses.dataclass(slots=True)
class EvalEntry:
    """One eval run: a model, an agent (and an ablated rule), every task's outcome."""

    agent: str
    ablate: str | None
    runs: int
    model: dict[str, Any]
    settings: dict[str, Any]
    llama_server: dict[str, Any] = dataclasses.field(default_factory=dict)
    prompt_tokens: int | None = None
    tasks: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    started_at: str = ""
    finished_at: str = ""
    notes: list[str] = dataclasses.field(default_factory=list)

    @classmethod
    def begin(cls, **fields: Any) -> EvalEntry:
        """A new entry, started now."""
        return cls(**fields, started_at=iso(utcnow()))

    def finish(self) -> None:
        """Mark the entry finished now."""
        self.finished_at = iso(utcnow())

    @property
    def passed(self) -> int:
        """Task runs that passed."""
        return sum(1 for task in self.tasks if task["passed"])

    @property
    def total(self) -> int:
        """Task runs."""
        return len(self.tasks)

    @property
    def pass_rate(self) -> float:
        """Passed over total (0 when nothing ran)."""
        return self.passed / self.total if self.total else 0.0

    @property
    def key(self) -> tuple[str, str, str | None]:
        """What an entry replaces: the same model file, agent and ablation."""
        return (str(self.model.get("sha256")), self.agent, self.ablate)

    def as_json(self) -> dict[str, Any]:
        """The entry as written."""
        return {"agent": self.agent, "ablate": self.ablate, "runs": self.runs,
                "model": self.model, "llama_server": self.llama_server,
                "settings": self.settings, "prompt_tokens": self.prompt_tokens,
                "passed": self.passed, "total": self.total,
                "pass_rate": round(self.pass_rate, 4), "tasks": self.tasks,
                "started_at": self.started_at, "finished_at": self.finished_at,
                "notes": self.notes, "labfy_ref_version": __version__, "commit": _commit(),
                "agent_sha256": agent_sha256()}


def _commit() -> str | None:
    """The git commit of this checkout, when it is one."""
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10, check=False, cwd=Path(__file__).parent)
    except OSError:
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


def read_record(directory: Path) -> dict[str, Any] | None:
    """The record in ``directory``, checked against its schema (None: there is none)."""
    return read_eval(directory)


def write_entry(directory: Path, entry: EvalEntry) -> Path:
    """Add ``entry`` to ``directory/eval-record.json`` (atomically), replacing its own kind."""
    directory.mkdir(parents=True, exist_ok=True)
    try:
        document = read_record(directory) or {}
    except ReportInvalid:
        document = {}  # an unreadable record is replaced, not merged
    entries = [e for e in document.get("entries", [])
               if (str(e["model"].get("sha256")), e["agent"], e["ablate"]) != entry.key]
    entries.append(entry.as_json())
    document = {"schema_version": SCHEMA_VERSION, "kind": "labfy.eval_record",
                "updated_at": iso(utcnow()), "entries": entries}
    jsonschema.Draft202012Validator(schema("eval-record")).validate(document)
    path = directory / RECORD_NAME
    temp = directory / f".{RECORD_NAME}.{secrets.token_hex(6)}.tmp"
    try:
        temp.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", "utf-8")
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)
    return path

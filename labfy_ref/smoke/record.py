"""The smoke record (SPEC §15): what ran, how far it got, what it cost.

One :class:`SmokeRecord` is filled stage by stage while ``labfy-ref smoke``
runs and written once, atomically, to ``DIR/smoke-record.json`` — a
``PASS_LOCAL_SPECIMEN`` only when every stage up to ``final`` passed, else
``FAIL`` with the last stage reached and the reason.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from labfy_ref import __version__
from labfy_ref.clock import iso, utcnow

STAGE = "REAL_LOCAL_MODEL_SMOKE"
PASSED = "PASS_LOCAL_SPECIMEN"
FAILED = "FAIL"
#: The stages in order; ``reached`` is the last one passed.
STAGES = ("governor", "verify", "start", "turn", "read", "prepare", "paused", "grant",
          "resume", "campaign", "final")
RECORD_NAME = "smoke-record.json"


@dataclasses.dataclass(slots=True)
class SmokeRecord:
    """The record being built (its JSON is SPEC §15's shape)."""

    model: dict[str, Any]
    llama_server: dict[str, Any]
    settings: dict[str, Any]
    conclude_after: int
    reached: str | None = None
    reason: str | None = None
    #: The run was refused before it started anything (a configuration or resource refusal).
    refused: bool = False
    timings_ms: dict[str, Any] = dataclasses.field(default_factory=lambda: {"rounds": []})
    tokens: dict[str, float] = dataclasses.field(
        default_factory=lambda: {"prompt": 0, "completion": 0, "cached": 0})
    turn: dict[str, Any] = dataclasses.field(default_factory=dict)
    started_at: str = dataclasses.field(default_factory=lambda: iso(utcnow()))
    _clock: float = dataclasses.field(default_factory=time.monotonic)

    def passed(self, stage: str) -> None:
        """``stage`` passed; stages pass in order (a skipped one is a bug, not a pass)."""
        expected = STAGES[STAGES.index(self.reached) + 1 if self.reached else 0]
        if stage != expected:
            raise AssertionError(f"stage {stage} passed before {expected}")
        self.reached = stage

    @contextlib.contextmanager
    def timed(self, name: str) -> Iterator[None]:
        """Time a block into ``timings_ms[name]``."""
        started = time.monotonic()
        try:
            yield
        finally:
            self.timings_ms[name] = round((time.monotonic() - started) * 1000.0, 1)

    @property
    def status(self) -> str:
        """PASS only when ``final`` was reached (through every earlier stage)."""
        return PASSED if self.reached == STAGES[-1] and self.reason is None else FAILED

    def as_json(self) -> dict[str, Any]:
        """The record as written (SPEC §15)."""
        return {
            "stage": STAGE, "status": self.status, "reached": self.reached,
            "reason": self.reason, "model": self.model, "llama_server": self.llama_server,
            "settings": self.settings,
            "timings_ms": {**self.timings_ms,
                           "total": round((time.monotonic() - self._clock) * 1000.0, 1)},
            "tokens": self.tokens, "turn": {**self.turn, "conclude_after": self.conclude_after},
            "started_at": self.started_at, "finished_at": iso(utcnow()),
            "labfy_ref_version": __version__,
        }

    def write(self, directory: Path) -> Path:
        """Write ``directory/smoke-record.json`` atomically (a reader never sees half)."""
        return write_json(directory, self.as_json())


def matrix_record(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The record of a model matrix (SM-08): the worst model's record, with every model's.

    Its top-level fields are those of the first record that failed (of the
    first record when every one passed), so a reader of SPEC §15's shape sees
    ``FAIL`` unless every model passed; ``entries`` holds one record per model,
    in the order they ran.
    """
    if not records:
        raise ValueError("a smoke matrix needs at least one model's record")
    worst = next((record for record in records if record.get("status") != PASSED), records[0])
    top = {key: value for key, value in worst.items() if key != "entries"}
    return {**top, "entries": [{k: v for k, v in r.items() if k != "entries"} for r in records]}


def write_json(directory: Path, document: dict[str, Any]) -> Path:
    """Write ``document`` as ``directory/smoke-record.json`` atomically."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / RECORD_NAME
    temp = directory / f".{RECORD_NAME}.{secrets.token_hex(6)}.tmp"
    try:
        temp.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n",
                        encoding="utf-8")
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)
    return path

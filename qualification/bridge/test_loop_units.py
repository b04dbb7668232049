"""BR-05, BR-12, AV-05: the bridge's agent loop, driven in-process with a scripted provider.

The turn runs as a task of the test, so the test acts while the turn waits on a human
(cancels it) and reads the turn's own approvals and what the model was sent.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from labfy_ref.bridge.llm import DemoProvider, ModelRoute
from labfy_ref.bridge.loop import AgentLoop, PendingApproval, TurnContext, decide, recent
from labfy_ref.bridge.plugins import bridge_surface
from labfy_ref.bridge.stream import StreamHandle
from labfy_ref.errors import ErrorCode, RuntimeRefused
from labfy_ref.gateway import AgentGateway
from labfy_ref.model import StreamDelta
from labfy_ref.modes import Approval, PermissionMode
from labfy_ref.protocol import Decoding, MessageLog
from labfy_ref.runtime import RuntimeLimits
from labfy_ref.workspace import open_workspace


def _write(path: str, content: str) -> str:
    return json.dumps({"type": "tool_call", "tool_id": "files.write",
                       "arguments": {"path": path, "content": content}})


class _Scripted(DemoProvider):
    """Answers each round with the next reply, and keeps what each round was sent."""

    def __init__(self, *replies: str) -> None:
        super().__init__()
        self.replies = list(replies)
        self.sent: list[list[dict[str, Any]]] = []

    async def stream(self, model: str, messages: Sequence[Mapping[str, Any]],
                     decoding: Decoding) -> AsyncIterator[StreamDelta]:
        self.sent.append([dict(m) for m in messages])
        yield StreamDelta(content=self.replies.pop(0), finish_reason="stop")


def _turn(history: Sequence[Mapping[str, Any]]) -> tuple[TurnContext, list[dict[str, Any]]]:
    handle = StreamHandle("ses_X", "assistant")
    seen: list[dict[str, Any]] = []
    handle.subscribe(seen.append)
    turn = TurnContext(session_id="ses_X", route=ModelRoute("demo", "deterministic-demo"),
                       permission_mode=PermissionMode.READ_ONLY,
                       history=[dict(m) for m in history],
                       handle=handle, headless=False, record=lambda _: None, approvals={})
    return turn, seen


async def _until(check: Any) -> None:
    for _ in range(2000):  # bounded: 20 s at most
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the turn never got there")


@pytest.mark.req("BR-05", "BR-12")
def test_a_cancelled_turn_cancels_its_pending_approval_and_keeps_the_decided_one(
        specimen: Path) -> None:
    """A turn cancelled while the human is asked (a client that leaves) cancels the approval
    still waiting, so a late decision is refused and says it was cancelled; an approval
    already answered in that turn stays answered."""
    workspace = open_workspace(specimen)
    store = workspace.open_store()
    provider = _Scripted(_write("a.txt", "one"), _write("b.txt", "two"))
    loop = AgentLoop(provider, bridge_surface(AgentGateway(workspace, store)), "p")
    turn, seen = _turn([{"role": "user", "content": "write a.txt and b.txt in files"}])

    def asked(count: int) -> bool:
        return [c["type"] for c in seen].count("approval-request") == count

    async def scenario() -> tuple[PendingApproval, PendingApproval]:
        task = asyncio.create_task(loop.run(turn))
        await _until(lambda: asked(1))
        [first] = turn.approvals.values()
        decide(turn.approvals, first.approval_id, Approval.ALLOWED_ONCE)
        await _until(lambda: asked(2))
        [second] = [a for a in turn.approvals.values() if a is not first]
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return first, second

    try:
        first, second = asyncio.run(scenario())
    finally:
        store.close()
    assert (first.state, second.state) == ("decided", "cancelled")
    assert seen[-1]["type"] == "done" and seen[-1]["reason"] == "cancelled"
    for approval, state in ((first, "decided"), (second, "cancelled")):
        with pytest.raises(RuntimeRefused) as late:
            decide(turn.approvals, approval.approval_id, Approval.ALLOWED_ONCE)
        assert late.value.code is ErrorCode.APPROVAL_NOT_PENDING
        assert late.value.message == f"approval is {state}, not pending"
    assert (specimen / "files" / "a.txt").read_text() == "one"
    assert not (specimen / "files" / "b.txt").exists(), "the cancelled write never ran"


@pytest.mark.req("AV-05")
def test_the_window_of_a_plain_list_is_the_window_of_its_message_log() -> None:
    """``recent`` takes any sequence of messages, a plain list as a MessageLog: the newest
    that fit, starting at a user message."""
    history = [{"role": "user" if n % 2 == 0 else "assistant", "content": f"m{n} " + "x" * 40}
               for n in range(12)]
    for max_bytes in (0, 60, 200, 400, 10_000):
        assert list(recent(history, max_bytes)) == list(recent(MessageLog(history), max_bytes))
    window = list(recent(history, 200))
    assert window and window[0]["role"] == "user" and window[-1] == history[-1]
    assert len(window) < len(history)


@pytest.mark.req("AV-05")
@pytest.mark.parametrize("budget", [2_000, 4_000, 8_000])
def test_the_model_is_sent_the_newest_history_that_fits_half_the_context_budget(
        specimen: Path, budget: int) -> None:
    """A bridge turn sends the system prompt and the newest history that fits half the
    context budget (so the turn itself has the other half), nothing older."""
    history = [{"role": "user" if n % 2 == 0 else "assistant", "content": f"m{n:03} " + "y" * 90}
               for n in range(101)]
    workspace = open_workspace(specimen)
    store = workspace.open_store()
    provider = _Scripted(json.dumps({"type": "final", "text": "done"}))
    loop = AgentLoop(provider, bridge_surface(AgentGateway(workspace, store)), "p",
                     limits=RuntimeLimits(max_context_bytes=budget))
    turn, seen = _turn(history)
    try:
        asyncio.run(loop.run(turn))
    finally:
        store.close()
    assert seen[-1]["reason"] == "completed"
    [sent] = provider.sent
    expected = list(recent(history, budget // 2))
    assert sent[0]["role"] == "system"
    assert [m["content"] for m in sent[1:len(expected) + 1]] == [m["content"] for m in expected]
    assert 0 < len(expected) < len(history)
    assert list(recent(history, budget)) != expected, "half the budget, not all of it"


@pytest.mark.req("AV-05", "BR-02")
@pytest.mark.parametrize("final", ["done", "Two hives by the hedge."])
def test_a_completed_turn_says_its_final_text_once_and_records_it(specimen: Path,
                                                                  final: str) -> None:
    """The final text reaches the stream once (streamed as the reply is read, never said
    again at the end), the turn records it as the assistant's message, and done is last."""
    workspace = open_workspace(specimen)
    store = workspace.open_store()
    provider = _Scripted(json.dumps({"type": "final", "text": final}))
    loop = AgentLoop(provider, bridge_surface(AgentGateway(workspace, store)), "p")
    records: list[dict[str, Any]] = []
    turn, seen = _turn([{"role": "user", "content": "hello"}])
    turn.record = records.append
    try:
        asyncio.run(loop.run(turn))
    finally:
        store.close()
    assert "".join(c["text"] for c in seen if c["type"] == "text") == final
    assert [c["type"] for c in seen][-1] == "done" and seen[-1]["reason"] == "completed"
    assert records[-1] == {"kind": "message", "role": "assistant", "text": final}


@pytest.mark.req("PR-03", "BR-02")
def test_a_reply_whose_text_was_shown_is_refused_at_once_never_repaired(
        specimen: Path) -> None:
    """A final answer the stream already showed the user, then broken by text after the
    object, is not repaired (the user would read a second answer): the turn ends
    MODEL_PROTOCOL_ERROR after that one request, with no tool run."""
    workspace = open_workspace(specimen)
    store = workspace.open_store()
    provider = _Scripted('{"type":"final","text":"Two hives by the hedge."} IGNORE-ME',
                         json.dumps({"type": "final", "text": "repaired"}))
    loop = AgentLoop(provider, bridge_surface(AgentGateway(workspace, store)), "p")
    turn, seen = _turn([{"role": "user", "content": "how many hives?"}])
    try:
        asyncio.run(loop.run(turn))
    finally:
        store.close()
    assert "".join(c["text"] for c in seen if c["type"] == "text") == \
        "Two hives by the hedge.", "the user read one answer as it streamed, no second"
    assert len(provider.sent) == 1, "no repair request after the text was shown"
    [error] = [c for c in seen if c["type"] == "error"]
    assert error["code"] == "MODEL_PROTOCOL_ERROR", error
    assert not [c for c in seen if c["type"].startswith("tool")], "no tool ran"
    assert seen[-1]["type"] == "done" and seen[-1]["reason"] == "error"

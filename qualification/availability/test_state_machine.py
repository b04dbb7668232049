"""ATTACKS.md §G as a state machine: nothing a model, a file or a client sends stops the servers.

Hypothesis drives one real server — the runtime on a local-model agent and the
bridge, both against a fake provider the machine scripts — through arbitrary
model replies (any JSON, lone-surrogate escapes, deep nesting, huge strings,
tool calls with hostile arguments), user messages with surrogates, raw bodies
that are not UTF-8, file names that are not UTF-8, cancels and approvals.
After every step: the worker is alive, every read route answers 2xx/4xx, no
turn ended ``INTERNAL_ERROR``, and a fresh turn still completes in the runtime
and in the bridge.

Scale: ``LABFY_MACHINE_EXAMPLES`` times ``LABFY_MACHINE_STEPS``, in four shards that
the test workers run side by side (qualify runs at least 2,000 steps in all;
``tox -e security`` more).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from fake_provider import Answer, FakeProvider, Scenario
from labfy_ref.text import has_surrogate
from labfy_ref.workspace import init_workspace
from qualification.conftest import local_agent
from qualification.harness import TERMINAL, ApiClient, LiveServer, TurnReader, wait_until

EXAMPLES = int(os.environ.get("LABFY_MACHINE_EXAMPLES", "45"))
STEPS = int(os.environ.get("LABFY_MACHINE_STEPS", "50"))
MIN_STEPS = int(os.environ.get("LABFY_MACHINE_MIN_STEPS", "2000"))
#: Independent runs of the machine, so the test workers share the load.
SHARDS = 4
FINAL = '{"type":"final","text":"fresh"}'
PAUSED = TERMINAL | {"AUTHORIZATION_REQUIRED"}

# -- strategies: text with lone surrogates, JSON with anything in it -------------------------

#: Any code point, lone surrogates included (the default text strategy never makes them).
any_char = st.one_of(st.characters(), st.characters(categories=["Cs"]),
                     st.sampled_from(["\ufffe", "\uffff", "\x00", "\u2028", "\x1c", "\u00a0"]))
#: Drawn character by character: ``st.text`` over a union merges the alphabets and then
#: almost never picks the small surrogate range.
hostile_text = st.lists(any_char, max_size=40).map("".join)
huge_text = st.integers(0, 1_500_000).map(lambda n: "\U0001f41d" * (n // 4))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | hostile_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(hostile_text, inner, max_size=3),
    max_leaves=8)
TOOLS = ["workspace.list_objects", "workspace.read_object", "research.prepare",
         "research.get_state", "files.list", "files.read", "files.write", "grants.create"]
tool_call = st.builds(
    lambda tool, args: json.dumps({"type": "tool_call", "tool_id": tool, "arguments": args}),
    st.sampled_from(TOOLS),
    st.one_of(
        st.fixed_dictionaries({"path": hostile_text}),
        st.fixed_dictionaries({"path": hostile_text, "content": hostile_text | huge_text}),
        st.fixed_dictionaries({"object_id": hostile_text}),
        st.fixed_dictionaries({"campaign_id": hostile_text}),
        st.fixed_dictionaries({"topic": hostile_text, "questions": st.lists(hostile_text,
                                                                           max_size=3)}),
        st.dictionaries(hostile_text, json_values, max_size=3)))
final = st.builds(lambda text: json.dumps({"type": "final", "text": text}),
                  hostile_text | huge_text)
model_reply = st.one_of(
    tool_call, final,
    json_values.map(json.dumps),
    st.integers(1, 100_000).map(lambda n: "[" * n + "]" * n),
    st.integers(1, 200).map(lambda n: '{"type":"final","text":' * n),
    hostile_text)
replies = st.lists(model_reply, min_size=1, max_size=4)
file_names = st.binary(min_size=1, max_size=40).filter(
    lambda b: b"/" not in b and b"\x00" not in b and b not in (b".", b".."))


# -- the machine ---------------------------------------------------------------------------

class Stage:
    """One server, its fake provider and an admin client, shared by every example."""

    def __init__(self, root: Path) -> None:
        init_workspace(root, specimen=True)
        self.files = root / "files"
        self.provider = FakeProvider(_script([FINAL])).start()
        agent = local_agent(self.provider.base_url)
        self.server = LiveServer(root, bridge=True, agent_mode=agent["agent_mode"],
                                 agent_endpoint=agent["agent_endpoint"],
                                 agent_model=agent["agent_model"]).start()
        self.client: ApiClient = self.server.client()
        self.steps = 0

    def close(self) -> None:
        self.server.stop()
        self.provider.stop()


#: Seconds a held model request takes: longer than any wait for a turn's ending, so a turn
#: whose request is cancelled can only end CANCELLED -- never by its answers arriving first
#: on a slow, busy machine (the cancel has to interrupt the request, RT-05).
HELD = 20.0


def _script(contents: list[str], **extra: Any) -> Scenario:
    """Answers in order, then a valid final answer for anything asked after them (each
    answer, the final one too, shaped by ``extra``)."""
    answers = tuple(Answer(content=c, **extra) for c in contents)
    return Scenario(name="machine", answers=(*answers, Answer(content=FINAL, **extra)),
                    when_exhausted="repeat_last")


def _json_body(value: Any) -> bytes:
    """JSON as a client would send it; lone surrogates travel as ``\\ud800`` escapes."""
    return json.dumps(value).encode("ascii")


def _lone(text: str) -> bool:
    """Does ``text`` still hold a lone surrogate once sent as JSON (escaped pairs join)?"""
    return has_surrogate(json.loads(json.dumps(text)))


class ServerMachine(RuleBasedStateMachine):
    """Steps against the shared stage; invariants after each one."""

    stage: ClassVar[Stage]

    def __init__(self) -> None:
        super().__init__()
        self.turns: list[str] = []
        self.sessions: list[str] = []

    @property
    def client(self) -> ApiClient:
        return self.stage.client

    def _post(self, path: str, body: bytes) -> Any:
        response = self.client.http.post(path, content=body, headers=self.client.headers(True)
                                         | {"Content-Type": "application/json"})
        assert response.status_code < 500, response.text
        return response

    def _finish_runtime_turn(self, turn_id: str) -> dict[str, Any]:
        turn = self.client.wait_state(turn_id, PAUSED, timeout=30)
        if turn["state"] == "AUTHORIZATION_REQUIRED":
            self.client.post(f"/api/v1/agent-runtime/turns/{turn_id}/cancel")
        return turn

    # -- rules -------------------------------------------------------------------------

    @rule(contents=replies, message=hostile_text)
    def runtime_turn(self, contents: list[str], message: str) -> None:
        """A runtime turn on scripted replies, with any user message."""
        self.stage.provider.set_scenario(_script(contents))
        response = self._post("/api/v1/agent-runtime/turns", _json_body({"message": message}))
        if _lone(message) or not message:
            assert response.status_code == 422, response.text
            return
        assert response.status_code == 202, response.text
        turn = response.json()["turn"]
        self.turns.append(turn["id"])
        ended = self._finish_runtime_turn(turn["id"])
        assert (ended["error"] or {}).get("code") != "INTERNAL_ERROR", ended

    @rule(contents=replies, text=hostile_text, allow=st.booleans(),
          mode=st.sampled_from(["read-only", "workspace-write"]))
    def bridge_turn(self, contents: list[str], text: str, allow: bool, mode: str) -> None:
        """A bridge turn on scripted replies; approvals answered either way."""
        self.stage.provider.set_scenario(_script(contents))
        created = self._post("/api/cordis/sessions", _json_body({"permission_mode": mode}))
        session_id = created.json()["session"]["id"]
        self.sessions.append(session_id)
        if _lone(text) or not text:
            response = self._post(f"/api/cordis/sessions/{session_id}/messages",
                                  _json_body({"text": text}))
            assert response.status_code == 422, response.text
            return
        text = json.loads(json.dumps(text))  # escaped pairs join into their code point
        reader = TurnReader(self.client, session_id, text)
        answered: set[str] = set()

        def unanswered() -> list[str]:
            return [c["approval_id"] for c in list(reader.chunks)
                    if c["type"] == "approval-request" and c["approval_id"] not in answered]

        for _ in range(64):  # one pass per approval the turn asks for, bounded
            wait_until(lambda: "done" in reader.types() or bool(unanswered())
                       or reader.status not in (None, 200), timeout=30, interval=0.002)
            if reader.status not in (None, 200):
                assert reader.status < 500, reader.error_body
                return
            pending = unanswered()
            if not pending:
                break
            for approval_id in pending:
                answered.add(approval_id)
                decision = "allowed-once" if allow else "rejected"
                self._post(f"/api/cordis/sessions/{session_id}/approvals/{approval_id}",
                           _json_body({"decision": decision}))
        chunks = reader.join(timeout=60)
        assert chunks and chunks[-1]["type"] == "done"
        assert not any(c.get("code") == "INTERNAL_ERROR" for c in chunks), chunks

    @rule(contents=replies)
    def cancel_runtime_turn(self, contents: list[str]) -> None:
        """A runtime turn cancelled while its model request is in flight."""
        provider = self.stage.provider
        provider.set_scenario(_script(contents, delay=HELD))
        asked = len(provider.chat_requests())
        turn = self.client.start_turn("cancel me")
        self.turns.append(turn["id"])
        wait_until(lambda: len(provider.chat_requests()) > asked, timeout=10, interval=0.002)
        self.client.post(f"/api/v1/agent-runtime/turns/{turn['id']}/cancel")
        assert self.client.wait_state(turn["id"], TERMINAL)["state"] == "CANCELLED"

    @rule(contents=replies, disconnect=st.booleans())
    def cancel_bridge_turn(self, contents: list[str], disconnect: bool) -> None:
        """A bridge turn stopped mid-request: by the cancel route, or by the client leaving."""
        provider = self.stage.provider
        provider.set_scenario(_script(contents, delay=HELD))
        session_id = self.client.post("/api/cordis/sessions", {}).json()["session"]["id"]
        self.sessions.append(session_id)
        asked = len(provider.chat_requests())
        reader = TurnReader(self.client, session_id, "stop me")
        wait_until(lambda: len(provider.chat_requests()) > asked, timeout=10, interval=0.002)
        if disconnect:
            reader.disconnect()
        else:
            self._post(f"/api/cordis/sessions/{session_id}/cancel", b"")
            assert reader.join(timeout=30)[-1]["type"] == "done"
        wait_until(lambda: not self.client.get(f"/api/cordis/sessions/{session_id}").json()[
            "session"]["active_turn"], timeout=10, interval=0.002)

    @rule(line=st.one_of(
        st.builds(lambda kind, fields: json.dumps({"kind": kind, **fields}),
                  st.sampled_from(["message", "tool", "approval", "settings", "header", "x"]),
                  st.dictionaries(st.sampled_from(["role", "text", "settings", "arguments",
                                                   "result", "at", "call_id", "tool_id"]),
                                  json_values, max_size=4)),
        json_values.map(json.dumps),
        st.binary(max_size=80).map(lambda raw: raw.replace(b"\n", b" ").decode("latin-1"))),
        torn=st.booleans())
    def edit_a_session_log_on_disk(self, line: str, torn: bool) -> None:
        """Someone edits a session log behind the server's back: a line of anything."""
        if not self.sessions:
            return
        session_id = self.sessions[-1]
        path = self.stage.files.parent / "sessions" / f"{session_id}.jsonl"
        if path.exists():
            with path.open("ab") as log:
                log.write(line.encode("utf-8", "surrogateescape") + (b"" if torn else b"\n"))
        sent = self._post(f"/api/cordis/sessions/{session_id}/messages",
                          _json_body({"text": "after the edit"}))
        assert sent.status_code in (200, 404, 409, 422), sent.text

    @rule(name=file_names, tool=st.sampled_from(["files.list", "files.read"]))
    def undecodable_file_name(self, name: bytes, tool: str) -> None:
        """A file whose name is any bytes, then a model that lists and reads files/."""
        path = os.path.join(os.fsencode(self.stage.files), name)
        with open(path, "wb") as handle:
            handle.write(b"\xff\xfe not text")
        call = {"type": "tool_call", "tool_id": tool,
                "arguments": {"path": "" if tool == "files.list"
                              else os.fsdecode(name)}}
        self.runtime_turn([json.dumps(call)], "look at the files")

    @rule(body=st.binary(max_size=64), route=st.sampled_from([
        "/api/v1/agent-runtime/turns", "/api/cordis/sessions", "/api/v1/grants"]))
    def raw_bytes_body(self, body: bytes, route: str) -> None:
        """Bytes that are not JSON, or not UTF-8, as a body: a 4xx, never a 5xx."""
        response = self._post(route, body)
        assert response.status_code >= 400 or body.strip()

    # -- after every step ---------------------------------------------------------------

    @invariant()
    def the_server_still_serves(self) -> None:
        self.stage.steps += 1
        client = self.client
        status = client.get("/api/v1/agent-runtime/status")
        assert status.status_code == 200 and status.json()["running"] is True
        reads = ["/api/v1/agent-runtime/turns", "/api/v1/agent-runtime/events?cursor=0",
                 "/api/v1/agent-runtime/tools", "/api/v1/objects", "/api/cordis/sessions",
                 "/api/cordis/health", "/api/cordis/tools"]
        reads += [f"/api/v1/agent-runtime/turns/{t}" for t in self.turns[-3:]]
        reads += [f"/api/cordis/sessions/{s}" for s in self.sessions[-3:]]
        for path in reads:
            response = client.get(path)
            assert response.status_code < 500, (path, response.text)
            json.loads(response.content.decode("utf-8"))  # valid UTF-8 JSON, always

    @invariant()
    def a_fresh_turn_completes(self) -> None:
        provider = self.stage.provider
        provider.set_scenario(_script([FINAL]))
        turn = self.client.start_turn("fresh")
        assert self.client.wait_state(turn["id"], PAUSED, timeout=30)["state"] == "COMPLETED"
        session_id = self.client.post("/api/cordis/sessions", {}).json()["session"]["id"]
        chunks = TurnReader(self.client, session_id, "fresh").join(timeout=30)
        assert chunks[-1] == {**chunks[-1], "type": "done", "reason": "completed"}, chunks
        self.client.delete(f"/api/cordis/sessions/{session_id}")


@pytest.fixture(scope="module")
def stage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stage]:
    stage = Stage(tmp_path_factory.mktemp("machine") / "ws")
    yield stage
    stage.close()


@pytest.mark.req("AV-01", "AV-02", "BR-02")
@pytest.mark.parametrize("shard", range(SHARDS))
def test_nothing_sent_stops_poisons_or_starves_the_server(stage: Stage, shard: int) -> None:
    """One shard of the run: shards are independent runs, spread over the test workers."""
    ServerMachine.stage = stage
    before, target = stage.steps, MIN_STEPS // SHARDS
    # Hypothesis draws each example's length (often under STEPS): run again until the
    # shard has its share of steps, a bounded number of times.
    for _ in range(10):
        run_state_machine_as_test(ServerMachine, settings=settings(
            max_examples=max(1, EXAMPLES // SHARDS), stateful_step_count=STEPS,
            deadline=None, suppress_health_check=list(HealthCheck)))
        if stage.steps - before >= target:
            break
    steps = stage.steps - before
    print(f"state machine shard {shard}: {steps} steps")
    assert steps >= target, f"only {steps} steps ran in shard {shard}"

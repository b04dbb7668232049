"""EV-02: the framework baselines' parts that need no model.

The baseline run itself (``labfy-ref eval --baseline smolagents`` on a GGUF)
is a benchmark of the real-model stage. Here: the option is refused clearly
when it is wrong or combined with a narrowing measurement, or when smolagents
is absent; every catalog tool becomes a smolagents tool of the types
smolagents accepts, calling the real gateway; and the shipped tool templates
render tools, a call and a result the way llama.cpp's ``<tool_call>`` format
reads them.
"""

from __future__ import annotations

import asyncio
import json
import types
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx

from labfy_ref.errors import ConfigRefused
from labfy_ref.eval.baseline import (
    BASELINES,
    STEP_TOKENS,
    TEMPLATES,
    TOOL_TEMPLATES,
    BaselineTurn,
    _inputs,
    _run,
    agent_name,
    smolagents_module,
    tool_template,
)
from labfy_ref.eval.record import read_record, write_entry
from labfy_ref.gateway import AgentGateway
from labfy_ref.gateway.policy import CallContext
from labfy_ref.modes import PermissionMode
from labfy_ref.runtime.limits import RuntimeLimits
from labfy_ref.tools import default_catalog
from labfy_ref.workspace import init_workspace
from qualification.eval_cli import eval_refusal
from qualification.unit.test_eval_tasks import _entry

#: The input types smolagents accepts (its AUTHORIZED_TYPES, less the media ones).
SMOLAGENTS_TYPES = {"string", "boolean", "integer", "number", "array", "object", "any", "null"}
#: The supervised llama-server the baselines talk to (answered by respx).
LLAMA = "http://127.0.0.1:43121"


@pytest.mark.req("EV-02")
@pytest.mark.parametrize(("extra", "said"), [
    (["--baseline", "langchain"], "--baseline takes one of smolagents, smolagents-code"),
    (["--baseline", "smolagents", "--control"], "give it alone"),
    (["--baseline", "smolagents-code", "--ablate", "relevance"], "give it alone"),
    (["--baseline", "smolagents", "--with", "recap"], "give it alone"),
])
def test_a_wrong_baseline_is_one_clear_refusal(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str],
                                               extra: list[str], said: str) -> None:
    code, err = eval_refusal(tmp_path, capsys, extra)
    assert code == 2
    assert err.startswith("CONFIG_INVALID: ") and said in err and "Traceback" not in err


@pytest.mark.req("EV-02")
def test_without_smolagents_the_baseline_says_how_to_install_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def absent(name: str) -> Any:
        raise ImportError(f"No module named {name!r}")

    monkeypatch.setattr("importlib.import_module", absent)
    with pytest.raises(ConfigRefused, match=r"pip install 'smolagents\[openai\]'"):
        smolagents_module()


@pytest.mark.req("EV-02")
def test_every_catalog_tool_maps_to_smolagents_inputs() -> None:
    for spec in default_catalog().values():
        inputs = _inputs(spec)
        schema = spec.input_schema
        assert set(inputs) == set(schema.get("properties", {})), spec.tool_id
        for name, entry in inputs.items():
            assert entry["type"] in SMOLAGENTS_TYPES, (spec.tool_id, name)
            assert entry["description"], (spec.tool_id, name)
            assert entry.get("nullable", False) == (name not in schema.get("required", [])), \
                "an optional argument is nullable, a required one is not"
    assert agent_name("smolagents") == "smolagents-ToolCallingAgent"
    assert set(BASELINES) == {"smolagents", "smolagents-code"}


@pytest.mark.req("EV-02")
def test_baseline_tools_call_the_real_gateway_and_record_the_turn(tmp_path: Path) -> None:
    smolagents = pytest.importorskip("smolagents", reason="smolagents is not installed "
                                     "(tox -e eval installs it)")
    from labfy_ref.eval.baseline import _tools  # noqa: PLC0415

    workspace = init_workspace(tmp_path / "ws", specimen=True)
    store = workspace.open_store()
    try:
        gateway = AgentGateway(workspace, store)
        context = CallContext(PermissionMode.READ_ONLY)
        turn = BaselineTurn()
        tools = {tool.name: tool for tool in _tools(smolagents, gateway, context, turn)}
        assert "files_write" not in tools, "read-only offers no write, as the runtime's"
        listing = json.loads(tools["workspace_list_objects"](kind=None))
        objects = listing["data"]["objects"]
        assert listing["ok"] is True and objects
        read = json.loads(tools["workspace_read_object"](object_id=objects[0]["object_id"]))
        assert read["data"]["object_id"] == objects[0]["object_id"]
        invented = json.loads(tools["workspace_read_object"](object_id="obj_" + "0" * 26))
        assert invented["ok"] is False, "an invented id is refused by the gateway (GW-04)"
    finally:
        store.close()
    assert [call["tool_id"] for call in turn.tool_calls] == [
        "workspace.list_objects", "workspace.read_object", "workspace.read_object"]
    assert turn.tool_calls[0]["arguments"] == {}, "an absent optional argument is not sent"
    assert turn.as_turn()["tool_calls"] is turn.tool_calls


@pytest.mark.req("EV-02")
@pytest.mark.parametrize(("marker", "name"), TOOL_TEMPLATES)
def test_the_tool_templates_render_tools_calls_and_results(marker: str, name: str) -> None:
    jinja2 = pytest.importorskip("jinja2", reason="jinja2 renders the template here")
    source = (TEMPLATES / name).read_text("utf-8")
    template = jinja2.Environment(autoescape=False).from_string(source)
    tool = {"type": "function", "function": {"name": "workspace_list_objects",
                                             "description": "List objects.",
                                             "parameters": {"type": "object"}}}
    messages = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "How many species?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "1", "type": "function",
             "function": {"name": "workspace_list_objects", "arguments": {"kind": "fact"}}}]},
        {"role": "tool", "tool_call_id": "1", "content": [{"type": "text", "text": "ok"}]},
    ]
    text = template.render(messages=messages, tools=[tool], add_generation_prompt=True)
    assert marker in text and "You are an agent." in text
    listed = text.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0]
    assert [json.loads(line) for line in listed.splitlines()] == [tool], "each tool, as JSON"
    call = text.split("<tool_call>\n", 2)[2].split("\n</tool_call>", 1)[0]
    assert json.loads(call) == {"name": "workspace_list_objects", "arguments": {"kind": "fact"}}
    assert "<tool_response>\nok\n</tool_response>" in text, "typed content parts are read"
    assert text.count("How many species?") == 1


@pytest.mark.req("EV-02", "EV-01")
def test_the_matrix_runs_every_variant_side_by_side() -> None:
    from labfy_ref.protocol.narrowing import DEFAULT_PROFILE, PROFILES  # noqa: PLC0415
    from qualification.eval.__main__ import variants  # noqa: PLC0415

    assert variants(["--quick"]) == [["--quick"]], "without --matrix: the run asked for"
    runs = variants(["--runs", "3", "--matrix"])
    into = ["--record", "qualification/eval"]  # the record that is committed
    assert runs[0] == ["--runs", "3", *into], "labfy-ref itself first"
    assert ["--runs", "3", *into, "--control"] in runs
    for name in BASELINES:
        assert ["--runs", "3", *into, "--baseline", name] in runs
    others = [name for name, profile in PROFILES.items() if profile is not DEFAULT_PROFILE]
    for name in others:  # the profile table (PR-08): each profile beside the default's run
        assert ["--runs", "3", *into, "--guidance", name] in runs
    assert ["--runs", "3", *into, "--guidance", DEFAULT_PROFILE.name] not in runs
    assert len(runs) == 2 + len(BASELINES) + len(others)


@respx.mock
@pytest.mark.req("EV-02")
@pytest.mark.parametrize(("own", "shipped"), [
    ("{% for m in messages %}<|im_start|>{{ m.role }}{% endfor %}", "chatml-tools.jinja"),
    ("{{ bos_token }}<start_of_turn>user\n", "gemma-tools.jinja"),
])
def test_the_tool_template_follows_the_models_own_chat_format(own: str, shipped: str) -> None:
    """llama-server's /props is asked (with its key, for at most 30 s) which chat format
    the model's own template uses; the shipped tool template of that format is used."""
    props = respx.get(f"{LLAMA}/props").mock(return_value=httpx.Response(
        200, json={"chat_template": own}))
    path = asyncio.run(tool_template(LLAMA, "k3y"))
    assert path == TEMPLATES / shipped and path.is_file()
    request = props.calls.last.request
    assert request.headers["Authorization"] == "Bearer k3y"
    assert request.extensions["timeout"] == httpx.Timeout(30).as_dict()


@respx.mock
@pytest.mark.req("EV-02")
@pytest.mark.parametrize("answer", [
    httpx.Response(200, json={"chat_template": "{{ '[INST]' }}"}), httpx.Response(200, json={}),
    httpx.Response(503, json={"chat_template": "<|im_start|>"}),
])
def test_a_model_of_another_chat_format_gets_no_guessed_tool_template(
        answer: httpx.Response) -> None:
    respx.get(f"{LLAMA}/props").mock(return_value=answer)
    with pytest.raises(ConfigRefused, match="no tool template is shipped for it"):
        asyncio.run(tool_template(LLAMA, "k3y"))


class _FakeSmolagents:
    """What :func:`labfy_ref.eval.baseline._run` uses of smolagents, recorded."""

    class Tool:
        pass

    def __init__(self, answer: Any, steps: list[Any]) -> None:
        self.models: list[dict[str, Any]] = []
        self.agents: list[dict[str, Any]] = []
        fake = self

        def model(**kwargs: Any) -> Any:
            fake.models.append(kwargs)
            return "the model"

        class Agent:
            def __init__(self, **kwargs: Any) -> None:
                fake.agents.append(kwargs)
                self.memory = types.SimpleNamespace(steps=steps)

            def run(self, message: str) -> Any:
                if isinstance(answer, Exception):
                    raise answer
                return answer

        self.OpenAIServerModel = model
        self.ToolCallingAgent = self.CodeAgent = Agent


def _baseline_run(fake: _FakeSmolagents, baseline: str = "smolagents") -> BaselineTurn:
    gateway: Any = types.SimpleNamespace(offerable=lambda context, approvals: [])
    return _run(fake, baseline, base_url=LLAMA, api_key="k3y", model_id="tiny",
                gateway=gateway, context=CallContext(PermissionMode.READ_ONLY),
                message="How many species?", limits=RuntimeLimits(max_rounds=7))


def _step(total: int | None) -> Any:
    usage = None if total is None else types.SimpleNamespace(total_tokens=total)
    return types.SimpleNamespace(token_usage=usage)


@pytest.mark.req("EV-02")
def test_the_framework_runs_on_our_llama_server_with_our_sampling_and_step_limit() -> None:
    """Same server, same greedy sampling, no hidden retry of a failed model call (a retry
    would run a step twice behind the step limit), the runtime's round budget as steps."""
    fake = _FakeSmolagents("Forty-one species.", [_step(40), _step(None), object(), _step(2)])
    turn = _baseline_run(fake)
    assert fake.models == [{"model_id": "tiny", "api_base": f"{LLAMA}/v1", "api_key": "k3y",
                            "client_kwargs": {"timeout": 600.0, "max_retries": 0},
                            "temperature": 0.0, "max_tokens": STEP_TOKENS}]
    assert fake.agents == [{"tools": [], "model": "the model", "max_steps": 7,
                            "verbosity_level": 0}]
    assert turn.as_turn() == {"tool_calls": [], "final_text": "Forty-one species.",
                              "state": "COMPLETED", "rounds": 3, "_tokens": 42}
    assert turn.error is None
    assert _baseline_run(_FakeSmolagents(None, [])).final_text == "", "no answer: no text"


@pytest.mark.req("EV-02")
def test_a_framework_failure_is_the_turns_outcome_with_its_first_200_characters() -> None:
    why = "the model said nothing a tool call could be read from. " * 10
    turn = _baseline_run(_FakeSmolagents(RuntimeError(why), [_step(9)]), "smolagents-code")
    assert turn.state == "FAILED" and (turn.rounds, turn.tokens) == (1, 9)
    assert turn.error == f"RuntimeError: {why[:200]}"
    assert len(turn.error) == len("RuntimeError: ") + 200


@pytest.mark.req("EV-02")
def test_the_baselines_sit_side_by_side_with_labfy_ref_in_one_record(tmp_path: Path) -> None:
    """Each agent on a model is one entry of the one record: a baseline run adds its entry
    beside labfy-ref's (and the control's), and a rerun of it replaces only its own."""
    directory = tmp_path / "report"
    written = directory / "eval-record.json"
    assert write_entry(directory, _entry("a" * 64, agent="labfy-ref")) == written
    for agent in ("smolagents-ToolCallingAgent", "random-control", "smolagents-CodeAgent"):
        assert write_entry(directory, _entry("a" * 64, agent=agent)) == written
    write_entry(directory, _entry("a" * 64, agent="smolagents-ToolCallingAgent", passed=False))
    write_entry(directory, _entry("b" * 64, agent="smolagents-ToolCallingAgent"))
    record = read_record(directory)
    assert record is not None
    seen = sorted((e["model"]["sha256"][0], e["agent"], e["passed"]) for e in record["entries"])
    assert seen == [("a", "labfy-ref", 1), ("a", "random-control", 1),
                    ("a", "smolagents-CodeAgent", 1), ("a", "smolagents-ToolCallingAgent", 0),
                    ("b", "smolagents-ToolCallingAgent", 1)]
    assert sorted(p.name for p in directory.iterdir()) == ["eval-record.json"]

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

import json
from pathlib import Path
from typing import Any

import pytest

from labfy_ref.errors import ConfigRefused
from labfy_ref.eval.baseline import (
    BASELINES,
    TEMPLATES,
    TOOL_TEMPLATES,
    BaselineTurn,
    _inputs,
    agent_name,
    smolagents_module,
)
from labfy_ref.gateway import AgentGateway
from labfy_ref.gateway.policy import CallContext
from labfy_ref.modes import PermissionMode
from labfy_ref.tools import default_catalog
from labfy_ref.workspace import init_workspace
from qualification.eval_cli import eval_refusal

#: The input types smolagents accepts (its AUTHORIZED_TYPES, less the media ones).
SMOLAGENTS_TYPES = {"string", "boolean", "integer", "number", "array", "object", "any", "null"}


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
    from labfy_ref.protocol.narrowing import RULES  # noqa: PLC0415
    from qualification.eval.__main__ import variants  # noqa: PLC0415

    assert variants(["--quick"]) == [["--quick"]], "without --matrix: the run asked for"
    runs = variants(["--runs", "3", "--matrix"])
    into = ["--record", "qualification/eval"]  # the record that is committed
    assert runs[0] == ["--runs", "3", *into], "labfy-ref itself first"
    assert ["--runs", "3", *into, "--control"] in runs
    for name in BASELINES:
        assert ["--runs", "3", *into, "--baseline", name] in runs
    for rule in RULES:
        assert ["--runs", "3", *into, "--ablate", rule] in runs
    assert len(runs) == 2 + len(BASELINES) + len(RULES)

"""BR-19: several providers, each keeping its identity; one that is down is said, never replaced.

``serve --providers FILE`` adds named providers beside the runtime's own (``local`` from
``--agent-*``, or ``demo``), which stays first and default. Every model of every provider is
listed as ``engine:<provider>:<model>`` (percent-encoded: any name round-trips), on the engine
API and on the OpenAI face; a provider that does not answer is listed with
``available: false`` and its reason. A session or a chat request naming a model is answered
by that provider alone — one that is down fails ``MODEL_UNAVAILABLE`` and no other is asked —
and the usage ledger keeps the provider of every call.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from fake_provider import Answer, FakeProvider, Scenario
from labfy_ref.config import RawOptions, load_providers, resolve
from labfy_ref.errors import ConfigRefused
from labfy_ref.netutil import free_port
from labfy_ref.server.serve import build_state
from labfy_ref.workspace import open_workspace
from qualification.conftest import ProviderFactory, ServerFactory, local_agent
from qualification.harness import LAUNCH_CODE, ApiClient, TurnReader

ODD = "org/Model:Q4 ü %2F"  # a model name that must round-trip through the route


def _final(text: str) -> str:
    return json.dumps({"type": "final", "text": text})


def _file(tmp_path: Path, body: str, name: str = "providers.toml") -> Path:
    path = tmp_path / name
    path.write_text(body, "utf-8")
    return path


def _three(tmp_path: Path, provider_factory: ProviderFactory,
           server_factory: ServerFactory) -> tuple[Any, FakeProvider, FakeProvider, ApiClient]:
    alpha = provider_factory(Scenario("alpha", (Answer(content=_final("from alpha")),),
                                      when_exhausted="repeat_last"))
    beta = provider_factory(Scenario("beta", (Answer(content=_final("from beta")),),
                                     models=("fake-model", ODD), when_exhausted="repeat_last"))
    providers = _file(tmp_path, f'''
[[provider]]
name = "beta"
endpoint = "{beta.base_url}"
model = "fake-model"

[[provider]]
name = "gone"
endpoint = "http://127.0.0.1:{free_port()}"
model = "absent"
''')
    server = server_factory(tmp_path / "specimen", bridge=True, providers=str(providers),
                            **local_agent(alpha.base_url))
    return server, alpha, beta, server.client()


def _turn(client: ApiClient, model: str, text: str = "hello") -> list[dict[str, Any]]:
    made = client.post("/api/cordis/sessions", {"model": model})
    assert made.status_code == 201, made.text
    return TurnReader(client, made.json()["session"]["id"], text).join()


def _said(chunks: list[dict[str, Any]]) -> str:
    return "".join(c["text"] for c in chunks if c["type"] == "text")


@pytest.mark.req("BR-19", "BR-10")
def test_every_model_of_every_provider_is_listed_a_down_one_with_its_reason(
        specimen: Path, tmp_path: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    assert specimen == tmp_path / "specimen"
    _, _, _, client = _three(tmp_path, provider_factory, server_factory)
    listed = client.get("/api/cordis/models").json()
    assert listed["default"] == "engine:local:fake-model", "the runtime's own stays the default"
    up = [(m["id"], m["provider"], m["model"]) for m in listed["models"] if m["available"]]
    assert up == [("engine:local:fake-model", "local", "fake-model"),
                  ("engine:beta:fake-model", "beta", "fake-model"),
                  ("engine:beta:org%2FModel%3AQ4%20%C3%BC%20%252F", "beta", ODD)]
    [down] = [m for m in listed["models"] if not m["available"]]
    assert (down["id"], down["provider"]) == ("engine:gone:absent", "gone")
    assert "connection" in down["reason"], down
    status = client.get("/api/v1/agent-runtime/status").json()["bridge"]
    assert status["providers"] == ["local", "beta", "gone"]

    face = client.get("/api/cordis/v1/models").json()["data"]
    ids = [m["id"] for m in face]
    assert ids[:4] == ["engine:local:fake-model", "engine:beta:fake-model",
                       "engine:beta:org%2FModel%3AQ4%20%C3%BC%20%252F", "engine:gone:absent"]
    assert {m["id"]: m["owned_by"] for m in face}["engine:gone:absent"] == "gone"
    assert "direct:beta:fake-model" in ids and not any(i.startswith("direct:gone") for i in ids)


@pytest.mark.req("BR-19", "BR-14")
def test_a_session_is_answered_by_its_provider_alone_and_the_ledger_keeps_it(
        specimen: Path, tmp_path: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    _, alpha, beta, client = _three(tmp_path, provider_factory, server_factory)
    assert _said(_turn(client, "engine:beta:org%2FModel%3AQ4%20%C3%BC%20%252F")) == "from beta"
    asked = [r.json()["model"] for r in beta.chat_requests()]
    assert asked == [ODD], "the name arrived as it is"
    assert alpha.chat_requests() == [], "the default provider was never asked"

    down = _turn(client, "engine:gone:absent")
    assert [c["type"] for c in down] == ["error", "done"]
    assert down[0]["code"] == "MODEL_UNAVAILABLE", down
    assert alpha.chat_requests() == [] and len(beta.chat_requests()) == 1, "never replaced"

    assert _said(_turn(client, "engine:local:fake-model")) == "from alpha"
    turn = client.start_turn("the runtime")  # the runtime keeps the runtime's own provider
    assert client.wait_state(turn["id"], {"COMPLETED"})["final_text"] == "from alpha"
    assert len(beta.chat_requests()) == 1

    records = client.get("/api/cordis/usage", params={"limit": 50}).json()["usage"]
    models = {r["model"] for r in records}
    assert {"engine:beta:org%2FModel%3AQ4%20%C3%BC%20%252F", "engine:local:fake-model",
            "engine:gone:absent"} <= models, models
    assert next(r for r in records if r["model"] == "engine:gone:absent")["outcome"] == (
        "MODEL_UNAVAILABLE")


@pytest.mark.req("BR-19", "BR-13")
def test_a_chat_client_names_any_providers_model_and_a_down_one_is_no_other(
        specimen: Path, tmp_path: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    server, alpha, beta, _ = _three(tmp_path, provider_factory, server_factory)
    with httpx.Client(base_url=f"{server.url}/api/cordis/v1", trust_env=False, timeout=30,
                      headers={"Authorization": f"Bearer {LAUNCH_CODE}"}) as http:
        answer = http.post("/chat/completions", json={
            "model": "engine:beta:fake-model", "messages": [{"role": "user", "content": "hi"}]})
        assert answer.status_code == 200, answer.text
        assert answer.json()["choices"][0]["message"]["content"] == "from beta"
        down = http.post("/chat/completions", json={
            "model": "engine:gone:absent", "messages": [{"role": "user", "content": "hi"}]})
        assert down.status_code == 503 and down.json()["error"]["code"] == "MODEL_UNAVAILABLE"
        unknown = http.post("/chat/completions", json={
            "model": "engine:nobody:fake-model", "messages": [{"role": "user", "content": "hi"}]})
        assert unknown.status_code == 404, unknown.text
    assert alpha.chat_requests() == [] and len(beta.chat_requests()) == 1


@pytest.mark.req("BR-19")
def test_a_session_naming_no_configured_provider_is_refused(
        specimen: Path, tmp_path: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    _, _, _, client = _three(tmp_path, provider_factory, server_factory)
    refused = client.post("/api/cordis/sessions", {"model": "engine:nobody:m"})
    assert (refused.status_code, refused.json()["error"]["code"]) == (422, "MODEL_NOT_FOUND")


# -- the file ---------------------------------------------------------------------------

_GOOD = '''
[[provider]]
name = "lab-2.b_x"
endpoint = "http://[::1]:9001"
model = "qwen"
timeout_seconds = 30
slots = 2
'''


@pytest.mark.req("BR-19")
def test_a_providers_file_resolves_once_and_check_config_shows_it(
        tmp_path: Path, specimen: Path) -> None:
    # the runtime's LABFY_AGENT_* never fill a provider's blanks
    environ = {"LABFY_AGENT_MODEL_ID": "leaked", "LABFY_AGENT_MODEL_ENDPOINT": "http://127.0.0.1:1"}
    [provider] = load_providers(_file(tmp_path, _GOOD), environ)
    assert provider.name == "lab-2.b_x"
    assert (str(provider.agent.endpoint), provider.agent.model_id) == ("http://[::1]:9001", "qwen")
    assert (provider.agent.timeout_seconds, provider.agent.slots) == (30, 2)
    given = str(tmp_path / "providers.toml")
    config = resolve(RawOptions(workspace=str(specimen), providers=given), {})
    assert config.as_json()["server"]["providers"] == [{
        "name": "lab-2.b_x", "endpoint": "http://[::1]:9001", "model": "qwen",
        "timeout_seconds": 30.0, "slots": 2, "supervised": None}]
    state = build_state(config, open_workspace(specimen), 0, "code")
    try:
        assert len(state.provider_clients) == 1
    finally:
        state.store.close()


@pytest.mark.req("BR-19")
@pytest.mark.parametrize(("body", "says"), [
    ("", "[[provider]] tables only, at least one"),
    ('title = "x"\n[[provider]]\nname = "a"\nendpoint = "http://127.0.0.1:9"\nmodel = "m"\n',
     "[[provider]] tables only"),
    ('[[provider]]\nname = "a"\nendpoint = "http://127.0.0.1:9"\nmodel = "m"\nkey = "s"\n',
     "only the keys"),
    ('[[provider]]\nname = "Big"\nendpoint = "http://127.0.0.1:9"\nmodel = "m"\n', "name must"),
    ('[[provider]]\nname = "local"\nendpoint = "http://127.0.0.1:9"\nmodel = "m"\n',
     "the runtime's own"),
    ('[[provider]]\nname = "demo"\nendpoint = "http://127.0.0.1:9"\nmodel = "m"\n',
     "the runtime's own"),
    ('[[provider]]\nname = "a"\nendpoint = "http://127.0.0.1:9"\nmodel = "m"\n' * 2,
     "taken by another"),
    ('[[provider]]\nname = "a"\nmodel = "m"\n', "exactly one of endpoint"),
    ('[[provider]]\nname = "a"\nendpoint = "http://127.0.0.1:9"\n', "needs its model"),
    ('[[provider]]\nname = "a"\nendpoint = "http://example.com:9"\nmodel = "m"\n',
     "provider a:"),
    ('[[provider]]\nname = "a"\nendpoint = "http://127.0.0.1:9"\nmodel = 5\n',
     "is a string"),
    ('[[provider]]\nname = "a"\nendpoint = "http://127.0.0.1:9"\nmodel = "m"\nslots = true\n',
     "slots must be a number"),
    ('[[provider]]\nname = "a"\nendpoint = "http://127.0.0.1:9"\nmodel = "m"\nslots = 99\n',
     "provider a:"),
    ("[[provider]\n", "unreadable (TOMLDecodeError)"),
    ("".join(f'[[provider]]\nname = "p{i}"\nendpoint = "http://127.0.0.1:9"\nmodel = "m"\n'
             for i in range(17)), "at most 16"),
])
def test_a_bad_providers_file_is_refused_naming_what(tmp_path: Path, body: str,
                                                     says: str) -> None:
    with pytest.raises(ConfigRefused) as refused:
        load_providers(_file(tmp_path, body), {})
    assert refused.value.message.startswith("--providers: ")
    assert says in refused.value.message, refused.value.message


@pytest.mark.req("BR-19")
def test_a_providers_file_that_is_not_text_or_too_large_is_refused(tmp_path: Path) -> None:
    for body, says in ((b"\xff\xfe[[provider]]", "UnicodeDecodeError"),
                       (b"#" * (64 * 1024 + 1), "larger than")):
        path = tmp_path / "p.toml"
        path.write_bytes(body)
        with pytest.raises(ConfigRefused) as refused:
            load_providers(path, {})
        assert says in refused.value.message
    with pytest.raises(ConfigRefused) as refused:
        resolve(RawOptions(providers=str(tmp_path)), {})
    assert refused.value.message == "--providers: a directory, not a file"

"""BR-20, BR-13, BR-17: the chat clients people use, through their everyday calls.

The official ``openai`` SDK, ``langchain-openai`` and the ``llm`` CLI (all from
PyPI, the test extra) against a bridge server whose engine answers with the
scripted fake provider: what each client does by default must find nothing
missing — usage where it reads it, ``models.retrieve``, structured output,
tools bound with ``tool_choice`` auto, a continued conversation.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fake_provider import Answer, FakeProvider, Scenario
from qualification.conftest import ProviderFactory, ServerFactory, local_agent
from qualification.harness import LAUNCH_CODE, LiveServer

MODEL = "engine:local:fake-model"
DIRECT = "direct:local:fake-model"
WORDS = "Lavender drew 62 visits."
SHAPED = '{"garden": "Lavender", "visits": 62}'


def _final(text: str) -> str:
    return json.dumps({"type": "final", "text": text})


@dataclasses.dataclass
class Served:
    server: LiveServer
    provider: FakeProvider

    @property
    def base_url(self) -> str:
        return f"{self.server.url}/api/cordis/v1"


@pytest.fixture
def served(specimen: Path, provider_factory: ProviderFactory,
           server_factory: ServerFactory) -> Served:
    """A bridge server on the fake provider: every agent round answers WORDS, every direct
    call (titles, shaping) SHAPED."""
    provider = provider_factory(Scenario(name="clients", answers=(Answer(content=_final(WORDS)),),
                                         direct=(Answer(content=SHAPED),),
                                         when_exhausted="repeat_last"))
    server = server_factory(specimen, bridge=True, **local_agent(provider.base_url))
    return Served(server, provider)


@pytest.mark.req("BR-20", "BR-13")
def test_the_openai_sdk_everyday_calls(served: Served) -> None:
    import openai  # noqa: PLC0415

    with openai.OpenAI(base_url=served.base_url, api_key=LAUNCH_CODE, max_retries=0,
                       timeout=30) as client:
        assert client.models.retrieve(MODEL).id == MODEL
        whole = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Which garden?"}],
            temperature=0.2, max_tokens=64)
        assert whole.choices[0].message.content == WORDS and whole.usage is not None
        parts = list(client.chat.completions.create(
            model=MODEL, stream=True, stream_options={"include_usage": True},
            messages=[{"role": "user", "content": "Which garden?"}]))
        assert "".join(p.choices[0].delta.content or "" for p in parts if p.choices) == WORDS
        assert parts[-1].usage is not None and parts[-1].usage.total_tokens > 0
        title = client.chat.completions.create(
            model=DIRECT, messages=[{"role": "user", "content": "### Task: a title"}])
        assert title.choices[0].message.content == SHAPED


@pytest.mark.req("BR-20", "BR-13")
def test_langchain_invoke_stream_batch_structured_output_and_bound_tools(
        served: Served) -> None:
    from langchain_core.tools import tool  # noqa: PLC0415
    from langchain_openai import ChatOpenAI  # noqa: PLC0415
    from pydantic import BaseModel  # noqa: PLC0415

    class Garden(BaseModel):
        garden: str
        visits: int

    @tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return "sunny"

    chat = ChatOpenAI(model=MODEL, base_url=served.base_url, api_key=LAUNCH_CODE,  # type: ignore[arg-type]
                      max_retries=0, timeout=30)
    assert chat.invoke("Which garden?").content == WORDS
    assert "".join(str(piece.content) for piece in chat.stream("Which garden?")) == WORDS
    assert [m.content for m in chat.batch(["Which garden?", "And the busiest?"])] == [WORDS] * 2
    assert chat.with_structured_output(Garden).invoke("Which garden?") == Garden(
        garden="Lavender", visits=62)
    bound = chat.bind_tools([get_weather], tool_choice="auto").invoke("Which garden?")
    assert bound.content == WORDS and not getattr(bound, "tool_calls", None), \
        "the engine answers; it never asks the client to run a function"
    usage = chat.invoke("Which garden?").usage_metadata
    assert usage is not None and usage["total_tokens"] > 0


@pytest.fixture
def llm_home(tmp_path: Path, served: Served) -> dict[str, str]:
    """An ``llm`` user directory with the engine as an OpenAI-compatible model."""
    home = tmp_path / "llm"
    home.mkdir()
    (home / "extra-openai-models.yaml").write_text(
        f"- model_id: labfy\n  model_name: {MODEL}\n  api_base: {served.base_url}\n"
        "  api_key_name: labfy\n  supports_schema: true\n", "utf-8")
    return {**os.environ, "LLM_USER_PATH": str(home)}


def _llm(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "llm", *args, "--key", LAUNCH_CODE],
                          capture_output=True, text=True, timeout=60, check=False, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.req("BR-20", "BR-13")
def test_the_llm_cli_prompts_without_streaming_and_continues_a_conversation(
        served: Served, llm_home: dict[str, str]) -> None:
    assert _llm(llm_home, "-m", "labfy", "--no-stream", "Which garden?") == WORDS
    assert _llm(llm_home, "-m", "labfy", "Which garden?") == WORDS
    assert _llm(llm_home, "-c", "--no-stream", "And the busiest?") == WORDS
    continued = served.provider.chat_requests()[-1].json()["messages"]
    said = [m["content"] for m in continued if m["role"] in ("user", "assistant")]
    assert "Which garden?" in said[-3] and said[-1].endswith("And the busiest?"), \
        "the conversation so far was sent as the transcript"
    shaped = _llm(llm_home, "-m", "labfy", "--no-stream", "-o", "json_object", "1",
                  "Which garden, as JSON?")
    assert json.loads(shaped) == json.loads(SHAPED)

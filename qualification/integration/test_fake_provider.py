"""FP-01, FP-02: the fake provider is a real, standalone, OpenAI-compatible server."""

from __future__ import annotations

import concurrent.futures
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from fake_provider import Answer, Scenario, ScenarioError, ToolCallReply
from fake_provider.scenario import TRICKLE_BYTES
from labfy_ref.netutil import RESERVED_PORTS
from qualification.conftest import SCENARIOS, ProviderFactory, scenario
from qualification.harness import wait_until


def _openai_client(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url + "/v1", api_key="unused", max_retries=0)


@pytest.mark.req("FP-01")
def test_the_official_openai_client_reads_plain_and_streamed_completions(
        provider_factory: ProviderFactory) -> None:
    provider = provider_factory(scenario("read-then-final"))
    client = _openai_client(provider.base_url)
    plain = client.chat.completions.create(model="fake-model",
                                           messages=[{"role": "user", "content": "hi"}])
    assert json.loads(plain.choices[0].message.content or "")["type"] == "tool_call"
    assert plain.choices[0].finish_reason == "stop"
    stream = client.chat.completions.create(model="fake-model", stream=True,
                                            messages=[{"role": "user", "content": "hi"}])
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert json.loads(text)["text"].endswith("𝄞")
    models = client.models.list()
    assert [m.id for m in models.data] == ["fake-model"]
    client.close()


@pytest.mark.req("FP-02")
def test_every_request_is_recorded_with_headers_body_and_addresses(
        provider_factory: ProviderFactory) -> None:
    provider = provider_factory(Scenario.replies('{"type":"final","text":"x"}'))
    with httpx.Client(trust_env=False) as http:
        http.post(provider.base_url + "/v1/chat/completions",
                  json={"model": "m", "messages": []}, headers={"X-Probe": "1"})
    [request] = provider.requests
    assert request.header("x-probe") == "1"
    assert request.json() == {"model": "m", "messages": []}
    assert request.local == ("127.0.0.1", provider.port)


@pytest.mark.req("FP-02")
def test_the_control_api_swaps_the_scenario_and_lists_requests(
        provider_factory: ProviderFactory) -> None:
    provider = provider_factory(Scenario.replies())
    document = json.loads((SCENARIOS / "loading-then-ready.json").read_text())
    with httpx.Client(trust_env=False, base_url=provider.base_url) as http:
        assert http.post("/_fake/scenario", json=document).status_code == 200
        assert http.get("/health").status_code == 503
        log = http.get("/_fake/requests").json()["requests"]
        assert [r["path"] for r in log] == ["/health"]
        assert http.post("/_fake/scenario", json={"bogus": 1}).status_code == 400


@pytest.mark.req("FP-02")
def test_runs_standalone_with_a_ready_file(tmp_path: Path) -> None:
    ready = tmp_path / "ready.json"
    process = subprocess.Popen(
        [sys.executable, "-m", "fake_provider", "--scenario",
         str(SCENARIOS / "read-then-final.json"), "--ready-file", str(ready)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: ready.exists() or process.poll() is not None, timeout=10)
        info = json.loads(ready.read_text())
        assert info["pid"] == process.pid and info["url"].startswith("http://127.0.0.1:")
        assert int(info["port"]) >= 1024, "no --port: a free port the system picks"
        with httpx.Client(trust_env=False) as http:
            answer = http.post(info["url"] + "/v1/chat/completions",
                               json={"model": "fake-model", "messages": []})
        assert answer.json()["object"] == "chat.completion"
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
        if process.stdout:
            process.stdout.close()
        if process.stderr:
            process.stderr.close()


@pytest.mark.req("FP-02", "MC-04")
def test_standalone_refuses_the_reserved_port_and_bad_scenarios(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"answers": [{"contnet": "typo"}]}')
    reserved = str(min(RESERVED_PORTS))
    slow = str(SCENARIOS / "slow.json")
    for args in (["--scenario", slow, "--port", reserved], ["--scenario", slow, "--port", "-1"],
                 ["--scenario", slow, "--port", "65536"], ["--scenario", str(bad)], []):
        done = subprocess.run([sys.executable, "-m", "fake_provider", *args],
                              capture_output=True, text=True, timeout=30, check=False,
                              env={**os.environ})
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith("fake_provider: ") or (
            not args and "--scenario" in done.stderr), done.stderr
        assert "Traceback" not in done.stderr


@pytest.mark.req("FP-02", "AV-04")
def test_trickle_delay_sends_a_plain_body_a_few_bytes_at_a_time(
        provider_factory: ProviderFactory) -> None:
    delay = 0.02
    provider = provider_factory(Scenario(name="trickle", answers=(
        Answer(content='{"type":"final","text":"slowly"}', trickle_delay=delay),
        Answer(raw_body='{"raw": true}', status=418, trickle_delay=delay))))
    with httpx.Client(trust_env=False, base_url=provider.base_url) as http:
        started = time.monotonic()
        with http.stream("POST", "/v1/chat/completions",
                         json={"model": "fake-model", "messages": []}) as response:
            pieces = list(response.iter_raw())
        elapsed = time.monotonic() - started
        raw = http.post("/v1/chat/completions", json={"model": "fake-model", "messages": []})
    body = b"".join(pieces)
    assert response.headers["content-length"] == str(len(body))
    message = json.loads(body)["choices"][0]["message"]
    assert message["content"] == '{"type":"final","text":"slowly"}'
    # The pauses between pieces are a lower bound on the time the body takes.
    assert elapsed >= (math.ceil(len(body) / TRICKLE_BYTES) - 1) * delay
    assert len(pieces) >= 2
    assert (raw.status_code, raw.json()) == (418, {"raw": True})


@pytest.mark.req("FP-01", "FP-02")
def test_the_official_openai_client_reads_a_trickled_completion(
        provider_factory: ProviderFactory) -> None:
    provider = provider_factory(Scenario.replies('{"type":"final","text":"drip"}',
                                                 trickle_delay=0.001))
    client = _openai_client(provider.base_url)
    plain = client.chat.completions.create(model="fake-model",
                                           messages=[{"role": "user", "content": "hi"}])
    assert plain.choices[0].message.content == '{"type":"final","text":"drip"}'
    client.close()


@pytest.mark.req("FP-02")
@pytest.mark.parametrize("delay", [-1, float("nan")])
def test_a_negative_or_nan_trickle_delay_is_refused(delay: float) -> None:
    with pytest.raises(ScenarioError, match="trickle_delay"):
        Scenario.from_json({"answers": [{"content": "x", "trickle_delay": delay}]})


@pytest.mark.req("FP-01")
def test_the_official_openai_client_reads_tool_calls_plain_and_streamed(
        provider_factory: ProviderFactory) -> None:
    scripted = scenario("openai-tool-calls")
    provider = provider_factory(Scenario(name="twice", answers=scripted.answers * 2))
    client = _openai_client(provider.base_url)
    messages: list[Any] = [{"role": "user", "content": "hi"}]
    plain = [client.chat.completions.create(model="fake-model", messages=messages)
             for _ in scripted.answers]
    first, final = (reply.choices[0] for reply in plain)
    assert first.finish_reason == final.finish_reason == "tool_calls"
    assert first.message.content is None
    [listing] = first.message.tool_calls or []
    assert listing.type == "function" and listing.id.startswith("call_0_")
    assert (listing.function.name, json.loads(listing.function.arguments)) == ("list_objects", {})
    [answer] = final.message.tool_calls or []
    assert answer.type == "function" and answer.id == "call_final"
    assert answer.function.name == "final_answer"
    assert json.loads(answer.function.arguments)["answer"].endswith("𝄞")

    # Streamed: each call's id and name in one delta, then its arguments in pieces.
    for expected in scripted.answers:
        calls: dict[int, dict[str, str]] = {}
        finish = None
        for chunk in client.chat.completions.create(model="fake-model", messages=messages,
                                                    stream=True):
            choice = chunk.choices[0]
            finish = choice.finish_reason or finish
            for delta in choice.delta.tool_calls or []:
                call = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
                call["id"] += delta.id or ""
                if delta.function is not None:
                    call["name"] += delta.function.name or ""
                    call["arguments"] += delta.function.arguments or ""
        [(expected_call)] = expected.tool_calls
        assert finish == "tool_calls"
        assert list(calls) == [0]
        assert calls[0]["name"] == expected_call.name
        assert calls[0]["arguments"] == expected_call.arguments
        assert calls[0]["id"] == (expected_call.id or calls[0]["id"]) and calls[0]["id"]
    client.close()


@pytest.mark.req("FP-02")
def test_tool_call_answers_are_checked_and_keep_string_arguments_verbatim() -> None:
    answer = Answer.from_json({"tool_calls": [{"name": "f", "arguments": '{"broken": '}]})
    assert answer.tool_calls == (ToolCallReply("f", '{"broken": '),)
    assert answer.finish_reason == "tool_calls"
    assert Answer.from_json({"tool_calls": [{"name": "f"}],
                             "finish_reason": "stop"}).finish_reason == "stop"
    bad: dict[str, Any]
    for bad in ({"tool_calls": {"name": "f"}}, {"tool_calls": [{"arguments": {}}]},
                {"tool_calls": [{"name": "f", "id": 3}]},
                {"tool_calls": [{"name": "f", "function": {}}]}, {"tool_calls": ["f"]}):
        with pytest.raises(ScenarioError, match=r"tool.call"):
            Answer.from_json(bad)


@pytest.mark.req("FP-01", "FP-02")
def test_the_connection_that_served_a_request_has_tcp_nodelay(
        provider_factory: ProviderFactory) -> None:
    # Nothing is timed: the provider reads the option back from the socket it served on.
    provider = provider_factory(Scenario.replies('{"type":"final","text":"x"}'))
    with httpx.Client(trust_env=False, base_url=provider.base_url) as http:
        assert http.get("/health").status_code == 200
        assert http.post("/v1/chat/completions",
                         json={"model": "fake-model", "messages": []}).status_code == 200
        log = http.get("/_fake/requests").json()["requests"]
    assert [r.nodelay for r in provider.requests] == [True, True]
    assert [r["nodelay"] for r in log] == [True, True]


def _chat(http: httpx.Client, content: str) -> httpx.Response:
    return http.post("/v1/chat/completions",
                     json={"model": "fake-model",
                           "messages": [{"role": "user", "content": content}]})


@pytest.mark.req("FP-02")
def test_prompt_tokens_are_four_character_pieces_and_only_the_shared_prefix_is_cached(
        provider_factory: ProviderFactory) -> None:
    # "<|user|>" + 39 characters + "\n" is 48 characters: 12 tokens of 4.
    provider = provider_factory(Scenario.replies("one two", "three", "four", "five"))
    same = "a" * 39
    differs = same[:4] + "b" + same[5:]  # the 13th character: the 4th token
    with httpx.Client(trust_env=False, base_url=provider.base_url) as http:
        usages = [_chat(http, content).json()["usage"] for content in (same, same, differs)]
    assert [u["prompt_tokens"] for u in usages] == [12, 12, 12]
    assert [u["prompt_tokens_details"]["cached_tokens"] for u in usages] == [0, 11, 3], \
        "nothing cached at first; never the last token; only the tokens before a difference"
    assert usages[0]["completion_tokens"] == 2 and usages[0]["total_tokens"] == 14


@pytest.mark.req("FP-02", "QR-03")
def test_a_keyed_script_is_chosen_by_the_last_known_marker_of_the_conversation() -> None:
    # Keyed scripts are how the conformance kit's provider serves every test at once.
    keyed = Scenario.from_json({"answers": [{"content": "plain"}],
                                "keyed": {"alpha": [{"content": "A {nonce}"}],
                                          "beta": [{"content": "B {nonce}"}]}})
    messages = [{"role": "user", "content": "[[kit:alpha:N1]]"},
                {"role": "assistant", "content": None},
                {"role": "user", "content": "[[kit:beta:N2]] then [[kit:nobody:N3]]"}]
    assert keyed.conversation(messages) == ("beta", "N2"), "an unknown key never wins"
    assert keyed.conversation(messages[:1]) == ("alpha", "N1")
    assert keyed.conversation([{"role": "user", "content": "no marker"}]) is None
    for not_a_list in ("not a list", 5, None, {"role": "user"}):
        assert keyed.conversation(not_a_list) is None
    answer = keyed.keyed_answer("beta", "N2", 0)
    assert answer is not None and answer.content == "B N2"
    assert keyed.keyed_answer("beta", "N2", 1) is None
    assert keyed.keyed_answer("beta", "N2", 5) is None, "past the end, however far"


@pytest.mark.req("FP-01")
def test_an_exhausted_scenario_answers_500_with_an_openai_error(
        provider_factory: ProviderFactory) -> None:
    provider = provider_factory(Scenario.replies("only"))
    with httpx.Client(trust_env=False, base_url=provider.base_url) as http:
        assert _chat(http, "hi").status_code == 200
        exhausted = _chat(http, "hi")
    assert exhausted.status_code == 500
    assert exhausted.json() == {"error": {"code": 500, "message": "scenario exhausted"}}


@pytest.mark.req("FP-02")
def test_setting_a_scenario_rewinds_it_to_its_first_answer_and_health_check(
        provider_factory: ProviderFactory) -> None:
    provider = provider_factory(Scenario.replies("first", "second"))
    loading = Scenario.from_json({"answers": [{"content": "third"}, {"content": "fourth"}],
                                  "loading_health_checks": 1})
    with httpx.Client(trust_env=False, base_url=provider.base_url) as http:
        assert _chat(http, "hi").json()["choices"][0]["message"]["content"] == "first"
        provider.set_scenario(loading)
        assert http.get("/health").status_code == 503
        assert http.get("/health").status_code == 200
        assert _chat(http, "hi").json()["choices"][0]["message"]["content"] == "third"
        provider.set_scenario(loading)
        assert http.get("/health").status_code == 503, "the health checks count again"


@pytest.mark.req("FP-02")
@pytest.mark.parametrize("value", [-1, "2", True, 1.5, None])
def test_a_loading_count_that_is_not_a_count_is_a_bad_scenario(value: object) -> None:
    with pytest.raises(ScenarioError, match="loading_health_checks"):
        Scenario.from_json({"answers": [], "loading_health_checks": value})
    assert Scenario.from_json({"answers": []}).loading_health_checks == 0


@pytest.mark.req("FP-02")
def test_standalone_accepts_the_highest_port(tmp_path: Path) -> None:
    # 65535 is a port: it is served, or (taken by someone else) refused by the system,
    # never refused as out of range.
    ready = tmp_path / "ready.json"
    process = subprocess.Popen(
        [sys.executable, "-m", "fake_provider", "--scenario", str(SCENARIOS / "slow.json"),
         "--port", "65535", "--ready-file", str(ready)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: ready.exists() or process.poll() is not None, timeout=10)
        if ready.exists():
            assert json.loads(ready.read_text())["port"] == 65535
        else:
            assert "not allowed" not in (process.stderr.read() if process.stderr else "")
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=10)
        if process.stdout:
            process.stdout.close()
        if process.stderr:
            process.stderr.close()


@pytest.mark.req("FP-02")
@pytest.mark.parametrize("slots", [1, 2, 0])
def test_slots_bound_how_many_answers_are_written_at_once(
        provider_factory: ProviderFactory, slots: int) -> None:
    """``slots: 1`` is one llama-server slot: six callers at once are answered one after the
    other; ``slots: 0`` (the default) answers them all at once. Counted by the provider."""
    provider = provider_factory(Scenario.replies())
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}
    with httpx.Client(trust_env=False, base_url=provider.base_url, timeout=30) as http:
        assert http.post("/_fake/scenario", json={
            "answers": [{"content": "ok", "delay": 0.5}], "when_exhausted": "repeat_last",
            "slots": slots}).status_code == 200
        assert http.post("/_fake/reset").status_code == 200
        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            replies = list(pool.map(lambda _: httpx.post(
                provider.base_url + "/v1/chat/completions", json=body, timeout=30,
                trust_env=False).status_code, range(6)))
        assert replies == [200] * 6
        most = http.get("/_fake/requests").json()["most_answering"]
    # with any number of slots six threads are answered at once (each sleeps 0.5 s, so they
    # overlap unless held); never more than the slots said
    assert most == (slots if slots else 6)


@pytest.mark.req("FP-02")
@pytest.mark.parametrize("value", [-1, "2", True, 1.5, None, 1025])
def test_slots_that_are_not_a_count_are_a_bad_scenario(value: object) -> None:
    with pytest.raises(ScenarioError, match="slots"):
        Scenario.from_json({"answers": [], "slots": value})
    assert Scenario.from_json({"answers": []}).slots == 0
    assert Scenario.from_json({"answers": [], "slots": 1024}).slots == 1024


@pytest.mark.req("FP-01")
def test_health_answers_llama_servers_loading_error_then_ok(
        provider_factory: ProviderFactory) -> None:
    """While the model loads, ``/health`` answers as llama-server does: 503 with an
    OpenAI-shaped error whose code is the status; then 200 ``{"status": "ok"}``."""
    provider = provider_factory(Scenario(name="loading", answers=(), loading_health_checks=1))
    with httpx.Client(trust_env=False, base_url=provider.base_url) as http:
        loading = http.get("/health")
        ready = http.get("/health")
    assert loading.status_code == 503
    assert loading.json() == {"error": {"code": 503, "message": "Loading model",
                                        "type": "unavailable_error"}}
    assert (ready.status_code, ready.json()) == (200, {"status": "ok"})


@pytest.mark.req("FP-01")
@pytest.mark.parametrize("path", ["/v1/nothing", "/v1/models/extra", "/v1/modelsx", "/v2",
                                  "/x", "/"])
def test_only_the_exact_models_path_lists_models_other_paths_are_404(
        provider_factory: ProviderFactory, path: str) -> None:
    """``GET /v1/models`` lists the scenario's models; any other path, even one that shares
    its beginning or sorts after it, is llama-server's 404 error."""
    provider = provider_factory(Scenario(name="models", answers=(), models=("a", "b")))
    with httpx.Client(trust_env=False, base_url=provider.base_url) as http:
        listed = http.get("/v1/models")
        other = http.get(path)
    assert listed.status_code == 200
    assert [m["id"] for m in listed.json()["data"]] == ["a", "b"]
    assert other.status_code == 404
    assert other.json() == {"error": {"code": 404, "message": "File Not Found"}}


@pytest.mark.req("FP-01")
def test_an_oversize_plain_answer_is_a_whole_completion_padded_to_the_size(
        provider_factory: ProviderFactory) -> None:
    """``oversize_bytes`` pads a plain completion with a ``padding`` field of that many
    characters: the body is at least that large and still one valid completion."""
    size = 100_000
    provider = provider_factory(Scenario.replies("big", oversize_bytes=size))
    with httpx.Client(trust_env=False, base_url=provider.base_url) as http:
        answer = _chat(http, "hi")
    assert answer.status_code == 200
    assert len(answer.content) >= size
    document = answer.json()
    assert document["padding"] == "x" * size
    assert document["choices"][0]["message"]["content"] == "big"


@pytest.mark.req("FP-01")
def test_an_oversize_stream_is_padded_with_comment_lines_and_still_ends_with_done(
        provider_factory: ProviderFactory) -> None:
    """A streamed ``oversize_bytes`` answer pads with SSE comment lines (``: x…``, 16 KiB of
    filler each) until the stream is that large, then ends with ``data: [DONE]``; the
    official client skips the comments and reads the content."""
    size = 40_000
    provider = provider_factory(Scenario(name="oversize", answers=(
        Answer(content="streamed", oversize_bytes=size),) * 2))
    request = {"model": "fake-model", "stream": True,
               "messages": [{"role": "user", "content": "hi"}]}
    with (httpx.Client(trust_env=False, base_url=provider.base_url) as http,
          http.stream("POST", "/v1/chat/completions", json=request) as response):
        body = b"".join(response.iter_bytes())
    assert response.status_code == 200
    assert len(body) >= size
    lines = body.split(b"\n")
    comments = [line for line in lines if line.startswith(b":")]
    assert comments and all(line == b": " + b"x" * 16384 for line in comments)
    assert body.endswith(b"data: [DONE]\n\n")
    client = _openai_client(provider.base_url)
    stream = client.chat.completions.create(model="fake-model", stream=True,
                                            messages=[{"role": "user", "content": "hi"}])
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == "streamed"
    client.close()


@pytest.mark.req("FP-02", "QR-03")
def test_each_keyed_conversation_walks_its_own_script_over_http(
        provider_factory: ProviderFactory) -> None:
    """Over HTTP, every (key, nonce) conversation starts at the first answer of its script
    and moves one answer per request, whatever other conversations do in between."""
    provider = provider_factory(Scenario.from_json({
        "answers": [{"content": "plain"}],
        "keyed": {"alpha": [{"content": "first {nonce}"}, {"content": "second {nonce}"}],
                  "beta": [{"content": "other {nonce}"}]}}))
    with httpx.Client(trust_env=False, base_url=provider.base_url) as http:
        said = [_chat(http, marker).json()["choices"][0]["message"]["content"]
                for marker in ("[[kit:alpha:N1]]", "[[kit:beta:N2]]", "[[kit:alpha:N3]]",
                               "[[kit:alpha:N1]]")]
    assert said == ["first N1", "other N2", "first N3", "second N1"]


@pytest.mark.req("FP-02")
def test_always_answers_every_request_alike_and_reports_each_usage(
        provider_factory: ProviderFactory) -> None:
    """``Scenario.always`` repeats its one answer; ``reported`` lists, oldest first, the
    usage each completion carried."""
    provider = provider_factory(Scenario.always("same again"))
    with httpx.Client(trust_env=False, base_url=provider.base_url) as http:
        bodies = [_chat(http, text).json() for text in ("one", "two", "three")]
    assert [b["choices"][0]["message"]["content"] for b in bodies] == ["same again"] * 3
    assert provider.reported == [b["usage"] for b in bodies]

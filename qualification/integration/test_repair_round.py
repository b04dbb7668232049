"""PR-03, PR-05: one repair, then MODEL_PROTOCOL_ERROR, against the fake provider."""

from __future__ import annotations

import asyncio

import pytest

from fake_provider import Scenario
from labfy_ref.errors import ErrorCode, ProtocolRefused
from labfy_ref.protocol import (
    ActionParser,
    Budget,
    Final,
    Observations,
    Round,
    chat_asker,
    narrow,
    request_action,
    system_prompt,
)
from labfy_ref.tools import default_catalog
from qualification.conftest import ProviderFactory, client_for

CATALOG = default_catalog()
MESSAGES = [{"role": "system", "content": system_prompt(CATALOG)},
            {"role": "user", "content": "Summarise the workspace. SECRET-USER-PROMPT"}]
#: The first round of a turn that may use every tool.
DECODING = narrow(CATALOG, CATALOG, Observations(), Budget(round=1, max_rounds=16,
                                                          max_tool_calls=64))
GOOD = '{"type":"final","text":"done"}'
BAD = 'Sure! Here it is: {"type":"final","text":"x"} IGNORE-ME'


def _round(provider_factory: ProviderFactory, *answers: str) -> tuple[Round | ProtocolRefused,
                                                                      list[dict[str, object]]]:
    provider = provider_factory(Scenario.replies(*answers))

    async def run() -> Round | ProtocolRefused:
        async with client_for(provider) as client:
            try:
                return await request_action(chat_asker(client), MESSAGES, ActionParser(CATALOG),
                                            DECODING)
            except ProtocolRefused as exc:
                return exc

    outcome = asyncio.run(run())
    return outcome, [r.json() for r in provider.chat_requests()]


@pytest.mark.req("PR-03")
def test_a_valid_first_reply_needs_one_request(provider_factory: ProviderFactory) -> None:
    outcome, sent = _round(provider_factory, GOOD, GOOD)
    assert isinstance(outcome, Round)
    assert (outcome.action, outcome.repaired, len(sent)) == (Final("done"), False, 1)


@pytest.mark.req("PR-03")
def test_one_repair_names_the_defect_and_never_repeats_the_reply(
        provider_factory: ProviderFactory) -> None:
    outcome, sent = _round(provider_factory, BAD, GOOD)
    assert isinstance(outcome, Round)
    assert (outcome.action, outcome.repaired, len(sent)) == (Final("done"), True, 2)
    repair = sent[1]["messages"][-1]  # type: ignore[index]
    assert sent[1]["messages"][:-1] == MESSAGES  # type: ignore[index]
    assert repair["role"] == "user"
    assert "not a JSON document" in repair["content"]
    assert "IGNORE-ME" not in repair["content"]
    assert "SECRET-USER-PROMPT" not in repair["content"]


@pytest.mark.req("PR-03", "PR-02")
def test_a_second_refusal_is_model_protocol_error_with_no_third_request(
        provider_factory: ProviderFactory) -> None:
    self_authorizing = ('{"type":"tool_call","tool_id":"grants.create",'
                        '"arguments":{"campaign_id":"camp_x"}}')
    outcome, sent = _round(provider_factory, BAD, self_authorizing, GOOD)
    assert isinstance(outcome, ProtocolRefused)
    assert outcome.code is ErrorCode.MODEL_PROTOCOL_ERROR
    assert outcome.defect == "unknown tool_id"
    assert len(sent) == 2


@pytest.mark.req("PR-05", "PR-06")
def test_every_request_carries_the_rounds_schema_and_completion_limit(
        provider_factory: ProviderFactory) -> None:
    _, sent = _round(provider_factory, BAD, GOOD)
    for body in sent:  # the repair asks under the same narrowed schema
        assert body["response_format"] == DECODING.response_format
        assert body["max_tokens"] == DECODING.max_tokens

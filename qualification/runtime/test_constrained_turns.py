"""PR-06 through the whole loop: a model that honours ``response_format`` concludes.

The model here is any model that keeps to the round's schema, as a
grammar-constrained llama-server does: each reply is drawn at random (seeded by
Hypothesis) from the schema the runtime sent. Whatever it picks, the turn never calls an id it
did not see, never repeats an answered call, never runs out of a budget, and
ends (after the human grant, if it prepared research) with a final answer.
"""

from __future__ import annotations

import asyncio
import json
import random
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labfy_ref.gateway import AgentGateway
from labfy_ref.protocol import Usage
from labfy_ref.runtime import AgentRuntime, RuntimeLimits
from labfy_ref.runtime.states import TurnState
from labfy_ref.runtime.turn import Turn
from labfy_ref.workspace import init_workspace
from qualification.strategies import random_instance


class _Reply:
    def __init__(self, content: str) -> None:
        self.content = content
        self.usage = Usage(prompt_tokens=10, completion_tokens=len(content), cached_tokens=0)


class ConstrainedModel:
    """Answers every round with an action drawn from the schema it was sent."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.limits: list[int | None] = []

    async def chat(self, messages: Sequence[Mapping[str, Any]], *,
                   response_format: Mapping[str, Any] | None = None,
                   max_tokens: int | None = None) -> _Reply:
        assert response_format is not None
        self.limits.append(max_tokens)
        action = random_instance(response_format["json_schema"]["schema"], self.rng)
        return _Reply(json.dumps(action, ensure_ascii=False))


async def _settle(turn: Turn) -> None:
    for _ in range(2000):
        if turn.state.terminal or turn.state is TurnState.AUTHORIZATION_REQUIRED:
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"turn stuck in {turn.state}")


@pytest.mark.req("PR-06", "RT-03", "GW-05")
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32), max_rounds=st.integers(2, 8),
       conclude_after=st.integers(0, 5))
def test_a_constrained_model_always_concludes_without_refusals(
        seed: int, max_rounds: int, conclude_after: int) -> None:
    limits = RuntimeLimits(max_rounds=max_rounds, conclude_after=conclude_after)
    model = ConstrainedModel(random.Random(seed))
    with tempfile.TemporaryDirectory() as tmp:
        workspace = init_workspace(Path(tmp) / "w", specimen=True)
        store = workspace.open_store()
        gateway = AgentGateway(workspace, store)
        runtime = AgentRuntime(model, gateway, label="constrained", limits=limits)

        async def run() -> Turn:
            runtime.start()
            turn, _ = runtime.start_turn("What does this workspace hold?")
            await _settle(turn)
            if turn.state is TurnState.AUTHORIZATION_REQUIRED:
                assert turn.authorization is not None
                gateway.grant(turn.authorization["campaign_id"])
                runtime.resume(turn.id)
                await _settle(turn)
            await runtime.close()
            return turn

        try:
            turn = asyncio.run(run())
        finally:
            store.close()
    assert turn.state is TurnState.COMPLETED, (turn.state, turn.error)
    refused = [c for c in turn.tool_calls if c.status != "ok"]
    assert not refused, [(c.tool_id, c.result["data"]) for c in refused]
    assert all(limit is not None and limit > 0 for limit in model.limits)
    keys = [(c.tool_id, json.dumps(c.arguments, sort_keys=True)) for c in turn.tool_calls]
    assert len(keys) == len(set(keys)), "no call was made twice"

"""The one factory of the agent's model: the demo agent, a client of a configured endpoint,
or our own supervised llama-server — for ``serve``, the bridge and the Work worker alike.

Each surface used to build its client itself (four places); the limits, the label and the
ownership of the connection pool are decided here once.
"""

from __future__ import annotations

import dataclasses

from labfy_ref.config import AgentConfig
from labfy_ref.model import ClientLimits, LocalModelClient
from labfy_ref.model.client import SlotQueue
from labfy_ref.model.demo import DEMO_LABEL, DemoAgent
from labfy_ref.model.supervised import SupervisedLlama
from labfy_ref.modes import MAX_WAITING_CALLS, AgentMode
from labfy_ref.protocol import ChatModel


@dataclasses.dataclass(frozen=True, slots=True)
class AgentModel:
    """What answers turns, the client behind it (None for the demo agent) and its label."""

    model: ChatModel
    client: LocalModelClient | SupervisedLlama | None
    label: str


def endpoint_client(agent: AgentConfig) -> LocalModelClient:
    """The client of the configured endpoint (``--agent-endpoint``), with its timeout."""
    assert agent.endpoint is not None
    assert agent.model_id is not None
    return LocalModelClient(agent.endpoint, agent.model_id,
                            limits=ClientLimits.with_timeout(agent.timeout_seconds),
                            slots=SlotQueue(agent.slots, MAX_WAITING_CALLS))


def open_agent_model(agent: AgentConfig, *,
                     supervised: SupervisedLlama | None = None) -> AgentModel:
    """The agent's model: ``supervised`` when the server runs its own llama-server (SM-07),
    else the configured endpoint's client, else the deterministic demo agent."""
    if supervised is not None:
        return AgentModel(supervised, supervised,
                          f"Local agent · {supervised.model} (supervised llama-server)")
    if agent.mode is AgentMode.LOCAL_MODEL:
        client = endpoint_client(agent)
        return AgentModel(client, client, f"Local agent · {agent.model_id}")
    return AgentModel(DemoAgent(), None, DEMO_LABEL)

"""Qualified model routes (BR-10): ``engine:<provider>:<model>``, percent-encoded.

A model keeps its provider identity wherever it is named: in a session's
settings, in ``/api/cordis/models`` and in the usage ledger (BR-14), whether
the runtime or the engine made the call. Any model name round-trips.
"""

from __future__ import annotations

import dataclasses
from urllib.parse import quote, unquote

from labfy_ref.errors import ErrorCode, RuntimeRefused
from labfy_ref.model.demo import DemoAgent
from labfy_ref.protocol import ChatModel

ROUTE_PREFIX = "engine"


@dataclasses.dataclass(frozen=True, slots=True)
class ModelRoute:
    """A provider and a model id, qualified as ``engine:<provider>:<model>``."""

    provider: str
    model: str

    def __str__(self) -> str:
        return f"{ROUTE_PREFIX}:{quote(self.provider, safe='')}:{quote(self.model, safe='')}"

    @classmethod
    def parse(cls, text: str) -> ModelRoute:
        """Inverse of ``str()``; refuses anything not of that form."""
        parts = text.split(":")
        if len(parts) != 3 or parts[0] != ROUTE_PREFIX or not parts[1] or not parts[2]:
            raise RuntimeRefused(ErrorCode.MODEL_NOT_FOUND,
                                 "a model is written engine:<provider>:<model>")
        return cls(unquote(parts[1]), unquote(parts[2]))


def model_route(model: ChatModel) -> ModelRoute:
    """The qualified route (BR-10) of an agent's model: the demo, or a local server's model."""
    if isinstance(model, DemoAgent):
        return ModelRoute("demo", model.model)
    name = getattr(model, "model", None)  # LocalModelClient, SupervisedLlama: the served id
    return ModelRoute("local", name if isinstance(name, str) and name else type(model).__name__)

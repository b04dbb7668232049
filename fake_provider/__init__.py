"""A scriptable fake OpenAI-compatible provider: a real HTTP server on loopback."""

from fake_provider.scenario import Answer, Scenario, ScenarioError, ToolCallReply
from fake_provider.server import FakeProvider, RecordedRequest

__all__ = ["Answer", "FakeProvider", "RecordedRequest", "Scenario", "ScenarioError",
           "ToolCallReply"]

"""The policy gateway and the services behind it (SPEC §5)."""

from labfy_ref.gateway.files import ConfinedFiles
from labfy_ref.gateway.gateway import TRUST, AgentGateway, ToolOutcome
from labfy_ref.gateway.policy import CallContext, Verdict, decide

__all__ = ["TRUST", "AgentGateway", "CallContext", "ConfinedFiles", "ToolOutcome", "Verdict",
           "decide"]

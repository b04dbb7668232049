"""The model boundary: endpoint validation and the loopback-only client (SPEC §3)."""

from labfy_ref.model.client import (
    Availability,
    ChatReply,
    ClientLimits,
    LocalModelClient,
    StreamDelta,
    Usage,
)
from labfy_ref.model.endpoint import LoopbackHost, ModelEndpoint, ModelPath, parse_endpoint

__all__ = [
    "Availability",
    "ChatReply",
    "ClientLimits",
    "LocalModelClient",
    "LoopbackHost",
    "ModelEndpoint",
    "ModelPath",
    "StreamDelta",
    "Usage",
    "parse_endpoint",
]

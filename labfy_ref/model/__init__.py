"""The model boundary: endpoint validation, the loopback-only client (SPEC §3) and the
supervised llama-server: its binary, CPU variants, resources and process (SPEC §11)."""

from labfy_ref.model.binary import BinaryIdentity, identify, locate_llama_server
from labfy_ref.model.client import (
    Availability,
    ChatReply,
    ClientLimits,
    LocalModelClient,
    Sampling,
    StreamDelta,
)
from labfy_ref.model.endpoint import LoopbackHost, ModelEndpoint, ModelPath, parse_endpoint
from labfy_ref.model.governor import ResourceReport, check_resources
from labfy_ref.model.supervisor import LaunchOptions, LocalModelSupervisor, SupervisorState
from labfy_ref.model.variants import (
    available_variants,
    conservative_variant,
    loaded_variant,
    stage_variant,
)
from labfy_ref.protocol.exchange import Usage

__all__ = [
    "Availability",
    "BinaryIdentity",
    "ChatReply",
    "ClientLimits",
    "LaunchOptions",
    "LocalModelClient",
    "LocalModelSupervisor",
    "LoopbackHost",
    "ModelEndpoint",
    "ModelPath",
    "ResourceReport",
    "Sampling",
    "StreamDelta",
    "SupervisorState",
    "Usage",
    "available_variants",
    "check_resources",
    "conservative_variant",
    "identify",
    "loaded_variant",
    "locate_llama_server",
    "parse_endpoint",
    "stage_variant",
]

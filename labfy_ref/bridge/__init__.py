"""The engine bridge: contract, stream handle, JSONL sessions, reference engine (SPEC §10)."""

from labfy_ref.bridge.contract import Engine
from labfy_ref.bridge.engine import ReferenceEngine
from labfy_ref.bridge.llm import ModelRoute
from labfy_ref.bridge.ndjson import NdjsonDecoder, encode_line
from labfy_ref.bridge.service import Bridge, BridgeState
from labfy_ref.bridge.store.logs import JsonlSessionStore
from labfy_ref.bridge.stream import StreamHandle
from labfy_ref.errors import SessionInvalid

__all__ = ["Bridge", "BridgeState", "Engine", "JsonlSessionStore", "ModelRoute",
           "NdjsonDecoder", "ReferenceEngine", "SessionInvalid", "StreamHandle", "encode_line"]

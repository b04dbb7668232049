"""JSON as labfy-ref writes it: one encoder for what a model is sent, one canonical form.

A leaf: it imports nothing of labfy-ref, so every floor above the ground may use it.
"""

from __future__ import annotations

import json
from typing import Any


def encode_json(value: Any) -> str:
    """JSON as sent to a model: UTF-8 text kept as is, no NaN (one encoder everywhere)."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


def canonical(value: Any) -> str:
    """Canonical JSON text (sorted keys, no spaces): identical calls compare equal."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

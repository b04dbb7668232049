"""The pages a user reads: the README and ``docs/*.md``, and their runnable blocks (DOC-01)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGES = (REPO / "README.md", *sorted((REPO / "docs").glob("*.md")))
#: Every page's text, in one string (the README first).
TEXT = "\n".join(page.read_text("utf-8") for page in PAGES)
_MARKED = re.compile(r"<!-- ([a-z-]+):start -->\n```(\w+)\n(.*?)```\n<!-- \1:end -->", re.S)


def blocks() -> dict[str, str]:
    """``name -> code`` of every marked block of every page."""
    found: dict[str, str] = {}
    for name, _language, code in _MARKED.findall(TEXT):
        assert name not in found, f"two blocks are named {name}"
        found[name] = code
    return found


def block(name: str) -> str:
    """The code of the block marked ``name`` (``<!-- name:start -->`` … ``:end -->``)."""
    code = blocks().get(name)
    assert code is not None, f"docs block {name} is missing"
    return code

"""The pages a user reads: the README and ``docs/*.md``, and their runnable blocks (DOC-01)."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGES = (REPO / "README.md", *sorted((REPO / "docs").glob("*.md")))
#: Every page's text, in one string (the README first).
TEXT = "\n".join(page.read_text("utf-8") for page in PAGES)
#: A marked block, at the margin or indented alike (inside a list item, say).
_MARKED = re.compile(r"^([ \t]*)<!-- ([a-z-]+):start -->\n\1```(\w+)\n(.*?)^\1```\n"
                     r"\1<!-- \2:end -->", re.S | re.M)


def blocks() -> dict[str, str]:
    """``name -> code`` of every marked block of every page."""
    found: dict[str, str] = {}
    for _indent, name, _language, code in _MARKED.findall(TEXT):
        assert name not in found, f"two blocks are named {name}"
        found[name] = textwrap.dedent(code)
    return found


def block(name: str) -> str:
    """The code of the block marked ``name`` (``<!-- name:start -->`` … ``:end -->``)."""
    code = blocks().get(name)
    assert code is not None, f"docs block {name} is missing"
    return code

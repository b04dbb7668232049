"""DOC-01, UI-09: the README's page-hooks table is the pages' hooks, no more and no fewer.

Every hook the table names is spelled in the pages' sources, every hook a page sets as a
literal (``data-testid="…"`` in HTML, ``dataset.testid = "…"`` in JS) is in the table, and
the SPEC §15 column is exactly the specification's list.
"""

from __future__ import annotations

import re

import pytest

from qualification.docs.pages import REPO

UI = REPO / "labfy_ref" / "ui"
_TABLE = re.compile(r"<!-- page-hooks:start -->\n(.*?)<!-- page-hooks:end -->", re.S)
_HOOK = re.compile(r"`([a-z0-9-]+)`")
_SET = re.compile(r'data-testid="([a-z0-9-]+)"|testid = "([a-z0-9-]+)"')
SPEC = REPO.parent / "shared" / "SPEC.md"


def _table() -> dict[str, tuple[set[str], set[str]]]:
    found = _TABLE.search((REPO / "README.md").read_text("utf-8"))
    assert found, "the README has no page-hooks table"
    rows: dict[str, tuple[set[str], set[str]]] = {}
    for line in found.group(1).splitlines()[2:]:
        page, pinned, added = (cell.strip() for cell in line.strip("|").split("|"))
        rows[page.strip("`")] = (set(_HOOK.findall(pinned)), set(_HOOK.findall(added)))
    return rows


def _sources() -> str:
    return "\n".join(path.read_text("utf-8") for path in sorted(UI.iterdir())
                     if path.suffix in {".html", ".js"})


@pytest.mark.req("DOC-01", "UI-09")
def test_every_hook_in_the_table_is_in_the_pages_and_every_literal_hook_in_the_table() -> None:
    rows = _table()
    assert set(rows) == {"/", "/cordis"}
    named = set().union(*(pinned | added for pinned, added in rows.values()))
    sources = _sources()
    for hook in sorted(named):
        assert f'"{hook}"' in sources, f"the table names {hook}, which no page sets"
    literal = {a or b for a, b in _SET.findall(sources)}
    assert literal <= named, f"hooks missing from the table: {sorted(literal - named)}"


@pytest.mark.req("DOC-01")
def test_the_pinned_column_is_the_specifications_list() -> None:
    if not SPEC.exists():
        pytest.skip(f"{SPEC} is absent: the pinned column cannot be compared")
    text = " ".join(SPEC.read_text("utf-8").split())
    start = text.index("Page hooks (`data-testid`")
    runtime, engine = text[start:text.index("Work (`labfy-ref work show", start)].split(
        "Engine page `/cordis`:")
    rows = _table()
    assert rows["/"][0] == set(_HOOK.findall(runtime)) - {"data-testid", "data-turn-id",
                                                          "data-state", "data-tool-id",
                                                          "data-status", "/"}
    assert rows["/cordis"][0] == set(_HOOK.findall(engine)) - {"data-session-id",
                                                               "data-call-id", "/cordis"}

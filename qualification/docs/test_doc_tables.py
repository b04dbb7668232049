"""DOC-01, UI-09, RT-03: the tables the docs hold equal what they describe.

The README's page-hooks table is the pages' hooks, no more and no fewer, and docs/api.md's
runtime-limits table is what the status reports.

Every hook the table names is spelled in the pages' sources, every hook a page sets as a
literal (``data-testid="…"`` in HTML, ``dataset.testid = "…"`` in JS) is in the table, and
the SPEC §15 column is exactly the specification's list.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from qualification.conftest import ServerFactory
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


_LIMITS = re.compile(r"<!-- runtime-limits:start -->\n(.*?)<!-- runtime-limits:end -->", re.S)


@pytest.mark.req("DOC-01", "RT-03")
def test_the_documented_limits_are_the_ones_the_status_reports(
        specimen: Path, server_factory: ServerFactory) -> None:
    found = _LIMITS.search((REPO / "docs" / "api.md").read_text("utf-8"))
    assert found, "docs/api.md has no runtime-limits table"
    documented = {}
    for line in found.group(1).splitlines()[2:]:
        name, default, _when = (cell.strip() for cell in line.strip("|").split("|"))
        documented[name.strip("`")] = int(default)
    limits = server_factory(specimen).client().get("/api/v1/agent-runtime/status").json()[
        "limits"]
    reported = {k: v for k, v in limits.items() if isinstance(v, int) and k.startswith("max_")}
    assert documented == reported

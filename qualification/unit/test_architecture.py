"""The layout's facts, recomputed from the code (ARC-01, ARC-02).

Floors are read from ``docs/architecture.md``; imports are every ``import`` statement of
``labfy_ref``, at module level, under ``TYPE_CHECKING`` or inside a function.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from labfy_ref.tools import default_catalog
from labfy_ref.tools.catalog import CATALOG_RESOURCE, REQUIRED_TRAITS

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "labfy_ref"
FLOORS_DOC = ROOT / "docs" / "architecture.md"
#: Agents and their predicates: they *are* the callers of tools, by name.
AGENTS = ("labfy_ref/model/demo.py", "labfy_ref/smoke/", "labfy_ref/eval/")


def floors() -> dict[str, int]:
    """``module prefix -> floor`` from the table of docs/architecture.md."""
    table: dict[str, int] = {}
    for line in FLOORS_DOC.read_text("utf-8").splitlines():
        row = re.match(r"\|\s*(\d+)\s*\|([^|]*)\|", line)
        if row:
            for name in re.findall(r"`(labfy_ref[\w.]*)`", row.group(2)):
                assert name not in table, f"{name} is on two floors"
                table[name] = int(row.group(1))
    return table


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """The labfy_ref modules ``name`` imports (the longest known prefix of each)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            targets = [f"{base}.{alias.name}" for alias in node.names] or [base]
        for target in targets:
            found = target
            while found and found not in known:
                found = found.rpartition(".")[0]
            if found.startswith("labfy_ref") and found != name:
                yield found


def floor_of(name: str, table: dict[str, int]) -> int:
    prefix = name
    while prefix not in table:
        assert "." in prefix, f"{name} stands on no floor of docs/architecture.md"
        prefix = prefix.rpartition(".")[0]
    return table[prefix]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: set(imports(name, path, known)) for name, path in known.items()}


def climbs(edges: dict[str, set[str]], table: dict[str, int]) -> list[str]:
    """Every import of a module on a higher floor."""
    return [f"{a} (floor {floor_of(a, table)}) imports {b} (floor {floor_of(b, table)})"
            for a, targets in sorted(edges.items()) for b in sorted(targets)
            if floor_of(b, table) > floor_of(a, table)]


@pytest.mark.req("ARC-01")
def test_no_module_imports_one_on_a_higher_floor_and_none_import_each_other() -> None:
    edges = graph()
    assert climbs(edges, floors()) == []
    assert cycles(edges) == []


@pytest.mark.req("ARC-01")
def test_the_walk_sees_every_kind_of_import_and_every_cycle() -> None:
    """The checker itself: a cycle made only of a type import and a relative import is
    found, and a module no floor names is refused, so the facts above cannot pass empty."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    edges = graph()
    assert "labfy_ref.protocol.narrowing" in edges["labfy_ref.runtime.driver"]
    assert "labfy_ref.protocol.action" in edges["labfy_ref.protocol"]  # relative or not
    table = floors()
    assert floor_of("labfy_ref.work.store.url", table) < floor_of("labfy_ref.config", table) \
        < floor_of("labfy_ref.work.run.worker", table)
    assert climbs({"labfy_ref.gateway.policy": {"labfy_ref.config"}}, table) == [
        "labfy_ref.gateway.policy (floor 3) imports labfy_ref.config (floor 5)"]
    with pytest.raises(AssertionError, match="no floor"):
        floor_of("elsewhere.module", table)
    assert set(edges) >= {"labfy_ref", "labfy_ref.modes", "labfy_ref.cli.main"}


def _tool_literals(path: Path, tool_ids: frozenset[str]) -> list[str]:
    return sorted({node.value for node in ast.walk(ast.parse(path.read_text("utf-8")))
                   if isinstance(node, ast.Constant) and node.value in tool_ids})


@pytest.mark.req("ARC-02", "PR-07")
def test_no_module_outside_the_catalog_spells_a_tool_id() -> None:
    """A new tool is one catalog entry plus one service method: no gateway map, no
    ``if tool_id == …`` in the narrowing, the driver, the bridge or Work. The agents
    (the demo agent, the smoke and eval scenarios and predicates) call tools by name."""
    tool_ids = frozenset(default_catalog())
    spelled = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if relative.startswith("labfy_ref/tools/") or relative.startswith(AGENTS):
            continue
        found = _tool_literals(path, tool_ids)
        if found:
            spelled[relative] = found
    assert spelled == {}
    demo = PACKAGE / "model" / "demo.py"
    assert _tool_literals(demo, tool_ids), "the check finds a tool id where one is"


@pytest.mark.req("ARC-02", "GW-02")
def test_every_tool_states_its_traits_and_a_service_runs_each_one(
        specimen: Path) -> None:
    """Every catalog entry names its service method and its crash recovery (a missing
    trait fails the catalog's load), and the gateway finds each method."""
    import json  # noqa: PLC0415

    from labfy_ref.gateway import AgentGateway  # noqa: PLC0415
    from labfy_ref.tools.catalog import Recovery, Traits  # noqa: PLC0415
    from labfy_ref.workspace import open_workspace  # noqa: PLC0415

    document = json.loads((PACKAGE / "tools" / "schemas" / CATALOG_RESOURCE)
                          .read_text("utf-8"))
    for entry in document["tools"]:
        assert set(REQUIRED_TRAITS) <= set(entry["traits"]), entry["tool_id"]
        for name in REQUIRED_TRAITS:
            partial = {k: v for k, v in entry["traits"].items() if k != name}
            with pytest.raises(KeyError, match="missing tool traits"):
                Traits.from_json(partial)
    workspace = open_workspace(specimen)
    store = workspace.open_store()
    try:
        gateway = AgentGateway(workspace, store)
        for spec in gateway.catalog.values():
            assert gateway.availability(spec) == (True, None), spec.tool_id
            assert gateway.service_method(spec) is not None
            if spec.traits.recovery is Recovery.MADE:  # Work asks it what a crash made
                assert gateway.service_method(spec, "_made_since") is not None, spec.tool_id
    finally:
        store.close()


@pytest.mark.req("ARC-03", "MC-05")
def test_settings_are_resolved_once_in_config_and_the_model_is_built_once() -> None:
    """No module but config.py and the CLI reads parsed arguments (``getattr(args``, an
    ``argparse`` import), and only assemble.py builds a client of the agent's endpoint."""
    readers, builders = [], []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        source = path.read_text("utf-8")
        if not relative.startswith(("labfy_ref/cli/", "labfy_ref/config.py")):
            tree = ast.parse(source)
            imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                        for alias in node.names}
            if "getattr(args" in source or "argparse" in imported:
                readers.append(relative)
        if "LocalModelClient(" in source and relative not in (
                "labfy_ref/assemble.py", "labfy_ref/model/client.py",
                "labfy_ref/model/supervised.py"):  # the client of our own llama-server
            builders.append(relative)
    assert readers == []
    assert builders == []


#: The modules that may speak sqlite3 itself: the workspace store's connection factory,
#: its upgrade's backup (SQLite's backup API), and the bridge's session index, a cache
#: rebuilt from the logs that has no schema to migrate.
SQLITE_DIRECT = ("labfy_ref/bridge/store/index.py", "labfy_ref/workspace/engine.py",
                 "labfy_ref/workspace/migrations.py")


@pytest.mark.req("ARC-04", "WS-01", "WK-06")
def test_both_stores_migrate_through_one_runner_on_sqlalchemy_core() -> None:
    """The workspace store and Work's store each keep their policy (upgrade when asked,
    with a backup; on open) but share one mechanism: their steps are ``sqlcore.Migration``
    run by ``sqlcore.migrate``, and no other module defines a migration or speaks sqlite3."""
    from labfy_ref import sqlcore  # noqa: PLC0415
    from labfy_ref.work.store import migrations as work  # noqa: PLC0415
    from labfy_ref.workspace import migrations as workspace  # noqa: PLC0415

    for steps in (work.MIGRATIONS, workspace.MIGRATIONS):
        assert steps and all(type(step) is sqlcore.Migration for step in steps)
    runners, direct, defined = set(), [], []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        tree = ast.parse(path.read_text("utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "labfy_ref.sqlcore" and any(
                    alias.name == "migrate" for alias in node.names):
                runners.add(relative)
            if isinstance(node, ast.Import) and any(a.name == "sqlite3" for a in node.names):
                direct.append(relative)
            if isinstance(node, ast.ClassDef) and node.name == "Migration":
                defined.append(relative)
    assert runners == {"labfy_ref/work/store/migrations.py", "labfy_ref/workspace/migrations.py"}
    assert direct == sorted(SQLITE_DIRECT)
    assert defined == ["labfy_ref/sqlcore.py"]
    with pytest.raises(ValueError, match="numbered 2, 3"):
        sqlcore.newest((workspace.MIGRATIONS[-1],), first=2)
    # none at all is an error unless the store may have no step yet
    with pytest.raises(ValueError, match=r"numbered 1, 2, \.\.\. in order: \[\]"):
        sqlcore.newest((), first=1)
    assert sqlcore.newest((), first=1, empty=True) == 0

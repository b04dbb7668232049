"""Which requirement IDs a piece of code implements (QR-06): ``[code]`` of requirements.toml.

Each ID declares the code that implements it: whole modules (``labfy_ref/x/y.py``)
or named parts of them (``labfy_ref/x/y.py:function``, ``:Class``,
``:Class.method``); an ID no code implements says why in ``[code_none]``. A
mutation -- a deliberate fault replacing a function, or one operator mutant on
a line -- is *attributed* to every ID whose declared code contains it, and
counts as killed for an ID only when a test tagged with that ID kills it.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Mapping
from pathlib import Path

from labfy_ref.errors import ReportInvalid

#: A line span of a source file, both ends included (as ``ast`` numbers lines).
Span = tuple[int, int]


@dataclasses.dataclass(frozen=True, slots=True)
class CodeRef:
    """One declared piece of code: a module, or a qualified name inside it."""

    path: str  # POSIX, relative to the repository root
    name: str | None = None  # "function", "Class", "Class.method"; None: the whole module

    @classmethod
    def parse(cls, text: str) -> CodeRef:
        """``path.py`` or ``path.py:Qualified.name``; ReportInvalid when malformed."""
        path, _, name = text.partition(":")
        parts = path.split("/")
        if (not path.endswith(".py") or path.startswith("/") or "\\" in path
                or any(part in ("", ".", "..") for part in parts)):
            raise ReportInvalid(f"[code] entry {text!r}: not a relative path to a .py file")
        if name and not all(part.isidentifier() for part in name.split(".")):
            raise ReportInvalid(f"[code] entry {text!r}: {name!r} is not a qualified name")
        return cls(path, name or None)

    def covers(self, path: str, qualname: str | None) -> bool:
        """Does this declaration contain ``qualname`` of ``path`` (None: the whole module)?"""
        if path != self.path:
            return False
        if self.name is None:
            return True
        return qualname is not None and (qualname == self.name
                                         or qualname.startswith(self.name + "."))

    def __str__(self) -> str:
        return self.path if self.name is None else f"{self.path}:{self.name}"


def named_spans(source: str) -> dict[str, Span]:
    """Every function, method and class of ``source`` by qualified name, and every name a
    top-level assignment binds (a constant, a table), with its lines (a decorated
    definition starts at its first decorator)."""
    tree = ast.parse(source)
    found: dict[str, Span] = {}
    for statement in tree.body:
        if isinstance(statement, ast.Assign | ast.AnnAssign):
            targets = statement.targets if isinstance(statement, ast.Assign) \
                else [statement.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    found[target.id] = (statement.lineno,
                                        statement.end_lineno or statement.lineno)

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = prefix + child.name
                first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                found[name] = (first, child.end_lineno or child.lineno)
                walk(child, name + ".")

    walk(tree, "")
    return found


@dataclasses.dataclass(frozen=True, slots=True)
class CodeMap:
    """ID -> its declared code, and the IDs that declare none with their reasons."""

    refs: Mapping[str, tuple[CodeRef, ...]] = dataclasses.field(default_factory=dict)
    none: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_toml(cls, code: object, none: object, ids: Mapping[str, str]) -> CodeMap:
        """Checked ``[code]`` and ``[code_none]`` tables (either may be absent)."""
        code = {} if code is None else code
        none = {} if none is None else none
        if not isinstance(code, dict) or not all(
                isinstance(v, list) and v and all(isinstance(e, str) for e in v)
                for v in code.values()):
            raise ReportInvalid("[code] must map IDs to non-empty lists of code entries")
        if not isinstance(none, dict) or not all(
                isinstance(v, str) and v.strip() for v in none.values()):
            raise ReportInvalid("[code_none] must map IDs to a reason")
        unknown = sorted((set(code) | set(none)) - set(ids))
        if unknown:
            raise ReportInvalid(f"[code] or [code_none] names unknown IDs {unknown}")
        both = sorted(set(code) & set(none))
        if both:
            raise ReportInvalid(f"IDs {both} are in both [code] and [code_none]")
        return cls({req: tuple(CodeRef.parse(e) for e in entries)
                    for req, entries in code.items()}, dict(none))

    def modules(self) -> tuple[str, ...]:
        """Every module some ID's code lies in, sorted."""
        return tuple(sorted({ref.path for refs in self.refs.values() for ref in refs}))

    def ids_for(self, path: str, qualname: str | None) -> tuple[str, ...]:
        """The IDs whose code contains ``qualname`` of ``path`` (a replaced function)."""
        return tuple(sorted(req for req, refs in self.refs.items()
                            if any(ref.covers(path, qualname) for ref in refs)))

    def line_ids(self, path: str, source: str) -> list[tuple[Span, tuple[str, ...]]]:
        """The declared spans of ``path`` (its text: ``source``), each with its IDs."""
        spans = named_spans(source)
        whole = (1, max(1, len(source.splitlines())))
        out: list[tuple[Span, tuple[str, ...]]] = []
        for req, refs in sorted(self.refs.items()):
            for ref in refs:
                if ref.path != path:
                    continue
                if ref.name is not None and ref.name not in spans:
                    raise ReportInvalid(f"[code] of {req}: {ref} is not defined in {path}")
                out.append((whole if ref.name is None else spans[ref.name], (req,)))
        return out

    def ids_at(self, path: str, source: str, line: int) -> tuple[str, ...]:
        """The IDs whose declared code contains ``line`` of ``path``."""
        return tuple(sorted({req for (first, last), reqs in self.line_ids(path, source)
                             if first <= line <= last for req in reqs}))

    def missing(self, root: Path) -> list[str]:
        """Each declaration that names no file or no definition under ``root``."""
        problems = []
        for req, refs in sorted(self.refs.items()):
            for ref in refs:
                file = root / ref.path
                if not file.is_file():
                    problems.append(f"{req}: {ref}: no such file")
                elif ref.name is not None and ref.name not in named_spans(
                        file.read_text("utf-8")):
                    problems.append(f"{req}: {ref}: not defined there")
        return problems


def module_path(dotted: str, root: Path) -> str:
    """``labfy_ref.server.connections`` -> ``labfy_ref/server/connections.py`` (or a
    package's ``__init__.py``) as found under ``root``."""
    base = dotted.replace(".", "/")
    return f"{base}/__init__.py" if (root / base / "__init__.py").is_file() else f"{base}.py"

"""Which modules are mutated, and which tests are run against each mutant (QR-04).

Each entry names the test files that cover the module: only those run per
mutant, which keeps one run of a module to minutes on 2 cores. The requirement
IDs a module's mutants count toward are the IDs those test files name in their
``@pytest.mark.req`` marks, read from the files themselves so they cannot drift.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
from pathlib import Path

#: The repository root (this file is qualification/mutation/scope.py).
REPO = Path(__file__).resolve().parents[2]


@dataclasses.dataclass(frozen=True, slots=True)
class ModuleScope:
    """One module to mutate, the tests that cover it, and optionally which functions."""

    path: str  # relative to the repository root, POSIX
    tests: tuple[str, ...]
    #: Only mutants inside these functions, methods or classes are run (empty: the whole
    #: module).
    functions: tuple[str, ...] = ()
    #: Run one mutant in ``sample`` (a fixed choice by :func:`sampled`; 1: every mutant).
    sample: int = 1

    def describe(self) -> str:
        """What of the module is mutated, in words (the record's ``scope``)."""
        parts = [f"only {', '.join(self.functions)}" if self.functions else "whole module",
                 "annotations skipped (never evaluated)"]
        if self.sample > 1:
            parts.append(f"a fixed sample of 1 mutant in {self.sample}")
        return "; ".join(parts)

    def reqs(self, root: Path = REPO) -> tuple[str, ...]:
        """The requirement IDs named by this module's test files, sorted."""
        found: set[str] = set()
        for test in self.tests:
            found.update(req_ids(root / test))
        return tuple(sorted(found))


#: The ten security-critical modules of issue 13 item 4, cheapest first.
MODULES: tuple[ModuleScope, ...] = (
    ModuleScope("labfy_ref/protocol/strict_json.py", (
        "qualification/unit/test_strict_json_bounds.py",
        "qualification/unit/test_action_protocol.py",
        "qualification/unit/test_client_unit.py",
        "qualification/security/test_model_protocol_attacks.py")),
    ModuleScope("labfy_ref/bridge/ndjson.py", (
        "qualification/bridge/test_ndjson_bounds.py",
        "qualification/bridge/test_stream.py",
        "qualification/bridge/test_stream_hot_paths.py")),
    ModuleScope("labfy_ref/protocol/action.py", (
        "qualification/unit/test_action_bounds.py",
        "qualification/unit/test_action_protocol.py",
        "qualification/security/test_model_protocol_attacks.py")),
    ModuleScope("labfy_ref/model/endpoint.py", (
        "qualification/unit/test_endpoint_grammar.py",
        "qualification/unit/test_endpoint.py",
        "qualification/security/test_endpoint_forms.py")),
    # client.py is the largest module (~600 mutants): only its bounds and its reading of
    # what the provider sends (MC-02, MC-03, AV-02, AV-04, BR-14), and of those a fixed
    # third — not the request body's assembly (_chat_body, _format_json, Sampling), the
    # reply dataclasses or the context-manager plumbing, which the turn tests cover.
    ModuleScope("labfy_ref/model/client.py", (
        "qualification/unit/test_client_bounds.py",
        "qualification/unit/test_client_unit.py",
        "qualification/integration/test_model_client.py"),
        functions=("ClientLimits", "_NoCookies", "_is_refused_output", "__init__", "chat",
                   "_chat_reply", "stream_chat", "_list_models", "probe", "_deadline",
                   "_time_or_transport", "_request_json", "_json_body", "_read_body", "_drain",
                   "_check_status", "_transport_failure", "_usage", "_count", "_stream_delta"),
        sample=3),
    # files.py has ~380 mutants: a fixed half of them keeps the whole run under an hour.
    ModuleScope("labfy_ref/gateway/files.py", (
        "qualification/gateway/test_files_unit.py",
        "qualification/gateway/test_symlinks.py",
        "qualification/security/test_file_boundary.py",
        "qualification/gateway/test_gateway.py"), sample=2),
    ModuleScope("labfy_ref/gateway/policy.py", (
        "qualification/gateway/test_policy_unit.py",
        "qualification/gateway/test_gateway.py")),
    ModuleScope("labfy_ref/server/security.py", (
        "qualification/security/test_security_middleware_unit.py",
        "qualification/security/test_server_host.py",
        "qualification/security/test_server_origin_csrf.py")),
    ModuleScope("labfy_ref/server/auth.py", (
        "qualification/security/test_auth_unit.py",
        "qualification/security/test_server_sessions.py",
        "qualification/security/test_bearer.py")),
    ModuleScope("labfy_ref/workspace/store.py", (
        "qualification/gateway/test_policy_unit.py",
        "qualification/gateway/test_gateway.py",
        "qualification/workspace/test_store_indexes.py"),
        functions=("active_for", "add_grant", "grants_for", "get_grant", "revoke_grant")),
)


def by_path(path: str) -> ModuleScope:
    """The scope entry of ``path`` (as written in :data:`MODULES`); KeyError if none."""
    for scope in MODULES:
        if scope.path == path:
            return scope
    raise KeyError(path)


def req_ids(test_file: Path) -> set[str]:
    """Every string argument of a ``pytest.mark.req(...)`` call in ``test_file``."""
    tree = ast.parse(test_file.read_text(encoding="utf-8"), filename=str(test_file))
    found: set[str] = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "req" and isinstance(node.func.value, ast.Attribute)
                and node.func.value.attr == "mark"):
            found.update(arg.value for arg in node.args
                         if isinstance(arg, ast.Constant) and isinstance(arg.value, str))
    return found


def function_lines(module: Path, names: tuple[str, ...]) -> list[tuple[int, int]]:
    """The (first, last) line ranges of the functions, methods or classes called ``names``."""
    tree = ast.parse(module.read_text(encoding="utf-8"), filename=str(module))
    return [(node.lineno, node.end_lineno or node.lineno) for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            and node.name in names]


#: A line and column (as ``ast`` counts them: 1-based lines, 0-based columns).
Position = tuple[int, int]


def annotation_spans(module: Path) -> list[tuple[Position, Position]]:
    """Where ``module``'s annotations are, if it never evaluates them (PEP 563).

    Under ``from __future__ import annotations`` an annotation is a string no code of
    ours reads back (no module of the scope is a pydantic model or calls
    ``get_type_hints``), so a mutant inside one (``str | None`` -> ``str & None``)
    cannot change what the module does: it is equivalent by construction, as mutmut
    assumes by never mutating annotations at all.
    """
    tree = ast.parse(module.read_text(encoding="utf-8"), filename=str(module))
    postponed = any(isinstance(node, ast.ImportFrom) and node.module == "__future__"
                    and any(alias.name == "annotations" for alias in node.names)
                    for node in tree.body)
    if not postponed:
        return []
    found: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            arguments = node.args
            found += [arg.annotation for arg in (*arguments.posonlyargs, *arguments.args,
                                                 *arguments.kwonlyargs, arguments.vararg,
                                                 arguments.kwarg)
                      if arg is not None and arg.annotation is not None]
            if node.returns is not None:
                found.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            found.append(node.annotation)
    return [((node.lineno, node.col_offset),
             (node.end_lineno or node.lineno, node.end_col_offset or 0)) for node in found]


def sampled(operator: str, line: int, column: int, occurrence: int, sample: int) -> bool:
    """Is this mutant in the fixed 1-in-``sample`` choice? (A hash: same source, same choice.)"""
    digest = hashlib.sha256(f"{operator}:{line}:{column}:{occurrence}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % sample == 0

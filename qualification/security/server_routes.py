"""The route table ``qualification/routes.toml`` (API-01), loaded for the matrices that use it.

The table is data, the one list of routes; this module only reads and checks
it and turns rows into pytest parameters. A malformed table fails at import,
so every suite that uses it fails loudly rather than testing fewer routes.
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

TABLE = Path(__file__).resolve().parent.parent / "routes.toml"
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
ROLES = ("public", "user", "admin")
_FIELDS = {"method", "path", "role", "body", "query", "target", "bearer"}
_PARAM = re.compile(r"\{([a-z_]+)\}")


@dataclasses.dataclass(frozen=True, slots=True)
class Route:
    """One row: method, path template, role, example body and query, target requirement,
    and whether a bearer token stands for a session there (SV-08)."""

    method: str
    template: str
    role: str
    body: Any
    query: str
    url: str  # the template filled with the example parameters, and the query
    target: str | None
    bearer: bool = True  # ``Authorization: Bearer`` authenticates here (pages: False)

    @property
    def mutation(self) -> bool:
        """Does this route change state (Origin, fetch-metadata and CSRF checks apply)?"""
        return self.method in MUTATING

    @property
    def api(self) -> bool:
        """Is this an API route (credentials checked), rather than a page or asset?"""
        return self.template.startswith("/api/")

    @property
    def key(self) -> tuple[str, str]:
        """``(method, path template)``, as the app's routes are compared."""
        return self.method, self.template

    def param(self) -> Any:
        """This row as a pytest parameter whose id reads ``METHOD /path/{template}``."""
        return pytest.param(self, id=f"{self.method} {self.template}")


def _fill(template: str, values: dict[str, str]) -> str:
    return _PARAM.sub(lambda m: values[m.group(1)], template)


def _row(entry: Any, examples: dict[str, str]) -> Route:
    if not isinstance(entry, dict) or not {"method", "path", "role"} <= set(entry) <= _FIELDS:
        raise ValueError(f"{TABLE.name}: a route needs method, path, role (and only "
                         f"{sorted(_FIELDS)}): {entry!r}")
    method, template, role = entry["method"], entry["path"], entry["role"]
    if (method not in METHODS or role not in ROLES or not str(template).startswith("/")
            or not isinstance(entry.get("target", ""), str)
            or not isinstance(entry.get("query", ""), str)):
        raise ValueError(f"{TABLE.name}: bad method, role, path, query or target in {entry!r}")
    if "bearer" in entry and (entry["bearer"] is not False
                              or not str(template).startswith("/api/")):
        raise ValueError(f"{TABLE.name}: bearer is only ever false, on an API route: {template}")
    if "body" in entry and method not in MUTATING:
        raise ValueError(f"{TABLE.name}: a {method} route has no body: {template}")
    missing = [name for name in _PARAM.findall(template) if name not in examples]
    if missing:
        raise ValueError(f"{TABLE.name}: no example in [params] for {missing} of {template}")
    query = str(entry.get("query", ""))
    path = _fill(template, examples)
    return Route(method, template, role, entry.get("body"), query,
                 f"{path}?{query}" if query else path, entry.get("target"),
                 str(template).startswith("/api/") and entry.get("bearer", True))


def _load(path: Path) -> tuple[dict[str, str], tuple[Route, ...]]:
    document = tomllib.loads(path.read_text("utf-8"))
    examples = document.get("params", {})
    if set(document) - {"params", "route"} or not all(
            isinstance(v, str) for v in examples.values()):
        raise ValueError(f"{path.name}: only [params] (strings) and [[route]] tables")
    rows = tuple(_row(entry, examples) for entry in document.get("route", []))
    keys = [row.key for row in rows]
    if len(set(keys)) != len(keys):
        raise ValueError(f"{path.name}: a route is listed twice")
    return examples, rows


def path_with(route: Route, *, every: str | None = None, **values: str) -> str:
    """The route's path with ``values`` for some parameters (or ``every`` for all of them),
    the examples for the rest."""
    chosen = dict.fromkeys(EXAMPLES, every) if every is not None else {}
    return _fill(route.template, EXAMPLES | chosen | values)


EXAMPLES, ALL = _load(TABLE)
#: Routes the app serves now (target rows are SPEC routes not built yet).
SERVED = tuple(row for row in ALL if row.target is None)
#: Routes that need a session.
PROTECTED = tuple(row for row in SERVED if row.role != "public")
#: Routes that change state.
MUTATIONS = tuple(row for row in SERVED if row.mutation)
#: Routes for the admin only.
ADMIN = tuple(row for row in SERVED if row.role == "admin")
#: Routes any session may use.
USER = tuple(row for row in SERVED if row.role == "user")
#: API routes where a bearer token stands for a session of its role (SV-08).
BEARER = tuple(row for row in SERVED if row.bearer)
#: API routes that refuse a bearer token whatever its value (the cookie session's own).
BEARER_REFUSED = tuple(row for row in SERVED if row.api and not row.bearer)


def params(rows: tuple[Route, ...]) -> list[Any]:
    """``rows`` as pytest parameters (one argument, ``route``), each id ``METHOD /template``."""
    return [row.param() for row in rows]

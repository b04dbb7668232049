"""SV-05: every bounded field of every request schema, at and just past each of its bounds.

The rows are generated, never listed: they come from the request schemas the server
publishes (``/api/openapi.json``: string lengths, integer ranges, array sizes, in bodies,
in objects nested in a body's arrays and in query strings) and from the limits the runtime
reports (``GET /api/v1/agent-runtime/status``), so a new bounded field gets its rows without
anyone writing them. Each row sends a route's example request (``qualification/routes.toml``)
with one field set to a boundary value: the bound itself must never be refused for that field,
one step past it must be refused ``422 VALIDATION_FAILED`` — by the schema or by the layer the
bound lives in — naming the field. What else the request does (an unknown campaign, a wrong
login code) does not matter here: only whether the field's bound held where it is published.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

import pytest

from labfy_ref.workspace import init_workspace
from qualification.harness import ApiClient, LiveServer
from qualification.security.server_routes import SERVED, Route

BOUNDS = Path(__file__).resolve().parents[1] / "bounds.toml"
_BOUNDS = ("minLength", "maxLength", "minimum", "maximum", "minItems", "maxItems",
           "minProperties", "maxProperties")
#: A mapping's values, by the type its schema gives them.
_FILLER = {"string": "v", "number": 0, "integer": 0, "boolean": False}


@dataclasses.dataclass(frozen=True, slots=True)
class Row:
    """One boundary value of one field: where it goes, the value, and whether it must pass."""

    route: Route
    place: str  # "body" or "query"
    path: tuple[str | int, ...]  # the field inside the body (an int: an array's item)
    bound: str  # the schema keyword (or runtime limit) the value sits on or just past
    value: Any
    accepted: bool
    held: bool = False  # the bound is held below the schema (its message names the field)

    @property
    def name(self) -> str:
        """The field as the validation message names it (``messages.0.name``)."""
        return _name(self.place, self.path)

    @property
    def id(self) -> str:
        verdict = "ok" if self.accepted else "refused"
        return f"{self.route.method} {self.route.template} {self.name} {self.bound} {verdict}"


def _resolve(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def _variants(document: dict[str, Any], schema: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The schema and each member of its ``anyOf``/``oneOf`` (``str | None`` is an anyOf)."""
    schema = _resolve(document, schema)
    yield schema
    for key in ("anyOf", "oneOf", "allOf"):
        for member in schema.get(key, []):
            yield from _variants(document, member)


def _values(schema: dict[str, Any], example: Any) -> Iterator[tuple[str, Any, bool]]:
    """``(bound, value, accepted)`` for each bound of one (non-composite) schema."""
    kind = schema.get("type")
    for bound in _BOUNDS:
        if bound not in schema:
            continue
        limit = int(schema[bound])
        low = bound.startswith("min")
        past = limit - 1 if low else limit + 1
        if kind == "string":
            yield bound, "x" * limit, True
            if past >= 0:
                yield bound, "x" * past, False
        elif kind == "integer":
            yield bound, limit, True
            yield bound, past, False
        elif kind == "array" and isinstance(example, list) and example:
            yield bound, [copy.deepcopy(example[0]) for _ in range(limit)], True
            if past >= 0:
                yield bound, [copy.deepcopy(example[0]) for _ in range(past)], False
        elif kind == "object" and isinstance(schema.get("additionalProperties"), dict) \
                and schema["additionalProperties"].get("type") in _FILLER:
            filler = _FILLER[schema["additionalProperties"]["type"]]
            yield bound, {str(n): filler for n in range(limit)}, True
            if past >= 0:
                yield bound, {str(n): filler for n in range(past)}, False


def _limits(schema: dict[str, Any]) -> dict[str, int]:
    return {bound: int(schema[bound]) for bound in _BOUNDS if bound in schema}


def _name(place: str, path: tuple[str | int, ...]) -> str:
    where = ".".join(str(part) for part in path)
    return f"query.{where}" if place == "query" else where


def _bounded(document: dict[str, Any], schema: dict[str, Any],
             path: tuple[str | int, ...]) -> Iterator[tuple[tuple[str | int, ...], dict[str, Any]]]:
    """Every bounded schema under ``schema`` with its path (an array's item is ``0``)."""
    for variant in _variants(document, schema):
        if _limits(variant) and path:
            yield path, variant
        for name, child in variant.get("properties", {}).items():
            yield from _bounded(document, child, (*path, name))
        if "items" in variant:
            yield from _bounded(document, variant["items"], (*path, 0))


def _example(body: Any, path: tuple[str | int, ...]) -> Any:
    """What the route's example body holds at ``path`` (None where it holds nothing)."""
    for part in path:
        held = (isinstance(body, list) and isinstance(part, int) and part < len(body)) or (
            isinstance(body, dict) and part in body)
        if not held:
            return None
        body = body[part]
    return body


def _place(body: Any, path: tuple[str | int, ...], value: Any) -> Any:
    body = copy.deepcopy(body)
    holder = body
    for part in path[:-1]:
        holder = holder[part]
    holder[path[-1]] = value
    return body


def published(document: dict[str, Any]) -> dict[tuple[str, str], dict[str, int]]:
    """Every bounded request field of the schema document: ``(route, field) -> bounds``."""
    found: dict[tuple[str, str], dict[str, int]] = {}
    for route in SERVED:
        operation = document["paths"].get(route.template, {}).get(route.method.lower())
        if operation is None:
            continue
        key = f"{route.method} {route.template}"
        body = operation.get("requestBody", {}).get("content", {}).get("application/json")
        if body is not None:
            for path, schema in _bounded(document, body["schema"], ()):
                found.setdefault((key, _name("body", path)), {}).update(_limits(schema))
        for parameter in operation.get("parameters", []):
            if parameter.get("in") == "query":
                for schema in _variants(document, parameter.get("schema", {})):
                    if _limits(schema):
                        found.setdefault((key, _name("query", (parameter["name"],))),
                                         {}).update(_limits(schema))
    return found


@functools.cache
def bound_rows() -> tuple[dict[str, Any], ...]:
    """The ``[[bound]]`` rows of ``qualification/bounds.toml``, read once."""
    return tuple(tomllib.loads(BOUNDS.read_text("utf-8"))["bound"])


def pinned(*, held: bool | None = None) -> dict[tuple[str, str], dict[str, int]]:
    """The bounds pinned in ``qualification/bounds.toml``: those the schema publishes
    (``held=False``), those a layer below it holds (``held=True``), or all of them."""
    return {(row["route"], row["field"]): {k: int(v) for k, v in row.items() if k in _BOUNDS}
            for row in bound_rows() if held is None or ("held" in row) == held}


def _rows(document: dict[str, Any], limits: dict[str, Any]) -> list[Row]:
    """The boundary rows: each pinned bound on and one past, sent where the route takes it."""
    rows = []
    bounds, below = pinned(), pinned(held=True)
    values = {(row["route"], row["field"]): row["values"]  # a mapping's values' type
              for row in bound_rows() if "values" in row}
    for route in SERVED:
        key = f"{route.method} {route.template}"
        for (where, field), limit in bounds.items():
            if where != key:
                continue
            place = "query" if field.startswith("query.") else "body"
            path: tuple[str | int, ...] = tuple(
                int(part) if part.isdigit() else part
                for part in field.removeprefix("query.").split("."))
            example = _example(route.body, path) if place == "body" else None
            kind = ("array" if {"minItems", "maxItems"} & set(limit) else
                    "string" if {"minLength", "maxLength"} & set(limit) else
                    "object" if {"minProperties", "maxProperties"} & set(limit) else "integer")
            mapped = {"additionalProperties": {"type": values[(where, field)]}} \
                if kind == "object" else {}
            for bound, value, accepted in _values({"type": kind, **limit, **mapped}, example):
                rows.append(Row(route, place, path, bound, value, accepted,
                                (where, field) in below))
    # A bound the runtime holds and reports rather than the schema (RT-03).
    turns = next(route for route in SERVED
                 if route.key == ("POST", "/api/v1/agent-runtime/turns"))
    chars = int(limits["max_message_chars"])
    rows += [Row(turns, "body", ("message",), "max_message_chars", "x" * chars, True, True),
             Row(turns, "body", ("message",), "max_message_chars", "x" * (chars + 1), False,
                 True),
             Row(turns, "body", ("message",), "max_message_chars", "", False, True)]
    return rows


def _send(client: ApiClient, row: Row) -> Any:
    route = row.route
    path, _, query = route.url.partition("?")
    if row.place == "query":
        pairs = dict(parse_qsl(query)) | {str(row.path[0]): str(row.value)}
        return client.http.request(route.method, f"{path}?{urlencode(pairs)}",
                                   headers=client.headers(route.mutation))
    body = _place(route.body, row.path, row.value)
    return client.http.request(route.method, route.url, json=body,
                               headers=client.headers(route.mutation))


def _refused_for(response: Any, row: Row) -> bool:
    """Was the request refused as invalid, naming this field (or, for a runtime limit, at all)?"""
    if response.status_code != 422:
        return False
    error = response.json().get("error", {})
    if error.get("code") != "VALIDATION_FAILED":
        return False
    message = str(error.get("message", ""))
    return message.startswith(f"{row.name}:") or (row.held and str(row.path[-1]) in message)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A demo-agent server with the engine bridge on, so its routes validate too."""
    path = tmp_path_factory.mktemp("bounds") / "specimen"
    init_workspace(path, specimen=True)
    live = LiveServer(path, bridge=True).start()
    yield live
    live.stop()


@pytest.fixture(scope="module")
def table(server: LiveServer) -> list[Row]:
    client = server.client()
    try:
        document = client.get("/api/openapi.json").json()
        limits = client.get("/api/v1/agent-runtime/status").json()["limits"]
    finally:
        client.close()
    return _rows(document, limits)


@pytest.mark.req("SV-05")
def test_every_bounded_field_the_schemas_publish_is_pinned(server: LiveServer) -> None:
    client = server.client()
    try:
        document = client.get("/api/openapi.json").json()
    finally:
        client.close()
    found, pins = published(document), pinned(held=False)
    assert sorted(set(found) & set(pinned(held=True))) == [], \
        "published by the schema now: drop its held mark in qualification/bounds.toml"
    assert sorted(set(found) - set(pins)) == [], \
        "a bounded request field without its row: pin it in qualification/bounds.toml"
    assert sorted(set(pins) - set(found)) == [], "pinned in qualification/bounds.toml, not served"
    assert {key: found[key] for key in pins} == pins, "a published bound moved"


@pytest.mark.req("SV-05")
def test_the_table_has_a_value_on_and_past_every_bound(table: list[Row]) -> None:
    for key, limit in pinned().items():
        rows = [row for row in table if (f"{row.route.method} {row.route.template}",
                                         row.name) == key]
        assert {row.bound for row in rows} == set(limit), key
        for bound in limit:
            verdicts = {row.accepted for row in rows if row.bound == bound}
            assert True in verdicts, f"{key} {bound}: no value on it"
            assert False in verdicts or (bound.startswith("min") and limit[bound] == 0), \
                f"{key} {bound}: no value past it"


@pytest.mark.req("SV-05")
def test_a_value_on_a_bound_is_accepted_and_one_past_it_refused(
        server: LiveServer, table: list[Row]) -> None:
    client = server.client()
    wrong = []
    try:
        for row in table:
            refused = _refused_for(_send(client, row), row)
            if refused == row.accepted:
                wrong.append(f"{row.id}: {'refused' if refused else 'accepted'}")
    finally:
        client.close()
    assert wrong == [], "\n".join(wrong)


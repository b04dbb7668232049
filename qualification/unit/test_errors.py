"""One error table (SV-05): every code has its HTTP status beside it; error classes live once."""

from __future__ import annotations

import ast

import pytest

from labfy_ref import errors
from labfy_ref.errors import HTTP_STATUS, ErrorCode, LabfyError, RuntimeRefused
from qualification.conftest import REPO


@pytest.mark.req("SV-05")
def test_every_code_has_exactly_one_http_status() -> None:
    assert set(HTTP_STATUS) == set(ErrorCode)
    assert all(400 <= status <= 599 for status in HTTP_STATUS.values())


@pytest.mark.req("SV-05")
@pytest.mark.parametrize("code", list(ErrorCode))
def test_a_refusal_answers_the_status_of_its_code(code: ErrorCode) -> None:
    assert RuntimeRefused(code, "x").status == HTTP_STATUS[code]
    assert LabfyError("x", code=code).as_dict() == {"code": code.value, "message": "x"}


#: The user-visible error classes: LabfyError and everything errors.py derives from it.
USER_VISIBLE = {name for name, value in vars(errors).items()
                if isinstance(value, type) and issubclass(value, LabfyError)}


def _classes_and_status_literals() -> tuple[list[str], list[str]]:
    """User-visible error classes defined outside errors.py; raise sites naming a status."""
    classes, literals = [], []
    for path in sorted((REPO / "labfy_ref").rglob("*.py")):
        if path.name == "errors.py" and path.parent.name == "labfy_ref":
            continue
        tree = ast.parse(path.read_text("utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and any(
                    isinstance(base, ast.Name) and base.id in USER_VISIBLE
                    for base in node.bases):
                classes.append(f"{path.name}:{node.name}")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id == "RuntimeRefused" \
                    and any(kw.arg == "status" for kw in node.keywords):
                literals.append(f"{path.name}:{node.lineno}")
    return classes, literals


@pytest.mark.req("SV-05")
def test_user_visible_errors_are_defined_once_and_no_raise_site_names_a_status() -> None:
    classes, literals = _classes_and_status_literals()
    assert classes == [], "every user-visible error class lives in labfy_ref/errors.py"
    assert literals == [], "statuses are decided in HTTP_STATUS, never at a raise site"


@pytest.mark.req("GW-05", "SV-05")
@pytest.mark.parametrize(("text", "limit", "said"), [
    ("short", 10, "short"),
    ("exactly10!", 10, "exactly10!"),
    ("eleven char", 10, "eleven ch…"),
    ("x" * 5000, 300, "x" * 299 + "…"),
    ("line one\nline two\x1b[31m", 300, "line one line two [31m"),
    ("a\u2028b\tc", 5, "a b c"),
])
def test_a_message_is_one_printable_line_cut_at_its_bound_with_an_ellipsis(
        text: str, limit: int, said: str) -> None:
    """A diagnostic is one line (controls and separators become spaces) of at most
    ``limit`` characters: one that fits is kept whole, one longer keeps ``limit - 1`` and
    ends with an ellipsis."""
    assert errors.bounded(text, limit) == said
    assert len(errors.bounded(text, limit)) <= limit

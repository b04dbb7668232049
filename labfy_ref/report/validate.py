"""Reading the report's JSON inputs strictly, against the published schemas (QR-05).

Every file the report reads — results files, a status.json given to
``--compare``, bench.json, mutation.json, conformance.json — is parsed here and
checked against its schema in ``labfy_ref/report/schemas/``. Anything wrong is
one bounded line, ``REPORT_INVALID: <file>: <where>: <what>``; nothing is
guessed and nothing half-read is used.
"""

from __future__ import annotations

import functools
import json
import os
import stat
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

from labfy_ref.errors import ReportInvalid

#: The status.json versions this report reads; the one it writes is the last.
STATUS_VERSIONS = (0, 1)
SCHEMA_VERSION = STATUS_VERSIONS[-1]
#: Results files: version 0 had no ``schema_version``; 1 adds build and sources.
RESULTS_VERSIONS = (0, 1)
_MAX_BYTES = 256 * 1024 * 1024  # far above the full suite's results (about 1 MiB)


@functools.cache
def schema(name: str) -> dict[str, Any]:
    """The published schema ``schemas/<name>.schema.json`` (package data)."""
    text = resources.files(__package__).joinpath("schemas", f"{name}.schema.json").read_text(
        "utf-8")
    document: dict[str, Any] = json.loads(text)
    return document


@functools.cache
def _validator(name: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(schema(name))


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


def read_bounded(path: Path, what: str, limit: int = _MAX_BYTES) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit``; ReportInvalid otherwise.

    Opened without waiting (a FIFO is refused, never waited on) and read to the
    bound, whatever its size claims (``/dev/zero`` says 0 and never ends).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ReportInvalid(f"cannot read {what} {path}: {exc.strerror or exc}") from exc
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ReportInvalid(f"{what} {path}: not a regular file")
        os.set_blocking(fd, True)
        chunks: list[bytes] = []
        left = limit + 1
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        raise ReportInvalid(f"cannot read {what} {path}: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)
    if left <= 0:
        raise ReportInvalid(f"{what} {path}: larger than {limit} bytes")
    return b"".join(chunks)


def load_json(path: Path, what: str) -> Any:
    """Parse ``path`` as strict JSON (no NaN/Infinity); ReportInvalid naming ``what`` if not."""
    data = read_bounded(path, what)
    try:
        return json.loads(data, parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as exc:
        raise ReportInvalid(f"malformed {what} {path}: not JSON ({exc})") from exc


def check(document: Any, name: str, source: str) -> None:
    """Validate ``document`` against schema ``name``; ReportInvalid with the first error's place."""
    error = jsonschema.exceptions.best_match(_validator(name).iter_errors(document))
    if error is None:
        return
    where = "".join(f"[{part}]" if isinstance(part, int) else f".{part}"
                    for part in error.absolute_path)
    raise ReportInvalid(f"malformed {source}: at ${where}: {error.message}")


def version_of(document: Any, source: str, known: tuple[int, ...]) -> int:
    """The ``schema_version`` of a JSON object (absent: 0); ReportInvalid when unknown."""
    if not isinstance(document, dict):
        raise ReportInvalid(f"malformed {source}: not a JSON object")
    version = document.get("schema_version", 0)
    if type(version) is not int or version not in known:
        raise ReportInvalid(f"{source}: unknown schema_version {json.dumps(version)[:40]} "
                            f"(this labfy-ref reads {', '.join(map(str, known))})")
    return version


def read_status(path: Path) -> tuple[int, dict[str, Any]]:
    """A status.json any labfy-ref wrote: (its version, the document), validated."""
    source = f"status file {path}"
    document = load_json(path, "status file")
    version = version_of(document, source, STATUS_VERSIONS)
    check(document, "status" if version == SCHEMA_VERSION else f"status.v{version}", source)
    return version, document

"""One fingerprint of the product sources a record was measured on (QR-05).

The test runs, the bench and the mutation run each record the hash of the
``labfy_ref`` sources they exercised; the report marks a bench or mutation
record *stale* when its hash differs from the newest test run's. Everything
that records such a hash calls :func:`sources_sha256`, so the hashes compare. The
mutation run keys its record by the modules it mutated only (:func:`files_sha256`):
a change elsewhere in the product does not make its scores stale.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

import labfy_ref

#: The package whose sources are hashed: the code actually imported.
PRODUCT_DIR = Path(labfy_ref.__file__).resolve().parent


def files_sha256(names: Iterable[str], root: Path = PRODUCT_DIR.parent) -> str | None:
    """SHA-256 over the named files (POSIX paths relative to ``root``), as
    :func:`sources_sha256` hashes a tree; a missing file counts as its name alone, so
    removing or renaming one changes the digest. None for no names."""
    digest = hashlib.sha256()
    named = sorted(set(names))
    for name in named:
        path = root / name
        data = path.read_bytes() if path.is_file() else None
        encoded = name.encode("utf-8", "surrogateescape")
        digest.update(len(encoded).to_bytes(8, "big") + encoded)
        digest.update(b"\xff" * 8 if data is None else len(data).to_bytes(8, "big") + data)
    return digest.hexdigest() if named else None


def sources_sha256(package_dir: Path = PRODUCT_DIR) -> str | None:
    """SHA-256 over ``package_dir/**/*.py``: each file's relative POSIX path and bytes, sorted.

    Paths are part of the digest, so a renamed module changes it; length prefixes
    keep one file's bytes from reading as the next one's name. Byte caches and
    other files do not count. None when the directory holds no Python source
    (an install without sources): the caller says "unknown", never "stale".
    """
    files = sorted((path.relative_to(package_dir).as_posix(), path)
                   for path in package_dir.rglob("*.py") if path.is_file())
    if not files:
        return None
    digest = hashlib.sha256()
    for name, path in files:
        data = path.read_bytes()
        encoded = name.encode("utf-8", "surrogateescape")
        digest.update(len(encoded).to_bytes(8, "big") + encoded)
        digest.update(len(data).to_bytes(8, "big") + data)
    return digest.hexdigest()


#: What decides an eval figure: the narrowing, the loop, the catalog and its services, the
#: model client, the SPECIMEN workspace and the eval itself (its tasks and predicates).
#: Entries with the same digest measured the same agent, whatever commit each ran on, so a
#: matrix run over several sittings is one comparison; another digest is a stale figure.
AGENT_PACKAGES = ("protocol", "runtime", "tools", "gateway", "model", "workspace", "eval")
#: ... but not how a record is written or read: that decides no figure.
AGENT_EXCLUDED = frozenset({"eval/record.py"})


def agent_sha256(package_dir: Path = PRODUCT_DIR) -> str | None:
    """SHA-256 over the sources of :data:`AGENT_PACKAGES` (code, tasks, schemas, SPECIMEN)."""
    names = [path.relative_to(package_dir.parent).as_posix()
             for package in AGENT_PACKAGES
             for path in sorted((package_dir / package).rglob("*"))
             if path.is_file() and "__pycache__" not in path.parts
             and path.relative_to(package_dir).as_posix() not in AGENT_EXCLUDED]
    return files_sha256(names, package_dir.parent)

"""The JavaScript libraries we vendor from the npm registry: pinned, hashed, re-fetchable.

``qualification/vendored.json`` pins each package (name, version, the registry's
``integrity`` of its tarball, licence) and every file we copy out of it with its
SHA-256. The pages never load a library from a CDN (SPEC UI-05, UI-08).

    python -m qualification.vendored verify     # offline: the vendored files match the pins
    python -m qualification.vendored refetch    # npm pack each pin again, check the tarball
                                                # integrity and every file's hash
    python -m qualification.vendored refetch --write   # (re)write the files from the pins

``refetch`` needs ``npm`` and the registry; ``verify`` needs nothing (a test runs it).
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import hashlib
import io
import json
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = Path(__file__).with_name("vendored.json")


@dataclasses.dataclass(frozen=True, slots=True)
class VendoredFile:
    """One file copied out of a package's tarball (``source``) to ``target`` in the repository."""

    source: str
    target: str
    sha256: str


@dataclasses.dataclass(frozen=True, slots=True)
class Package:
    """One pinned npm package and the files we take from it."""

    name: str
    version: str
    integrity: str
    license: str
    files: tuple[VendoredFile, ...]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Package:
        """Read one manifest entry."""
        return cls(name=str(data["name"]), version=str(data["version"]),
                   integrity=str(data["integrity"]), license=str(data["license"]),
                   files=tuple(VendoredFile(str(f["source"]), str(f["target"]), str(f["sha256"]))
                               for f in data["files"]))


def load(manifest: Path = MANIFEST) -> list[Package]:
    """Every pinned package of the manifest."""
    document = json.loads(manifest.read_text("utf-8"))
    return [Package.from_json(entry) for entry in document["packages"]]


def sha256(data: bytes) -> str:
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def verify(packages: list[Package], root: Path = ROOT) -> list[str]:
    """Offline check: each vendored file exists and has its pinned hash. Returns the problems."""
    problems = []
    for package in packages:
        for file in package.files:
            path = root / file.target
            if not path.is_file():
                problems.append(f"{package.name}: {file.target} is missing")
            elif sha256(path.read_bytes()) != file.sha256:
                problems.append(f"{package.name}: {file.target} does not match its pinned sha256")
    return problems


def sri_matches(integrity: str, data: bytes) -> bool:
    """Whether ``data`` has the registry's Subresource-Integrity string (``sha512-…``)."""
    algorithm, _, expected = integrity.partition("-")
    if algorithm not in {"sha256", "sha384", "sha512"}:
        return False
    return base64.b64encode(hashlib.new(algorithm, data).digest()).decode() == expected


def _pack(package: Package, into: Path) -> bytes:
    """``npm pack name@version``: the registry's tarball, through the user's npm configuration."""
    done = subprocess.run(["npm", "pack", f"{package.name}@{package.version}", "--silent",
                           "--pack-destination", str(into)],
                          capture_output=True, text=True, check=False, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"npm pack {package.name}@{package.version} failed: "
                           f"{done.stderr.strip()[-300:]}")
    return (into / done.stdout.strip().splitlines()[-1]).read_bytes()


def _members(tarball: bytes) -> Iterator[tuple[str, bytes]]:
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as archive:
        for member in archive.getmembers():
            handle = archive.extractfile(member) if member.isfile() else None
            if handle is not None:
                yield member.name, handle.read()


def refetch(packages: list[Package], *, write: bool, root: Path = ROOT) -> list[str]:
    """Fetch every pin again; check the tarball integrity and each file. Returns the problems."""
    problems = []
    with tempfile.TemporaryDirectory() as scratch:
        for package in packages:
            tarball = _pack(package, Path(scratch))
            if not sri_matches(package.integrity, tarball):
                problems.append(f"{package.name}@{package.version}: tarball integrity differs "
                                "from the pin")
                continue
            contents = dict(_members(tarball))
            for file in package.files:
                data = contents.get(file.source)
                if data is None:
                    problems.append(f"{package.name}: {file.source} is not in the tarball")
                elif sha256(data) != file.sha256:
                    problems.append(f"{package.name}: {file.source} differs from its pinned sha256")
                elif write:
                    target = root / file.target
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(data)
    return problems


def main(argv: list[str] | None = None) -> int:
    """``python -m qualification.vendored verify|refetch [--write]``."""
    parser = argparse.ArgumentParser(prog="python -m qualification.vendored",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["verify", "refetch"])
    parser.add_argument("--write", action="store_true",
                        help="refetch: write the vendored files from the checked tarballs")
    options = parser.parse_args(argv)
    packages = load()
    problems = (verify(packages) if options.command == "verify"
                else refetch(packages, write=options.write))
    for problem in problems:
        print(f"VENDORED_MISMATCH: {problem}", file=sys.stderr)
    if not problems:
        files = sum(len(p.files) for p in packages)
        print(f"{options.command}: {len(packages)} packages, {files} files match their pins")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

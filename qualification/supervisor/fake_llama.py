"""A fake ``llama-server`` for the supervisor's tests: a real executable serving real HTTP.

:func:`install_fake` writes ``FOLDER/llama-server``, a Python script whose
``#!`` line names this interpreter, and its configuration. Run, it answers
``--version`` and ``--help`` like llama-server, parses the flags the
supervisor passes, records each run (argv, environment, pid, CPU variant) as
one JSON line, and behaves as its ``mode`` says. Like llama.cpp it opens and
maps the ``-m`` file (so ``/proc/<pid>/maps`` names its inode) and records
that file's SHA-256 and inode (``model``) -- what the fake actually runs.

* ``serve``: the fake provider (:class:`~fake_provider.FakeProvider`) on
  ``--host``/``--port`` with the key, ``/health`` 503 for ``loading_checks``
  polls, then 200;
* ``exit``: prints an error and exits with ``exit_code`` before serving;
* ``segfault``: dies of SIGSEGV before serving (a crash that is no SIGILL);
* ``ignore_key``: serves, but ``/v1/models`` answers without the key;
* ``never_healthy``: ``/health`` stays 503;
* ``grandchild``: serves after spawning a grandchild (in its group) that
  ignores SIGTERM;
* ``stubborn``: serves and ignores SIGTERM;
* ``impostor``: does not listen itself; a process in another session serves
  the port (with the key it read) while the fake idles.

A serving fake answers chats from ``scenario`` (a scenario file) when given,
else ``"fake reply"`` to every one; with ``gate`` it starts but does not listen
until that file exists (the test holds "loading" as long as it needs). Every
``--version``/``--help`` run is recorded too (:meth:`FakeLlama.probes`).

CPU backends: like ggml, it looks for ``libggml-cpu-<v>.so`` beside its
*resolved* path, maps the best one (so ``/proc/<pid>/maps`` names it) and,
when that one is listed in ``sigill``, dies of SIGILL as an unsupported
instruction would.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import mmap
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fake_provider import FakeProvider, Scenario

REPO = Path(__file__).resolve().parents[2]
#: ggml's order of preference among the backends we fake, best first.
PREFERENCE = ("sapphirerapids", "zen4", "icelake", "skylakex", "alderlake", "haswell",
              "sandybridge", "sse42", "x64")
VERSION_LINE = "version: 9.9.9-fake (build 1, commit fake)"
PROBES = "probes.jsonl"
#: How long a gated fake waits for its gate file before giving up (exit 4).
GATE_SECONDS = 60.0
_FULL_HELP = """\
-m,    --model FNAME                    model path
--host HOST                             IP addresses to listen on
--port PORT                             port to listen
-c,    --ctx-size N                     size of the prompt context
-t,    --threads N                      number of CPU threads
-np,   --parallel N                     number of server slots
-s,    --seed SEED                      RNG seed
-a,    --alias STRING                   set model name aliases
--ui,  --webui, --no-ui, --no-webui     whether to enable the Web UI (default: enabled)
--api-key KEY                           API key to use for authentication
--api-key-file FNAME                    path to file containing API keys, one per line
"""
_MINIMAL_HELP = """\
-m,    --model FNAME                    model path
--api-key KEY                           API key to use for authentication
"""


@dataclasses.dataclass(frozen=True)
class FakeLlama:
    """An installed fake: its executable and the record of its runs."""

    binary: Path
    record: Path

    def runs(self) -> list[dict[str, Any]]:
        """One entry per run (``--version``/``--help`` excluded), oldest first."""
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text("utf-8").splitlines()]

    def probes(self) -> list[list[str]]:
        """The argv of each ``--version``/``--help`` run, oldest first."""
        path = self.record.with_name(PROBES)
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text("utf-8").splitlines()]


def install_fake(folder: Path, *, mode: str = "serve", variants: tuple[str, ...] = (),
                 sigill: tuple[str, ...] = (), help_style: str = "full", exit_code: int = 3,
                 loading_checks: int = 3, scenario: Path | None = None,
                 gate: Path | None = None) -> FakeLlama:
    """Write an executable fake llama-server (and its CPU backends) into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "fake-config.json"
    record = folder / "runs.jsonl"
    config.write_text(json.dumps({
        "mode": mode, "sigill": list(sigill), "help": help_style, "exit_code": exit_code,
        "loading_checks": loading_checks, "record": str(record),
        "scenario": None if scenario is None else str(scenario),
        "gate": None if gate is None else str(gate)}), "utf-8")
    for variant in variants:
        (folder / f"libggml-cpu-{variant}.so").write_bytes(b"\x7fELF fake backend\n" * 64)
    # Shared libraries and a relative symlink, as a real build has beside its binary.
    (folder / "libllama.so.0.6.0").write_bytes(b"\x7fELF fake library\n" * 64)
    if not (folder / "libllama.so.0").is_symlink():
        (folder / "libllama.so.0").symlink_to("libllama.so.0.6.0")
    binary = folder / "llama-server"
    binary.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        f"sys.path.insert(0, {str(REPO)!r})\n"
        "from qualification.supervisor.fake_llama import main\n"
        f"sys.exit(main({str(config)!r}, __file__))\n", "utf-8")
    binary.chmod(0o755)
    return FakeLlama(binary, record)


def _flags(argv: list[str]) -> dict[str, str]:
    flags: dict[str, str] = {}
    for index, arg in enumerate(argv):
        if arg.startswith("-") and index + 1 < len(argv) and not argv[index + 1].startswith("--"):
            flags[arg] = argv[index + 1]
    return flags


def _pick_backend(launcher: str) -> Path | None:
    """The best backend beside the resolved launcher, as ggml picks it."""
    folder = Path(launcher).resolve().parent
    present = [folder / f"libggml-cpu-{v}.so" for v in PREFERENCE]
    return next((path for path in present if path.exists()), None)


def _load_backend(backend: Path, sigill: list[str]) -> mmap.mmap:
    """Map ``backend`` (so /proc/<pid>/maps names it); die of SIGILL if told to."""
    with backend.open("rb") as handle:
        mapped = mmap.mmap(handle.fileno(), 0, prot=mmap.PROT_READ)
    if backend.name.removeprefix("libggml-cpu-").removesuffix(".so") in sigill:
        print(f"load_backend: loaded CPU backend from {backend.name}", file=sys.stderr,
              flush=True)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file for the test
        os.kill(os.getpid(), signal.SIGILL)
    return mapped


def _open_model(path: str) -> tuple[dict[str, Any], mmap.mmap | None]:
    """Open and map ``-m`` as llama.cpp does: (its digest and inode, the mapping)."""
    with open(path, "rb") as handle:
        status = os.fstat(handle.fileno())
        data = handle.read()
        mapped = mmap.mmap(handle.fileno(), 0, prot=mmap.PROT_READ) if data else None
    return {"sha256": hashlib.sha256(data).hexdigest(), "inode": status.st_ino}, mapped


def _serve(host: str, port: int, key: str | None, alias: str, loading: int,
           scenario_file: str | None = None) -> None:
    """Serve until SIGTERM (or forever, when SIGTERM is ignored)."""
    scenario = (Scenario.load(scenario_file) if scenario_file is not None
                else Scenario.always("fake reply", name="fake-llama"))
    scenario = dataclasses.replace(scenario, models=(alias or "fake-model",),
                                   loading_health_checks=loading)
    stop = threading.Event()
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN:
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with FakeProvider(scenario, host=host, port=port, api_key=key):
        print(f"main: server is listening on http://{host}:{port}", file=sys.stderr, flush=True)
        stop.wait()


def _sleeper(ignore_term: bool, session: bool) -> subprocess.Popen[bytes]:
    code = ("import signal, time\n"
            + ("signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" if ignore_term else "")
            + "time.sleep(600)\n")
    return subprocess.Popen([sys.executable, "-c", code], start_new_session=session)


def main(config_path: str, launcher: str) -> int:
    """The fake's entry point (called by the installed script)."""
    config = json.loads(Path(config_path).read_text("utf-8"))
    argv = sys.argv[1:]
    if argv in (["--version"], ["--help"]):
        with Path(config["record"]).with_name(PROBES).open("a", encoding="utf-8") as probes:
            probes.write(json.dumps(argv) + "\n")
    if argv == ["--version"]:
        print(VERSION_LINE, file=sys.stderr)
        print("built with a test for Linux x86_64", file=sys.stderr)
        return 0
    if argv == ["--help"]:
        print(_FULL_HELP if config["help"] == "full" else _MINIMAL_HELP)
        return 0
    flags = _flags(argv)
    key = flags.get("--api-key")
    if "--api-key-file" in flags:
        key = Path(flags["--api-key-file"]).read_text("ascii").strip()
    backend = _pick_backend(launcher)
    variant = backend.name[len("libggml-cpu-") : -len(".so")] if backend else None
    mode = config["mode"]
    run: dict[str, Any] = {"argv": argv, "env": dict(os.environ), "pid": os.getpid(),
                           "pgid": os.getpgid(0), "sid": os.getsid(0), "variant": variant,
                           "launcher": launcher, "stdin": os.readlink("/proc/self/fd/0")}
    if mode == "grandchild":
        run["grandchild"] = _sleeper(ignore_term=True, session=False).pid
    if mode == "impostor":
        run["impostor"] = subprocess.Popen(
            [sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
             "from qualification.supervisor.fake_llama import _serve; "
             "_serve('127.0.0.1', int(sys.argv[2]), sys.argv[3], '', 0)",
             str(REPO), flags["--port"], key or ""], start_new_session=True).pid
    run["model"], _model = _open_model(flags["-m"])
    with open(config["record"], "a", encoding="utf-8") as record:
        record.write(json.dumps(run) + "\n")
    _mapped = _load_backend(backend, config["sigill"]) if backend else None
    if mode == "exit":
        print("error: failed to load model (fake)", file=sys.stderr, flush=True)
        return int(config["exit_code"])
    if mode == "segfault":  # dies of a signal other than SIGILL before ready
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file for the test
        os.kill(os.getpid(), signal.SIGSEGV)
    if mode == "impostor":
        time.sleep(600)
        return 0
    if mode == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if config.get("gate") is not None and not _wait_for(Path(config["gate"])):
        print("error: the test never opened the gate (fake)", file=sys.stderr, flush=True)
        return 4
    loading = 10**9 if mode == "never_healthy" else int(config["loading_checks"])
    _serve(flags["--host"], int(flags["--port"]), None if mode == "ignore_key" else key,
           flags.get("--alias", ""), loading, config.get("scenario"))
    return 0


def _wait_for(gate: Path) -> bool:
    """Wait (bounded) until ``gate`` exists: the fake is started but not listening yet."""
    for _ in range(int(GATE_SECONDS / 0.02)):
        if gate.exists():
            return True
        time.sleep(0.02)
    return False


def group_exists(pgid: int) -> bool:
    """Whether any process (a zombie included) is left in group ``pgid`` (signal 0)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def running_members(pgid: int) -> list[int]:
    """The pids of group ``pgid`` that are not zombies, from ``/proc/*/stat``."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text("ascii", "replace")
        except OSError:
            continue
        state, _ppid, pgrp = text[text.rindex(")") + 2 :].split()[:3]
        if int(pgrp) == pgid and state not in ("Z", "X"):
            found.append(int(stat.parent.name))
    return found


async def until(predicate: Callable[[], bool], *, timeout: float) -> None:
    """``wait_until`` for coroutines: poll ``predicate`` (bounded), fail past ``timeout``."""
    for _ in range(int(timeout / 0.02) + 1):
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not met in time")

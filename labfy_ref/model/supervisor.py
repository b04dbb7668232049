"""Our own llama-server: started, proven, watched and stopped (SM-02, SM-05, SM-06).

The child runs in its own session and process group with stdin closed, a
minimal environment, ``--host 127.0.0.1``, a free port (never one of
:data:`~labfy_ref.netutil.RESERVED_PORTS`) and a fresh API key, given in a
0600 key file when the binary knows ``--api-key-file`` (so it never shows in
``ps``), else as ``--api-key``. Its output goes through a pipe into a log
capped at :data:`~labfy_ref.model.governor.LOG_CAP_BYTES`: two halves, the
older half dropped when the newer one is full, so the newest lines survive.

Start: ``/health`` is polled until 200 (it is public, so it proves nothing);
then the ownership proof (SM-05): the child is alive, the port's listening
socket is one of the child's own descriptors (where ``/proc`` tells), and
``GET /v1/models`` answers 401 without the key -- only then is the key sent,
and the answer must be 200. A child that dies of SIGILL before ready is
retried once on a conservative CPU variant, staged (SM-06).

The model is a :class:`~labfy_ref.model.gguf.PinnedGguf` (SM-09): the child
is handed ``/proc/self/fd/N`` of the very descriptor that was hashed (only
the child inherits it), the file's identity is checked right before each
spawn and again once the child is proven, and ``/proc/<pid>/maps`` tells
whether the child mapped that inode (:attr:`LocalModelSupervisor.opened`).

Signals go only to the child's process group, and only while the child is
our unreaped child: its id then cannot name anyone else's group. When the
child ends, its group is killed before the child is reaped, so no remnant
outlives it. On Linux the child also gets ``PR_SET_PDEATHSIG`` = SIGKILL (set
by a small ``python -c`` step that then execs the server): if our process is
killed outright, the server dies with it. The kernel ties that signal to the
*thread* that spawned the child, so the supervisor must run on an event loop
whose thread lives as long as the server should.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import os
import secrets
import shutil
import signal
import tempfile
from pathlib import Path

import httpx

from labfy_ref.errors import (
    MAX_MESSAGE_CHARS,
    ConfigRefused,
    ErrorCode,
    IllegalTransition,
    LlamaServerFailed,
)
from labfy_ref.model.binary import child_environment, run_probe
from labfy_ref.model.child import BoundedLog, ChildProcess, group_gone
from labfy_ref.model.endpoint import ModelEndpoint, ModelPath, parse_endpoint
from labfy_ref.model.gguf import FileIdentity, PinnedGguf
from labfy_ref.model.governor import LOG_CAP_BYTES
from labfy_ref.model.variants import (
    available_variants,
    check_variant,
    conservative_variant,
    cpu_flags,
    loaded_variant,
    stage_variant,
)
from labfy_ref.netutil import free_port

LOG_NAME = "llama-server.log"
HOST = "127.0.0.1"
HELP_TIMEOUT = 10.0
_POLL = 0.1
_REQUEST_TIMEOUT = 2.0
_GROUP_TIMEOUT = 5.0  # killed members wait for their reaper (init) this long at most
KEY_FILE = "api-key"


@dataclasses.dataclass(frozen=True, slots=True)
class LaunchOptions:
    """How to run llama-server; checked when built (``CONFIG_INVALID``)."""

    ctx_size: int = 4096
    threads: int | None = None  # None: the CPUs this process may run on
    seed: int = 0
    parallel: int = 1
    start_timeout: float = 120.0  # per attempt: the SIGILL retry gets its own
    cpu_variant: str | None = None
    model_alias: str = ""  # --alias: the model id the client sends
    #: --jinja --chat-template-file: a chat template other than the model's own (None: its own)
    chat_template_file: Path | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.ctx_size <= 1 << 24:
            raise ConfigRefused(f"context size must be 1-{1 << 24}, not {self.ctx_size}")
        if self.threads is not None and not 1 <= self.threads <= 1024:
            raise ConfigRefused(f"threads must be 1-1024, not {self.threads}")
        if not 1 <= self.parallel <= 256:
            raise ConfigRefused(f"parallel slots must be 1-256, not {self.parallel}")
        if not 0 <= self.seed < 1 << 32:
            raise ConfigRefused(f"seed must be 0-{(1 << 32) - 1}, not {self.seed}")
        if not 0 < self.start_timeout <= 3600:
            raise ConfigRefused(f"start timeout must be in (0, 3600] s, not {self.start_timeout}")
        if not self.model_alias.isprintable() or len(self.model_alias) > 200:
            raise ConfigRefused("model alias must be printable and at most 200 characters")

    def thread_count(self) -> int:
        """``threads``, or as many as this process may use."""
        return self.threads or len(os.sched_getaffinity(0))


class SupervisorState(enum.StrEnum):
    """Where the supervised server is; ``/status`` shows these words."""

    STOPPED = "stopped"
    LOADING = "loading"
    READY = "ready"
    EXITED = "exited"


def maps_file(pid: int, identity: FileIdentity) -> bool | None:
    """Whether process ``pid`` has the file of ``identity`` mapped; None when ``/proc`` is mute."""
    wanted = f"{os.major(identity.device):02x}:{os.minor(identity.device):02x}"
    try:
        with open(f"/proc/{pid}/maps", "rb") as handle:
            for line in handle:
                fields = line.split(maxsplit=5)
                if (len(fields) >= 5 and fields[4] == str(identity.inode).encode()
                        and fields[3].decode("ascii", "replace") == wanted):
                    return True
    except OSError:
        return None
    return False


def listener_owned_by(pid: int, port: int) -> bool | None:
    """Whether every TCP listener on ``port`` is a socket of process ``pid``.

    None when ``/proc`` cannot tell (no ``/proc/net/tcp``, no listener on the
    port in it, or the descriptors are unreadable); the HTTP proof then stands
    alone.
    """
    inodes: set[str] = set()
    readable = False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text("ascii", "replace").splitlines()[1:]
        except OSError:
            continue
        readable = True
        for fields in (line.split() for line in lines):
            if len(fields) > 9 and fields[3] == "0A" and fields[1].endswith(f":{port:04X}"):
                inodes.add(f"socket:[{fields[9]}]")
    if not readable or not inodes:
        return None
    try:
        owned = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
    except OSError:
        return None
    return inodes <= owned


class LocalModelSupervisor:
    """Starts, proves, watches and stops one llama-server of our own (one per ``log_dir``)."""

    def __init__(self, binary: Path, model: PinnedGguf, options: LaunchOptions, *,
                 log_dir: Path) -> None:
        self._binary = binary.absolute()  # the child runs in its own folder
        self._model = model  # kept open by its opener as long as the server runs
        self._mapped: bool | None = None
        self._handed: str | None = None  # "descriptor" or "path", once a child was started
        self._options = options
        self._log_dir = log_dir
        self._state = SupervisorState.STOPPED
        self._started = False
        self._stopping = False
        self._stop_lock = asyncio.Lock()
        self._gone = asyncio.Event()
        self._notes: list[str] = []
        self._log: BoundedLog | None = None
        self._run_dir: Path | None = None
        self._child: ChildProcess | None = None
        self._port: int | None = None
        self._api_key = ""
        self._variant: str | None = None

    # -- what callers read ---------------------------------------------------------

    @property
    def parallel(self) -> int:
        """The slots the server is started with (``--parallel``)."""
        return self._options.parallel

    @property
    def state(self) -> SupervisorState:
        """STOPPED, LOADING, READY or EXITED."""
        return self._state

    @property
    def endpoint(self) -> ModelEndpoint:
        """``http://127.0.0.1:PORT`` of the child (known once a start was tried)."""
        if self._port is None:
            raise IllegalTransition("the supervisor has no endpoint before start()")
        return parse_endpoint(f"http://{HOST}:{self._port}")

    @property
    def api_key(self) -> str:
        """The fresh key of the current child; send it to :attr:`endpoint` only."""
        return self._api_key

    @property
    def cpu_variant(self) -> str | None:
        """The CPU backend the child loaded (``/proc/<pid>/maps``), None for a static build."""
        return self._variant

    @property
    def exit_description(self) -> str | None:
        """``"exit code 1"`` / ``"signal SIGKILL"`` once the child is gone."""
        return self._child.exit_description if self._child is not None else None

    @property
    def pid(self) -> int | None:
        """The running child's pid (also its process group id); None when none runs."""
        child = self._child
        return child.pid if child is not None and child.returncode is None else None

    @property
    def log_path(self) -> Path:
        """The child's log (its older half, when rotated, is ``<name>.1``)."""
        return self._log_dir / LOG_NAME

    @property
    def opened(self) -> dict[str, object]:
        """The model file the child was handed, and whether its maps show that very inode."""
        model = self._model
        return {"file": model.path.name, "sha256": model.sha256, "size": model.size,
                "inode": model.identity.inode,
                "handed": self._handed, "mapped": self._mapped}

    @property
    def notes(self) -> tuple[str, ...]:
        """What the supervisor decided on its own (e.g. the SIGILL retry)."""
        return tuple(self._notes)

    def log_tail(self, max_bytes: int = 2048) -> str:
        """The last ``max_bytes`` of the child's output."""
        if self._log is not None:
            return self._log.tail(max_bytes).decode("utf-8", "replace")
        with contextlib.suppress(OSError), self.log_path.open("rb") as handle:
            handle.seek(max(0, handle.seek(0, os.SEEK_END) - max_bytes))
            return handle.read().decode("utf-8", "replace")
        return ""

    async def wait_exited(self) -> str:
        """Wait until the server is gone for good (exit, failed start or stop); say how."""
        await self._gone.wait()
        return self.exit_description or "not started"

    # -- start -----------------------------------------------------------------------

    async def start(self) -> None:
        """Start the child and prove it is ours; raise ``LlamaServerFailed`` otherwise.

        On any failure (cancellation included) the child's process group is
        gone before this raises.
        """
        if self._started:
            raise IllegalTransition("a supervisor starts once; make a new one")
        self._started = True
        self._state = SupervisorState.LOADING
        try:
            await self._start()
        except BaseException:
            with contextlib.suppress(asyncio.CancelledError):
                await self._end_child(grace=0.0)
            self._cleanup_files()
            self._state = SupervisorState.EXITED
            self._gone.set()
            raise
        self._state = SupervisorState.READY

    async def _start(self) -> None:
        pinned = self._options.cpu_variant
        if pinned is not None:
            check_variant(self._binary, pinned)
        self._log_dir.mkdir(parents=True, exist_ok=True)
        self._log = BoundedLog(self.log_path, LOG_CAP_BYTES)
        self._run_dir = Path(tempfile.mkdtemp(prefix="llama-run-", dir=self._log_dir)).absolute()
        flags = await self._help_flags()
        try:
            await self._attempt(pinned, flags)
        except LlamaServerFailed:
            child = self._child
            if child is None or child.returncode != -signal.SIGILL or self._stopping:
                raise
            died = pinned or self._variant
            retry = conservative_variant(available_variants(self._binary), cpu_flags(),
                                         exclude=frozenset({died} if died else ()))
            what = f"{died or 'the automatic pick'} died of SIGILL before ready"
            if retry is None:
                self._notes.append(f"{what}; no conservative CPU variant to retry on")
                raise
            self._notes.append(f"{what}; retried on {retry}")
            await self._end_child(grace=0.0)
            await self._attempt(retry, flags)

    async def _help_flags(self) -> frozenset[str]:
        """The optional flags this build knows, from ``--help`` (none when it fails)."""
        try:
            probe = await asyncio.to_thread(run_probe, [str(self._binary), "--help"],
                                            timeout=HELP_TIMEOUT)
        except OSError as exc:
            raise ConfigRefused(f"{self._binary}: cannot run ({exc.strerror})",
                                code=ErrorCode.LLAMA_SERVER_NOT_FOUND) from exc
        words = set(probe.output.replace(",", " ").split())
        return frozenset(words & {"--no-webui", "--no-ui", "--api-key-file"})

    def _argv(self, binary: Path, port: int, flags: frozenset[str]) -> list[str]:
        assert self._run_dir is not None
        options = self._options
        argv = [str(binary), "-m", str(self._model_argument()), "--host", HOST,
                "--port", str(port),
                "-c", str(options.ctx_size), "-t", str(options.thread_count()),
                "-np", str(options.parallel), "--seed", str(options.seed)]
        if "--api-key-file" in flags:
            key_file = self._run_dir / KEY_FILE
            with contextlib.suppress(FileNotFoundError):
                key_file.unlink()
            fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w", encoding="ascii") as handle:
                handle.write(self._api_key + "\n")
            argv += ["--api-key-file", str(key_file)]
        else:
            argv += ["--api-key", self._api_key]
        if options.model_alias:
            argv += ["--alias", options.model_alias]
        if options.chat_template_file is not None:
            argv += ["--jinja", "--chat-template-file", str(options.chat_template_file)]
        ui_off = next((flag for flag in ("--no-webui", "--no-ui") if flag in flags), None)
        return argv + ([ui_off] if ui_off else [])

    def _model_argument(self) -> Path:
        """``/proc/self/fd/N`` of the pinned file; its path only where ``/proc`` has no fds."""
        model = self._model
        by_descriptor = model.by_descriptor()
        if by_descriptor is not None:
            self._handed = "descriptor"
            return by_descriptor
        try:
            at_path = FileIdentity.of(os.stat(model.path))
        except OSError:
            at_path = None
        if at_path != model.identity:
            model.check_unchanged("before the server started")
            raise ConfigRefused(f"{model.path.name}: another file is at its path now; nothing "
                                "runs a model that is not the one verified",
                                code=ErrorCode.GGUF_CHANGED)
        self._handed = "path"
        return model.path.absolute()

    def _check_opened(self, child: ChildProcess) -> None:
        """Once proven: the file unchanged, and (where maps tell) the child maps that inode."""
        model = self._model
        model.check_unchanged("while the server started")
        self._mapped = maps_file(child.pid, model.identity)
        if self._mapped is False and self._handed == "path":
            raise ConfigRefused(f"{model.path.name}: the server did not map the verified file",
                                code=ErrorCode.GGUF_CHANGED)

    async def _attempt(self, variant: str | None, flags: frozenset[str]) -> None:
        assert self._run_dir is not None
        assert self._log is not None
        binary = self._binary
        if variant is not None:
            binary = stage_variant(self._binary, variant, self._run_dir / f"variant-{variant}")
            self._log.write(f"--- labfy-ref: staged CPU variant {variant} ---\n".encode())
        self._port, self._api_key = free_port(HOST), secrets.token_urlsafe(32)
        self._variant = None
        argv = self._argv(binary, self._port, flags)
        self._model.check_unchanged("before the server started")
        try:
            self._child = ChildProcess(argv, cwd=self._run_dir, env=child_environment(),
                                       log=self._log, on_exit=self._child_ended,
                                       pass_fds=(self._model.fd,))
        except OSError as exc:
            raise ConfigRefused(f"{binary}: cannot run ({exc.strerror})",
                                code=ErrorCode.LLAMA_SERVER_NOT_FOUND) from exc
        deadline = asyncio.get_running_loop().time() + self._options.start_timeout
        async with httpx.AsyncClient(trust_env=False, follow_redirects=False,
                                     timeout=_REQUEST_TIMEOUT) as http:
            await self._wait_healthy(self._child, http, deadline)
            await self._prove_ours(self._child, http)
        self._check_opened(self._child)
        with contextlib.suppress(FileNotFoundError):  # read at start; no longer needed
            (self._run_dir / KEY_FILE).unlink()

    def _fail(self, code: ErrorCode, what: str) -> LlamaServerFailed:
        tail = " ".join(self.log_tail(1024).split())
        room = MAX_MESSAGE_CHARS - len(what) - 8
        message = f"{what}; log: …{tail[-room:]}" if tail and room >= 24 else what
        return LlamaServerFailed(message, code=code)

    def _exited_error(self, child: ChildProcess) -> LlamaServerFailed:
        why = "was stopped" if self._stopping else "exited"
        return self._fail(ErrorCode.LLAMA_SERVER_EXITED,
                          f"llama-server {why} before ready ({child.exit_description})")

    async def _wait_healthy(self, child: ChildProcess, http: httpx.AsyncClient,
                            deadline: float) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if child.exited.is_set():
                raise self._exited_error(child)
            if loop.time() >= deadline:
                raise self._fail(ErrorCode.LLAMA_SERVER_START_TIMEOUT,
                                 f"llama-server not ready within {self._options.start_timeout:g}"
                                 " s (/health never answered 200)")
            self._observe_variant(child)
            budget = min(_REQUEST_TIMEOUT, max(0.05, deadline - loop.time()))
            if await self._status(http, ModelPath.HEALTH, with_key=False, timeout=budget) == 200:
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(_POLL, max(0.0, deadline - loop.time()))):
                    await child.exited.wait()

    async def _status(self, http: httpx.AsyncClient, path: ModelPath, *, with_key: bool,
                      timeout: float = _REQUEST_TIMEOUT) -> int | None:
        """The status of one GET on our port; None when nothing answered."""
        headers = {"Authorization": f"Bearer {self._api_key}"} if with_key else {}
        try:
            reply = await http.get(self.endpoint.url(path), headers=headers, timeout=timeout)
        except httpx.HTTPError:
            return None
        return reply.status_code

    async def _prove_ours(self, child: ChildProcess, http: httpx.AsyncClient) -> None:
        """SM-05: alive child, its own listener, 401 without the key, then 200 with it."""
        port = self.endpoint.port
        if child.exited.is_set():
            raise self._exited_error(child)
        if listener_owned_by(child.pid, port) is False:
            raise self._fail(ErrorCode.LLAMA_SERVER_NOT_OURS,
                             f"port {port} is held by a process that is not our child")
        without = await self._status(http, ModelPath.MODELS, with_key=False)
        if without != 401:
            raise self._fail(ErrorCode.LLAMA_SERVER_NOT_OURS,
                             f"port {port} answered /v1/models with {without} without the "
                             "key; it is not our llama-server")
        if child.exited.is_set():
            raise self._exited_error(child)
        with_key = await self._status(http, ModelPath.MODELS, with_key=True)
        if with_key != 200:
            raise self._fail(ErrorCode.LLAMA_SERVER_NOT_OURS,
                             f"port {port} answered /v1/models with {with_key} to our key; "
                             "it is not our llama-server")
        self._observe_variant(child)

    def _observe_variant(self, child: ChildProcess) -> None:
        if not child.exited.is_set():
            self._variant = loaded_variant(child.pid) or self._variant

    # -- the end ---------------------------------------------------------------------

    def _child_ended(self) -> None:
        """The child ended on its own (its group killed, the child reaped)."""
        if self._state is SupervisorState.READY and not self._stopping:
            self._state = SupervisorState.EXITED
            self._gone.set()

    async def _end_child(self, grace: float) -> None:
        """Terminate (SIGKILL at once when ``grace`` is 0) and reap; wait for the group."""
        child = self._child
        if child is None:
            return
        if grace > 0:
            await child.terminate(grace)
        else:
            child.release()
        await group_gone(child.pid, timeout=max(grace, _GROUP_TIMEOUT))

    def _cleanup_files(self) -> None:
        if self._run_dir is not None:
            shutil.rmtree(self._run_dir, ignore_errors=True)
            self._run_dir = None
        if self._log is not None:
            self._log.close()
            self._log = None

    async def stop(self, grace: float = 5.0) -> None:
        """SIGTERM the group, SIGKILL it after ``grace`` s, reap, clean up; idempotent."""
        async with self._stop_lock:
            self._stopping = True
            await self._end_child(grace)
            self._cleanup_files()
            if self._started:
                self._state = SupervisorState.STOPPED
            self._gone.set()

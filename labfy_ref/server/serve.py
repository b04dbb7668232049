"""``labfy-ref serve``: compose the server from a resolved configuration and run it (SV-01).

It configures the server log first (SV-05: ``--log-level``, ``--log-file``,
``--debug``; uvicorn's own records pass through it, one line each), binds its
own loopback socket (never the reserved port), takes the workspace lock,
prints the URL and — on its own line — the login code, and writes
``--ready-file`` (mode 0600) once the server accepts connections. The code is
never put in a URL and never logged. A failure after the configuration was
accepted is one ``SERVE_FAILED`` line (exit 1), never a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import html
import json
import logging
import math
import os
import resource
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import webbrowser
from collections.abc import Callable
from pathlib import Path
from types import FrameType

import uvicorn
from fastapi import FastAPI

from labfy_ref.assemble import AgentModel, endpoint_client, open_agent_model
from labfy_ref.bridge.service import Bridge
from labfy_ref.clock import iso, utcnow
from labfy_ref.config import (
    DEFAULT_PORT,
    DEFAULT_SHUTDOWN_GRACE_SECONDS,
    AgentConfig,
    ServeConfig,
)
from labfy_ref.errors import ConfigRefused, ErrorCode, LabfyError, WorkspaceError
from labfy_ref.gateway import AgentGateway
from labfy_ref.host import Composition, default_composition, load_composition
from labfy_ref.logs import configure, debug_enabled, one_line
from labfy_ref.model import LocalModelClient
from labfy_ref.model.gguf import Progress, open_gguf
from labfy_ref.model.supervised import SupervisedLlama, fitting_slots, supervised_llama
from labfy_ref.modes import BridgeToggle
from labfy_ref.netutil import RESERVED_PORTS
from labfy_ref.protocol import ChatModel
from labfy_ref.runtime import AgentRuntime, RuntimeLimits
from labfy_ref.server.app import create_app
from labfy_ref.server.auth import Authenticator, cookie_name, load_accounts, new_login_code
from labfy_ref.server.connections import DEFAULT_LIMITS, ConnectionLimits, guarded_protocol
from labfy_ref.server.registry import RunningServer, holder_of, register, unregister
from labfy_ref.server.state import ServerState
from labfy_ref.server.work_access import WorkAccess
from labfy_ref.text import terminal
from labfy_ref.workspace import (
    Workspace,
    WorkspaceLock,
    default_specimen_workspace,
    open_workspace,
)

_BIND_TRIES = 16
log = logging.getLogger("labfy_ref.server")


def bind_socket(host: str, port: int | None) -> socket.socket:
    """A listening loopback socket on ``port`` or a free one, never a reserved port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for _ in range(_BIND_TRIES):
        # Made as TCP explicitly: asyncio sets TCP_NODELAY on accepted sockets only when
        # the listener's protocol is IPPROTO_TCP (protocol 0 costs ~40 ms per request).
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port or 0))
        except OSError as exc:
            sock.close()
            raise ConfigRefused(f"cannot bind {host}:{port}: {exc.strerror}") from exc
        if sock.getsockname()[1] not in RESERVED_PORTS:
            sock.listen(128)
            sock.setblocking(False)
            return sock
        sock.close()
    raise ConfigRefused("could not find a free port")


def bind_default(host: str) -> socket.socket:
    """A listening socket on :data:`DEFAULT_PORT` or, if it is taken, the next free port of
    the 20 after it (a reserved port skipped); ``PORT_REFUSED`` when all are taken."""
    for port in range(DEFAULT_PORT, DEFAULT_PORT + 21):
        if port in RESERVED_PORTS:
            continue
        try:
            return bind_socket(host, port)
        except ConfigRefused:
            continue
    raise ConfigRefused(f"ports {DEFAULT_PORT}-{DEFAULT_PORT + 20} are all in use: pass "
                        "--port N, or --port 0 for any free port", code=ErrorCode.PORT_REFUSED)


def build_state(config: ServeConfig, workspace: Workspace, port: int, launch_code: str, *,
                limits: RuntimeLimits | None = None,
                supervised: SupervisedLlama | None = None,
                owns_model: bool = True, agent: ChatModel | None = None,
                providers: dict[str, SupervisedLlama] | None = None) -> ServerState:
    """Compose store, gateway, agent and runtime for ``workspace``.

    ``supervised`` is the server's own llama-server (SM-07), not started yet:
    the server starts it in the background and shows "loading" until ready.
    ``agent`` answers turns instead of any model (``labfy-ref eval``'s control).
    ``providers`` are the prepared llama-servers of ``--providers``' supervised models
    (BR-19; :func:`prepare_supervised`), started like ``supervised``.
    """
    accounts = load_accounts(config.accounts) if config.accounts else ()
    load: Callable[[], Composition] = (
        functools.partial(load_composition, config.composition)
        if config.composition is not None else default_composition)
    load()  # a document that does not read stops serve here, not later in the background
    store = workspace.open_store()
    limits = limits or RuntimeLimits(conclude_after=config.conclude_after,
                                     guidance=config.guidance)
    gateway = AgentGateway(workspace, store, max_result_bytes=limits.max_result_bytes)
    opened = (AgentModel(agent, None, str(getattr(agent, "label", "agent")))
              if agent is not None  # the eval's control: it stands in for the model
              else open_agent_model(config.agent, supervised=supervised))
    model, client, label = opened.model, opened.client, opened.label
    runtime = AgentRuntime(model, gateway, label=label, permission_mode=config.permission_mode,
                           limits=limits)
    provider_clients = _provider_clients(config, providers or {})
    bridge = Bridge(load, {"workspace": workspace, "gateway": gateway,
                                  "agent_config": config.agent, "model_client": client,
                                  "runtime_limits": limits,
                                  "session_titles": config.session_titles.value,
                                  "providers": tuple((p.name, p.agent, provider_clients[p.name])
                                                     for p in config.providers),
                                  "approval_seconds": config.approval_seconds},
                    enabled=config.bridge, row_seconds=config.bridge_row_seconds,
                    toggle_locked=config.bridge_toggle is BridgeToggle.LOCKED)
    auth = Authenticator(launch_code, accounts, cookie=cookie_name(port),
                         idle_seconds=config.session_idle_seconds,
                         max_seconds=config.session_max_seconds)
    # the Work store opens on first use (work_access.py); only its URL is settled here
    work = WorkAccess.of(workspace.root, workspace.workspace_id, config.work_db)
    return ServerState(config=config, workspace=workspace, store=store, gateway=gateway,
                       runtime=runtime, auth=auth, port=port,
                       bridge=bridge, work=work, client=client, supervised=supervised,
                       owns_model=owns_model, provider_clients=tuple(provider_clients.values()))


def _provider_clients(config: ServeConfig, prepared: dict[str, SupervisedLlama],
                      ) -> dict[str, LocalModelClient | SupervisedLlama]:
    """A client of each ``--providers`` model (BR-19): the server's own, shared with the
    bridge's host as the runtime's is, closed by the server."""
    clients: dict[str, LocalModelClient | SupervisedLlama] = {}
    for provider in config.providers:
        if provider.agent.supervised is None:
            clients[provider.name] = endpoint_client(provider.agent)
        elif provider.name in prepared:
            clients[provider.name] = prepared[provider.name]
        else:
            raise ConfigRefused(f"--providers: provider {provider.name}: a supervised model is "
                                "verified and started by labfy-ref serve itself")
    return clients


def uvicorn_config(app: FastAPI, log_level: str = "warning",
                   limits: ConnectionLimits = DEFAULT_LIMITS,
                   grace: float = DEFAULT_SHUTDOWN_GRACE_SECONDS) -> uvicorn.Config:
    """How uvicorn runs our app: no access log (no URLs in logs), no Server header, h11
    with SV-09's deadlines and connection cap (no WebSocket: the app serves none).

    ``log_config=None``: uvicorn installs no handler of its own; :func:`serve`
    routes its loggers through ours.
    """
    return uvicorn.Config(app, log_level=log_level, log_config=None, access_log=False,
                          lifespan="on", server_header=False, http=guarded_protocol(limits),
                          ws="none", timeout_keep_alive=math.ceil(limits.idle_seconds),
                          timeout_graceful_shutdown=grace)  # type: ignore[arg-type]


def _failed(message: str) -> LabfyError:
    return LabfyError(message, code=ErrorCode.SERVE_FAILED)


class _UvicornRelay(logging.Handler):
    """uvicorn's records, re-emitted through the product's log as one line each.

    uvicorn logs some failures with ``exc_info`` and an application's startup
    failure as a formatted traceback inside the message; without ``--debug``
    only the first line and the exception's class are kept (SV-05).
    """

    def emit(self, record: logging.LogRecord) -> None:
        """Hand ``record`` (cut to one line unless debugging) to ``labfy_ref.server.uvicorn``."""
        if not debug_enabled():
            record = one_line(record)
        logging.getLogger(f"{log.name}.uvicorn").handle(record)


#: Descriptors kept free of connections: the log, the stores, the model client, the listener.
RESERVED_DESCRIPTORS = 128


def connection_limits(limits: ConnectionLimits = DEFAULT_LIMITS) -> ConnectionLimits:
    """SV-09 at start: raise the soft descriptor limit to the hard one, and keep the
    connection cap below what it allows (a warning says so when it must be lowered)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the descriptor limit from %d to %s: %s", soft, hard, exc)
    if soft == resource.RLIM_INFINITY or soft - RESERVED_DESCRIPTORS >= limits.max_connections:
        return limits
    cap = max(1, soft - RESERVED_DESCRIPTORS)
    log.warning("descriptor limit %d: at most %d connections at once", soft, cap)
    return dataclasses.replace(limits, max_connections=cap)


def _configure_log(config: ServeConfig) -> str:
    """Set up the server log; return the level uvicorn's own loggers get."""
    try:
        configure(config.log_level, config.log_file, debug=config.debug)
    except OSError as exc:
        raise _failed(f"--log-file: cannot open {config.log_file}: {exc.strerror}") from exc
    ours = logging.getLogger(log.name.split(".", 1)[0])
    relay = _UvicornRelay(ours.getEffectiveLevel())
    uvicorn_root = logging.getLogger("uvicorn")
    for handler in list(uvicorn_root.handlers):
        uvicorn_root.removeHandler(handler)
    uvicorn_root.addHandler(relay)
    uvicorn_root.propagate = False
    # uvicorn's info lines repeat ours (started, stopped); its warnings and errors matter.
    if config.debug:
        return "debug"
    return "error" if config.log_level == "error" else "warning"


def _write_ready_file(path: Path, document: dict[str, object]) -> None:
    """Write ``document`` to ``path`` atomically, mode 0600, or raise ``SERVE_FAILED``.

    The temporary name is random and created exclusively without following a
    link, so nobody can plant a file or a symlink to be written through.
    """
    temp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
    except OSError as exc:
        raise _failed(f"--ready-file: cannot write {path}: {exc.strerror}") from exc
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            os.fchmod(handle.fileno(), 0o600)  # exactly 0600, whatever the umask
            json.dump(document, handle)
        os.replace(temp, path)
    except OSError as exc:
        temp.unlink(missing_ok=True)
        raise _failed(f"--ready-file: cannot write {path}: {exc.strerror}") from exc
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def prepare_supervised(agent: AgentConfig, scratch: Path, held: contextlib.ExitStack,
                       progress: Progress | None = None, *,
                       name: str = "llama-server") -> SupervisedLlama | None:
    """SM-07 before serving: govern (file size only), verify (SHA-256), then the model to start.

    Both checks run before anything starts; a refusal is ``ConfigRefused``
    (``RESOURCES_INSUFFICIENT``, ``GGUF_SHA256_MISMATCH``: exit 2). The file
    stays open in ``held`` (SM-09): what was checked is what the server runs.
    ``name`` names its log folder (each supervised provider has its own).
    """
    supervised = agent.supervised
    if supervised is None:
        return None
    assert agent.model_id is not None
    model = held.enter_context(open_gguf(supervised.model_file))
    slots = fitting_slots(model, supervised.llama_server, scratch, agent.slots)
    if slots < agent.slots:
        log.warning("%s: %d slots asked, memory allows %d of the model's context; "
                    "llama-server gets %d", name, agent.slots, slots, slots)
    model.hash(supervised.model_sha256, progress)
    return supervised_llama(supervised.llama_server, model,
                            agent.model_id, cpu_variant=supervised.cpu_variant,
                            timeout_seconds=agent.timeout_seconds,
                            log_dir=scratch / name, slots=slots)


def banner(workspace: Workspace, agent: str, url: str, code: str, *, loading: bool,
           bridge: bool) -> list[str]:
    """What ``serve`` prints once serving (README pins these lines): the workspace and agent,
    the one-click login link (SV-10), the engine page and OpenAI base URL with the bridge,
    and last the page's URL and, on its own line, the login code."""
    lines = [f"labfy-ref: workspace '{workspace.name}' ({workspace.kind.value}), agent: {agent}"]
    if loading:
        lines.append("labfy-ref: llama-server is loading; the page shows when the model is "
                     "ready")
    lines.append(f"labfy-ref: log in with one click: {url}#code={code}")
    if bridge:
        lines += [f"labfy-ref: engine page: {url}cordis",
                  f"labfy-ref: OpenAI base URL: {url}api/cordis/v1 (API key: the login code)"]
    return [*lines, f"Open {url} and log in with this login code:", code]


def open_in_browser(link: str) -> Path | None:
    """Open ``link`` in the default browser through a 0600 redirect file (SV-10): the code
    never appears on the browser's command line, which other users can read. The file's
    path, or None when no browser could be started (the banner's link stays)."""
    folder = Path(tempfile.mkdtemp(prefix="labfy-open-"))  # 0700
    page = folder / "open.html"
    fd = os.open(page, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        quoted = html.escape(link, quote=True)
        out.write(f'<!doctype html><meta charset="utf-8"><meta name="referrer" '
                  f'content="no-referrer"><meta http-equiv="refresh" content="0;url={quoted}">'
                  f'<title>labfy-ref</title><a href="{quoted}">Open labfy-ref</a>\n')
    if not webbrowser.open(page.as_uri()):
        print("labfy-ref: no browser could be opened; use the link above", flush=True)
    return page


def serve(config: ServeConfig, progress: Progress | None = None) -> int:
    """Run the workspace server until SIGINT/SIGTERM; return the exit code."""
    uvicorn_level = _configure_log(config)
    workspace = (open_workspace(config.workspace) if config.workspace is not None
                 else default_specimen_workspace())
    with (tempfile.TemporaryDirectory(prefix="labfy-serve-") as scratch,
          contextlib.ExitStack() as held):
        supervised = prepare_supervised(config.agent, Path(scratch), held, progress)
        providers = {provider.name: prepared for provider in config.providers
                     if (prepared := prepare_supervised(
                         provider.agent, Path(scratch), held, progress,
                         name=f"llama-server-{provider.name}")) is not None}
        return _serve(config, workspace, uvicorn_level, supervised, providers)


def _locked(workspace: Workspace) -> WorkspaceLock:
    """The workspace's lock, taken; ``WORKSPACE_LOCKED`` names the server holding it (SV-12)."""
    lock = WorkspaceLock(workspace)
    try:
        lock.acquire()
    except WorkspaceError as exc:
        holder = holder_of(workspace.root, os.environ) \
            if exc.code is ErrorCode.WORKSPACE_LOCKED else None
        if holder is None:
            raise
        raise WorkspaceError(f"{exc.message}: labfy-ref serve (PID {holder.pid}) serves it at "
                             f"{holder.url}", code=ErrorCode.WORKSPACE_LOCKED) from None
    return lock


def _bound(config: ServeConfig) -> socket.socket:
    """The listening socket: ``--port``, or the default port or the next free (said)."""
    if config.port is not None:
        return bind_socket(config.host.value, config.port)
    sock = bind_default(config.host.value)
    port = int(sock.getsockname()[1])
    if port != DEFAULT_PORT:
        print(f"labfy-ref: port {DEFAULT_PORT} is in use (another program holds it); "
              f"serving on {port}", flush=True)
    return sock


def _serve(config: ServeConfig, workspace: Workspace, uvicorn_level: str,
           supervised: SupervisedLlama | None,
           providers: dict[str, SupervisedLlama] | None = None) -> int:
    lock = _locked(workspace)
    sock = None
    announced: list[str] = []  # the URL, once the server is announced
    opened: list[Path | None] = []  # the --open redirect file, removed at stop
    registered: list[Path] = []  # this server's file for labfy-ref list, removed at stop
    checks: list[asyncio.Task[None]] = []  # the one look at the model endpoint, held
    failures: list[LabfyError] = []
    try:
        sock = _bound(config)
        port = int(sock.getsockname()[1])
        url = f"http://{config.host.url_form}:{port}/"
        launch_code = new_login_code()
        state = build_state(config, workspace, port, launch_code, supervised=supervised,
                            providers=providers)

        def announce() -> None:
            # Runs in the app's startup: a failure here stops the server cleanly instead
            # of failing the startup (which uvicorn reports as a traceback and exit 3).
            if config.ready_file is not None:
                try:
                    _write_ready_file(config.ready_file, {"url": url, "port": port,
                                                          "token": launch_code,
                                                          "pid": os.getpid()})
                except LabfyError as exc:
                    failures.append(exc)
                    server.should_exit = True
                    return
            announced.append(url)
            registered.append(register(RunningServer(str(workspace.root.resolve()), url,
                                                     os.getpid(), iso(utcnow())), os.environ))
            log.info("server started workspace=%s kind=%s agent=%s address=%s pid=%d",
                     json.dumps(workspace.name, ensure_ascii=False), workspace.kind.value,
                     json.dumps(state.runtime.label, ensure_ascii=False), url, os.getpid())
            for line in banner(workspace, state.runtime.label, url, launch_code,
                               loading=supervised is not None, bridge=config.bridge):
                print(line, flush=True)
            if config.open_browser:
                opened.append(open_in_browser(f"{url}#code={launch_code}"))
            if state.client is not None and supervised is None:
                checks.append(asyncio.get_running_loop().create_task(_warn_if_down(state)))

        server = StoppingServer(uvicorn_config(create_app(state, on_started=announce),
                                               uvicorn_level, connection_limits(),
                                               config.shutdown_grace_seconds), state)
        try:
            asyncio.run(_run(server, sock))
        except SystemExit:  # uvicorn exits 3 when the app's startup fails; it logged why
            raise _failed("the server could not start (the server log says why)") from None
        if failures:
            raise failures[0]
        return 0
    finally:
        if sock is not None:
            sock.close()
        if announced and config.ready_file is not None:
            config.ready_file.unlink(missing_ok=True)
        for page in opened:
            if page is not None:
                shutil.rmtree(page.parent, ignore_errors=True)
        for entry in registered:
            unregister(entry)
        lock.release()
        if announced:
            log.info("server stopped address=%s", announced[0])


async def _warn_if_down(state: ServerState) -> None:
    """Say once, on the terminal, when the configured model endpoint does not answer: turns
    end MODEL_UNAVAILABLE until it does (the pages show the same reason)."""
    available, diagnostic = await state.availability()
    endpoint = state.config.agent.endpoint
    if not available:
        where = f" at {endpoint}" if endpoint is not None else ""
        print(f"labfy-ref: warning: the model endpoint{where} does not answer "
              f"({terminal(diagnostic, limit=200)}); turns end MODEL_UNAVAILABLE until it does",
              flush=True)


class StoppingServer(uvicorn.Server):
    """uvicorn's server, stopping as SV-13 says: the first SIGTERM or SIGINT stops accepting
    and, at once, cancels every turn (no effect after the signal) and ends every open stream
    (its interruption chunk, or ``[DONE]``) by closing the runtime and releasing the bridge's
    host; open connections then get ``--shutdown-grace`` seconds. A second signal exits at
    once. The lifespan's close runs either way (it stops a supervised llama-server)."""

    def __init__(self, config: uvicorn.Config, state: ServerState) -> None:
        super().__init__(config)
        self.state = state
        self._interrupting: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets=sockets)
        if self.force_exit:  # the lifespan's close was skipped: the child must still stop
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.state.close(), FORCED_CLOSE_SECONDS)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        second = self.should_exit
        super().handle_exit(sig, frame)
        if second:
            self.force_exit = True  # any second signal, not only a second Ctrl-C
        elif self._loop is not None:
            self._loop.call_soon_threadsafe(self._interrupt)

    def _interrupt(self) -> None:
        if self._interrupting is None:
            self._interrupting = asyncio.get_running_loop().create_task(self.state.interrupt())


#: After a second signal, how long the server still gives its close (a supervised child's
#: stop: terminate, then kill) before it exits regardless.
FORCED_CLOSE_SECONDS = 3.0


async def _run(server: uvicorn.Server, sock: socket.socket) -> None:
    # uvicorn shuts down gracefully on SIGINT/SIGTERM, then re-raises the signal with
    # the handlers it found. Ours only note it, so the process exits 0 after cleanup.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: None)
    await server.serve(sockets=[sock])
    sys.stdout.flush()

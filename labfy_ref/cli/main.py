"""``labfy-ref``: the one console script (SPEC §14).

Exit codes: 0 ok, 2 configuration refused, 1 runtime failure. Every message is
one line starting with its error code; a traceback appears only with
``--debug``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn, TextIO

from labfy_ref import __version__
from labfy_ref.cli.options import add_serve_options, raw_options
from labfy_ref.config import resolve
from labfy_ref.errors import ConfigRefused, ErrorCode, LabfyError, WorkspaceError, bounded
from labfy_ref.model.gguf import verify_gguf
from labfy_ref.report import DEFAULT_REPORT_DIR, DEFAULT_REQUIREMENTS, FORMATS, regenerate

EXIT_OK, EXIT_FAILURE, EXIT_REFUSED = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as ``CONFIG_INVALID: ...`` and exits 2."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{ErrorCode.CONFIG_INVALID.value}: {bounded(message)}\n")
        sys.exit(EXIT_REFUSED)


def _check_config(args: argparse.Namespace) -> int:
    # The files serve would read are read here too, with the same functions; no socket opens.
    from labfy_ref.host import load_composition  # noqa: PLC0415
    from labfy_ref.server.auth import load_accounts  # noqa: PLC0415

    config = resolve(raw_options(args), os.environ)
    if config.composition is not None:
        load_composition(config.composition)
    if config.accounts is not None:
        load_accounts(config.accounts)
    print(json.dumps(config.as_json(), indent=2))
    return EXIT_OK


def _serve(args: argparse.Namespace) -> int:
    # The server stack (FastAPI, uvicorn) loads only for the commands that need it.
    from labfy_ref.server.serve import serve  # noqa: PLC0415

    return serve(resolve(raw_options(args), os.environ))


def _workspace_init(args: argparse.Namespace) -> int:
    from labfy_ref.workspace import init_workspace  # noqa: PLC0415

    workspace = init_workspace(Path(args.directory), specimen=args.specimen, name=args.name)
    print(f"created {workspace.kind.value} workspace '{workspace.name}' at {workspace.root}")
    return EXIT_OK


def _progress_bar(stream: TextIO) -> Callable[[int, int], None] | None:
    """A one-line progress bar on a terminal; nothing when output is not a TTY."""
    if not stream.isatty():
        return None

    def show(done: int, total: int) -> None:
        share = done / total if total else 1.0
        stream.write(f"\r[{'#' * int(share * 30):<30}] {share:6.1%} of {total} bytes")
        if done >= total:
            stream.write("\n")
        stream.flush()

    return show


def _verify_gguf(args: argparse.Namespace) -> int:
    info = verify_gguf(Path(args.file), args.sha256, _progress_bar(sys.stderr))
    print(json.dumps({"file": str(info.path), "size": info.size, "gguf_version": info.version,
                      "sha256": info.sha256}))
    return EXIT_OK


def _formats(text: str) -> tuple[str, ...]:
    chosen = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [fmt for fmt in chosen if fmt not in FORMATS]
    if not chosen or unknown:
        raise ConfigRefused(f"--format takes a comma list of {', '.join(FORMATS)}")
    return chosen


def _report(args: argparse.Namespace) -> int:
    report, written = regenerate(Path(args.results), Path(args.requirements),
                                 _formats(args.format))
    counts = ", ".join(f"{status} {count}" for status, count in report.summary().items())
    for path in written:
        print(path)
    print(f"requirements: {counts}")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    """The full command-line grammar."""
    parser = _Parser(prog="labfy-ref", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--version", action="version", version=f"labfy-ref {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    serve = commands.add_parser("serve", help="run the workspace server (demo agent by default)")
    add_serve_options(serve)
    serve.set_defaults(handler=_serve)

    workspace = commands.add_parser("workspace", help="workspace tools")
    workspace_commands = workspace.add_subparsers(dest="workspace_command", required=True,
                                                  parser_class=_Parser)
    init = workspace_commands.add_parser("init", help="create a workspace")
    init.add_argument("directory", metavar="DIR")
    init.add_argument("--specimen", action="store_true",
                      help="fill it with the bundled SPECIMEN objects, evidence and files")
    init.add_argument("--name", metavar="N")
    init.set_defaults(handler=_workspace_init)

    gguf = commands.add_parser("verify-gguf", help="check a GGUF's magic and SHA-256")
    gguf.add_argument("file", metavar="FILE")
    gguf.add_argument("--sha256", required=True, metavar="HEX")
    gguf.set_defaults(handler=_verify_gguf)

    check = commands.add_parser("check-config", help="resolve flags and env as serve would")
    add_serve_options(check)
    check.set_defaults(handler=_check_config)

    report = commands.add_parser("report", help="rebuild the status report from recorded results")
    report.add_argument("--results", default=str(DEFAULT_REPORT_DIR), metavar="DIR")
    report.add_argument("--requirements", default=str(DEFAULT_REQUIREMENTS), metavar="FILE")
    report.add_argument("--format", default="md,json", metavar="md,json,html")
    report.set_defaults(handler=_report)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; map every error to its exit code and one line."""
    args = build_parser().parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except (ConfigRefused, WorkspaceError) as exc:
        sys.stderr.write(f"{exc}\n")
        return EXIT_REFUSED
    except LabfyError as exc:
        sys.stderr.write(f"{exc}\n")
        return EXIT_FAILURE
    except Exception as exc:
        if args.debug:
            traceback.print_exc()
        sys.stderr.write(f"INTERNAL_ERROR: {bounded(type(exc).__name__ + ': ' + str(exc))}\n")
        return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())

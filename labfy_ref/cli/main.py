"""``labfy-ref``: the one console script (SPEC §14).

Exit codes: 0 ok, 2 configuration refused, 1 runtime failure. Every message is
one line starting with its error code; a traceback appears only with
``--debug`` (accepted anywhere on the line).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn, TextIO

from labfy_ref import __version__
from labfy_ref.cli.options import (
    add_debug_option,
    add_guidance_option,
    add_serve_options,
    add_supervised_options,
    raw_options,
)
from labfy_ref.cli.work import add_work_commands
from labfy_ref.config import (
    RawOptions,
    ServeConfig,
    conclude_after_option,
    guidance_option,
    resolve,
    supervised_model,
)
from labfy_ref.errors import (
    ConfigRefused,
    ErrorCode,
    LabfyError,
    ReportInvalid,
    WorkspaceError,
    bounded,
)
from labfy_ref.model.gguf import verify_gguf
from labfy_ref.model.governor import format_bytes
from labfy_ref.protocol.narrowing import DEFAULT_CONCLUDE_AFTER, GUIDANCE
from labfy_ref.report import (
    DEFAULT_REPORT_DIR,
    DEFAULT_REQUIREMENTS,
    FORMATS,
    REQUIREMENTS_COPY,
    default_requirements,
    regenerate,
)
from labfy_ref.report.compare import GATES, parse_gates, tripped
from labfy_ref.text import terminal

EXIT_OK, EXIT_FAILURE, EXIT_REFUSED = 0, 1, 2
DESCRIPTION = ("A secure local-model agent runtime and engine bridge: serve a workspace to "
               "a browser or an API client, check a configuration or a model file, and "
               "rebuild the qualification report.")
_EPILOG = ("Exit codes: 0 ok, 2 configuration refused, 1 runtime failure. Errors are one "
           "line 'CODE: reason' on stderr; --debug (anywhere on the line) adds tracebacks.")


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as ``CONFIG_INVALID: ...`` and exits 2."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{ErrorCode.CONFIG_INVALID.value}: "
                         f"{bounded(f'{message} (see --help)')}\n")
        sys.exit(EXIT_REFUSED)


def _usage(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    """The handler of a command group named without its sub-command: help, exit 2."""

    def show(_: argparse.Namespace) -> int:
        parser.print_help(sys.stderr)
        return EXIT_REFUSED

    return show


def _workspace_preview(config: ServeConfig) -> dict[str, object]:
    """The workspace serve would use, opened as serve opens it; nothing locked or created.

    An older store is refused as serve refuses it, except the per-user SPECIMEN
    copy, which serve upgrades itself: that is shown as ``workspace_upgrade``.
    """
    from labfy_ref.workspace import SCHEMA_VERSION, Workspace, open_workspace  # noqa: PLC0415
    from labfy_ref.workspace.layout import (  # noqa: PLC0415
        WorkspaceKind,
        default_specimen_path,
        existing_default_specimen,
    )

    workspace: Workspace | None
    if config.workspace is not None:
        workspace = open_workspace(config.workspace)
    else:
        try:
            workspace = existing_default_specimen()
        except WorkspaceError as exc:
            if exc.code is not ErrorCode.WORKSPACE_OUTDATED:
                raise
            return {"workspace": str(default_specimen_path()),
                    "workspace_kind": WorkspaceKind.SPECIMEN.value, "workspace_exists": True,
                    "workspace_upgrade": f"to schema version {SCHEMA_VERSION} when serve "
                                         "starts; a backup is kept"}
    if workspace is None:
        return {"workspace": str(default_specimen_path()),
                "workspace_kind": WorkspaceKind.SPECIMEN.value, "workspace_exists": False,
                "workspace_upgrade": None}
    return {"workspace": str(workspace.root), "workspace_kind": workspace.kind.value,
            "workspace_exists": True, "workspace_upgrade": None}


def _list(args: argparse.Namespace) -> int:
    from labfy_ref.server.registry import running  # noqa: PLC0415

    servers = running(os.environ)
    if args.json:
        print(json.dumps([server.as_json() for server in servers], ensure_ascii=False))
        return EXIT_OK
    for server in servers:
        print(f"{server.pid}\t{server.url}\t{server.started_at}\t{terminal(server.workspace)}")
    if not servers:
        print("no labfy-ref server is running for this user", file=sys.stderr)
    return EXIT_OK


def _check_config(args: argparse.Namespace) -> int:
    # The files serve would read are read here too, with the same functions; no socket opens.
    from labfy_ref.host import load_composition  # noqa: PLC0415
    from labfy_ref.server.auth import load_accounts  # noqa: PLC0415

    config = resolve(raw_options(args), os.environ)
    if config.composition is not None:
        load_composition(config.composition)
    if config.accounts is not None:
        load_accounts(config.accounts)
    document = config.as_json()
    document["server"].update(_workspace_preview(config))
    print(json.dumps(document, indent=2))
    return EXIT_OK


def _serve(args: argparse.Namespace) -> int:
    # The server stack (FastAPI, uvicorn) loads only for the commands that need it.
    from labfy_ref.server.serve import serve  # noqa: PLC0415

    return serve(resolve(raw_options(args), os.environ), _progress_bar(sys.stderr))


def _workspace_init(args: argparse.Namespace) -> int:
    from labfy_ref.workspace import init_workspace  # noqa: PLC0415

    workspace = init_workspace(Path(args.directory), specimen=args.specimen, name=args.name)
    print(f"created {workspace.kind.value} workspace '{terminal(workspace.name)}' at "
          f"{terminal(str(workspace.root))}")
    return EXIT_OK


def _workspace_upgrade(args: argparse.Namespace) -> int:
    from labfy_ref.workspace import upgrade_workspace  # noqa: PLC0415

    root = Path(args.directory).resolve()
    done = upgrade_workspace(root)
    if done.backup is None:
        print(f"the workspace at {terminal(str(root))} is already at schema version "
              f"{done.to_version}; nothing to do")
    else:
        print(f"upgraded the workspace at {terminal(str(root))} from schema version "
              f"{done.from_version} to {done.to_version}; backup: {terminal(str(done.backup))}")
    return EXIT_OK


def _progress_bar(stream: TextIO) -> Callable[[int, int], None] | None:
    """A one-line progress bar on a terminal; nothing when output is not a TTY."""
    if not stream.isatty():
        return None

    def show(done: int, total: int) -> None:
        share = done / total if total else 1.0
        stream.write(f"\r[{'#' * int(share * 30):<30}] {share:6.1%} "
                     f"{format_bytes(done)} of {format_bytes(total)}")
        if done >= total:
            stream.write("\n")
        stream.flush()

    return show


def _smoke(args: argparse.Namespace) -> int:
    from labfy_ref.smoke import (  # noqa: PLC0415
        PASSED,
        SmokeOptions,
        run_smoke,
    )

    # the same resolution as serve's --model-file (file, digest, binary, variant)
    model = supervised_model(RawOptions(llama_server=args.llama_server,
                                        model_file=args.model_file,
                                        model_sha256=args.model_sha256,
                                        cpu_variant=args.cpu_variant), os.environ)
    assert model is not None  # both flags are required by the parser
    options = SmokeOptions(model=model, record_dir=Path(args.record),
                           conclude_after=conclude_after_option(args.conclude_after),
                           guidance=guidance_option(args.guidance))

    def say(line: str) -> None:
        print(f"smoke: {line}", flush=True)

    record = asyncio.run(run_smoke(options, say, _progress_bar(sys.stderr)))
    if record.status == PASSED:
        return EXIT_OK
    return EXIT_REFUSED if record.refused else EXIT_FAILURE


def _eval(args: argparse.Namespace) -> int:
    from labfy_ref.eval import load_tasks  # noqa: PLC0415
    from labfy_ref.eval.run import EvalOptions, run  # noqa: PLC0415

    guidance = guidance_option(args.guidance)
    rules = [rule.name for rule in guidance.profile.rules]
    if args.ablate is not None and args.ablate not in rules:
        raise ConfigRefused(f"--ablate takes a rule of the {guidance.profile.name} profile: "
                            f"{', '.join(rules) or 'it has none'}")
    added = tuple(args.with_rule or ())
    others = [rule.name for rule in GUIDANCE if rule.name not in rules]
    if any(rule not in others for rule in added) or len(set(added)) < len(added):
        raise ConfigRefused(f"--with takes a guidance rule the {guidance.profile.name} profile "
                            f"lacks, once: {', '.join(others) or 'it has them all'}")
    if args.ablate is not None and added:
        raise ConfigRefused("--ablate and --with measure one change at a time: give one")
    if args.baseline is not None:
        from labfy_ref.eval.baseline import BASELINES  # noqa: PLC0415

        if args.baseline not in BASELINES:
            raise ConfigRefused(f"--baseline takes one of {', '.join(BASELINES)}")
        if args.control or args.ablate is not None or added:
            raise ConfigRefused("--baseline runs a framework, not the narrowing: give it alone "
                                "(no --control, --ablate or --with)")
    tasks = load_tasks(Path(args.tasks) if args.tasks else None)
    if args.task:
        unknown = sorted(set(args.task) - {task.id for task in tasks})
        if unknown:
            raise ConfigRefused(f"--task: no task {', '.join(unknown)}")
        tasks = [task for task in tasks if task.id in args.task]
    elif args.quick:
        tasks = [task for task in tasks if task.quick]
    if not args.runs.isascii() or not args.runs.isdigit() or not 1 <= int(args.runs) <= 20:
        raise ConfigRefused("--runs takes a whole number 1-20")
    runs = int(args.runs)
    conclude_after = conclude_after_option(args.conclude_after)
    # the same resolution as serve's --model-file (file, digest, binary, variant), last:
    # a refused option of the eval's own is said before any model is looked at
    model = supervised_model(RawOptions(llama_server=args.llama_server,
                                        model_file=args.model_file,
                                        model_sha256=args.model_sha256,
                                        cpu_variant=args.cpu_variant), os.environ)
    assert model is not None  # both flags are required by the parser
    options = EvalOptions(model=model, record_dir=Path(args.record), tasks=tasks, runs=runs,
                          conclude_after=conclude_after, guidance=guidance, ablate=args.ablate,
                          add=added, control=args.control, baseline=args.baseline)

    def say(line: str) -> None:
        print(f"eval: {line}", flush=True)

    run(options, say)
    return EXIT_OK


def _verify_gguf(args: argparse.Namespace) -> int:
    info = verify_gguf(Path(args.file), args.sha256, _progress_bar(sys.stderr))
    print(json.dumps({"file": str(info.path), "size": info.size, "gguf_version": info.version,
                      "sha256": info.sha256, "sha256_checked": args.sha256 is not None}))
    return EXIT_OK


def _formats(text: str) -> tuple[str, ...]:
    chosen = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [fmt for fmt in chosen if fmt not in FORMATS]
    if not chosen or unknown:
        raise ConfigRefused(f"--format takes a comma list of {', '.join(FORMATS)}")
    return chosen


def _report(args: argparse.Namespace) -> int:
    formats = _formats(args.format)
    gates = parse_gates(args.fail_on) if args.fail_on is not None else frozenset()
    compare_with = Path(args.compare) if args.compare is not None else None
    if "regression" in gates and compare_with is None:
        raise ConfigRefused("--fail-on regression needs --compare OLD_STATUS_JSON")
    results = Path(args.results)
    requirements = (Path(args.requirements) if args.requirements is not None
                    else default_requirements(results))
    report, written = regenerate(results, requirements, formats, compare_with)
    counts = ", ".join(f"{status} {count}" for status, count in report.summary().items())
    for path in written:
        print(terminal(str(path)))
    print(f"requirements: {counts}")
    if report.changes is not None:  # read from an old file: shown inert (ATTACKS.md §H)
        print(f"changed since {terminal(report.changes.since, limit=64)}: "
              f"{len(report.changes.items)}")
        for change in report.changes.items:
            print(terminal(change.describe(), limit=300))
    if not gates:
        return EXIT_OK
    # the report is written either way: a pipeline publishes it, then the gate decides
    found = tripped(report, gates)
    print(terminal(f"gate --fail-on {','.join(sorted(gates))}: "
                   + ("FAILED: " + "; ".join(found) if found else "passed")))
    return EXIT_FAILURE if found else EXIT_OK


def _add_workspace_commands(commands: argparse._SubParsersAction[_Parser],
                            debug: _Parser) -> None:
    workspace = commands.add_parser("workspace", parents=[debug], help="workspace tools",
                                    description="Create workspaces, and upgrade those an "
                                                "older labfy-ref made.")
    workspace.set_defaults(handler=_usage(workspace))
    actions = workspace.add_subparsers(title="actions", metavar="ACTION", dest="action",
                                       parser_class=_Parser)
    init = actions.add_parser(
        "init", parents=[debug], help="create a workspace",
        description="Create a workspace directory (its parent must exist): a LIVE one, "
                    "empty, or a SPECIMEN one with the bundled sample objects and evidence.")
    init.add_argument("directory", metavar="DIR",
                      help="the directory to create (absent, or an empty directory)")
    init.add_argument("--specimen", action="store_true",
                      help="fill it with the bundled SPECIMEN objects, evidence and files; "
                           "default: an empty LIVE workspace")
    init.add_argument("--name", metavar="N",
                      help="the workspace's display name; default: the directory's name "
                           "(LIVE) or the specimen's name (SPECIMEN)")
    init.set_defaults(handler=_workspace_init)
    upgrade = actions.add_parser(
        "upgrade", parents=[debug], help="migrate a workspace made by an older release",
        description="Migrate the store of a workspace made by an older labfy-ref to this "
                    "release's schema. A copy of the store is kept first, beside it, as "
                    "labfy.sqlite.vN-TIMESTAMP.bak (never overwritten). Refused while a "
                    "server uses the workspace; a current workspace is left as it is.")
    upgrade.add_argument("directory", metavar="DIR", help="the workspace to upgrade")
    upgrade.set_defaults(handler=_workspace_upgrade)


def build_parser() -> argparse.ArgumentParser:
    """The full command-line grammar."""
    debug = _Parser(add_help=False)
    add_debug_option(debug)
    parser = _Parser(prog="labfy-ref", description=DESCRIPTION, epilog=_EPILOG,
                     parents=[debug])
    parser.add_argument("--version", action="version", version=f"labfy-ref {__version__}")
    parser.set_defaults(handler=_usage(parser))
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", dest="command",
                                     parser_class=_Parser)

    serve = commands.add_parser(
        "serve", parents=[debug], help="run the workspace server (demo agent by default)",
        description="Serve a workspace on a loopback address; print a one-click login link, "
                    "the URL and, on its own line, the login code (valid while it runs).")
    add_serve_options(serve)
    serve.set_defaults(handler=_serve)

    listing = commands.add_parser(
        "list", parents=[debug], help="the running servers of this user",
        description="List this user's running labfy-ref servers, one per line: PID, URL, "
                    "since when, workspace (SV-12). Never a login code.")
    listing.add_argument("--json", action="store_true", default=False,
                         help="a JSON list of {workspace, url, pid, started_at} instead; "
                              "default: lines")
    listing.set_defaults(handler=_list)

    check = commands.add_parser(
        "check-config", parents=[debug], help="resolve flags and env as serve would",
        description="Resolve flags and environment exactly as serve would, open the "
                    "workspace and read the files it names, and print the result as JSON. "
                    "Starts nothing, opens no socket, creates nothing.")
    add_serve_options(check)
    check.set_defaults(handler=_check_config)

    _add_workspace_commands(commands, debug)
    add_work_commands(commands, debug)

    gguf = commands.add_parser(
        "verify-gguf", parents=[debug], help="check a GGUF file's magic and SHA-256",
        description="Check a GGUF model file's magic and version and stream its SHA-256 "
                    "(progress on a terminal); print the result as JSON.")
    gguf.add_argument("file", metavar="FILE", help="the model file")
    gguf.add_argument("--sha256", metavar="HEX",
                      help="expected SHA-256 (64 hex digits); a mismatch is refused; "
                           "default: none (the digest is only printed)")
    gguf.set_defaults(handler=_verify_gguf)

    smoke = commands.add_parser(
        "smoke", parents=[debug], help="run the SPECIMEN scenario on a real local model",
        description="Govern, verify and start our own llama-server on MODEL, then drive the "
                    "SPECIMEN scenario over the real HTTP API of a fresh temporary workspace "
                    "server; write the smoke record. Exit 0 on PASS_LOCAL_SPECIMEN.")
    add_supervised_options(smoke, required=True)
    smoke.add_argument("--record", default=str(DEFAULT_REPORT_DIR), metavar="DIR",
                       help="where smoke-record.json is written; default: %(default)s")
    smoke.add_argument("--conclude-after", metavar="N",
                       help="PR-06: after N tool calls only concluding actions are offered "
                            f"(0: never); default: {DEFAULT_CONCLUDE_AFTER}, as every surface")
    add_guidance_option(smoke)
    smoke.set_defaults(handler=_smoke)

    evaluate = commands.add_parser(
        "eval", parents=[debug], help="run the SPECIMEN tasks on a real local model (EV-01)",
        description="Govern, verify and start our own llama-server on MODEL, run every task "
                    "of the tasks file on its own fresh SPECIMEN workspace over the real HTTP "
                    "API, print a pass table and write eval-record.json. A benchmark: exit 0 "
                    "whatever the pass rate.")
    add_supervised_options(evaluate, required=True)
    evaluate.add_argument("--tasks", metavar="FILE",
                          help="tasks file (docs/eval.md); default: the shipped SPECIMEN tasks")
    evaluate.add_argument("--task", action="append", metavar="ID",
                          help="run only this task (repeatable); default: every task")
    evaluate.add_argument("--quick", action="store_true",
                          help="only the tasks marked quick; default: every task")
    evaluate.add_argument("--runs", default="1", metavar="N",
                          help="runs of each task, each on its own repeatable ids; default: 1")
    add_guidance_option(evaluate)
    evaluate.add_argument("--ablate", metavar="RULE",
                          help="switch one guidance rule of the profile off (a measurement); "
                               "default: none")
    evaluate.add_argument("--control", action="store_true",
                          help="run the random control (uniform within each round's narrowed "
                               "schema) instead of the model; the model is not started; "
                               "default: the model")
    evaluate.add_argument("--with", dest="with_rule", metavar="RULE", action="append",
                          help="switch on a guidance rule the profile lacks (a measurement; "
                               "repeatable, the record names the entry +RULE+RULE); "
                               "default: none")
    evaluate.add_argument("--baseline", metavar="FRAMEWORK",
                          help="run the tasks through a framework instead of labfy-ref (EV-02): "
                               "smolagents (ToolCallingAgent, native tool calls) or "
                               "smolagents-code (CodeAgent); needs smolagents installed; "
                               "default: labfy-ref")
    evaluate.add_argument("--conclude-after", metavar="N",
                          help="PR-06: after N tool calls only concluding actions are offered "
                               f"(0: never); default: {DEFAULT_CONCLUDE_AFTER}, as every surface")
    evaluate.add_argument("--record", default=str(DEFAULT_REPORT_DIR), metavar="DIR",
                          help="where eval-record.json is written; default: %(default)s")
    evaluate.set_defaults(handler=_eval)

    report = commands.add_parser(
        "report", parents=[debug], help="rebuild the status report from recorded results",
        description="Rebuild the qualification status report from the results a test run "
                    "recorded, without re-running anything; with --compare, list what changed "
                    "since an earlier status.json; with --fail-on, exit 1 when the report shows "
                    "what it names (the report is written first). A malformed or unknown-version "
                    "input is REPORT_INVALID, exit 2.")
    report.add_argument("--results", default=str(DEFAULT_REPORT_DIR), metavar="DIR",
                        help="the report directory a run wrote; default: %(default)s")
    report.add_argument("--requirements", default=None, metavar="FILE",
                        help=f"requirements file; default: DIR/{REQUIREMENTS_COPY} (the copy "
                             f"the run kept), else ./{DEFAULT_REQUIREMENTS}")
    report.add_argument("--format", default="md,json", metavar=",".join(FORMATS),
                        help="comma list of formats to write; default: %(default)s")
    report.add_argument("--compare", metavar="OLD_STATUS_JSON",
                        help="an earlier status.json (any version): the report gains a "
                             "'Changed since' section and one line per change is printed; default: "
                             "none")
    report.add_argument("--fail-on", metavar=",".join(GATES),
                        help="exit 1 (after writing the report) on a regression (a CURRENT ID "
                             "or a passing stage that no longer is; needs --compare), any FAIL, "
                             "or any NOT_RUN; default: never")
    report.set_defaults(handler=_report)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; map every error to its exit code and one line."""
    args = build_parser().parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except (ConfigRefused, WorkspaceError, ReportInvalid) as exc:
        sys.stderr.write(f"{terminal(str(exc))}\n")  # a message may quote a foreign value
        return EXIT_REFUSED
    except LabfyError as exc:
        sys.stderr.write(f"{terminal(str(exc))}\n")
        return EXIT_FAILURE
    except Exception as exc:
        if getattr(args, "debug", False):
            traceback.print_exc()
        sys.stderr.write("INTERNAL_ERROR: "
                         f"{terminal(bounded(type(exc).__name__ + ': ' + str(exc)))}\n")
        return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())

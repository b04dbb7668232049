"""``labfy-ref work``: submit, run, show, approve, list, cancel and prune Work tasks (WK-05).

Every command finds its database the same way: ``--work-db URL``, else
``LABFY_WORK_DB``, else the ``work.sqlite`` of ``--workspace DIR`` (which must be a
workspace). It sees only that workspace's tasks (WK-11), so workspaces may share one
database; ``--all-workspaces`` (with ``--work-db`` or ``LABFY_WORK_DB``, never with
``--workspace``) is the database admin's view of every task, and without either
option a command is refused. Output is one JSON document on stdout (``list`` and
``show`` print a table instead when stdout is a terminal, unless ``--json``); a refusal is one line
``CODE: message`` on stderr and exit 2 (an unknown task or approval, a second
answer, a bad value, a refused URL), a database that cannot be reached exit 1.
The database password never appears: every message shows the URL redacted.

The Work store (and SQLAlchemy with it) loads only when a ``work`` command runs.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from labfy_ref.cli.options import add_agent_options, add_work_db_option, worker_options
from labfy_ref.cli.tables import task_detail, task_list
from labfy_ref.config import DEFAULT_HEARTBEAT_SECONDS, DEFAULT_LEASE_SECONDS, resolve_worker
from labfy_ref.errors import ConfigRefused, ErrorCode, LabfyError, WorkspaceError

if TYPE_CHECKING:
    from labfy_ref.work import WorkStore

#: Largest ``--limit`` the parser reads (the store admits fewer: VALIDATION_FAILED).
MAX_COUNT = 1_000_000
_COUNT = re.compile(r"[1-9][0-9]{0,6}", re.ASCII)
#: ``--older-than``: days as a plain decimal, at most this many (a century).
MAX_DAYS = 36500
_DAYS = re.compile(r"[0-9]{1,5}(\.[0-9]{1,6})?", re.ASCII)
#: Failures of the moment rather than refusals of what was asked: exit 1, not 2.
_RUNTIME_FAILURES = frozenset({ErrorCode.WORK_DB_UNAVAILABLE})
_DB_HELP = ("The database: --work-db URL, else LABFY_WORK_DB, else the work.sqlite of "
            "--workspace DIR")
Handler = Callable[[argparse.Namespace], int]


def _refusals(handler: Handler) -> Handler:
    """Run ``handler`` so that a refused request exits 2 like a refused option.

    The store refuses with its own codes (``TASK_NOT_FOUND``, ``APPROVAL_NOT_PENDING``,
    ``VALIDATION_FAILED``…); they are re-raised as :class:`ConfigRefused` with the same
    code and message, which ``main`` prints as one line and exits 2.
    """

    @functools.wraps(handler)
    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except (ConfigRefused, WorkspaceError):
            raise
        except LabfyError as exc:
            if exc.code in _RUNTIME_FAILURES:
                raise
            raise ConfigRefused(exc.message, code=exc.code) from None

    return run


def _open_store(args: argparse.Namespace) -> WorkStore:
    """The Work store the options name (see the module's docstring), migrated forward,
    for the one workspace ``--workspace`` names (or every one: ``--all-workspaces``)."""
    from labfy_ref.work import WorkStore  # noqa: PLC0415
    from labfy_ref.work.store.tasks import ALL_WORKSPACES  # noqa: PLC0415
    from labfy_ref.work.store.url import given_database_url, work_database  # noqa: PLC0415
    from labfy_ref.workspace import open_workspace  # noqa: PLC0415

    every = getattr(args, "all_workspaces", False)
    if args.workspace is not None:
        if every:
            raise ConfigRefused("--workspace shows one workspace's tasks, --all-workspaces "
                                "every workspace's: give one of them")
        workspace = open_workspace(Path(args.workspace))  # WORKSPACE_INVALID if it is not one
        database = work_database(workspace.root, given_database_url(args.work_db, os.environ))
        return WorkStore.open(database.url, workspace_id=workspace.workspace_id,
                              adopt=database.adopt)
    given = given_database_url(args.work_db, os.environ)
    if not every:
        raise ConfigRefused("whose tasks? Give --workspace DIR (that workspace's tasks, in its "
                            "work.sqlite unless --work-db or LABFY_WORK_DB names another "
                            "database), or --all-workspaces with --work-db URL or "
                            "LABFY_WORK_DB (every workspace's tasks: the database admin's view)")
    if given is None:
        raise ConfigRefused("--all-workspaces needs the database: --work-db URL or "
                            "LABFY_WORK_DB")
    return WorkStore.open(given, workspace_id=ALL_WORKSPACES)


def _print(document: dict[str, Any]) -> int:
    # ASCII JSON: any terminal or pipe takes it, whatever its encoding
    print(json.dumps(document))
    return 0


def _show_to(args: argparse.Namespace, document: dict[str, Any],
             readable: Callable[[dict[str, Any]], str]) -> int:
    """A table for a person at a terminal; JSON with ``--json`` or when stdout is no TTY."""
    if args.json or not sys.stdout.isatty():
        return _print(document)
    print(readable(document))
    return 0


def _submit(args: argparse.Namespace) -> int:
    store = _open_store(args)
    try:
        return _print(store.submit(args.message).as_dict())
    finally:
        store.close()


def _show(args: argparse.Namespace) -> int:
    store = _open_store(args)
    try:
        return _show_to(args, store.show(args.task_id), task_detail)
    finally:
        store.close()


def _approve(args: argparse.Namespace) -> int:
    store = _open_store(args)
    try:
        return _print({"approval": store.answer_approval(args.approval_id,
                                                         args.decision).as_dict()})
    finally:
        store.close()


def _list(args: argparse.Namespace) -> int:
    from labfy_ref.work.store.pages import task_page  # noqa: PLC0415

    store = _open_store(args)
    try:
        return _show_to(args, task_page(store, state=args.state, limit=args.limit,
                                        cursor=args.cursor), task_list)
    finally:
        store.close()


def _cancel(args: argparse.Namespace) -> int:
    store = _open_store(args)
    try:
        return _print({"task": store.cancel(args.task_id).as_dict()})
    finally:
        store.close()


def _prune(args: argparse.Namespace) -> int:
    store = _open_store(args)
    try:
        pruned = store.prune(datetime.timedelta(days=args.older_than))
        return _print({"pruned": pruned, "older_than_days": args.older_than})
    finally:
        store.close()


def _days(text: str) -> float:
    """``--older-than DAYS``: a plain non-negative number of days (fractions allowed)."""
    if not _DAYS.fullmatch(text) or float(text) > MAX_DAYS:
        raise argparse.ArgumentTypeError(f"must be a number of days 0-{MAX_DAYS}, not {text!r}")
    return float(text)


def run_worker_command(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> int:
    """``labfy-ref work worker``: its options resolved (CONFIG_INVALID naming the flag), then
    the worker; its failures keep their exit codes."""
    # the worker (its driver, its agent) loads only for this command
    from labfy_ref.work.run.worker import run_worker  # noqa: PLC0415

    environ = os.environ if environ is None else environ
    return run_worker(resolve_worker(worker_options(args), environ), environ)


def _worker_main(args: argparse.Namespace) -> int:
    """The ``work worker`` command: its log (start, each run's outcome, stop) on stderr, its
    stdout the JSON line per run that scripts and the bench read."""
    from labfy_ref.logs import configure  # noqa: PLC0415

    configure()
    return run_worker_command(args)


def _count(text: str) -> int:
    """``--limit N``: a whole number from 1, in ASCII digits."""
    if not _COUNT.fullmatch(text) or int(text) > MAX_COUNT:
        raise argparse.ArgumentTypeError(f"must be a whole number 1-{MAX_COUNT}, not {text!r}")
    return int(text)


def _json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", default=False,
                        help="print the JSON document even on a terminal; default: a table on "
                             "a terminal, JSON when stdout is a pipe or a file")


def _database_options(parser: argparse.ArgumentParser, *, workspace_required: bool) -> None:
    where = parser.add_argument_group("database")
    where.add_argument("--workspace", metavar="DIR", required=workspace_required,
                       help="the workspace (see 'labfy-ref workspace init') whose tasks these "
                            "are; its work.sqlite is the default database; default: none" + (
                                " (required)" if workspace_required else
                                " (required unless --all-workspaces)"))
    add_work_db_option(where)
    if not workspace_required:
        where.add_argument("--all-workspaces", action="store_true", default=False,
                           help="every workspace's tasks on the --work-db / LABFY_WORK_DB "
                                "database (its admin's view; tasks from before tasks recorded "
                                "their workspace show only here); default: only --workspace's")


def add_work_commands(commands: argparse._SubParsersAction[Any],
                      debug: argparse.ArgumentParser) -> None:
    """Add ``work`` and its sub-commands (SPEC §14's six, and prune) to ``commands``."""
    work = commands.add_parser(
        "work", parents=[debug], help="isolated Work: tasks in SQL, run by workers",
        description="Submit tasks to a Work database (SQLite in the workspace, or PostgreSQL "
                    "for a team), run them with any number of workers, show them, answer "
                    f"their approvals, list and cancel them. {_DB_HELP}.")

    def usage(_: argparse.Namespace) -> int:
        work.print_help(sys.stderr)  # as main does for a group named without its sub-command
        return 2

    work.set_defaults(handler=usage)
    actions = work.add_subparsers(title="actions", metavar="ACTION", dest="action",
                                  parser_class=type(work))

    submit = actions.add_parser(
        "submit", parents=[debug], help="queue a task",
        description="Store a task and its first run, QUEUED for any worker; print "
                    '{"task": {"id", "run_id", "state"}}.')
    _database_options(submit, workspace_required=True)
    submit.add_argument("--message", required=True, metavar="TEXT",
                        help="what the agent is asked to do; default: none (required)")
    submit.set_defaults(handler=_refusals(_submit))

    worker = actions.add_parser(
        "worker", parents=[debug], help="claim and run queued tasks",
        description="Claim runnable runs under a lease and run them with the agent in the "
                    "workspace, until SIGTERM (the run in hand is released, not lost).")
    _database_options(worker, workspace_required=True)
    runs = worker.add_argument_group("worker")
    runs.add_argument("--permission-mode", metavar="read-only|workspace-write",
                      help="read-only: a write waits for an approval (WAITING_APPROVAL); "
                           "workspace-write: it runs; default: read-only")
    runs.add_argument("--once", action="store_true", default=False,
                      help="take at most one run, and exit at once when none is waiting; "
                           "default: keep waiting for work")
    runs.add_argument("--max-runs", metavar="N", help="stop after N runs; default: no limit")
    runs.add_argument("--lease-seconds", metavar="SECONDS",
                      help="how long a claim lasts unless renewed, at most 3600 (another worker "
                           f"takes the run over after it); default: {DEFAULT_LEASE_SECONDS:g}")
    runs.add_argument("--heartbeat-seconds", metavar="SECONDS",
                      help="how often the claim is renewed, shorter than the lease; default: "
                           f"{DEFAULT_HEARTBEAT_SECONDS:g} or a third of the lease, whichever "
                           "is shorter")
    add_agent_options(worker)
    worker.set_defaults(handler=_worker_main)

    show = actions.add_parser(
        "show", parents=[debug], help="print a task",
        description="Print a task: task, runs, events, effects, approvals — a table on a "
                    "terminal, JSON otherwise (or with --json).")
    show.add_argument("task_id", metavar="TASK_ID", help="the task (task_…)")
    _json_option(show)
    _database_options(show, workspace_required=False)
    show.set_defaults(handler=_refusals(_show))

    approve = actions.add_parser(
        "approve", parents=[debug], help="answer an approval",
        description="Answer a pending approval once (a second answer is refused "
                    "APPROVAL_NOT_PENDING); the run is queued again for any worker.")
    approve.add_argument("approval_id", metavar="APPROVAL_ID",
                         help="the approval (appr_…), listed by 'work show'")
    approve.add_argument("decision", metavar="allowed-once|rejected",
                         help="allowed-once runs the call once; rejected refuses it")
    _database_options(approve, workspace_required=False)
    approve.set_defaults(handler=_refusals(_approve))

    listing = actions.add_parser(
        "list", parents=[debug], help="list tasks newest first",
        description='Print {"tasks": [...], "next_cursor"}: tasks newest first; pass '
                    "next_cursor as --cursor for the next page (null: none). On a terminal "
                    "a table (--json: the JSON).")
    _json_option(listing)
    listing.add_argument("--state", metavar="S",
                         help="only tasks in this state (QUEUED, RUNNING, WAITING_APPROVAL, "
                              "COMPLETED, FAILED, CANCELLED); default: all")
    listing.add_argument("--limit", type=_count, default=50, metavar="N",
                         help="tasks per page, at most 200; default: %(default)s")
    listing.add_argument("--cursor", metavar="TASK_ID",
                         help="the next_cursor of the previous page; default: the first page")
    _database_options(listing, workspace_required=False)
    listing.set_defaults(handler=_refusals(_list))

    cancel = actions.add_parser(
        "cancel", parents=[debug], help="cancel a task",
        description="Cancel a task and its unfinished run (CANCELLED); a worker running it "
                    "stops at its next step. A finished task is refused TASK_FINISHED.")
    cancel.add_argument("task_id", metavar="TASK_ID", help="the task (task_…)")
    _database_options(cancel, workspace_required=False)
    cancel.set_defaults(handler=_refusals(_cancel))

    prune = actions.add_parser(
        "prune", parents=[debug], help="delete finished tasks older than an age",
        description='Delete COMPLETED, FAILED and CANCELLED tasks last updated more than '
                    '--older-than days ago, with their runs, messages, stored model replies, '
                    'effects, events and approvals; print {"pruned": N, "older_than_days": D}.')
    prune.add_argument("--older-than", type=_days, required=True, metavar="DAYS",
                       help="age in days (fractions allowed, e.g. 0.5); default: none (required)")
    _database_options(prune, workspace_required=False)
    prune.set_defaults(handler=_refusals(_prune))

"""WK-05: ``labfy-ref work submit|worker|show|approve|list|cancel`` (SPEC §14), on both engines.

The commands run through the real entry point (``main``, and a subprocess where the
operating system's argv matters) against a fresh database of each engine; what they
print is checked against SPEC §14/§15 and against the store they wrote to. Refusals
are one line ``CODE: message`` on stderr, exit 2 (a database that cannot be reached:
exit 1), never a traceback, never the database password.
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fake_provider import Scenario
from labfy_ref.cli.main import build_parser
from labfy_ref.config import DEFAULT_HEARTBEAT_SECONDS, DEFAULT_LEASE_SECONDS
from labfy_ref.ids import id_pattern
from labfy_ref.work import ENV_VAR, DatabaseUrl, State, WorkStore, sqlite_url
from qualification.conftest import ProviderFactory
from qualification.docs.pages import block
from qualification.harness import wait_until
from qualification.work.wire import (
    STORE_WORKSPACE,
    TASK_KEYS,
    Done,
    check_work_shape,
    full_url,
    open_for,
    populate,
    run_worker_once,
)
from qualification.work.workers import conversation_requests, message, work_scenario

PASSWORD = "S3cr3t-pw-7781"
HOSTILE = st.one_of(
    st.text(st.characters(codec=None, categories=None), max_size=60),
    st.text(st.characters(codec=None, categories=["Cs", "Cc"]), min_size=1, max_size=6),
    st.builds(lambda a, b: f"{a}\x00{b}", st.text(max_size=10), st.text(max_size=10)),
    st.builds(lambda a, b: f"{a}\udcff{b}", st.text(max_size=10), st.text(max_size=10)),
)


@pytest.fixture(autouse=True)
def no_ambient_database(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reads a Work database named by the machine it runs on."""
    monkeypatch.delenv(ENV_VAR, raising=False)


def _subprocess(*args: str | bytes, env: dict[str, str] | None = None) -> Done:
    done = subprocess.run([sys.executable, "-m", "labfy_ref.cli.main", *args],
                          capture_output=True, text=True, timeout=60, check=False,
                          env={**os.environ, **(env or {})})
    return Done(done.returncode, done.stdout, done.stderr)


@pytest.mark.req("WK-05", "WK-02")
def test_submit_prints_the_task_its_first_run_and_its_state(
        run: Any, workspace: Path, work_url: DatabaseUrl) -> None:
    printed = run("work", "submit", "--workspace", str(workspace), "--work-db",
                  full_url(work_url), "--message", "summarise notes.md").json()
    assert set(printed) == {"task"} and set(printed["task"]) == {"id", "run_id", "state"}
    task = printed["task"]
    assert id_pattern("task").fullmatch(task["id"]) and id_pattern("run").fullmatch(
        task["run_id"])
    assert task["state"] == "QUEUED"
    store = open_for(work_url, workspace)
    try:
        assert store.get_task(task["id"]).message == "summarise notes.md"
        assert [r.id for r in store.list_runs(task["id"])] == [task["run_id"]]
    finally:
        store.close()


@pytest.mark.req("WK-05", "WK-02")
def test_the_default_database_is_the_workspaces_own_owner_only_work_sqlite(
        run: Any, workspace: Path) -> None:
    database = workspace / "work.sqlite"
    assert not database.exists()
    task = run("work", "submit", "--workspace", str(workspace), "--message", "m").json()["task"]
    assert stat.S_IMODE(database.stat().st_mode) == 0o600
    shown = run("work", "show", task["id"], "--workspace", str(workspace)).json()
    assert shown["task"]["message"] == "m"
    store = open_for(sqlite_url(database), workspace)
    try:
        assert store.get_task(task["id"]).state is State.QUEUED
    finally:
        store.close()
    # with neither a workspace nor a URL, no database is guessed
    run("work", "show", task["id"]).refused("CONFIG_INVALID")
    run("work", "list").refused("CONFIG_INVALID")


@pytest.mark.req("WK-05")
def test_labfy_work_db_names_the_database_and_the_flag_wins_over_it(
        run: Any, workspace: Path, work_url: DatabaseUrl, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, full_url(work_url))
    from_env = run("work", "submit", "--workspace", str(workspace),
                   "--message", "env").json()["task"]
    assert not (workspace / "work.sqlite").exists(), "the variable's database, not the default"
    other = sqlite_url(tmp_path / "other.sqlite")
    from_flag = run("work", "submit", "--workspace", str(workspace), "--work-db",
                    full_url(other), "--message", "flag").json()["task"]
    listed = run("work", "list", "--workspace", str(workspace)).json()
    assert [t["id"] for t in listed["tasks"]] == [from_env["id"]]
    flagged = run("work", "list", "--all-workspaces", "--work-db", full_url(other)).json()
    assert [t["id"] for t in flagged["tasks"]] == [from_flag["id"]]
    monkeypatch.setenv(ENV_VAR, "")  # an empty variable counts as unset
    run("work", "list", "--all-workspaces").refused("CONFIG_INVALID")


@pytest.mark.req("WK-05", "WK-02")
def test_show_prints_the_work_shape(run: Any, work_url: DatabaseUrl) -> None:
    store = WorkStore.open(work_url, workspace_id=STORE_WORKSPACE)
    try:
        populated = populate(store, "write the notes")
    finally:
        store.close()
    db = ("--all-workspaces", "--work-db", full_url(work_url))
    work = run("work", "show", populated.task_id, *db).json()
    check_work_shape(work, populated, "write the notes")
    line = run("work", "show", "task_nope", *db).refused(
        "TASK_NOT_FOUND")
    assert line == "TASK_NOT_FOUND: no task task_nope"


@pytest.mark.req("WK-05", "WK-02")
def test_approve_answers_a_pending_approval_once(run: Any, work_url: DatabaseUrl) -> None:
    store = WorkStore.open(work_url, workspace_id=STORE_WORKSPACE)
    try:
        first, second = populate(store), populate(store)
        db = ("--all-workspaces", "--work-db", full_url(work_url))
        answered = run("work", "approve", first.approval_id, "allowed-once", *db).json()
        assert answered == {"approval": {"id": first.approval_id, "run_id": first.run_id,
                                         "tool_id": "files.write",
                                         "summary": "write notes.md (11 characters)",
                                         "decision": "allowed-once"}}
        assert store.get_task(first.task_id).state is State.QUEUED, "queued for any worker"
        again = run("work", "approve", first.approval_id, "rejected", *db)
        assert again.refused("APPROVAL_NOT_PENDING") == (
            f"APPROVAL_NOT_PENDING: approval {first.approval_id} was already answered")
        assert store.get_approval(first.approval_id).decision == "allowed-once"
        run("work", "approve", "appr_nope", "rejected", *db).refused("APPROVAL_NOT_FOUND")
        for wrong in ("maybe", "ALLOWED-ONCE", "pending", ""):
            run("work", "approve", second.approval_id, wrong, *db).refused("VALIDATION_FAILED")
        assert store.get_approval(second.approval_id).decision is None
        assert run("work", "approve", second.approval_id, "rejected",
                   *db).json()["approval"]["decision"] == "rejected"
    finally:
        store.close()


@pytest.mark.req("WK-05")
def test_list_pages_tasks_newest_first(run: Any, work_url: DatabaseUrl) -> None:
    store = WorkStore.open(work_url, workspace_id=STORE_WORKSPACE)
    try:
        ids = [store.submit(f"task {n}").task.id for n in range(3)]
        store.cancel(ids[1])
    finally:
        store.close()
    db = ("--all-workspaces", "--work-db", full_url(work_url))
    everything = run("work", "list", *db).json()
    assert set(everything) == {"tasks", "next_cursor"}
    assert [t["id"] for t in everything["tasks"]] == ids[::-1]
    assert all(set(t) == TASK_KEYS for t in everything["tasks"])
    assert everything["next_cursor"] is None
    first = run("work", "list", "--limit", "2", *db).json()
    assert [t["id"] for t in first["tasks"]] == [ids[2], ids[1]]
    assert first["next_cursor"] == ids[1]
    rest = run("work", "list", "--limit", "2", "--cursor", first["next_cursor"], *db).json()
    assert (rest["tasks"][0]["id"], rest["next_cursor"]) == (ids[0], None)
    exact = run("work", "list", "--limit", "3", *db).json()
    assert exact["next_cursor"] is None, "a full last page has no empty page after it"
    cancelled = run("work", "list", "--state", "CANCELLED", *db).json()
    assert [(t["id"], t["state"]) for t in cancelled["tasks"]] == [(ids[1], "CANCELLED")]
    run("work", "list", "--state", "cancelled", *db).refused("VALIDATION_FAILED")
    run("work", "list", "--limit", "201", *db).refused("VALIDATION_FAILED")
    run("work", "list", "--cursor", "task_nope", *db).refused("VALIDATION_FAILED")
    for wrong in ("0", "-1", "x", "1.5", "٣"):
        run("work", "list", "--limit", wrong, *db).refused("CONFIG_INVALID")


@pytest.mark.req("WK-05")
def test_a_limit_is_read_up_to_a_million_and_the_store_bounds_it_further(
        run: Any, work_url: DatabaseUrl) -> None:
    """``--limit`` reads whole numbers up to 1,000,000 (more is no limit the command takes:
    CONFIG_INVALID); the store then admits 1-200 (VALIDATION_FAILED)."""
    db = ("--all-workspaces", "--work-db", full_url(work_url))
    assert run("work", "list", "--limit", "200", *db).json()["tasks"] == []
    run("work", "list", "--limit", "1000000", *db).refused("VALIDATION_FAILED")
    run("work", "list", "--limit", "1000001", *db).refused("CONFIG_INVALID")


@pytest.mark.req("WK-05", "WK-02")
def test_cancel_cancels_a_task_once_and_refuses_a_finished_one(
        run: Any, work_url: DatabaseUrl) -> None:
    store = WorkStore.open(work_url, workspace_id=STORE_WORKSPACE)
    try:
        queued = store.submit("to cancel")
        done = store.submit("to finish")
        claim = store.claim("w", 60)
        assert claim is not None and claim.task_id == queued.task.id
        db = ("--all-workspaces", "--work-db", full_url(work_url))
        cancelled = run("work", "cancel", queued.task.id, *db).json()
        assert set(cancelled) == {"task"} and set(cancelled["task"]) == TASK_KEYS
        assert (cancelled["task"]["id"], cancelled["task"]["state"]) == (queued.task.id,
                                                                         "CANCELLED")
        assert [r.state for r in store.list_runs(queued.task.id)] == [State.CANCELLED]
        assert run("work", "cancel", queued.task.id, *db).json() == cancelled, "idempotent"
        finisher = store.claim("w", 60)
        assert finisher is not None and finisher.task_id == done.task.id
        store.finish(finisher, State.COMPLETED, final_text="ok")
        run("work", "cancel", done.task.id, *db).refused("TASK_FINISHED")
        assert store.get_task(done.task.id).state is State.COMPLETED
        run("work", "cancel", "task_nope", *db).refused("TASK_NOT_FOUND")
    finally:
        store.close()


@pytest.mark.req("WK-05", "WK-07")
def test_the_database_password_is_never_printed(run: Any, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    nowhere = tmp_path / "no-socket-here"
    unreachable = f"postgresql://alice:{PASSWORD}@/work?host={nowhere}"
    refused = run("work", "list", "--all-workspaces", "--work-db", unreachable)
    line = refused.refused("WORK_DB_UNAVAILABLE", exit_code=1)
    assert PASSWORD not in line and "***" in line
    invalid = f"mysql://alice:{PASSWORD}@db.example/work"
    every = "--all-workspaces"
    assert PASSWORD not in run("work", "list", every, "--work-db", invalid).refused(
        "WORK_DB_INVALID")
    monkeypatch.setenv(ENV_VAR, unreachable)
    assert PASSWORD not in run("work", "show", "task_x", every).refused("WORK_DB_UNAVAILABLE",
                                                                        exit_code=1)


@pytest.mark.req("WK-05", "WS-01")
def test_a_directory_that_is_not_a_workspace_is_refused_and_left_as_it_is(
        run: Any, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    run("work", "submit", "--workspace", str(plain), "--message", "m").refused(
        "WORKSPACE_INVALID")
    run("work", "list", "--workspace", str(plain)).refused("WORKSPACE_INVALID")
    assert list(plain.iterdir()) == []


@pytest.mark.req("WK-05", "WK-08")
@settings(deadline=None, max_examples=30,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(message=HOSTILE)
def test_a_message_is_submitted_exactly_or_refused_with_a_code(
        run: Any, workspace: Path, work_url: DatabaseUrl, message: str) -> None:
    db = ("--workspace", str(workspace), "--work-db", full_url(work_url))
    done = run("work", "submit", *db, f"--message={message}")  # even one that starts with -
    if not message or "\x00" in message or any(0xD800 <= ord(c) <= 0xDFFF for c in message):
        done.refused("VALIDATION_FAILED")
        return
    task = done.json()["task"]
    assert run("work", "show", task["id"], *db).json()["task"]["message"] == message


@pytest.mark.req("WK-05", "WK-08")
def test_raw_bytes_from_the_operating_system_are_refused_not_mangled(
        workspace: Path, work_url: DatabaseUrl) -> None:
    db: tuple[str, ...] = ("--workspace", str(workspace), "--work-db", full_url(work_url))
    done = _subprocess("work", "submit", *db, "--message", b"caf\xe9 \xff\xfe")
    done.refused("VALIDATION_FAILED")
    assert "lone surrogate" in done.err
    listed = _subprocess("work", "list", *db).json()
    assert listed == {"tasks": [], "next_cursor": None}, "nothing was stored"


def _options(parser: Any) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


def _subparser(parser: Any, *path: str) -> Any:
    for name in path:
        parser = next(action for action in parser._actions
                      if action.__class__.__name__ == "_SubParsersAction").choices[name]
    return parser


@pytest.mark.req("WK-05")
def test_the_worker_takes_serves_agent_options_and_its_own() -> None:
    parser = build_parser()
    serve, worker = _subparser(parser, "serve"), _subparser(parser, "work", "worker")
    agent = {option for group in serve._action_groups
             if group.title.startswith(("agent", "supervised")) for action in group._group_actions
             for option in action.option_strings}
    assert {"--agent-mode", "--agent-endpoint", "--agent-model", "--agent-timeout"} <= agent
    assert agent <= _options(worker)
    assert {"--workspace", "--work-db", "--permission-mode", "--once", "--max-runs",
            "--lease-seconds", "--heartbeat-seconds", "--debug"} <= _options(worker)
    args = parser.parse_args([
        "work", "worker", "--workspace", "ws", "--work-db", "sqlite:////tmp/w.sqlite",
        "--permission-mode", "workspace-write", "--once", "--max-runs", "3",
        "--lease-seconds", "2", "--heartbeat-seconds", "0.5", "--agent-mode", "local-model",
        "--agent-endpoint", "http://127.0.0.1:43117", "--agent-model", "m",
        "--agent-timeout", "9"])
    assert (args.workspace, args.work_db, args.permission_mode, args.once, args.max_runs,
            args.lease_seconds, args.heartbeat_seconds) == (
        "ws", "sqlite:////tmp/w.sqlite", "workspace-write", True, "3", "2", "0.5")
    assert (args.agent_mode, args.agent_endpoint, args.agent_model, args.agent_timeout) == (
        "local-model", "http://127.0.0.1:43117", "m", "9")
    plain = parser.parse_args(["work", "worker", "--workspace", "ws"])
    assert (plain.once, plain.max_runs, plain.permission_mode, plain.lease_seconds,
            plain.heartbeat_seconds, plain.agent_mode) == (False, None, None, None, None, None)


@pytest.mark.req("WK-05")
def test_submit_and_worker_need_a_workspace(run: Any) -> None:
    run("work", "worker").refused("CONFIG_INVALID")
    run("work", "submit", "--message", "m").refused("CONFIG_INVALID")
    run("work", "submit", "--workspace", "ws").refused("CONFIG_INVALID")


@pytest.mark.req("WK-05", "CLI-01")
def test_work_lists_its_actions(run: Any) -> None:
    bare = run("work")
    assert bare.code == 2 and bare.out == ""
    assert "submit" in bare.err and "ACTION" in bare.err
    with pytest.raises(SystemExit) as helped:
        build_parser().parse_args(["work", "--help"])
    assert helped.value.code == 0
    work = _subparser(build_parser(), "work")
    actions = next(action for action in work._actions
                   if action.__class__.__name__ == "_SubParsersAction")
    assert list(actions.choices) == [
        "submit", "worker", "show", "approve", "list", "cancel", "prune"]
    for name in actions.choices:
        assert "--work-db" in _options(actions.choices[name]), name
        assert ENV_VAR in actions.choices[name].format_help(), name


@pytest.mark.req("WK-05", "WK-07", "MC-05")
def test_check_config_resolves_the_work_database_as_serve_would(
        run: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))  # the default workspace's home
    shown = json.loads(run("check-config").out)["server"]
    assert shown["work_db"] is None, "the workspace's own work.sqlite"
    secret = f"postgresql://alice:{PASSWORD}@db.internal:5432/work"
    flagged = run("check-config", "--work-db", secret)
    assert flagged.code == 0, flagged.err
    assert json.loads(flagged.out)["server"]["work_db"] == \
        "postgresql+psycopg://alice:***@db.internal:5432/work"
    assert PASSWORD not in flagged.out
    monkeypatch.setenv(ENV_VAR, f"sqlite:///{tmp_path}/env.sqlite")
    from_env = json.loads(run("check-config").out)["server"]["work_db"]
    assert from_env == f"sqlite:///{tmp_path}/env.sqlite"
    assert not (tmp_path / "env.sqlite").exists(), "check-config opens no database"
    refused = run("check-config", "--work-db", f"mysql://alice:{PASSWORD}@db/work")
    assert PASSWORD not in refused.refused("WORK_DB_INVALID")
    monkeypatch.setenv(ENV_VAR, "sqlite://")  # in memory: private to each process
    run("check-config").refused("WORK_DB_INVALID")


def _readme_block(name: str) -> str:
    return block(name)  # docs/work.md


@pytest.mark.req("WK-05", "DOC-01", "CLI-03")
def test_the_readme_work_flow_runs_as_written_on_both_engines(
        work_url: DatabaseUrl, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LABFY_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    postgres = work_url.dialect == "postgresql"
    if postgres:  # as the README says: the same commands, the database named by the variable
        env[ENV_VAR] = full_url(work_url)
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", _readme_block("work-flow")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    created, ran, shown = done.stdout.splitlines()
    said = [line.split(" labfy_ref.work ", 1)[-1] for line in done.stderr.splitlines()
            if " INFO labfy_ref.work " in line]  # the worker's log (CLI-03), on stderr
    assert len(said) == 4, done.stderr
    assert said[0].startswith("worker ") and " started: workspace 'team-lab', database " in said[0]
    assert "agent Deterministic demo agent, read-only" in said[0]
    assert " took run run_" in said[1] and f"of task {json.loads(shown)['task']['id']}" in said[1]
    assert said[2].endswith(" s") and " COMPLETED in " in said[2]
    assert said[3].endswith("stopped: 1 run(s) done; 1 run(s) taken")
    assert created.startswith("created LIVE workspace 'team-lab'")
    work = json.loads(shown)
    ran_line = json.loads(ran)
    assert ran_line.pop("claim_ms") >= 0  # how long the claim took (the bench's claim latency)
    assert ran_line == {"run_id": work["runs"][0]["id"], "task_id": work["task"]["id"],
                        "attempt": 1, "outcome": "COMPLETED", "detail": None}
    assert (work["task"]["state"], work["task"]["final_text"]) == (
        "COMPLETED", "Demo agent (a fixed rule, not a model): the workspace holds no objects yet.")
    assert [e["type"] for e in work["events"]][:3] == ["task.submitted", "run.claimed",
                                                       "model.answered"]
    assert (tmp_path / "team-lab" / "work.sqlite").exists() is not postgres
    if postgres:
        store = open_for(work_url, tmp_path / "team-lab")
        try:
            assert store.get_task(work["task"]["id"]).state is State.COMPLETED
        finally:
            store.close()


@pytest.mark.req("WK-05")
def test_the_worker_help_names_the_workers_own_defaults() -> None:
    text = " ".join(_subparser(build_parser(), "work", "worker").format_help().split())
    assert f"default: {DEFAULT_LEASE_SECONDS:g}" in text
    assert f"default: {DEFAULT_HEARTBEAT_SECONDS:g} or a third of the lease" in text


@pytest.mark.req("WK-05")
@pytest.mark.parametrize(("options", "fragment"), [
    (["--lease-seconds", "0"], "--lease-seconds"),
    (["--lease-seconds", "nan"], "--lease-seconds"),
    (["--lease-seconds", "4", "--heartbeat-seconds", "4"], "--heartbeat-seconds"),
    (["--max-runs", "0"], "--max-runs"),
    (["--max-runs", "two"], "--max-runs"),
    (["--permission-mode", "admin"], "--permission-mode"),
    (["--agent-mode", "local-model"], "--agent-model"),
    (["--agent-mode", "local-model", "--agent-model", "m", "--agent-endpoint",
      "http://example.com:80"], "ENDPOINT_REFUSED"),
])
def test_the_worker_refuses_a_bad_option_before_it_claims_anything(
        run: Any, workspace: Path, tmp_path: Path, options: list[str], fragment: str) -> None:
    url = sqlite_url(tmp_path / "work.sqlite")
    task = run("work", "submit", "--workspace", str(workspace), "--work-db", full_url(url),
               "--message", "m").json()["task"]
    done = run("work", "worker", "--workspace", str(workspace), "--work-db", full_url(url),
               "--once", *options)
    assert done.code == 2 and done.out == "", done
    assert done.err.count("\n") == 1 and "Traceback" not in done.err, done.err
    assert done.err.split(":", 1)[0] in {"CONFIG_INVALID", "ENDPOINT_REFUSED"}, done.err
    assert fragment in done.err
    store = open_for(url, workspace)
    try:
        assert store.get_task(task["id"]).state is State.QUEUED, "nothing was claimed"
    finally:
        store.close()


@pytest.mark.req("WK-05")
def test_a_write_rejected_from_the_command_line_never_happens(
        run: Any, specimen: Path, work_url: DatabaseUrl,
        provider_factory: ProviderFactory) -> None:
    provider = provider_factory(work_scenario())
    db = ("--workspace", str(specimen), "--work-db", full_url(work_url))
    task = run("work", "submit", *db, "--message", message("write1", "r1")).json()["task"]
    parked = run_worker_once(specimen, work_url, provider.base_url)
    assert (parked["task_id"], parked["outcome"]) == (task["id"], "WAITING_APPROVAL")
    [approval] = run("work", "show", task["id"], *db).json()["approvals"]
    answered = run("work", "approve", approval["id"], "rejected", *db).json()
    assert answered["approval"]["decision"] == "rejected"
    run("work", "approve", approval["id"], "allowed-once", *db).refused("APPROVAL_NOT_PENDING")
    finished = run_worker_once(specimen, work_url, provider.base_url)
    assert (finished["task_id"], finished["outcome"]) == (task["id"], "COMPLETED")
    shown = run("work", "show", task["id"], *db).json()
    assert shown["task"]["state"] == "COMPLETED"
    assert not (specimen / "files" / "notes" / "r1-1.md").exists(), "the rejected write"
    assert [e for e in shown["effects"] if e["tool_id"] == "files.write"] == [], \
        "a rejected call never reaches the gateway"
    listed = run("work", "list", "--state", "COMPLETED", *db).json()
    assert [t["id"] for t in listed["tasks"]] == [task["id"]]


@pytest.mark.req("WK-05", "WK-04")
def test_the_worker_command_releases_its_run_on_sigterm_and_exits_0(
        run: Any, specimen: Path, work_url: DatabaseUrl,
        provider_factory: ProviderFactory) -> None:
    slow = {"content": json.dumps({"type": "final", "text": "late"}), "delay": 60}
    provider = provider_factory(Scenario.from_json({"name": "slow", "keyed": {"slow": [slow]}}))
    db = ("--workspace", str(specimen), "--work-db", full_url(work_url))
    task = run("work", "submit", *db, "--message", message("slow", "k1")).json()["task"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("LABFY_")}
    worker = subprocess.Popen(
        [sys.executable, "-m", "labfy_ref.cli.main", "work", "worker", *db, "--agent-mode",
         "local-model", "--agent-endpoint", provider.base_url, "--agent-model", "fake-model",
         "--lease-seconds", "10", "--heartbeat-seconds", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        # the worker holds the run and waits for the model: the moment to stop it
        wait_until(lambda: conversation_requests(provider, "k1") == [2], timeout=60)
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate(timeout=10)
    assert worker.returncode == 0, err
    [line] = [json.loads(text) for text in out.splitlines()]
    assert (line["task_id"], line["outcome"]) == (task["id"], "RELEASED")
    shown = run("work", "show", task["id"], *db).json()
    assert shown["task"]["state"] == "QUEUED"
    assert (shown["runs"][0]["state"], shown["runs"][0]["worker"]) == ("QUEUED", None)
    assert shown["events"][-1]["type"] == "run.released"


@pytest.mark.req("WK-05", "WK-02")
def test_prune_deletes_finished_tasks_older_than_the_age_and_nothing_else(
        run: Any, workspace: Path) -> None:
    """``work prune --older-than DAYS``: the issue's "pruned by age", from the command line."""
    db = ("--workspace", str(workspace))
    url = sqlite_url(workspace / "work.sqlite")
    two_days_ago = open_for(url, workspace, clock=lambda: datetime.datetime.now(datetime.UTC)
                            - datetime.timedelta(days=2))
    try:
        old = two_days_ago.submit("old and cancelled")
        two_days_ago.cancel(old.task.id)
        waiting = two_days_ago.submit("old but never run")  # not finished: never pruned
    finally:
        two_days_ago.close()
    recent = run("work", "submit", *db, "--message", "recent").json()["task"]["id"]
    run("work", "cancel", recent, *db).json()
    assert run("work", "prune", "--older-than", "1", *db).json() == {
        "pruned": 1, "older_than_days": 1.0}
    left = {task["id"] for task in run("work", "list", *db).json()["tasks"]}
    assert left == {waiting.task.id, recent}
    run("work", "show", old.task.id, *db).refused("TASK_NOT_FOUND")
    assert run("work", "prune", "--older-than", "1", *db).json()["pruned"] == 0
    for bad in ("-1", "abc", "1e3", "36501", "", "\u0661"):
        run("work", "prune", "--older-than", bad, *db).refused("CONFIG_INVALID")
    run("work", "prune", *db).refused("CONFIG_INVALID")

"""WK-05: the Work routes of SPEC §15 on a real server, on both engines.

Each test starts the real workspace server (``LiveServer``) on a fresh Work database
of each engine (``--work-db``) and talks to it as a browser would: session cookie,
CSRF token, Origin. What the routes answer is checked against §15's shapes and
against the store they wrote to; refusals carry their codes and store nothing.
The session, CSRF, Origin, Host, bearer and role matrices cover these routes from
``qualification/routes.toml`` like every other route.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labfy_ref.errors import ErrorCode, LabfyError
from labfy_ref.server.auth import token_hash
from labfy_ref.work import ENV_VAR, DatabaseUrl, State, WorkStore
from labfy_ref.workspace import init_workspace
from qualification.conftest import ProviderFactory, ServerFactory
from qualification.harness import ApiClient, LiveServer, ServeProcess
from qualification.work.postgres import PrivateCluster
from qualification.work.wire import (
    RUN_KEYS,
    TASK_KEYS,
    WORK_KEYS,
    check_work_shape,
    full_url,
    open_for,
    populate,
    run_worker_once,
)
from qualification.work.workers import check_exactly_once, message, work_scenario

USER_TOKEN = "carol-token-0123456789"
PASSWORD = "S3cr3t-pw-4410"
TASKS = "/api/v1/work/tasks"


@pytest.fixture
def server(server_factory: ServerFactory, workspace: Path, work_url: DatabaseUrl,
           tmp_path: Path) -> LiveServer:
    """A server whose Work database is ``work_url``, with one ``user`` account, ``carol``."""
    accounts = tmp_path / "accounts.toml"
    accounts.write_text(f'[[account]]\nname = "carol"\ntoken_sha256 = "{token_hash(USER_TOKEN)}"\n')
    live = server_factory(workspace, work_db=full_url(work_url), accounts=str(accounts))
    live.user_token = USER_TOKEN
    return live


@pytest.fixture
def store(work_url: DatabaseUrl, workspace: Path) -> Any:
    """The same database, opened by the test as the server's workspace to check what the
    routes wrote."""
    opened = open_for(work_url, workspace)
    yield opened
    opened.close()


def _error(response: Any, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    assert body["error"]["code"] == code, body
    message: str = body["error"]["message"]
    assert message.isprintable() and len(message) <= 300
    return message


def _submit(client: ApiClient, message: str) -> dict[str, Any]:
    response = client.post(TASKS, {"message": message})
    assert response.status_code == 201, response.text
    body = response.json()
    assert set(body) == {"task"}
    task: dict[str, Any] = body["task"]
    return task


@pytest.mark.req("WK-05", "WK-02")
def test_a_task_submitted_over_http_is_queued_listed_and_shown(
        server: LiveServer, store: WorkStore) -> None:
    client = server.client()
    task = _submit(client, "summarise notes.md")
    assert set(task) == TASK_KEYS
    assert (task["state"], task["message"], task["final_text"]) == ("QUEUED",
                                                                    "summarise notes.md", None)
    assert store.get_task(task["id"]).as_dict() == task, "the server wrote it to the database"
    listed = client.get(TASKS).json()
    assert listed == {"tasks": [task], "next_cursor": None}
    work = client.get(f"{TASKS}/{task['id']}").json()
    assert set(work) == WORK_KEYS and work["task"] == task
    [run] = work["runs"]
    assert set(run) == RUN_KEYS
    assert (run["state"], run["attempt"], run["worker"], run["lease_expires_at"]) == (
        "QUEUED", 0, None, None)
    assert [(e["seq"], e["type"], e["data"]) for e in work["events"]] == [
        (1, "task.submitted", {"run_id": run["id"]})]
    assert (work["effects"], work["approvals"]) == ([], [])
    claim = store.claim("worker-b", 60)
    assert claim is not None and claim.task_id == task["id"], "a worker can claim it"


@pytest.mark.req("WK-05", "WK-02")
def test_show_answers_the_work_shape(server: LiveServer, store: WorkStore) -> None:
    populated = populate(store, "write the notes")
    response = server.client().get(f"{TASKS}/{populated.task_id}")
    assert response.status_code == 200
    check_work_shape(response.json(), populated, "write the notes")


@pytest.mark.req("WK-05")
def test_the_list_pages_newest_first_and_filters_by_state(
        server: LiveServer, store: WorkStore) -> None:
    client = server.client()
    ids = [_submit(client, f"task {n}")["id"] for n in range(3)]
    store.cancel(ids[0])
    first = client.get(TASKS, params={"limit": 2}).json()
    assert [t["id"] for t in first["tasks"]] == [ids[2], ids[1]]
    assert first["next_cursor"] == ids[1]
    rest = client.get(TASKS, params={"limit": 2, "cursor": first["next_cursor"]}).json()
    assert ([t["id"] for t in rest["tasks"]], rest["next_cursor"]) == ([ids[0]], None)
    assert client.get(TASKS, params={"limit": 3}).json()["next_cursor"] is None
    queued = client.get(TASKS, params={"state": "QUEUED"}).json()
    assert [t["id"] for t in queued["tasks"]] == [ids[2], ids[1]]
    blank = client.get(TASKS, params={"state": "", "cursor": "", "limit": 50}).json()
    assert [t["id"] for t in blank["tasks"]] == ids[::-1], "empty parameters are not given"
    for params in ({"limit": 0}, {"limit": 201}, {"limit": "x"}, {"state": "queued"},
                   {"cursor": "task_nope"}):
        _error(client.get(TASKS, params=params), 422, "VALIDATION_FAILED")


@pytest.mark.req("WK-05", "SV-05")
def test_unknown_ids_are_404_with_a_code(server: LiveServer) -> None:
    client = server.client()
    assert _error(client.get(f"{TASKS}/task_x"), 404, "TASK_NOT_FOUND") == "no task task_x"
    _error(client.post(f"{TASKS}/task_x/cancel"), 404, "TASK_NOT_FOUND")
    _error(client.post("/api/v1/work/approvals/appr_x", {"decision": "rejected"}), 404,
           "APPROVAL_NOT_FOUND")


@pytest.mark.req("WK-05", "WK-02")
def test_an_approval_is_answered_once_and_a_second_answer_is_409(
        server: LiveServer, store: WorkStore) -> None:
    client = server.client()  # the admin answers (WK-12)
    first, second = populate(store), populate(store)
    url = f"/api/v1/work/approvals/{first.approval_id}"
    answered = client.post(url, {"decision": "allowed-once"})
    assert answered.status_code == 200, answered.text
    assert answered.json() == {"approval": {
        "id": first.approval_id, "run_id": first.run_id, "tool_id": "files.write",
        "summary": "write notes.md (11 characters)", "decision": "allowed-once"}}
    assert store.get_task(first.task_id).state is State.QUEUED, "queued again for a worker"
    assert store.get_task(second.task_id).state is State.WAITING_APPROVAL, \
        "an answer wakes its own run only"
    _error(client.post(url, {"decision": "rejected"}), 409, "APPROVAL_NOT_PENDING")
    assert store.get_approval(first.approval_id).decision == "allowed-once"
    other = f"/api/v1/work/approvals/{second.approval_id}"
    for body in ({"decision": "maybe"}, {"decision": "pending"}, {"decision": 1}, {},
                 {"decision": "rejected", "extra": True}):
        _error(client.post(other, body), 422, "VALIDATION_FAILED")
    assert store.get_approval(second.approval_id).decision is None
    shown = client.get(f"{TASKS}/{second.task_id}").json()
    assert shown["approvals"][0]["decision"] == "pending"


@pytest.mark.req("WK-05", "WK-02")
def test_cancel_answers_the_cancelled_task_and_refuses_a_finished_one(
        server: LiveServer, store: WorkStore) -> None:
    client = server.client()
    queued = _submit(client, "to cancel")
    cancelled = client.post(f"{TASKS}/{queued['id']}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    assert set(cancelled.json()) == {"task"} and set(cancelled.json()["task"]) == TASK_KEYS
    assert cancelled.json()["task"]["state"] == "CANCELLED"
    assert [r.state for r in store.list_runs(queued["id"])] == [State.CANCELLED]
    assert client.post(f"{TASKS}/{queued['id']}/cancel").json() == cancelled.json()
    finished = _submit(client, "to finish")
    claim = store.claim("w", 60)
    assert claim is not None and claim.task_id == finished["id"]
    store.finish(claim, State.COMPLETED, final_text="done")
    _error(client.post(f"{TASKS}/{finished['id']}/cancel"), 409, "TASK_FINISHED")
    assert store.get_task(finished["id"]).state is State.COMPLETED


@pytest.mark.req("WK-05", "SV-05", "WK-08")
def test_a_bad_body_is_refused_with_a_code_and_stores_nothing(
        server: LiveServer, store: WorkStore) -> None:
    client = server.client()
    for body in ({"message": ""}, {"message": "a\x00b"}, {"message": 5}, {"message": None},
                 {}, {"message": "m", "extra": 1}, ["m"]):
        _error(client.post(TASKS, body), 422, "VALIDATION_FAILED")
    headers = client.headers(True) | {"Content-Type": "application/json"}
    for raw in (b'{"message": "\\ud800"}', b'{"message": "caf\xe9"}',
                b'{"message": "a", "message": "b"}'):
        _error(client.http.post(TASKS, content=raw, headers=headers), 422, "VALIDATION_FAILED")
    _error(client.post(TASKS, {"message": "x" * 70_000}), 413, "BODY_TOO_LARGE")
    assert store.list_tasks() == []


@pytest.mark.req("WK-05", "SV-03", "SV-04")
def test_without_a_session_or_its_csrf_token_nothing_is_submitted(
        server: LiveServer, store: WorkStore) -> None:
    anonymous = server.client(login=False)
    _error(anonymous.post(TASKS, {"message": "m"}), 401, "UNAUTHENTICATED")
    _error(anonymous.get(TASKS), 401, "UNAUTHENTICATED")
    client = server.client()
    no_csrf = client.headers(False) | {"Origin": client.base_url}
    _error(client.http.post(TASKS, json={"message": "m"}, headers=no_csrf), 403, "CSRF_FAILED")
    foreign = client.headers(True) | {"Origin": "http://evil.example"}
    _error(client.http.post(TASKS, json={"message": "m"}, headers=foreign), 403,
           "ORIGIN_NOT_ALLOWED")
    assert store.list_tasks() == []
    assert _submit(server.client(token=USER_TOKEN), "from a user")["message"] == "from a user"


@pytest.mark.req("WK-05", "SV-05", "WK-08")
@settings(deadline=None, max_examples=20,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(message=st.one_of(
    st.text(st.characters(codec=None, categories=None), max_size=60),
    st.text(st.characters(codec=None, categories=["Cs", "Cc"]), min_size=1, max_size=6)))
def test_a_message_is_stored_exactly_or_refused_422(server: LiveServer, message: str) -> None:
    client = server.client()
    body = json.dumps({"message": message}).encode("ascii")  # lone surrogates as \\u escapes
    headers = client.headers(True) | {"Content-Type": "application/json"}
    response = client.http.post(TASKS, content=body, headers=headers)
    # what the wire carries: a high and a low surrogate escaped in a row are one character
    wire = json.loads(body)["message"]
    if not wire or "\x00" in wire or any(0xD800 <= ord(c) <= 0xDFFF for c in wire):
        _error(response, 422, "VALIDATION_FAILED")
        return
    assert response.status_code == 201, response.text
    task_id = response.json()["task"]["id"]
    assert client.get(f"{TASKS}/{task_id}").json()["task"]["message"] == wire


@pytest.mark.req("WK-05", "WK-07")
def test_an_unreachable_database_is_503_without_its_password_and_the_rest_still_serves(
        server_factory: ServerFactory, workspace: Path, tmp_path: Path) -> None:
    nowhere = tmp_path / "no-socket-here"
    live = server_factory(workspace, work_db=f"postgresql://alice:{PASSWORD}@/work?host={nowhere}")
    client = live.client()
    for response in (client.get(TASKS), client.post(TASKS, {"message": "m"}),
                     client.get(f"{TASKS}/task_x")):
        message = _error(response, 503, "WORK_DB_UNAVAILABLE")
        assert PASSWORD not in message and PASSWORD not in response.text
    assert client.get("/api/v1/agent-runtime/status").status_code == 200


@pytest.mark.req("WK-05", "WK-02")
def test_the_default_database_is_made_in_the_workspace_on_first_use_only(
        server_factory: ServerFactory, workspace: Path) -> None:
    live = server_factory(workspace)
    client = live.client()
    assert client.get("/api/v1/agent-runtime/status").status_code == 200
    database = workspace / "work.sqlite"
    assert not database.exists(), "a server whose Work routes are unused makes no database"
    task = _submit(client, "first")
    assert stat.S_IMODE(database.stat().st_mode) == 0o600
    assert client.get(f"{TASKS}/{task['id']}").json()["task"] == task


@pytest.mark.req("WK-05")
def test_serve_takes_its_work_database_from_labfy_work_db(
        workspace: Path, work_url: DatabaseUrl, store: WorkStore, tmp_path: Path) -> None:
    process = ServeProcess("--workspace", str(workspace), ready_file=tmp_path / "ready.json",
                           env={ENV_VAR: full_url(work_url)})
    try:
        ready = process.wait_ready()
        client = ApiClient(ready["url"].rstrip("/"))
        try:
            client.login(ready["token"])
            task = _submit(client, "through serve")
        finally:
            client.close()
    finally:
        code, _, err = process.stop()
    assert code == 0, err
    assert store.get_task(task["id"]).message == "through serve"
    assert not (workspace / "work.sqlite").exists()


@pytest.mark.req("WK-05", "WK-04")
def test_a_write_waits_for_an_approval_answered_over_http_then_runs_once(
        server_factory: ServerFactory, specimen: Path, work_url: DatabaseUrl,
        provider_factory: ProviderFactory) -> None:
    provider = provider_factory(work_scenario())
    store = open_for(work_url, specimen)
    request_close = store.close
    client = server_factory(specimen, work_db=full_url(work_url)).client()
    task = _submit(client, message("write1", "h1"))
    parked = run_worker_once(specimen, work_url, provider.base_url)
    assert (parked["task_id"], parked["outcome"]) == (task["id"], "WAITING_APPROVAL")
    waiting = client.get(f"{TASKS}/{task['id']}").json()
    assert waiting["task"]["state"] == "WAITING_APPROVAL"
    [approval] = waiting["approvals"]
    assert (approval["tool_id"], approval["decision"]) == ("files.write", "pending")
    written = specimen / "files" / "notes" / "h1-1.md"
    assert not written.exists(), "read-only: nothing is written before the answer"
    url = f"/api/v1/work/approvals/{approval['id']}"
    assert client.post(url, {"decision": "allowed-once"}).status_code == 200
    _error(client.post(url, {"decision": "rejected"}), 409, "APPROVAL_NOT_PENDING")
    assert client.get(f"{TASKS}/{task['id']}").json()["task"]["state"] == "QUEUED"
    finished = run_worker_once(specimen, work_url, provider.base_url)
    assert (finished["task_id"], finished["outcome"]) == (task["id"], "COMPLETED")
    done = client.get(f"{TASKS}/{task['id']}").json()
    assert (done["task"]["state"], done["task"]["final_text"]) == ("COMPLETED", "done h1")
    assert done["approvals"][0]["decision"] == "allowed-once"
    try:
        check_exactly_once(store, task["id"], "write1", "h1", specimen / "files", provider)
    finally:
        request_close()


@pytest.mark.req("WK-12", "WK-05")
def test_a_user_session_cannot_answer_a_work_approval(
        server: LiveServer, store: WorkStore) -> None:
    """Work approvals are the admin's, like the bridge's: a ``user`` gets 403 and the
    approval stays pending (a read-only worker's refusal is not lifted)."""
    populated = populate(store)
    url = f"/api/v1/work/approvals/{populated.approval_id}"
    carol = server.client(token=server.user_token)
    assert "administrators only" in _error(carol.post(url, {"decision": "allowed-once"}),
                                           403, "FORBIDDEN")
    assert store.get_approval(populated.approval_id).decision is None
    assert store.get_task(populated.task_id).state is State.WAITING_APPROVAL
    assert carol.get(f"{TASKS}/{populated.task_id}").status_code == 200, "she may look"
    answered = server.client().post(url, {"decision": "allowed-once"})
    assert answered.status_code == 200, answered.text


@pytest.mark.req("WK-05", "WK-11")
def test_the_list_route_pages_this_workspaces_tasks_only_by_state_and_cursor(
        server: LiveServer, work_url: DatabaseUrl, tmp_path: Path) -> None:
    """``GET /api/v1/work/tasks`` on a database another workspace shares: filtered by state
    it lists this workspace's tasks only, and the other's task id is no cursor (422, as any
    id this workspace never listed)."""
    other = tmp_path / "other"
    init_workspace(other, specimen=False)
    b_store = open_for(work_url, other)
    client = server.client()
    try:
        theirs = b_store.submit("their queued task").task.id
        mine = _submit(client, "my queued task")["id"]
        newest = _submit(client, "my newest queued task")["id"]
        for query in ({"state": "QUEUED"}, {"state": "QUEUED", "limit": 1}, {}):
            listed = client.get(TASKS, params=query).json()["tasks"]
            assert theirs not in [t["id"] for t in listed], query
        paged = client.get(TASKS, params={"state": "QUEUED", "limit": 1}).json()
        assert [t["id"] for t in paged["tasks"]] == [newest]
        rest = client.get(TASKS, params={"state": "QUEUED", "cursor": paged["next_cursor"]})
        assert [t["id"] for t in rest.json()["tasks"]] == [mine]
        _error(client.get(TASKS, params={"cursor": theirs}), 422, "VALIDATION_FAILED")
        _error(client.get(TASKS, params={"state": "QUEUED", "cursor": theirs}), 422,
               "VALIDATION_FAILED")
    finally:
        b_store.close()


@pytest.mark.req("WK-11", "WK-05")
def test_workspaces_sharing_one_database_never_reach_each_others_tasks(
        server_factory: ServerFactory, specimen: Path, tmp_path: Path, work_url: DatabaseUrl,
        provider_factory: ProviderFactory, run: Any) -> None:
    """The team set-up: one database, workspace A's server with a ``user`` account,
    workspace B's worker. B's worker never runs A's task (so A's server never shows B's
    objects, B gets no file or campaign of A's); A's routes and CLI neither show, cancel
    nor answer B's; the admin's --all-workspaces sees both."""
    provider = provider_factory(work_scenario())
    other = tmp_path / "b"
    init_workspace(other, specimen=True)
    accounts = tmp_path / "accounts.toml"
    accounts.write_text(f'[[account]]\nname = "alice"\n'
                        f'token_sha256 = "{token_hash(USER_TOKEN)}"\n')
    server_a = server_factory(specimen, work_db=full_url(work_url), accounts=str(accounts))
    alice = server_a.client(token=USER_TOKEN)
    mine = _submit(alice, message("write1", "a1"))  # the oldest runnable run of the database
    b_store = open_for(work_url, other)
    try:
        theirs = b_store.submit(message("write1", "b1")).task.id
        ran = run_worker_once(other, work_url, provider.base_url)  # B's worker, read-only
        assert (ran["task_id"], ran["outcome"]) == (theirs, "WAITING_APPROVAL"), \
            "B's worker took B's task, not A's older one"
        [approval] = b_store.list_approvals(theirs)
        assert not (other / "files" / "notes" / "a1-1.md").exists()
        assert alice.get(f"{TASKS}/{mine['id']}").json()["task"]["state"] == "QUEUED"
        assert [t["id"] for t in alice.get(TASKS).json()["tasks"]] == [mine["id"]]
        admin = server_a.client()
        _error(admin.get(f"{TASKS}/{theirs}"), 404, "TASK_NOT_FOUND")
        _error(admin.post(f"{TASKS}/{theirs}/cancel", {}), 404, "TASK_NOT_FOUND")
        _error(admin.post(f"/api/v1/work/approvals/{approval.id}",
                          {"decision": "allowed-once"}), 404, "APPROVAL_NOT_FOUND")
        assert b_store.get_approval(approval.id).decision is None
        assert b_store.get_task(theirs).state is State.WAITING_APPROVAL, "not cancelled"

        db = ("--work-db", full_url(work_url))
        a_cli = ("--workspace", str(specimen), *db)
        run("work", "show", theirs, *a_cli).refused("TASK_NOT_FOUND")
        run("work", "cancel", theirs, *a_cli).refused("TASK_NOT_FOUND")
        run("work", "approve", approval.id, "rejected", *a_cli).refused("APPROVAL_NOT_FOUND")
        listed = run("work", "list", *a_cli).json()["tasks"]
        assert [t["id"] for t in listed] == [mine["id"]]
        assert run("work", "list", *db).refused("CONFIG_INVALID").startswith(
            "CONFIG_INVALID: whose tasks?")
        run("work", "list", "--all-workspaces", *a_cli).refused("CONFIG_INVALID")
        every = run("work", "list", "--all-workspaces", *db).json()["tasks"]
        assert [t["id"] for t in every] == [theirs, mine["id"]]

        done = run_worker_once(specimen, work_url, provider.base_url, mode="workspace-write")
        assert (done["task_id"], done["outcome"]) == (mine["id"], "COMPLETED")
        assert (specimen / "files" / "notes" / "a1-1.md").exists()
        assert not (other / "files" / "notes" / "a1-1.md").exists()
        assert b_store.get_task(theirs).state is State.WAITING_APPROVAL
    finally:
        b_store.close()


@pytest.mark.req("WK-05", "WK-02")
def test_a_database_that_could_not_be_opened_is_tried_again_on_the_next_request(
        server_factory: ServerFactory, workspace: Path, tmp_path: Path) -> None:
    later = tmp_path / "not-yet"
    live = server_factory(workspace, work_db=f"sqlite:///{later}/work.sqlite")
    client = live.client()
    assert "does not exist" in _error(client.get(TASKS), 503, "WORK_DB_UNAVAILABLE")
    later.mkdir()
    task = _submit(client, "now it opens")
    assert client.get(TASKS).json()["tasks"] == [task]


@pytest.mark.req("WK-05", "WK-02")
def test_a_stopped_server_holds_no_connection_to_its_work_database(
        server_factory: ServerFactory, workspace: Path, work_url: DatabaseUrl,
        request: pytest.FixtureRequest) -> None:
    live = server_factory(workspace, work_db=full_url(work_url))
    _submit(live.client(), "opens the store")
    live.stop()
    with pytest.raises(LabfyError) as refused:
        live.state.work.store()
    assert refused.value.code is ErrorCode.WORK_DB_UNAVAILABLE, "closed for good"
    if work_url.dialect == "postgresql":
        cluster: PrivateCluster = request.getfixturevalue("pg_cluster")
        with cluster.admin() as conn:
            held = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s",
                                (work_url.url.database,)).fetchone()
        assert held == (0,), "every pooled connection was closed"

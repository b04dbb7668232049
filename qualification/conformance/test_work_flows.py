"""The Work routes with a worker beside the target (WK-02, WK-05, WK-12; QR-07's worker).

Each test submits its own task over HTTP, the launch profile's worker runs it with the kit's
provider, and the test reads what the routes show: the task's end, its runs, events,
effects and approvals. Nothing here looks at the target's database or files.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest

from qualification.conformance.kit import marker, nonce
from qualification.harness import ApiClient
from qualification.target import Served

pytestmark = pytest.mark.conformance

TASKS = "/api/v1/work/tasks"
FINISHED = {"COMPLETED", "FAILED", "CANCELLED"}
#: How long a worker has to take a step of a kit script (each answers at once or in 2.5 s).
STEP_SECONDS = 30.0


@contextlib.contextmanager
def _client(target: Served, token: str | None = None) -> Iterator[ApiClient]:
    client = target.client(token=token)
    try:
        yield client
    finally:
        client.close()


def _submit(client: ApiClient, message: str) -> str:
    made = client.post(TASKS, {"message": message})
    assert made.status_code == 201, made.text
    task_id: str = made.json()["task"]["id"]
    return task_id


def _until(client: ApiClient, task_id: str, states: set[str]) -> dict[str, Any]:
    """The task's show once its state is one of ``states`` (bounded; the last one seen)."""
    deadline = time.monotonic() + STEP_SECONDS
    while True:
        shown: dict[str, Any] = client.get(f"{TASKS}/{task_id}").json()
        if shown["task"]["state"] in states or time.monotonic() > deadline:
            return shown
        time.sleep(0.05)


def _error(response: Any, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code, response.text


@pytest.mark.req("WK-05", "WK-02")
def test_a_submitted_task_runs_to_its_end_on_the_worker_and_shows_how(
        work_target: Served) -> None:
    tag = nonce()
    with _client(work_target) as client:
        task_id = _submit(client, f"Answer me. {marker('final', tag)}")
        done = _until(client, task_id, FINISHED)
    assert done["task"]["state"] == "COMPLETED", done
    assert done["task"]["final_text"] == f"KIT final « ünïcödé » \U0001d11e {tag}"
    [run] = done["runs"]
    assert run["state"] == "COMPLETED" and run["attempt"] == 1 and run["worker"]
    kinds = [event["type"] for event in done["events"]]
    assert kinds[0] == "task.submitted" and kinds[-1] == "run.finished", kinds
    assert "run.claimed" in kinds
    assert [event["seq"] for event in done["events"]] == sorted(
        {event["seq"] for event in done["events"]})
    assert done["effects"] == [] and done["approvals"] == []


@pytest.mark.req("WK-12", "WK-05")
def test_a_write_waits_for_the_admins_answer_and_runs_once(work_target: Served,
                                                           user_token: str) -> None:
    tag = nonce()
    with _client(work_target) as admin, _client(work_target, user_token) as user:
        task_id = _submit(admin, f"Write it. {marker('work-write', tag)}")
        waiting = _until(admin, task_id, FINISHED | {"WAITING_APPROVAL"})
        assert waiting["task"]["state"] == "WAITING_APPROVAL", waiting
        [approval] = waiting["approvals"]
        assert (approval["tool_id"], approval["decision"]) == ("files.write", "pending")
        assert waiting["effects"] == [], "nothing runs before the answer"
        url = f"/api/v1/work/approvals/{approval['id']}"
        _error(user.post(url, {"decision": "allowed-once"}), 403, "FORBIDDEN")
        assert user.get(f"{TASKS}/{task_id}").json()["approvals"][0]["decision"] == "pending"
        answered = admin.post(url, {"decision": "allowed-once"})
        assert answered.status_code == 200, answered.text
        _error(admin.post(url, {"decision": "rejected"}), 409, "APPROVAL_NOT_PENDING")
        done = _until(admin, task_id, FINISHED)
    assert done["task"]["state"] == "COMPLETED", done
    assert done["task"]["final_text"] == f"KIT wrote {tag}."
    assert done["approvals"][0]["decision"] == "allowed-once"
    [effect] = done["effects"]
    assert (effect["tool_id"], effect["status"]) == ("files.write", "completed")
    assert effect["arguments"]["path"] == f"kit-work-{tag}.txt"


@pytest.mark.req("WK-12", "WK-05")
def test_a_rejected_write_never_runs_and_the_task_still_ends(work_target: Served) -> None:
    tag = nonce()
    with _client(work_target) as client:
        task_id = _submit(client, f"Write it. {marker('work-write', tag)}")
        waiting = _until(client, task_id, FINISHED | {"WAITING_APPROVAL"})
        [approval] = waiting["approvals"]
        answered = client.post(f"/api/v1/work/approvals/{approval['id']}",
                               {"decision": "rejected"})
        assert answered.status_code == 200, answered.text
        done = _until(client, task_id, FINISHED)
    assert done["task"]["state"] == "COMPLETED", done
    assert done["approvals"][0]["decision"] == "rejected"
    assert all(effect["status"] != "completed" for effect in done["effects"]), done["effects"]


@pytest.mark.req("WK-05", "WK-09")
def test_a_task_cancelled_while_its_run_is_held_never_finishes_otherwise(
        work_target: Served) -> None:
    with _client(work_target) as client:
        task_id = _submit(client, f"Take your time. {marker('hold')}")
        running = _until(client, task_id, FINISHED | {"RUNNING"})
        assert running["task"]["state"] == "RUNNING", running
        cancelled = client.post(f"{TASKS}/{task_id}/cancel")
        assert cancelled.status_code == 200, cancelled.text
        assert cancelled.json()["task"]["state"] == "CANCELLED"
        time.sleep(3.5)  # the held model answer (2.5 s) arrives meanwhile
        after = client.get(f"{TASKS}/{task_id}").json()
        assert client.post(f"{TASKS}/{task_id}/cancel").json() == cancelled.json()
    assert after["task"]["state"] == "CANCELLED" and after["task"]["final_text"] is None, after
    assert all(run["state"] == "CANCELLED" for run in after["runs"]), after["runs"]

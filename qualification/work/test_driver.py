"""WK-01, WK-02, WK-04, WK-05: one run driven by the Work driver, on SQLite and PostgreSQL.

The worker runs in this process (``run_worker_command``, the body of ``labfy-ref work
worker``) against a real fake provider; the run's model, its engine composition, its
gateway, its files and its store are real.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fake_provider.scenario import Scenario
from fake_provider.server import FakeProvider
from labfy_ref.cli.work import run_worker_command
from labfy_ref.gateway.summary import approval_summary
from labfy_ref.gateway.usage import UsageService
from labfy_ref.host import Composition, Host, RowSpec
from labfy_ref.host.host import RowState
from labfy_ref.model import LocalModelClient
from labfy_ref.model.endpoint import parse_endpoint
from labfy_ref.modes import PermissionMode
from labfy_ref.runtime import RuntimeLimits
from labfy_ref.tools import default_catalog
from labfy_ref.work import DatabaseUrl, EffectStatus, State, WorkStore
from labfy_ref.work.run import driver
from labfy_ref.work.run.composition import (
    ROWS,
    RunEngine,
    check_isolated,
    run_composition,
    start_run_engine,
)
from labfy_ref.work.run.driver import RunOutcome, RunServices
from labfy_ref.work.run.effects import AUDIT_EVENT
from labfy_ref.work.run.worker import Worker, WorkerSettings
from labfy_ref.work.store import fields
from labfy_ref.workspace.layout import open_workspace
from qualification.conftest import ProviderFactory
from qualification.harness import wait_until
from qualification.work.wire import open_for
from qualification.work.workers import (
    check_exactly_once,
    conversation_requests,
    message,
    script,
    url_text,
    work_scenario,
)


@pytest.fixture
def provider(provider_factory: ProviderFactory) -> FakeProvider:
    """A fake provider serving the Work scripts."""
    return provider_factory(work_scenario())


@pytest.fixture
def store(work_url: DatabaseUrl, specimen: Path) -> Iterator[WorkStore]:
    """The test's view of the Work database (workers open their own)."""
    opened = open_for(work_url, specimen)
    yield opened
    opened.close()


def worker_once(workspace: Path, url: DatabaseUrl, provider: FakeProvider,
                capsys: pytest.CaptureFixture[str], **options: Any) -> list[dict[str, Any]]:
    """Run ``labfy-ref work worker --once`` in this process; the run lines it printed."""
    values = {"workspace": str(workspace), "work_db": url_text(url), "once": True,
              "max_runs": None, "permission_mode": "workspace-write",
              "agent_mode": "local-model", "agent_endpoint": provider.base_url,
              "agent_model": "fake-model", "agent_timeout": "30", "lease_seconds": "30",
              "heartbeat_seconds": "5", **options}
    capsys.readouterr()
    assert run_worker_command(argparse.Namespace(**values), environ={}) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


@pytest.mark.req("WK-01")
def test_a_run_engine_holds_only_its_own_rows_and_is_disposed() -> None:
    """The run's composition: prompt, model, tool descriptions, engine; no files, shell or
    sessions; stopping it disposes every row and retracts every service."""
    class Model:
        async def chat(self, *_: Any, **__: Any) -> Any:
            raise AssertionError("not asked")

    async def scenario() -> None:
        host, engine = await start_run_engine(default_catalog(), Model())
        status = host.status()
        assert [row["id"] for row in status["rows"]] == list(ROWS)
        assert {row["state"] for row in status["rows"]} == {RowState.ACTIVE.value}
        names = {service["name"] for service in status["services"]}
        assert names == {"catalog", "model", "system_prompt", "llm", "tools", "engine"}
        assert "files.write" in engine.tool_ids
        assert "files.write" in engine.system_prompt
        await host.stop()
        assert host.service("engine") is None
        assert host.service("model") is None
        assert {row["state"] for row in host.status()["rows"]} == {RowState.DISPOSED.value}

    asyncio.run(scenario())
    assert [row.id for row in run_composition().rows] == list(ROWS)
    for row_id, plugin in (("extra", "sessions"),
                           ("extra", "labfy_ref.bridge.plugins:SessionsPlugin"),
                           ("extra", "x:ShellPlugin"), ("extra", "x:FilesPlugin"),
                           ("files", "x:Thing"), ("shell", "x:Thing")):  # by its row's id
        with pytest.raises(ValueError, match="not allowed in a Work run"):
            check_isolated(Composition((*run_composition().rows,
                                        RowSpec(row_id, plugin, {}))))


@pytest.mark.req("WK-02", "WK-04")
def test_a_run_completes_with_its_replies_effects_messages_and_events_stored(
        specimen: Path, work_url: DatabaseUrl, store: WorkStore, provider: FakeProvider,
        capsys: pytest.CaptureFixture[str]) -> None:
    """workspace-write: two writes and a read, then the answer; everything is stored."""
    task = store.submit(message("write2", "a1")).task
    (line,) = worker_once(specimen, work_url, provider, capsys)
    assert line.pop("claim_ms") >= 0  # how long the claim took (the bench's claim latency)
    assert line == {"run_id": store.list_runs(task.id)[0].id, "task_id": task.id,
                    "attempt": 1, "outcome": "COMPLETED", "detail": None}
    check_exactly_once(store, task.id, "write2", "a1", specimen / "files", provider)
    run_id = line["run_id"]
    effects = store.list_effects(run_id)
    assert [(e.step, e.tool_id, e.status) for e in effects] == [
        (1, "files.write", EffectStatus.COMPLETED), (2, "files.write", EffectStatus.COMPLETED),
        (3, "files.read", EffectStatus.COMPLETED)]
    assert effects[2].result["data"]["content"] == "note 1 a1"
    reply = store.get_reply(run_id, 1)
    assert reply is not None
    assert json.loads(reply.response["content"])["tool_id"] == "files.write"
    assert reply.request["messages"] == 2
    roles = [m.role for m in store.list_messages(run_id)]
    assert roles == ["user"] + ["assistant", "tool"] * 3 + ["assistant"]
    kinds = [e.type for e in store.list_events(task.id)]
    assert kinds[:2] == ["task.submitted", "run.claimed"]
    assert kinds[-1] == "run.finished"
    assert kinds.count("model.answered") == 4
    assert kinds.count(AUDIT_EVENT) == 2
    assert kinds.count("tool.answered") == 3


@pytest.mark.req("WK-04", "WK-05")
def test_read_only_write_waits_for_an_approval_then_another_worker_resumes_it(
        specimen: Path, work_url: DatabaseUrl, store: WorkStore, provider: FakeProvider,
        capsys: pytest.CaptureFixture[str]) -> None:
    """read-only: the write parks the run WAITING_APPROVAL with nothing written; once
    allowed, the next worker replays step 1 from the store (no model request) and writes."""
    task = store.submit(message("write1", "b1")).task
    (parked,) = worker_once(specimen, work_url, provider, capsys, permission_mode="read-only")
    assert parked["outcome"] == "WAITING_APPROVAL"
    assert store.get_task(task.id).state is State.WAITING_APPROVAL
    (approval,) = store.list_approvals(task.id)
    assert approval.id == parked["detail"]
    assert (approval.tool_id, approval.step, approval.decision) == ("files.write", 1, None)
    assert approval.summary == 'files.write notes/b1-1.md (9 bytes): "note 1 b1"'
    shown = store.show(task.id)["approvals"]
    assert shown[0]["arguments"] == {"path": "notes/b1-1.md", "content": "note 1 b1"}
    assert not (specimen / "files/notes/b1-1.md").exists()
    assert store.list_effects(parked["run_id"]) == []
    assert worker_once(specimen, work_url, provider, capsys, permission_mode="read-only") == []
    assert conversation_requests(provider, "b1") == [2]
    store.answer_approval(approval.id, "allowed-once")
    (resumed,) = worker_once(specimen, work_url, provider, capsys, permission_mode="read-only")
    assert (resumed["outcome"], resumed["attempt"]) == ("COMPLETED", 2)
    check_exactly_once(store, task.id, "write1", "b1", specimen / "files", provider)
    workspace_store = open_workspace(specimen).open_store()
    try:
        ledger = UsageService(workspace_store).report()["usage"]
    finally:
        workspace_store.close()
    calls = [(r["caller"], r["outcome"]) for r in ledger]
    assert calls == [(resumed["run_id"], "ok")] * 2  # step 1 replayed on resume: no call


@pytest.mark.req("WK-05", "GW-07")
def test_one_work_approval_allows_one_write_of_its_run(
        specimen: Path, work_url: DatabaseUrl, store: WorkStore, provider: FakeProvider,
        capsys: pytest.CaptureFixture[str]) -> None:
    """read-only, two writes of the same tool: allowing the first lets the first write run
    and nothing more; the second parks the run on its own approval, unwritten."""
    task = store.submit(message("write2", "o1")).task
    worker_once(specimen, work_url, provider, capsys, permission_mode="read-only")
    (first,) = store.list_approvals(task.id)
    store.answer_approval(first.id, "allowed-once")
    (line,) = worker_once(specimen, work_url, provider, capsys, permission_mode="read-only")
    assert line["outcome"] == "WAITING_APPROVAL", line
    approvals = store.list_approvals(task.id)
    assert [(a.step, a.tool_id, a.decision is None) for a in approvals] == [
        (1, "files.write", False), (2, "files.write", True)]
    assert line["detail"] == approvals[1].id
    assert (specimen / "files/notes/o1-1.md").is_file()
    assert not (specimen / "files/notes/o1-2.md").exists(), "the second write was not allowed"


@pytest.mark.req("WK-05")
def test_a_rejected_approval_is_a_normal_refusal_the_model_reads(
        specimen: Path, work_url: DatabaseUrl, store: WorkStore, provider: FakeProvider,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Rejected: the model is told PERMISSION_DENIED as a tool result and answers; no file."""
    task = store.submit(message("write1", "c1")).task
    worker_once(specimen, work_url, provider, capsys, permission_mode="read-only")
    (approval,) = store.list_approvals(task.id)
    store.answer_approval(approval.id, "rejected")
    (line,) = worker_once(specimen, work_url, provider, capsys, permission_mode="read-only")
    assert line["outcome"] == "COMPLETED"
    assert store.get_task(task.id).final_text == "done c1"
    assert not (specimen / "files/notes/c1-1.md").exists()
    assert store.list_effects(line["run_id"]) == []
    tool_message = store.list_messages(line["run_id"])[2]
    assert tool_message.role == "tool"
    assert '"code":"PERMISSION_DENIED"' in tool_message.content.replace(" ", "")
    answered = [e.data for e in store.list_events(task.id) if e.type == "tool.answered"]
    assert answered == [{"step": 1, "tool_id": "files.write", "status": "refused",
                         "error_code": "PERMISSION_DENIED"}]


@pytest.mark.req("WK-01", "WK-02")
def test_a_refused_write_is_a_tool_result_and_its_effect_is_refused(
        specimen: Path, work_url: DatabaseUrl, store: WorkStore,
        provider_factory: ProviderFactory, capsys: pytest.CaptureFixture[str]) -> None:
    """A write outside files/ is refused (by the confined files service): the effect row
    says ``refused`` with the code, nothing is written, the model reads the refusal."""
    outside = {"content": json.dumps({"type": "tool_call", "tool_id": "files.write",
                                      "arguments": {"path": "../escape.md", "content": "x"}})}
    final = {"content": json.dumps({"type": "final", "text": "refused"})}
    provider = provider_factory(Scenario.from_json({"answers": [outside, final]}))
    task = store.submit("write outside").task
    (line,) = worker_once(specimen, work_url, provider, capsys)
    assert line["outcome"] == "COMPLETED"
    (effect,) = store.list_effects(line["run_id"])
    assert effect.status is EffectStatus.REFUSED
    assert effect.result["error"]["code"] == "PATH_OUTSIDE_WORKSPACE"
    assert not (specimen / "escape.md").exists()
    answered = [e.data for e in store.list_events(task.id) if e.type == "tool.answered"]
    assert answered == [{"step": 1, "tool_id": "files.write", "status": "error",
                         "error_code": "PATH_OUTSIDE_WORKSPACE"}]


@pytest.mark.req("WK-01", "WK-02")
def test_budgets_apply_and_end_the_task_failed_with_the_code(
        specimen: Path, work_url: DatabaseUrl, store: WorkStore,
        provider_factory: ProviderFactory, capsys: pytest.CaptureFixture[str]) -> None:
    """A model that lists forever meets the rounds budget: FAILED BUDGET_EXHAUSTED."""
    listing = {"content": json.dumps({"type": "tool_call", "tool_id": "files.list",
                                      "arguments": {"path": ""}})}
    provider = provider_factory(Scenario.from_json({"answers": [listing],
                                                    "when_exhausted": "repeat_last"}))
    task = store.submit("list forever").task
    (line,) = worker_once(specimen, work_url, provider, capsys, conclude_after="0")
    assert (line["outcome"], line["detail"]) == ("FAILED", "BUDGET_EXHAUSTED")
    finished = [e.data for e in store.list_events(task.id) if e.type == "run.finished"]
    assert finished[0]["error"]["code"] == "BUDGET_EXHAUSTED"
    assert store.get_task(task.id).state is State.FAILED
    assert store.get_reply(line["run_id"], 16) is not None
    assert store.get_reply(line["run_id"], 17) is None


@pytest.mark.req("WK-01", "WK-05")
def test_cancelling_the_task_stops_the_drive_and_disposes_its_engine(
        specimen: Path, work_url: DatabaseUrl, store: WorkStore,
        provider_factory: ProviderFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Cancelled while its model is asked (an answer a minute away): the worker's heartbeat
    finds the run fenced off, the drive stops at once, and its engine — every row of its
    composition — is disposed; nothing more is stored for the run."""
    provider = provider_factory(work_scenario(slow=script(1, delay_final=60)))
    engines: list[Host] = []

    async def observed(catalog: Any, model: Any) -> tuple[Host, RunEngine]:
        host, engine = await start_run_engine(catalog, model)
        engines.append(host)
        return host, engine

    monkeypatch.setattr(driver, "start_run_engine", observed)
    task = store.submit(message("slow", "d1")).task
    workspace = open_workspace(specimen)
    workspace_store = workspace.open_store()
    model = LocalModelClient(parse_endpoint(provider.base_url), "fake-model")
    services = RunServices(workspace, workspace_store, model, "local:fake-model",
                           PermissionMode.WORKSPACE_WRITE, RuntimeLimits())
    settings = WorkerSettings("in-test", lease_seconds=30, heartbeat_seconds=0.2)

    async def scenario() -> RunOutcome:
        claim = store.claim(settings.name, settings.lease_seconds)
        assert claim is not None
        running = asyncio.create_task(Worker(store, services, settings).run(claim))
        await asyncio.to_thread(wait_until, lambda: conversation_requests(provider, "d1")
                                == [2, 4], timeout=30)
        assert {row["state"] for row in engines[0].status()["rows"]} == {"ACTIVE"}
        store.cancel(task.id)
        return await asyncio.wait_for(running, timeout=20)

    try:
        outcome = asyncio.run(asyncio.wait_for(scenario(), timeout=60))
    finally:
        asyncio.run(model.aclose())
        workspace_store.close()
    assert outcome.outcome == "LOST"
    (engine,) = engines
    assert {row["state"] for row in engine.status()["rows"]} == {"DISPOSED"}
    assert engine.service("engine") is None
    (run,) = store.list_runs(task.id)
    assert run.state is State.CANCELLED
    assert store.get_reply(run.id, 2) is None
    assert [e.type for e in store.list_events(task.id)][-1] == "task.cancelled"


@pytest.mark.req("WK-02")
def test_an_answer_the_store_cannot_keep_fails_the_task_with_the_code(
        specimen: Path, work_url: DatabaseUrl, store: WorkStore,
        provider_factory: ProviderFactory, capsys: pytest.CaptureFixture[str]) -> None:
    """A final answer holding NUL cannot be stored as text: the task ends FAILED with
    VALIDATION_FAILED at once — not left RUNNING for every worker to take over and fail."""
    final = {"content": json.dumps({"type": "final", "text": "bad \x00 answer"})}
    provider = provider_factory(Scenario.from_json({"answers": [final]}))
    task = store.submit("answer").task
    (line,) = worker_once(specimen, work_url, provider, capsys)
    assert (line["outcome"], line["detail"]) == ("FAILED", "VALIDATION_FAILED")
    assert store.get_task(task.id).state is State.FAILED
    finished = [e.data for e in store.list_events(task.id) if e.type == "run.finished"]
    assert finished[0]["error"]["code"] == "VALIDATION_FAILED"
    assert "NUL" in finished[0]["error"]["message"]
    assert worker_once(specimen, work_url, provider, capsys) == []
    assert len(provider.chat_requests()) == 1


TEXT = st.one_of(
    st.text(st.one_of(st.characters(codec=None, categories=["Cs"]), st.characters(codec=None))),
    st.binary().map(lambda raw: raw.decode("utf-8", "surrogateescape")))


@pytest.mark.req("WK-05")
@settings(deadline=None, max_examples=200)
@given(tool_id=st.sampled_from(["files.write", "research.prepare", "files.read"]),
       path=TEXT, content=TEXT)
def test_an_approval_summary_is_always_a_name_the_store_keeps(tool_id: str, path: str,
                                                              content: str) -> None:
    """Whatever the model put in a call (lone surrogates, NUL, controls, raw bytes), the
    approval's summary is one printable line of at most 200 characters the store accepts,
    so asking a human never fails on the model's text."""
    summary = approval_summary(default_catalog()[tool_id], {"path": path, "content": content})
    assert fields.name(summary, "summary") == summary
    assert len(summary) <= 200
    assert summary.startswith(tool_id)
    if tool_id == "files.write" and len(path) < 100:
        size = len(content.encode("utf-8", "surrogatepass"))
        assert f"({size} bytes): " in summary


@pytest.mark.req("WK-05")
def test_a_tool_that_targets_a_file_but_writes_no_content_is_summarised_as_its_call() -> None:
    """Only a call whose traits name both its target and what it writes is summarised as a
    write of so many bytes; a tool that names a target only (a removal another catalog
    could ship) is shown as its call, never as a write of 0 bytes."""
    import dataclasses  # noqa: PLC0415

    from labfy_ref.tools.catalog import Recovery  # noqa: PLC0415

    write = default_catalog()["files.write"]
    remove = dataclasses.replace(write, tool_id="files.remove", traits=dataclasses.replace(
        write.traits, written=None, recovery=Recovery.MADE))
    assert remove.target == "path"
    assert approval_summary(remove, {"path": "notes/old.txt"}) == \
        'files.remove {"path": "notes/old.txt"}'
    assert approval_summary(write, {"path": "notes/a.txt", "content": "hé"}) == \
        'files.write notes/a.txt (3 bytes): "hé"'


@pytest.mark.req("PR-07", "GW-02")
def test_work_tells_effects_apart_by_the_catalog_not_by_tool_ids() -> None:
    """Work's effect ledger and approval summaries read each tool's catalog traits
    (``recovery``, ``targets``, ``written``): no Work module spells a tool id, and every
    tool that changes something says how a crash of it is resolved."""
    from pathlib import Path  # noqa: PLC0415

    from labfy_ref.tools.catalog import Effect, Recovery  # noqa: PLC0415

    for spec in default_catalog().values():
        assert (spec.traits.recovery is Recovery.REPEAT) == (spec.effect is Effect.READ)
    assert {spec.effect for spec in default_catalog().values()} == set(Effect)
    root = Path(__file__).resolve().parents[2] / "labfy_ref" / "work"
    for module in sorted(root.rglob("*.py")):
        source = module.read_text("utf-8")
        for tool_id in default_catalog():
            assert f'"{tool_id}"' not in source, f"{module.name} spells {tool_id}"


@pytest.mark.req("WK-05", "GW-06")
@pytest.mark.parametrize("path", ["../../outside.txt", "/etc/passwd", "notes/../../x.md"])
def test_a_write_confinement_refuses_anyway_is_never_put_to_a_human(
        specimen: Path, work_url: DatabaseUrl, store: WorkStore,
        provider_factory: ProviderFactory, capsys: pytest.CaptureFixture[str],
        path: str) -> None:
    """read-only: before, the approver was asked to allow ``files.write ../../outside.txt``,
    a write the confined files service refuses whatever the answer. Confinement is
    checked first: no approval, the model reads PATH_OUTSIDE_WORKSPACE and answers."""
    outside = {"content": json.dumps({"type": "tool_call", "tool_id": "files.write",
                                      "arguments": {"path": path, "content": "x"}})}
    final = {"content": json.dumps({"type": "final", "text": "refused"})}
    provider = provider_factory(Scenario.from_json({"answers": [outside, final]}))
    task = store.submit("write outside").task
    (line,) = worker_once(specimen, work_url, provider, capsys, permission_mode="read-only")
    assert line["outcome"] == "COMPLETED"
    assert store.list_approvals(task.id) == []
    answered = [e.data for e in store.list_events(task.id) if e.type == "tool.answered"]
    assert answered == [{"step": 1, "tool_id": "files.write", "status": "refused",
                         "error_code": "PATH_OUTSIDE_WORKSPACE"}]
    assert not (specimen.parent / "outside.txt").exists()


@pytest.mark.req("WK-05", "GW-07")
def test_an_approval_allows_only_its_own_run_never_another_task_at_the_same_step(
        specimen: Path, work_url: DatabaseUrl, store: WorkStore, provider: FakeProvider,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Two tasks park on a write at the same step; one approval is allowed, the other
    rejected: each run reads its own answer only, so one file is written, never both."""
    allowed = store.submit(message("write1", "a1")).task
    rejected = store.submit(message("write1", "b1")).task
    parked = [worker_once(specimen, work_url, provider, capsys, permission_mode="read-only")
              for _ in range(2)]
    assert [line["outcome"] for (line,) in parked] == ["WAITING_APPROVAL"] * 2
    (yes,), (no,) = store.list_approvals(allowed.id), store.list_approvals(rejected.id)
    assert (yes.step, no.step) == (1, 1)
    store.answer_approval(yes.id, "allowed-once")
    store.answer_approval(no.id, "rejected")
    ended = [worker_once(specimen, work_url, provider, capsys, permission_mode="read-only")
             for _ in range(2)]
    assert sorted(line["outcome"] for (line,) in ended) == ["COMPLETED", "COMPLETED"]
    assert (specimen / "files/notes/a1-1.md").is_file()
    assert not (specimen / "files/notes/b1-1.md").exists(), "another task's answer is not its"
    (rejected_run,) = store.list_runs(rejected.id)[-1:]
    assert store.list_effects(rejected_run.id) == []

"""``--target-url``: the pytest side of the conformance kit (QR-03).

Its hooks and fixtures are imported by the repository's root ``conftest.py``.
Without ``--target-url`` nothing changes but the ``target`` fixture: our own
server in-process, set up as the self-test launches the real one (bridge on,
agent on the kit provider, one ``user`` account). With it, the controller asks
the target's ``GET /api/version`` first (a target that does not answer is a
usage error, not a red report), records it as ``conformance.json`` in the
report directory (``conformance-report/`` unless ``--report-dir`` says
otherwise), and every test not marked ``conformance`` is skipped: it needs a
local build.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from labfy_ref.report import now_iso
from labfy_ref.report.model import LOCAL_BUILD
from labfy_ref.report.pytest_plugin import report_dir_of
from labfy_ref.server.auth import token_hash
from labfy_ref.workspace import init_workspace
from qualification.conformance.kit import (
    KIT_APPROVAL_SECONDS,
    KIT_MODEL,
    PROVIDERS_FILE,
    kit_provider,
    launch_profile,
    marker,
    profile_mismatches,
)
from qualification.conformance.launch import terminate
from qualification.harness import LiveServer
from qualification.target import RemoteTarget, Served, TargetError, normalise_url

MARK = "conformance"
#: A kit test that changes the whole target (the admin's bridge toggle, BR-16): against a
#: shared ``--target-url`` it runs alone, no other kit test meanwhile on any worker.
EXCLUSIVE = "exclusive"
#: Why a test is not run against another implementation.
LOCAL_ONLY = (f"{LOCAL_BUILD}: it reads our store files, starts its own servers or "
              "processes, or calls our objects in-process")
NO_PROVIDER = ("needs the kit's provider: start `tox -e conformance -- provider`, "
               "launch the target with the flags it prints, and pass --target-provider URL")
NO_USER = "needs a user-role login: pass --target-user-token"
#: The ``user`` account of the in-process target (the self-test makes its own).
LOCAL_USER_TOKEN = "kit-user-token-0123456789"
_TARGET = pytest.StashKey[RemoteTarget | None]()


def pytest_addoption(parser: pytest.Parser) -> None:
    """The kit's options."""
    group = parser.getgroup("conformance", "conformance kit (QR-03)")
    group.addoption("--target-url", default=None,
                    help="run the HTTP-contract tests against this running implementation")
    group.addoption("--target-token", default=None,
                    help="the target's admin login code (required with --target-url)")
    group.addoption("--target-user-token", default=None,
                    help="a user-role login code of the target (else user-role tests NOT_RUN)")
    group.addoption("--target-provider", default=None,
                    help="the kit provider's URL the target's agent answers with (else turn "
                         "flows NOT_RUN)")


def _remote(config: pytest.Config) -> RemoteTarget | None:
    url = config.getoption("--target-url")
    if url is None:
        return None
    token = config.getoption("--target-token")
    if not token:
        raise pytest.UsageError("--target-url needs --target-token (the target's admin code)")
    provider = config.getoption("--target-provider")
    try:
        return RemoteTarget(normalise_url(str(url)), str(token),
                            config.getoption("--target-user-token"),
                            normalise_url(str(provider)) if provider else None)
    except TargetError as exc:
        raise pytest.UsageError(str(exc)) from exc


def pytest_configure(config: pytest.Config) -> None:
    """Register the marker; with a target, check it answers and record what it is."""
    config.addinivalue_line(
        "markers", f"{MARK}: runs against --target-url through the target fixtures (QR-03); "
        "every other test needs a local build")
    config.addinivalue_line(
        "markers", f"{EXCLUSIVE}: against a shared --target-url, runs while no other kit test "
        "does (it changes the whole target: the bridge toggle)")
    remote = _remote(config)
    config.stash[_TARGET] = remote
    if remote is None or hasattr(config, "workerinput"):
        return
    try:
        version = remote.version()
        remote.wait_for_bridge()
    except TargetError as exc:
        raise pytest.UsageError(str(exc)) from exc
    if remote.provider_url is not None:  # QR-07: a target that ignores its profile fails
        wrong = profile_mismatches(remote.status(), launch_profile(remote.provider_url))
        if wrong:
            raise pytest.UsageError(
                "the target does not run with the kit's launch profile (QR-07; print it with "
                "`tox -e conformance -- provider`): " + "; ".join(wrong))
    report_dir = report_dir_of(config)
    report_dir.mkdir(parents=True, exist_ok=True)
    record = report_dir / "conformance.json"
    tmp = record.with_name(record.name + ".tmp")
    tmp.write_text(json.dumps({"target_url": remote.url, "at": now_iso(), "version": version},
                              indent=2), "utf-8")
    tmp.replace(record)


def pytest_report_header(config: pytest.Config) -> str | None:
    """Name the target at the top of the run."""
    remote = config.stash.get(_TARGET, None)
    return None if remote is None else f"conformance target: {remote.url}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Against a target, only the tests marked ``conformance`` run."""
    if config.stash.get(_TARGET, None) is None:
        return
    skip = pytest.mark.skip(reason=LOCAL_ONLY)
    for item in items:
        if item.get_closest_marker(MARK) is None:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def kit_turn(request: pytest.FixtureRequest) -> Iterator[None]:
    """Against a ``--target-url`` shared by the kit's workers: every test holds the target
    shared, an ``exclusive`` one alone (a turnstile first, so it is not starved)."""
    config = request.config
    if config.stash.get(_TARGET, None) is None:
        yield
        return
    folder = report_dir_of(config)
    folder.mkdir(parents=True, exist_ok=True)
    alone = request.node.get_closest_marker(EXCLUSIVE) is not None
    with (folder / ".kit-turnstile.lock").open("a") as turnstile, \
            (folder / ".kit-target.lock").open("a") as held:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(held, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            if not alone:
                fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)
            if alone:
                fcntl.flock(turnstile, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def target(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The server under test: the ``--target-url`` one, or ours set up like the self-test's."""
    remote = request.config.stash.get(_TARGET, None)
    if remote is not None:
        yield remote
        remote.stop()
        return
    root = tmp_path_factory.mktemp("kit-target")
    init_workspace(root / "ws", specimen=True)
    accounts = root / "accounts.toml"
    accounts.write_text(f'[[account]]\nname = "kit-user"\n'
                        f'token_sha256 = "{token_hash(LOCAL_USER_TOKEN)}"\n')
    provider = kit_provider().start()
    providers = root / PROVIDERS_FILE
    providers.write_text(launch_profile(provider.base_url)["providers"], "utf-8")
    server = LiveServer(root / "ws", bridge=True, accounts=str(accounts), providers=str(providers),
                        agent_mode="local-model", agent_endpoint=provider.base_url,
                        agent_model=KIT_MODEL,
                        approval_timeout=f"{KIT_APPROVAL_SECONDS:g}").start()
    server.user_token = LOCAL_USER_TOKEN
    server.provider_url = provider.base_url
    # the profile's worker beside it, on the workspace's own Work database (as the self-test)
    env = {key: value for key, value in os.environ.items() if not key.startswith("LABFY_")}
    with (root / "worker.log").open("wb") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "labfy_ref.cli.main", "work", "worker", "--workspace",
             str(root / "ws"), *launch_profile(provider.base_url)["worker"]],
            stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        yield server
    finally:
        terminate(worker)
        server.stop()
        provider.stop()


def remote_target(config: pytest.Config) -> RemoteTarget | None:
    """The ``--target-url`` target of this run, or None (our own servers)."""
    return config.stash.get(_TARGET, None)


@pytest.fixture
def model_target(target: Served) -> Served:
    """:func:`target`, when its agent answers with the kit provider; else NOT_RUN."""
    if target.provider_url is None:
        pytest.skip(NO_PROVIDER)
    return target


@pytest.fixture(scope="session")
def work_target(target: Served) -> Served:
    """:func:`target` with the launch profile's Work worker beside it (QR-07): a probe task
    must end ``COMPLETED`` within the profile's ``worker_seconds``, else the Work tests fail
    loudly (never pass or skip); NOT_RUN without the kit's provider."""
    if target.provider_url is None:
        pytest.skip(NO_PROVIDER)
    profile = launch_profile(target.provider_url)
    client = target.client()
    try:
        made = client.post("/api/v1/work/tasks", {"message": marker("final")})
        if made.status_code != 201:
            pytest.fail(f"the target refused a Work task ({made.status_code}): {made.text[:300]}")
        task_id = made.json()["task"]["id"]
        deadline = time.monotonic() + profile["worker_seconds"]
        state = None
        while time.monotonic() < deadline:
            state = client.get(f"/api/v1/work/tasks/{task_id}").json()["task"]["state"]
            if state == "COMPLETED":
                return target
            time.sleep(0.1)
    finally:
        client.close()
    pytest.fail(f"no worker ran the kit's probe task within {profile['worker_seconds']:g} s "
                f"(it is {state}): start the launch profile's worker beside the target "
                "(QR-07; print it with `tox -e conformance -- provider`)")


@pytest.fixture
def user_token(target: Served) -> str:
    """The target's user-role code; NOT_RUN without one."""
    if target.user_token is None:
        pytest.skip(NO_USER)
    return target.user_token

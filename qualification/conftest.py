"""Fixtures shared by every suite: a scrubbed environment, fake providers and servers."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fake_provider import FakeProvider, Scenario
from labfy_ref.host import default_composition
from labfy_ref.model import ClientLimits, LocalModelClient, parse_endpoint
from labfy_ref.workspace import init_workspace
from qualification.conformance.plugin import remote_target
from qualification.harness import ApiClient, LiveServer
from qualification.target import Served

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"
SCENARIOS = FIXTURES / "scenarios"

_AMBIENT = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "NETRC", "SSL_CERT_FILE",
            "SSL_CERT_DIR", "LABFY_AGENT_MODE", "LABFY_AGENT_MODEL_ENDPOINT",
            "LABFY_AGENT_MODEL_ID", "LABFY_AGENT_MODEL_TIMEOUT_SECONDS")


@pytest.fixture(scope="session")
def runtime_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the suite's servers list themselves (SV-12): never the user's own list."""
    return tmp_path_factory.mktemp("runtime")


@pytest.fixture(autouse=True)
def clean_environ(monkeypatch: pytest.MonkeyPatch, runtime_dir: Path) -> None:
    """No test inherits proxies, netrc or agent settings from the machine it runs on, nor
    lists its servers among the user's (subprocesses inherit the variable)."""
    for name in _AMBIENT:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    monkeypatch.setenv("LABFY_RUNTIME_DIR", str(runtime_dir))


ProviderFactory = Callable[..., FakeProvider]


@pytest.fixture
def provider_factory() -> Iterator[ProviderFactory]:
    """Start fake providers on free loopback ports; all are stopped at teardown."""
    started: list[FakeProvider] = []

    def start(scenario: Scenario, host: str = "127.0.0.1") -> FakeProvider:
        provider = FakeProvider(scenario, host=host).start()
        started.append(provider)
        return provider

    yield start
    for provider in started:
        provider.stop()


def client_for(provider: FakeProvider, *, model: str = "fake-model",
               limits: ClientLimits | None = None) -> LocalModelClient:
    """A LocalModelClient aimed at ``provider`` through the validated endpoint."""
    return LocalModelClient(parse_endpoint(provider.base_url), model, limits=limits)


def local_agent(url: str, model: str = "fake-model") -> dict[str, str]:
    """Server options for a local-model agent at ``url`` (a fake provider's base URL)."""
    return {"agent_mode": "local-model", "agent_endpoint": url, "agent_model": model}


def scenario(name: str) -> Scenario:
    """Load ``fixtures/scenarios/<name>.json``."""
    return Scenario.load(SCENARIOS / f"{name}.json")


@pytest.fixture
def specimen(tmp_path: Path) -> Path:
    """A fresh SPECIMEN workspace directory."""
    path = tmp_path / "specimen"
    init_workspace(path, specimen=True)
    return path


def composition_without(tmp_path: Path, row: str) -> Path:
    """The default composition minus ``row``, written to ``tmp_path`` (a bridge that fails)."""
    path = tmp_path / "composition.yaml"
    rows = [r for r in default_composition().rows if r.id != row]
    path.write_text(json.dumps({"rows": [{"id": r.id, "plugin": r.plugin, "config": r.config}
                                         for r in rows]}))  # JSON is YAML
    return path


def composition_with_row(tmp_path: Path, row: dict[str, Any]) -> Path:
    """The default composition with ``row`` first, written to ``tmp_path``."""
    path = tmp_path / "composition.yaml"
    rows = [{"id": r.id, "plugin": r.plugin, "config": r.config}
            for r in default_composition().rows]
    path.write_text(json.dumps({"rows": [row, *rows]}))  # JSON is YAML
    return path


def composition_with_slow_row(tmp_path: Path, seconds: float) -> Path:
    """The default composition plus a row that takes ``seconds`` to activate (HO-07)."""
    return composition_with_row(tmp_path, {
        "id": "slow", "plugin": "qualification.host.plugins_for_tests:Slow",
        "config": {"seconds": seconds}})


ServerFactory = Callable[..., LiveServer]


@pytest.fixture
def server_factory() -> Iterator[ServerFactory]:
    """Start real workspace servers (threads); all are stopped at teardown."""
    started: list[LiveServer] = []

    def start(workspace: Path, **options: Any) -> LiveServer:
        server = LiveServer(workspace, **options).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="module")
def demo_server(request: pytest.FixtureRequest,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One demo-agent server on a fresh SPECIMEN workspace, shared by a module's tests
    (the conformance target with ``--target-url``)."""
    if remote_target(request.config) is not None:
        yield request.getfixturevalue("target")
        return
    path = tmp_path_factory.mktemp("shared") / "specimen"
    init_workspace(path, specimen=True)
    server = LiveServer(path).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def demo_client(demo_server: Served) -> Iterator[ApiClient]:
    """An admin client of :func:`demo_server` (logged in once per module, out after it)."""
    client = demo_server.client()
    yield client
    client.close()

"""MC-05 and SV-01 options: explicit configuration, flags over environment."""

from __future__ import annotations

import pytest

from labfy_ref.config import (
    ENV_AGENT_ENDPOINT,
    ENV_AGENT_MODE,
    ENV_AGENT_MODEL,
    ENV_AGENT_TIMEOUT,
    AgentMode,
    RawOptions,
    resolve,
    resolve_agent,
)
from labfy_ref.errors import ConfigRefused, ErrorCode

LOCAL = {"agent_mode": "local-model", "agent_endpoint": "http://127.0.0.1:43117",
         "agent_model": "m"}


@pytest.mark.req("MC-05")
def test_no_configuration_means_the_demo_agent() -> None:
    agent = resolve_agent(RawOptions(), {})
    assert agent.mode is AgentMode.DEMO
    assert agent.endpoint is None and agent.model_id is None


@pytest.mark.req("MC-05")
def test_environment_configures_a_local_model() -> None:
    env = {ENV_AGENT_MODE: "local-model", ENV_AGENT_ENDPOINT: "http://[::1]:5000/v1",
           ENV_AGENT_MODEL: "qwen", ENV_AGENT_TIMEOUT: "12.5"}
    agent = resolve_agent(RawOptions(), env)
    assert agent.mode is AgentMode.LOCAL_MODEL
    assert str(agent.endpoint) == "http://[::1]:5000"
    assert (agent.model_id, agent.timeout_seconds) == ("qwen", 12.5)
    assert set(agent.sources.values()) == {"env"}


@pytest.mark.req("MC-05")
def test_flags_win_over_environment() -> None:
    env = {ENV_AGENT_MODE: "local-model", ENV_AGENT_ENDPOINT: "http://127.0.0.1:1111",
           ENV_AGENT_MODEL: "env-model"}
    agent = resolve_agent(RawOptions(agent_endpoint="http://127.0.0.1:2222",
                                     agent_model="flag-model"), env)
    assert (agent.endpoint.port if agent.endpoint else None, agent.model_id) == (2222,
                                                                                  "flag-model")
    assert agent.sources == {"mode": "env", "endpoint": "flag", "model": "flag",
                             "timeout": "default"}


@pytest.mark.req("MC-05")
def test_a_bad_environment_endpoint_is_refused_not_ignored() -> None:
    env = {ENV_AGENT_MODE: "local-model", ENV_AGENT_ENDPOINT: "http://localhost:5000",
           ENV_AGENT_MODEL: "m"}
    with pytest.raises(ConfigRefused) as caught:
        resolve_agent(RawOptions(), env)
    assert caught.value.code is ErrorCode.ENDPOINT_REFUSED


@pytest.mark.req("MC-05")
@pytest.mark.parametrize(
    ("options", "env", "fragment"),
    [
        ({"agent_endpoint": "http://127.0.0.1:43117"}, {}, "agent mode is 'demo'"),
        ({"agent_mode": "demo", "agent_model": "m"}, {}, "agent mode is 'demo'"),
        ({"agent_mode": "local-model", "agent_model": "m"}, {}, "exactly one of"),
        ({"agent_mode": "local-model", "agent_endpoint": "http://127.0.0.1:43117"}, {},
         "needs --agent-model"),
        ({"agent_mode": "cloud"}, {}, "must be 'demo' or 'local-model'"),
        ({**LOCAL, "agent_timeout": "0"}, {}, "--agent-timeout"),
        ({**LOCAL, "agent_timeout": "nan"}, {}, "--agent-timeout"),
        ({**LOCAL, "agent_timeout": "1e9"}, {}, "--agent-timeout"),
        ({**LOCAL, "agent_model": " m"}, {}, "--agent-model"),
        ({**LOCAL, "agent_model": "m\n"}, {}, "--agent-model"),
        ({**LOCAL, "llama_server": "/bin/sh"}, {}, "go together"),
        ({}, {ENV_AGENT_MODEL: "m"}, "agent mode is 'demo'"),
    ],
)
def test_incomplete_or_contradictory_settings_are_refused(
        options: dict[str, str], env: dict[str, str], fragment: str) -> None:
    with pytest.raises(ConfigRefused) as caught:
        resolve_agent(RawOptions(**options), env)  # type: ignore[arg-type]
    assert fragment in caught.value.message


@pytest.mark.req("MC-05")
def test_an_empty_environment_variable_counts_as_unset() -> None:
    agent = resolve_agent(RawOptions(), {ENV_AGENT_MODE: "", ENV_AGENT_ENDPOINT: ""})
    assert agent.mode is AgentMode.DEMO


@pytest.mark.req("MC-04")
@pytest.mark.parametrize(
    ("options", "code"),
    [
        ({"host": "0.0.0.0"}, ErrorCode.HOST_REFUSED),
        ({"host": "::"}, ErrorCode.HOST_REFUSED),
        ({"host": "192.168.1.10"}, ErrorCode.HOST_REFUSED),
        ({"host": "localhost"}, ErrorCode.HOST_REFUSED),
        ({"port": "8080"}, ErrorCode.PORT_REFUSED),
        ({"port": "0"}, ErrorCode.PORT_REFUSED),
        ({"port": "65536"}, ErrorCode.PORT_REFUSED),
        ({"port": "+5000"}, ErrorCode.PORT_REFUSED),
        ({"port": "05000"}, ErrorCode.PORT_REFUSED),
        ({"permission_mode": "root"}, ErrorCode.CONFIG_INVALID),
    ],
)
def test_server_options_are_refused_outside_loopback_and_reserved_ports(
        options: dict[str, str], code: ErrorCode) -> None:
    with pytest.raises(ConfigRefused) as caught:
        resolve(RawOptions(**options), {})  # type: ignore[arg-type]
    assert caught.value.code is code

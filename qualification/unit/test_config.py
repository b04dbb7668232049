"""MC-05 and SV-01 options: explicit configuration, flags over environment."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from labfy_ref.config import (
    DEFAULT_TIMEOUT_SECONDS,
    ENV_AGENT_ENDPOINT,
    ENV_AGENT_MODE,
    ENV_AGENT_MODEL,
    ENV_AGENT_TIMEOUT,
    RawOptions,
    resolve,
    resolve_agent,
)
from labfy_ref.errors import ConfigRefused, ErrorCode
from labfy_ref.modes import AgentMode
from labfy_ref.server.serve import build_state
from labfy_ref.workspace import open_workspace

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
        ({**LOCAL, "llama_server": "/bin/sh"}, {}, "need --model-file"),
        ({**LOCAL, "model_file": "/bin/sh"}, {}, "go together"),
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


@pytest.mark.req("SV-01", "MC-04")
@pytest.mark.parametrize(("text", "port"), [("0", 0), ("1", 1), ("65535", 65535)])
def test_port_0_means_any_free_port(text: str, port: int) -> None:
    assert resolve(RawOptions(port=text), {}).port == port


def _writing(field: str, path: str) -> RawOptions:
    return RawOptions(ready_file=path) if field == "ready_file" else RawOptions(log_file=path)


@pytest.mark.req("SV-01", "LOG-01")
@pytest.mark.parametrize("field", ["ready_file", "log_file"])
def test_files_serve_writes_need_an_existing_directory(tmp_path: Path, field: str) -> None:
    flag = "--" + field.replace("_", "-")
    accepted = resolve(_writing(field, str(tmp_path / "out")), {})
    assert getattr(accepted, field) == tmp_path / "out"
    assert not (tmp_path / "out").exists(), "resolving writes nothing"
    for bad, fragment in [(str(tmp_path / "missing" / "out"), "does not exist"),
                          (str(tmp_path / ("x" * 300) / "out"), "File name too long"),
                          ("", "the path is empty")]:
        with pytest.raises(ConfigRefused) as caught:
            resolve(_writing(field, bad), {})
        assert caught.value.code is ErrorCode.CONFIG_INVALID
        assert caught.value.message.startswith(f"{flag}: ") and fragment in caught.value.message


@pytest.mark.req("LOG-01", "SV-05")
def test_log_settings_are_resolved_and_shown(tmp_path: Path) -> None:
    default = resolve(RawOptions(), {})
    assert (default.log_level, default.log_file, default.debug) == ("info", None, False)
    chosen = resolve(RawOptions(log_level="error", log_file=str(tmp_path / "log"), debug=True),
                     {})
    assert chosen.as_json()["log"] == {"level": "error", "file": str(tmp_path / "log"),
                                       "debug": True}
    assert chosen.agent.timeout_seconds == DEFAULT_TIMEOUT_SECONDS
    for level in ("INFO", "trace", "verbose", ""):
        with pytest.raises(ConfigRefused) as caught:
            resolve(RawOptions(log_level=level), {})
        assert caught.value.message == "--log-level must be one of debug, info, warning, error"


@pytest.mark.req("SV-05", "SM-07")
@pytest.mark.parametrize("field", ["accounts", "composition"])
@pytest.mark.parametrize(("kind", "fragment"), [
    ("fifo", "not a regular file"), ("directory", "a directory, not a file"),
    ("missing", "no such file")])
def test_a_file_flag_says_what_the_path_is_when_it_is_not_a_file(
        tmp_path: Path, field: str, kind: str, fragment: str) -> None:
    # Before, a FIFO (or a directory) was "no such file": a user looked for a typo.
    path = tmp_path / "it"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    with pytest.raises(ConfigRefused) as caught:
        resolve(RawOptions(**{field: str(path)}), {})  # type: ignore[arg-type]
    assert caught.value.code is ErrorCode.CONFIG_INVALID
    assert caught.value.message == f"--{field}: {fragment}" or fragment in caught.value.message


@pytest.mark.req("BR-12", "QR-07")
@pytest.mark.parametrize(("text", "seconds"), [
    (None, 300.0), ("0.5", 0.5), ("1", 1.0), ("86400", 86400.0),
    ("0", None), ("-1", None), ("86400.5", None), ("nan", None), ("inf", None), ("", None),
    ("three", None)])
def test_the_approval_timeout_is_seconds_in_its_bounds(specimen: Path, text: str | None,
                                                       seconds: float | None) -> None:
    raw = RawOptions(workspace=str(specimen), bridge=True, approval_timeout=text)
    if seconds is None:
        with pytest.raises(ConfigRefused) as refused:
            resolve(raw, {})
        assert refused.value.message == ("--approval-timeout must be a number of seconds"
                                      if text in ("three", "") else
                                      "--approval-timeout must be > 0 and <= 86400 seconds")
        return
    config = resolve(raw, {})
    assert config.approval_seconds == seconds
    assert config.as_json()["server"]["approval_timeout_seconds"] == seconds
    state = build_state(config, open_workspace(specimen), 0, "code")

    async def loop_seconds() -> float:
        await state.bridge.start()
        try:
            assert state.bridge.host is not None
            return float(state.bridge.host.service("agent_loop").approval_seconds)
        finally:
            await state.bridge.stop()

    try:
        assert asyncio.run(loop_seconds()) == seconds
        assert asyncio.run(state.status())["bridge"]["approval_timeout_seconds"] == seconds
    finally:
        state.store.close()
        state.work.close()

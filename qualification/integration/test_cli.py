"""CLI-01, CLI-02 and the check-config command of SPEC §14."""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from labfy_ref.cli.main import build_parser
from labfy_ref.workspace import SCHEMA_VERSION, init_workspace
from qualification.harness import ServeProcess
from qualification.workspace.previous_release import dump, restore_v1_workspace

MUST_SHOW = ["check-config", "--agent-mode", "local-model", "--agent-endpoint",
             "http://127.0.0.1:43117", "--agent-model", "m"]


def _run(*args: str, env: dict[str, str] | None = None,
         cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "labfy_ref.cli.main", *args],
                          capture_output=True, text=True, timeout=60, check=False, cwd=cwd,
                          env={**os.environ, **(env or {})})


@pytest.fixture(autouse=True)
def private_data_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test has its own per-user data directory (the default workspace lives there)."""
    data = tmp_path / "data"
    monkeypatch.setenv("XDG_DATA_HOME", str(data))
    return data


@pytest.mark.req("MC-05", "CLI-01")
def test_check_config_prints_the_resolved_configuration_as_json() -> None:
    done = _run(*MUST_SHOW)
    assert done.returncode == 0, done.stderr
    resolved = json.loads(done.stdout)
    assert resolved["agent"] == {
        "mode": "local-model", "endpoint": "http://127.0.0.1:43117", "model": "m",
        "timeout_seconds": 60.0, "slots": 1, "supervised": None, "conclude_after": 4,
        "guidance": {"profile": "guided", "rules": ["relevance", "requested", "search",
                                                    "effect-task", "look-first", "grounding"],
                     "guards": ["information-gain", "progress", "text-shape"],
                     "asked": "auto",
                     "source": "auto: no calibration record for this model, the default "
                               "profile"},
        "sources": {"mode": "flag", "endpoint": "flag", "model": "flag", "timeout": "default"},
    }
    assert resolved["server"]["host"] == "127.0.0.1"
    assert resolved["server"]["permission_mode"] == "read-only"


@pytest.mark.req("MC-05")
def test_check_config_reads_the_environment() -> None:
    done = _run("check-config", env={"LABFY_AGENT_MODE": "local-model",
                                     "LABFY_AGENT_MODEL_ENDPOINT": "http://[::1]:5001/v1",
                                     "LABFY_AGENT_MODEL_ID": "env-model"})
    assert done.returncode == 0, done.stderr
    agent = json.loads(done.stdout)["agent"]
    assert (agent["endpoint"], agent["model"]) == ("http://[::1]:5001", "env-model")


@pytest.mark.req("CLI-01")
@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["check-config", "--host", "0.0.0.0"], "HOST_REFUSED"),
        (["check-config", "--port", "99999"], "PORT_REFUSED"),
        (["check-config", "--agent-mode", "local-model"], "CONFIG_INVALID"),
        (["check-config", "--no-such-flag"], "CONFIG_INVALID"),
        (["no-such-command"], "CONFIG_INVALID"),
        (["report", "--format", "pdf"], "CONFIG_INVALID"),
    ],
)
def test_refusals_are_one_line_with_the_code_and_exit_2(args: list[str], code: str) -> None:
    done = _run(*args)
    assert done.returncode == 2
    assert done.stderr.startswith(f"{code}: ")
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


@pytest.mark.req("CLI-01", "QR-02")
def test_an_unreadable_report_input_is_refused_with_one_line(
        tmp_path: os.PathLike[str]) -> None:
    done = _run("report", "--results", str(tmp_path), "--requirements",
                os.path.join(tmp_path, "missing.toml"))
    assert done.returncode == 2
    assert done.stderr.startswith("REPORT_INVALID: ") and "Traceback" not in done.stderr


@pytest.mark.req("CLI-01", "HO-01", "SV-03")
@pytest.mark.parametrize(("flag", "content", "fragment"), [
    ("--composition", "rows: [", "not YAML"),
    ("--composition", "rows:\n  - id: a\n", "needs id and plugin"),
    ("--accounts", "[[account]]\nname = 'x'\n", "token_sha256"),
])
def test_check_config_reads_the_files_serve_would_read(
        tmp_path: os.PathLike[str], flag: str, content: str, fragment: str) -> None:
    path = os.path.join(tmp_path, "file")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(content)
    done = _run("check-config", flag, path)
    assert done.returncode == 2
    assert done.stderr.startswith("CONFIG_INVALID: ") and fragment in done.stderr


def _one_line(done: subprocess.CompletedProcess[str], start: str) -> None:
    assert done.stderr.startswith(start), done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def _parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:  # argparse publishes no walk of its tree
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers(sub)


@pytest.mark.req("CLI-02")
@pytest.mark.parametrize(("args", "lists"), [
    ([], ["serve", "check-config", "workspace", "verify-gguf", "report"]),
    (["workspace"], ["init"]),
])
def test_a_command_group_alone_prints_its_usage_to_stderr_and_exits_2(
        args: list[str], lists: list[str]) -> None:
    done = _run(*args)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith(f"usage: labfy-ref {' '.join(args)}".rstrip())
    for command in lists:
        assert f"\n    {command}" in done.stderr, command


@pytest.mark.req("CLI-02")
def test_every_argument_has_help_and_every_option_names_its_default() -> None:
    skipped = (argparse._HelpAction, argparse._VersionAction,
               argparse._SubParsersAction)
    checked = 0
    for parser in _parsers(build_parser()):
        for action in parser._actions:
            if isinstance(action, skipped):
                continue
            where = (parser.prog, action.option_strings or action.dest)
            assert action.help and action.help != argparse.SUPPRESS, where
            if action.option_strings:
                assert "default:" in action.help, where
            checked += 1
    assert checked > 40


@pytest.mark.req("CLI-02")
def test_every_flag_is_off_until_given() -> None:
    """An on/off flag (``store_true``) parses as off when it is not given (or, ``--debug``
    anywhere, as absent): one that were on by default could never be turned off, and
    giving it would change nothing."""
    flags = 0
    for parser in _parsers(build_parser()):
        for action in parser._actions:
            if isinstance(action, argparse._StoreTrueAction):
                assert action.default in (False, argparse.SUPPRESS), (
                    parser.prog, action.option_strings)
                flags += 1
    assert flags >= 5


@pytest.mark.req("CLI-02")
def test_help_is_written_for_users() -> None:
    for parser in _parsers(build_parser()):
        text = parser.format_help()
        assert "§" not in text and "_command" not in text and "{init" not in text, parser.prog
        assert parser.description, parser.prog
    done = _run("serve", "--help")
    assert done.returncode == 0
    for shown in ("--log-level", "default: info", "--log-file", "default: 127.0.0.1",
                  "0 for any free port", "--debug"):
        assert shown in done.stdout, shown


@pytest.mark.req("CLI-02")
@pytest.mark.parametrize("args", [["--debug", "check-config"], ["check-config", "--debug"]])
def test_debug_is_accepted_anywhere_on_the_line(args: list[str]) -> None:
    done = _run(*args)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["log"]["debug"] is True


@pytest.mark.req("CLI-02", "WS-01", "WS-05")
def test_debug_after_a_nested_command(tmp_path: Path) -> None:
    done = _run("workspace", "init", str(tmp_path / "ws"), "--debug")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "ws" / "labfy-workspace.toml").is_file()


@pytest.mark.req("CLI-01", "SV-01", "LOG-01")
@pytest.mark.parametrize("flag", ["--ready-file", "--log-file"])
def test_check_config_refuses_an_output_file_in_a_missing_directory(
        tmp_path: Path, flag: str) -> None:
    done = _run("check-config", flag, str(tmp_path / "missing" / "out.json"))
    assert done.returncode == 2
    _one_line(done, f"CONFIG_INVALID: {flag}: directory {tmp_path / 'missing'} does not exist")


@pytest.mark.req("LOG-01", "SV-05")
def test_check_config_shows_the_server_log_settings(tmp_path: Path) -> None:
    log_file = tmp_path / "server.log"
    done = _run("check-config", "--log-level", "warning", "--log-file", str(log_file))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["log"] == {"level": "warning", "file": str(log_file),
                                              "debug": False}
    assert not log_file.exists(), "check-config writes nothing"
    default = json.loads(_run("check-config").stdout)["log"]
    assert default == {"level": "info", "file": None, "debug": False}
    refused = _run("check-config", "--log-level", "loud")
    assert refused.returncode == 2
    _one_line(refused, "CONFIG_INVALID: --log-level must be one of debug, info, warning, error")


@pytest.mark.req("CLI-01", "SV-01", "WS-01")
def test_check_config_opens_the_workspace_as_serve_would(tmp_path: Path,
                                                         specimen: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    refused = _run("check-config", "--workspace", str(plain))
    assert refused.returncode == 2
    _one_line(refused, "WORKSPACE_INVALID: ")
    done = _run("check-config", "--workspace", str(specimen))
    assert done.returncode == 0, done.stderr
    server = json.loads(done.stdout)["server"]
    assert server["workspace"] == str(specimen.resolve())
    assert (server["workspace_kind"], server["workspace_exists"]) == ("SPECIMEN", True)


@pytest.mark.req("CLI-01", "WS-03", "WS-05")
def test_check_config_shows_the_default_workspace_without_creating_it(
        private_data_home: Path) -> None:
    default = private_data_home / "labfy-ref" / "specimen"
    done = _run("check-config")
    assert done.returncode == 0, done.stderr
    server = json.loads(done.stdout)["server"]
    assert server["workspace"] == str(default)
    assert (server["workspace_kind"], server["workspace_exists"]) == ("SPECIMEN", False)
    assert not private_data_home.exists(), "nothing is created"
    default.mkdir(parents=True)
    (default / "labfy-workspace.toml").write_text("kind = [")
    broken = _run("check-config")
    assert broken.returncode == 2, "a broken default is refused, as serve refuses it"
    _one_line(broken, "WORKSPACE_INVALID: labfy-workspace.toml is malformed")


@pytest.mark.req("CLI-01", "WS-01")
@pytest.mark.parametrize(("where", "reason"), [
    ("missing/parent/ws", "No such file or directory"),
    ("file/ws", "Not a directory"),
    pytest.param("/proc/labfy-ws", "No such file or directory",
                 marks=pytest.mark.skipif(not Path("/proc/self").is_dir(),
                                          reason="no /proc on this system")),
])
def test_workspace_init_refuses_what_mkdir_without_p_refuses(
        tmp_path: Path, where: str, reason: str) -> None:
    (tmp_path / "file").write_text("not a directory")
    target = where if where.startswith("/") else str(tmp_path / where)
    done = _run("workspace", "init", target)
    assert done.returncode == 2
    _one_line(done, f"WORKSPACE_INVALID: cannot create {target}: {reason}")
    assert [entry.name for entry in tmp_path.iterdir()] == ["file"], "nothing left behind"


@pytest.mark.req("QR-02", "CLI-01")
def test_report_rebuilds_from_any_directory_with_the_requirements_the_run_kept(
        pytester: pytest.Pytester, tmp_path: Path) -> None:
    pytester.makefile(".toml", requirements='[requirements]\n"AA-01" = "one requirement"\n')
    pytester.makepyfile(test_one='import pytest\n\n\n@pytest.mark.req("AA-01")\n'
                                 'def test_one():\n    pass\n')
    result = pytester.runpytest_subprocess("-p", "labfy_ref.report.pytest_plugin",
                                           "--requirements", "requirements.toml",
                                           "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    report_dir = pytester.path / "qualification-report"
    kept = report_dir / "requirements.toml"
    assert kept.read_text() == (pytester.path / "requirements.toml").read_text()
    (pytester.path / "requirements.toml").unlink()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = _run("report", "--results", str(report_dir), cwd=elsewhere)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "requirements: CURRENT 1"


@pytest.mark.req("QR-02", "CLI-01")
def test_report_without_a_requirements_file_is_one_clean_line(tmp_path: Path) -> None:
    done = _run("report", "--results", str(tmp_path / "results"), cwd=tmp_path)
    assert done.returncode == 2
    _one_line(done, "REPORT_INVALID: no requirements file: ")
    assert "--requirements" in done.stderr


@pytest.mark.req("CLI-02", "WS-01", "WS-05")
def test_workspace_upgrade_migrates_keeps_a_backup_and_says_so(tmp_path: Path) -> None:
    old = restore_v1_workspace(tmp_path / "old")
    before = dump(old / "labfy.sqlite")
    done = _run("workspace", "upgrade", str(old))
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    line = done.stdout.rstrip("\n")
    assert "\n" not in line
    prefix = (f"upgraded the workspace at {old} from schema version 1 to {SCHEMA_VERSION}; "
              "backup: ")
    assert line.startswith(prefix), line
    backup = Path(line.removeprefix(prefix))
    assert backup.parent == old and backup.name.startswith("labfy.sqlite.v1-")
    assert dump(backup) == before
    again = _run("workspace", "upgrade", str(old))
    assert again.returncode == 0, again.stderr
    assert again.stdout == (f"the workspace at {old} is already at schema version "
                            f"{SCHEMA_VERSION}; nothing to do\n")
    assert sorted(p.name for p in old.iterdir() if p.suffix == ".bak") == [backup.name]


@pytest.mark.req("CLI-01", "SV-01", "WS-05")
@pytest.mark.parametrize("case", ["not-a-workspace", "newer", "locked"])
def test_workspace_upgrade_refusals_are_one_line_and_change_nothing(tmp_path: Path,
                                                                   case: str) -> None:
    target = tmp_path / "ws"
    server = None
    if case == "not-a-workspace":
        target.mkdir()
        expected = f"WORKSPACE_INVALID: {target} is not a workspace"
    elif case == "newer":
        init_workspace(target, specimen=False)
        with sqlite3.connect(target / "labfy.sqlite") as db:
            db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'",
                       (str(SCHEMA_VERSION + 1),))
        expected = (f"WORKSPACE_INVALID: store schema version {SCHEMA_VERSION + 1} is newer "
                    f"than this build's {SCHEMA_VERSION}")
    else:
        init_workspace(target, specimen=False)
        server = ServeProcess("--workspace", str(target), ready_file=tmp_path / "ready.json")
        server.wait_ready()
        expected = "WORKSPACE_LOCKED: another labfy-ref server is using this workspace; stop it"
    store = target / "labfy.sqlite"
    try:
        before = dump(store) if store.exists() else []
        done = _run("workspace", "upgrade", str(target))
    finally:
        if server is not None:
            server.stop()
    assert done.returncode == 2
    _one_line(done, expected)
    assert done.stdout == ""
    assert (dump(store) if store.exists() else []) == before
    assert not [p for p in target.iterdir() if p.suffix == ".bak"], "no backup is made"


@pytest.mark.req("CLI-01", "SV-01", "WS-05")
@pytest.mark.parametrize("command", ["serve", "check-config"])
def test_serve_and_check_config_on_an_old_workspace_name_the_upgrade(tmp_path: Path,
                                                                     command: str) -> None:
    old = restore_v1_workspace(tmp_path / "old lab")
    before = dump(old / "labfy.sqlite")
    done = _run(command, "--workspace", str(old))
    assert done.returncode == 2
    _one_line(done, "WORKSPACE_OUTDATED: store schema version 1 is older than this build's "
                    f"{SCHEMA_VERSION}")
    assert done.stderr.rstrip("\n").endswith(f"run: labfy-ref workspace upgrade '{old}'")
    assert dump(old / "labfy.sqlite") == before
    assert not [p for p in old.iterdir() if p.suffix == ".bak"], "nothing is upgraded unasked"


@pytest.mark.req("CLI-01", "WS-03", "WS-05")
def test_check_config_shows_that_serve_will_upgrade_the_per_user_copy(
        private_data_home: Path) -> None:
    (private_data_home / "labfy-ref").mkdir(parents=True)
    copy = restore_v1_workspace(private_data_home / "labfy-ref" / "specimen")
    before = dump(copy / "labfy.sqlite")
    done = _run("check-config")
    assert done.returncode == 0, done.stderr
    server = json.loads(done.stdout)["server"]
    assert (server["workspace"], server["workspace_exists"]) == (str(copy), True)
    assert server["workspace_upgrade"] == (f"to schema version {SCHEMA_VERSION} when serve starts; "
                                           "a backup is kept")
    assert dump(copy / "labfy.sqlite") == before
    assert not [p for p in copy.iterdir() if p.suffix == ".bak"], "check-config changes nothing"


@pytest.mark.req("CLI-02")
def test_the_workspace_group_lists_upgrade() -> None:
    done = _run("workspace")
    assert done.returncode == 2
    assert "\n    upgrade" in done.stderr and "\n    init" in done.stderr


@pytest.mark.req("CLI-01", "CLI-02")
def test_an_unexpected_error_is_one_internal_error_line_with_its_kind_and_exit_1(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A failure no refusal describes (a bug, a disk that vanished mid-command) is still one
    line, ``INTERNAL_ERROR: <kind>: <what it said>``, exit 1, and no traceback."""
    import labfy_ref.cli.main as cli_main  # noqa: PLC0415

    def broken(_: argparse.Namespace) -> int:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(cli_main, "_report", broken)
    assert cli_main.main(["report"]) == 1
    captured = capsys.readouterr()
    assert captured.err == "INTERNAL_ERROR: OSError: [Errno 5] Input/output error\n"
    assert captured.out == ""

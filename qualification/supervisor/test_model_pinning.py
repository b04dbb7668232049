"""SM-09: the model that runs is the model that was verified (on the fake llama-server).

The fake opens and maps its ``-m`` file as llama.cpp does and records that
file's digest and inode, so each test sees what the child actually ran. The
attacks are the classes of ATTACKS.md's time-of-check/time-of-use line: the
path changes after the check (a rename over it, a symlink retargeted), the
inode is rewritten after the check (its mtime restored, or while the child
loads), the file is not a file at all (a FIFO must be refused, not waited on).
The same swap on the real llama-server is in ``qualification/smoke``.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading
from pathlib import Path

import pytest

from labfy_ref.errors import ConfigRefused, ErrorCode
from labfy_ref.model.gguf import open_gguf, verify_gguf
from labfy_ref.model.supervisor import LaunchOptions, LocalModelSupervisor, SupervisorState
from qualification.supervisor.fake_llama import FakeLlama, group_exists, install_fake

VERIFIED = b"GGUF\x03\x00\x00\x00" + b"the verified model" + bytes(46)
OTHER = b"GGUF\x03\x00\x00\x00" + b"a model nobody hash" + bytes(45)
OPTIONS = LaunchOptions(start_timeout=30.0, model_alias="fake-llama", ctx_size=512, threads=1)


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def run_and_stop(sup: LocalModelSupervisor) -> None:
    async def run() -> None:
        try:
            await sup.start()
            assert sup.state is SupervisorState.READY
        finally:
            await sup.stop()
    asyncio.run(run())


def ran(fake: FakeLlama) -> dict[str, object]:
    runs = fake.runs()
    assert len(runs) == 1
    model = runs[0]["model"]
    assert isinstance(model, dict)
    return model


@pytest.mark.req("SM-09")
def test_a_file_renamed_over_the_path_after_the_hash_never_runs(tmp_path: Path) -> None:
    # Renaming over the path unlinks the verified inode, which sets its ctime: the
    # supervisor cannot tell that from a rewrite, so it refuses rather than guess.
    fake = install_fake(tmp_path / "bin", loading_checks=1)
    path = write(tmp_path / "models" / "model.gguf", VERIFIED)
    with open_gguf(path) as pinned:
        pinned.hash(digest(VERIFIED))
        os.replace(write(tmp_path / "models" / "swap.gguf", OTHER), path)  # after the hash
        sup = LocalModelSupervisor(fake.binary, pinned, OPTIONS, log_dir=tmp_path / "logs")
        with pytest.raises(ConfigRefused) as caught:
            run_and_stop(sup)
    assert caught.value.code is ErrorCode.GGUF_CHANGED
    assert fake.runs() == []


@pytest.mark.req("SM-09")
def test_the_child_runs_the_hashed_descriptor_and_status_names_that_file(
        tmp_path: Path) -> None:
    fake = install_fake(tmp_path / "bin", loading_checks=1)
    path = write(tmp_path / "model.gguf", VERIFIED)
    with open_gguf(path) as pinned:
        pinned.hash(digest(VERIFIED))
        sup = LocalModelSupervisor(fake.binary, pinned, OPTIONS, log_dir=tmp_path / "logs")
        run_and_stop(sup)
        inode, fd = pinned.identity.inode, pinned.fd
    assert ran(fake) == {"sha256": digest(VERIFIED), "inode": inode}
    argv = fake.runs()[0]["argv"]
    assert argv[argv.index("-m") + 1] == f"/proc/self/fd/{fd}", "the hashed descriptor"
    assert sup.opened == {"file": "model.gguf", "sha256": digest(VERIFIED),
                          "size": len(VERIFIED), "inode": inode,
                          "handed": "descriptor", "mapped": True}


@pytest.mark.req("SM-09")
def test_a_symlink_retargeted_after_the_hash_changes_nothing_that_runs(tmp_path: Path) -> None:
    fake = install_fake(tmp_path / "bin", loading_checks=1)
    verified = write(tmp_path / "store" / "verified.gguf", VERIFIED)
    other = write(tmp_path / "store" / "other.gguf", OTHER)
    link = tmp_path / "model.gguf"
    link.symlink_to(verified)
    with open_gguf(link) as pinned:  # a link is followed once, at the open
        pinned.hash(digest(VERIFIED))
        link.unlink()
        link.symlink_to(other)
        sup = LocalModelSupervisor(fake.binary, pinned, OPTIONS, log_dir=tmp_path / "logs")
        run_and_stop(sup)
    assert ran(fake)["sha256"] == digest(VERIFIED)
    assert sup.opened["mapped"] is True


@pytest.mark.req("SM-09")
def test_a_rewrite_in_place_that_restores_mtime_is_refused_before_any_child(
        tmp_path: Path) -> None:
    fake = install_fake(tmp_path / "bin", loading_checks=1)
    path = write(tmp_path / "model.gguf", VERIFIED)
    with open_gguf(path) as pinned:
        pinned.hash(digest(VERIFIED))
        before = path.stat()
        with path.open("r+b") as handle:  # same inode, same size, other bytes
            handle.write(OTHER)
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        assert path.stat().st_mtime_ns == before.st_mtime_ns
        sup = LocalModelSupervisor(fake.binary, pinned, OPTIONS, log_dir=tmp_path / "logs")
        with pytest.raises(ConfigRefused) as caught:
            run_and_stop(sup)
    assert caught.value.code is ErrorCode.GGUF_CHANGED
    assert fake.runs() == []  # nothing was started on the rewritten file
    assert sup.state is SupervisorState.STOPPED or sup.state is SupervisorState.EXITED


@pytest.mark.req("SM-09")
def test_a_rewrite_while_the_child_loads_is_caught_at_ready_and_the_child_is_gone(
        tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    fake = install_fake(tmp_path / "bin", loading_checks=0, gate=gate)
    path = write(tmp_path / "model.gguf", VERIFIED)

    def rewrite_then_open_the_gate() -> None:
        for _ in range(3000):  # until the child has started (bounded: 30 s)
            if fake.record.exists():
                break
            threading.Event().wait(0.01)
        with path.open("r+b") as handle:
            handle.write(OTHER)
        gate.touch()

    with open_gguf(path) as pinned:
        pinned.hash(digest(VERIFIED))
        sup = LocalModelSupervisor(fake.binary, pinned, OPTIONS, log_dir=tmp_path / "logs")
        writer = threading.Thread(target=rewrite_then_open_the_gate)
        writer.start()
        with pytest.raises(ConfigRefused) as caught:
            run_and_stop(sup)
        writer.join(timeout=30)
    assert caught.value.code is ErrorCode.GGUF_CHANGED
    assert "changed while the server started" in caught.value.message
    assert not group_exists(fake.runs()[0]["pid"])


@pytest.mark.req("SM-09", "SM-01")
def test_a_file_written_while_it_is_hashed_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "model.gguf", VERIFIED + bytes(3 << 20))  # several chunks

    def append(done: int, total: int) -> None:
        if done < total:
            with path.open("ab") as handle:
                handle.write(b"x")

    with pytest.raises(ConfigRefused) as caught:
        verify_gguf(path, None, append)
    assert caught.value.code is ErrorCode.GGUF_CHANGED


@pytest.mark.req("SM-01")
@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
def test_only_a_regular_file_is_opened_and_a_fifo_is_refused_at_once(
        tmp_path: Path, kind: str) -> None:
    if kind == "fifo":
        target = tmp_path / "model.gguf"
        os.mkfifo(target)
    elif kind == "directory":
        target = tmp_path / "model.gguf"
        target.mkdir()
    else:
        target = Path("/dev/zero")
    outcome: list[BaseException | None] = []

    def check() -> None:
        try:
            verify_gguf(target, None)
        except BaseException as exc:  # handed to the test thread
            outcome.append(exc)
        else:
            outcome.append(None)

    worker = threading.Thread(target=check, daemon=True)  # a hang must not hang the suite
    worker.start()
    worker.join(timeout=20)
    assert outcome, f"verify_gguf on a {kind} did not return"
    error = outcome[0]
    assert isinstance(error, ConfigRefused)
    assert error.code is ErrorCode.GGUF_INVALID
    assert "not a regular file" in error.message


@pytest.mark.req("SM-09")
@pytest.mark.parametrize(("by_descriptor", "maps_tell", "refused"), [
    (True, True, False),
    (True, False, False),  # handed the descriptor: that file runs, mapped or read
    (False, True, False),  # no /proc fds: its path, and the maps show that inode
    (False, False, True),  # its path, and the server never mapped it: not proven, refused
])
def test_a_server_that_reads_without_mapping_is_refused_only_when_handed_a_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, by_descriptor: bool,
        maps_tell: bool, refused: bool) -> None:
    """llama-server ``--no-mmap`` reads its model instead of mapping it: then the maps cannot
    name the inode. A descriptor needs no proof; a path handed where ``/proc`` has no fds
    does, and without it nothing runs."""
    from labfy_ref.model import supervisor as supervising  # noqa: PLC0415
    from labfy_ref.model.gguf import PinnedGguf  # noqa: PLC0415

    if not by_descriptor:
        monkeypatch.setattr(PinnedGguf, "by_descriptor", lambda self: None)
    if not maps_tell:
        monkeypatch.setattr(supervising, "maps_file", lambda pid, identity: False)
    fake = install_fake(tmp_path / "bin")
    path = write(tmp_path / "model.gguf", VERIFIED)
    with open_gguf(path) as pinned:
        pinned.hash(digest(VERIFIED))
        sup = LocalModelSupervisor(fake.binary, pinned, OPTIONS, log_dir=tmp_path / "logs")
        if refused:
            with pytest.raises(ConfigRefused) as caught:
                run_and_stop(sup)
            assert caught.value.code is ErrorCode.GGUF_CHANGED
            assert caught.value.message == ("model.gguf: the server did not map the verified "
                                            "file")
        else:
            run_and_stop(sup)
    opened = sup.opened
    assert (opened["handed"], opened["mapped"]) == (
        "descriptor" if by_descriptor else "path", maps_tell)
    assert ran(fake)["sha256"] == digest(VERIFIED)

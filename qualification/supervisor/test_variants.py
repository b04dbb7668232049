"""CPU variants: staging, the pinned variant, the SIGILL retry, what ran (SM-06)."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from labfy_ref.errors import ConfigRefused, ErrorCode, LlamaServerFailed
from labfy_ref.model.governor import LOG_CAP_BYTES, check_resources
from labfy_ref.model.supervisor import SupervisorState
from labfy_ref.model.variants import (
    available_variants,
    conservative_variant,
    cpu_flags,
    loaded_variant,
    stage_variant,
)
from qualification.supervisor.fake_llama import group_exists, install_fake
from qualification.supervisor.test_governor import llama, meminfo, model
from qualification.supervisor.test_supervisor import supervisor

HASWELL_CPU = frozenset({"sse4_2", "avx", "f16c", "avx2", "bmi2", "fma", "avx512f"})
ALL = ("haswell", "sse42", "x64", "zen4")


@pytest.mark.req("SM-06")
@pytest.mark.parametrize(("available", "flags", "exclude", "expected"), [
    (ALL, HASWELL_CPU, frozenset(), "haswell"),
    (ALL, HASWELL_CPU, frozenset({"haswell"}), "sse42"),
    (ALL, frozenset({"sse4_2", "avx"}), frozenset(), "sse42"),   # no AVX2: not haswell
    (ALL, frozenset(), frozenset(), "x64"),
    (("zen4", "sse42"), HASWELL_CPU, frozenset(), "sse42"),
    (("zen4", "icelake"), HASWELL_CPU, frozenset(), None),       # nothing conservative shipped
    ((), HASWELL_CPU, frozenset(), None),                        # a static build
])
def test_the_conservative_variant_is_the_best_of_haswell_sse42_x64_the_cpu_supports(
        available: tuple[str, ...], flags: frozenset[str], exclude: frozenset[str],
        expected: str | None) -> None:
    assert conservative_variant(available, flags, exclude=exclude) == expected


@pytest.mark.req("SM-06")
def test_cpu_flags_are_read_from_cpuinfo(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse4_2 avx2\n\nprocessor\t: 1\n"
                       "flags\t\t: other\n")
    assert cpu_flags(cpuinfo) == frozenset({"fpu", "sse4_2", "avx2"})
    assert cpu_flags(tmp_path / "missing") == frozenset()


@pytest.mark.req("SM-06")
def test_variants_are_found_beside_the_resolved_binary(tmp_path: Path) -> None:
    fake = install_fake(tmp_path / "real", variants=("zen4", "x64"))
    link = tmp_path / "elsewhere" / "llama-server"
    link.parent.mkdir()
    link.symlink_to(fake.binary)
    (link.parent / "libggml-cpu-haswell.so").write_bytes(b"decoy")  # beside the link: ignored
    assert available_variants(link) == ("x64", "zen4")


@pytest.mark.req("SM-06")
def test_staging_holds_one_backend_the_libraries_and_their_relative_links(
        tmp_path: Path) -> None:
    fake = install_fake(tmp_path / "bin", variants=ALL)
    staged = stage_variant(fake.binary, "sse42", tmp_path / "stage")
    folder = staged.parent
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert sorted(p.name for p in folder.iterdir()) == [
        "libggml-cpu-sse42.so", "libllama.so.0", "libllama.so.0.6.0", "llama-server"]
    assert os.readlink(folder / "libllama.so.0") == "libllama.so.0.6.0"
    # Real files (same file system here: hard links), so the loader looks in the stage.
    assert not staged.is_symlink()
    assert staged.stat().st_ino == fake.binary.stat().st_ino
    assert available_variants(staged) == ("sse42",)


@pytest.mark.req("SM-06")
def test_staging_copies_across_file_systems(tmp_path: Path) -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir() or shm.stat().st_dev == tmp_path.stat().st_dev:
        pytest.skip("needs /dev/shm on a file system other than the temporary folder's")
    fake = install_fake(tmp_path / "bin", variants=("haswell",))
    foreign = shm / f"labfy-stage-{os.getpid()}-{tmp_path.name}"
    try:
        staged = stage_variant(fake.binary, "haswell", foreign)  # a hard link would be EXDEV
        assert staged.read_bytes() == fake.binary.read_bytes()
        assert staged.stat().st_dev != fake.binary.stat().st_dev
        assert os.access(staged, os.X_OK)
        assert available_variants(staged) == ("haswell",)
    finally:
        shutil.rmtree(foreign, ignore_errors=True)


@pytest.mark.req("SM-06", "SM-04")
def test_the_scratch_need_is_a_copy_of_the_binary_its_libraries_and_largest_backend(
        tmp_path: Path) -> None:
    """Before a start the governor asks for the log plus what staging a variant may copy:
    the binary and its libraries (not their relative links) and the largest backend; a
    static build has no backend to add: its need is the log and exactly its own files."""
    path = model(tmp_path, llama(), 1024)
    enough = meminfo(tmp_path, 64 * 1024 * 1024)
    for name, variants, backend in (("static", (), 0), ("dynamic", ("haswell", "x64"), 5004)):
        fake = install_fake(tmp_path / name, variants=variants)
        folder = fake.binary.parent
        if variants:  # haswell, the larger backend, is what a copy may have to hold
            (folder / "libggml-cpu-haswell.so").write_bytes(b"\x7fELF" + bytes(5000))
        files = fake.binary.stat().st_size + (folder / "libllama.so.0.6.0").stat().st_size
        report = check_resources(path, ctx_size=16, scratch=tmp_path, meminfo=enough,
                                 binary=fake.binary)
        assert report.scratch_need == LOG_CAP_BYTES + files + backend, name


@pytest.mark.req("SM-06")
def test_an_unknown_variant_is_refused_naming_the_available_ones(tmp_path: Path) -> None:
    fake = install_fake(tmp_path / "bin", variants=("haswell", "x64"))
    with pytest.raises(ConfigRefused) as caught:
        stage_variant(fake.binary, "pentium", tmp_path / "stage")
    assert caught.value.code is ErrorCode.CONFIG_INVALID
    assert caught.value.message == "unknown CPU variant 'pentium'; available: haswell, x64"
    assert not (tmp_path / "stage").exists()
    sup = supervisor(fake, tmp_path, cpu_variant="../haswell")
    with pytest.raises(ConfigRefused, match="unknown CPU variant"):
        asyncio.run(sup.start())
    assert fake.runs() == []  # nothing was started


@pytest.mark.req("SM-06")
def test_loaded_variant_is_none_without_a_backend_or_a_process() -> None:
    assert loaded_variant(os.getpid()) is None
    assert loaded_variant(2**22 + 1) is None  # above the default pid_max: no such process


#: A child that maps a CPU backend, then enough other mappings below it (each names a
#: long file path) that its /proc/<pid>/maps lists megabytes before the backend.
_MANY_MAPPINGS = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
def place(path, count):
    fd = os.open(path, os.O_RDONLY)
    for _ in range(count):
        if libc.mmap(None, 4096, 1, 2, fd, 0) in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "mmap")
place(sys.argv[1], 1)
place(sys.argv[2], int(sys.argv[3]))
print("ready", flush=True)
sys.stdin.read()
"""


@pytest.mark.req("SM-06")
def test_the_variant_is_found_in_a_process_with_megabytes_of_mappings(tmp_path: Path) -> None:
    """A busy llama-server maps thousands of regions (thread stacks, buffers, the model);
    the backend it loaded is still named when its line comes megabytes into the maps."""
    fake = install_fake(tmp_path / "bin", variants=("haswell",))
    backend = fake.binary.parent / "libggml-cpu-haswell.so"
    filler = tmp_path / ("d" * 200) / ("buffer-" + "f" * 200)
    filler.parent.mkdir()
    filler.write_bytes(bytes(4096))
    child = subprocess.Popen([sys.executable, "-c", _MANY_MAPPINGS, str(backend), str(filler),
                              "8000"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        maps = Path(f"/proc/{child.pid}/maps").read_bytes()
        # The case this is about: the backend's line lies between 2 MiB and 8 MiB in.
        assert 2 * 1024 * 1024 < maps.index(b"libggml-cpu-haswell.so") < 8 * 1024 * 1024
        assert loaded_variant(child.pid) == "haswell"
    finally:
        child.kill()
        child.communicate()


@pytest.mark.req("SM-06")
def test_a_pinned_variant_is_staged_and_reported_as_the_one_that_ran(tmp_path: Path) -> None:
    fake = install_fake(tmp_path / "bin", variants=ALL, loading_checks=0)
    sup = supervisor(fake, tmp_path, cpu_variant="sse42")

    async def run() -> tuple[str | None, list[str]]:
        try:
            await sup.start()
            launcher = Path(fake.runs()[0]["launcher"])
            return sup.cpu_variant, sorted(p.name for p in launcher.parent.glob("libggml-cpu-*"))
        finally:
            await sup.stop()

    variant, staged_backends = asyncio.run(run())
    assert variant == "sse42"
    assert staged_backends == ["libggml-cpu-sse42.so"]
    assert fake.runs()[0]["variant"] == "sse42"
    assert sup.notes == ()
    assert list((tmp_path / "logs").glob("llama-run-*")) == []  # the stage is removed


@pytest.mark.req("SM-06")
def test_the_automatic_pick_reports_the_variant_it_loaded(tmp_path: Path) -> None:
    fake = install_fake(tmp_path / "bin", variants=ALL, loading_checks=0)
    sup = supervisor(fake, tmp_path)

    async def run() -> str | None:
        try:
            await sup.start()
            return sup.cpu_variant
        finally:
            await sup.stop()

    assert asyncio.run(run()) == "zen4"
    assert fake.runs()[0]["launcher"] == str(fake.binary)  # nothing staged


@pytest.mark.req("SM-06")
@pytest.mark.parametrize("pinned", [None, "zen4"])
def test_sigill_before_ready_is_retried_once_on_a_staged_conservative_variant(
        tmp_path: Path, pinned: str | None) -> None:
    fake = install_fake(tmp_path / "bin", variants=ALL, sigill=("zen4",), loading_checks=0)
    sup = supervisor(fake, tmp_path, cpu_variant=pinned)
    expected = conservative_variant(ALL, cpu_flags(), exclude=frozenset({"zen4"}))

    async def run() -> str | None:
        try:
            await sup.start()
            return sup.cpu_variant
        finally:
            await sup.stop()

    assert asyncio.run(run()) == expected
    first, second = fake.runs()
    assert (first["variant"], second["variant"]) == ("zen4", expected)
    assert not group_exists(first["pid"])
    assert Path(second["launcher"]).parent.name == f"variant-{expected}"
    (note,) = sup.notes
    died = "zen4" if pinned else "(zen4|the automatic pick)"
    assert re.fullmatch(
        f"{died} died of SIGILL before ready; retried on {expected}", note)


@pytest.mark.req("SM-06")
def test_sigill_with_nothing_conservative_to_retry_on_is_llama_server_exited(
        tmp_path: Path) -> None:
    fake = install_fake(tmp_path / "bin", variants=("zen4",), sigill=("zen4",))
    sup = supervisor(fake, tmp_path)
    with pytest.raises(LlamaServerFailed) as caught:
        asyncio.run(sup.start())
    assert caught.value.code is ErrorCode.LLAMA_SERVER_EXITED
    assert "(signal SIGILL)" in caught.value.message
    assert sup.notes[0].endswith("died of SIGILL before ready; no conservative CPU variant "
                                 "to retry on")
    assert len(fake.runs()) == 1


@pytest.mark.req("SM-06")
def test_a_retry_that_dies_of_sigill_too_is_not_retried_again(tmp_path: Path) -> None:
    fake = install_fake(tmp_path / "bin", variants=ALL, sigill=ALL)
    sup = supervisor(fake, tmp_path)
    with pytest.raises(LlamaServerFailed) as caught:
        asyncio.run(sup.start())
    assert "(signal SIGILL)" in caught.value.message
    assert len(fake.runs()) == 2
    assert sup.state is SupervisorState.EXITED


@pytest.mark.req("SM-06")
def test_a_child_that_dies_of_another_signal_before_ready_is_not_retried(
        tmp_path: Path) -> None:
    """Only SIGILL says "this CPU variant": a crash of any other kind is the server's
    failure as it is, reported, never retried on another variant."""
    fake = install_fake(tmp_path / "bin", mode="segfault", variants=ALL)
    sup = supervisor(fake, tmp_path)
    with pytest.raises(LlamaServerFailed) as caught:
        asyncio.run(sup.start())
    assert caught.value.code is ErrorCode.LLAMA_SERVER_EXITED
    assert "(signal SIGSEGV)" in caught.value.message
    assert len(fake.runs()) == 1 and sup.notes == ()

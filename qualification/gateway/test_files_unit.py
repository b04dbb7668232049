"""GW-06, GW-08, AV-02: the confined file access, called directly on a real directory.

The boundary tests prove the confinement through the gateway; here
:class:`ConfinedFiles` and its helpers are called directly so every bound is
pinned on both sides (path length, entries, read and write sizes, a UTF-8
sequence cut by the read bound), every refusal by its code and text, and the
modes of what is created — in milliseconds, as the mutation run of QR-04 needs.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import secrets
import stat
import threading
from pathlib import Path
from typing import Any

import pytest

from labfy_ref.errors import ErrorCode, ToolError
from labfy_ref.gateway import files as files_module
from labfy_ref.gateway.files import MAX_PATH_CHARS, ConfinedFiles, _invisible, _os_error, split_path


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """An empty ``files/`` with an outside neighbour holding a secret."""
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("secret")
    files = tmp_path / "files"
    files.mkdir()
    return files


@pytest.fixture
def umask() -> int:
    """The process umask (read without changing it for longer than a call)."""
    value = os.umask(0)
    os.umask(value)
    return value


def _code(call: object, *args: object) -> tuple[ErrorCode, str]:
    assert callable(call)
    with pytest.raises(ToolError) as caught:
        call(*args)
    return caught.value.code, caught.value.message


@pytest.mark.req("GW-06")
def test_split_path_takes_relative_clean_paths_of_at_most_1024_characters() -> None:
    assert MAX_PATH_CHARS == 1024
    assert split_path("") == [] and split_path(".") == []
    assert split_path("a/b.txt") == ["a", "b.txt"] and split_path("a/b/") == ["a", "b"]
    assert split_path("x" * 1024) == ["x" * 1024]
    assert split_path("a/" * 512) == ["a"] * 512
    for path, message in [
        ("x" * 1025, "path is longer than 1024 characters"),
        ("a\x00b", "path contains a NUL byte"),
        ("/etc/passwd", "absolute paths are refused; paths are relative to files/"),
        ("..", "'..' is refused"), ("a/../b", "'..' is refused"), ("a/..", "'..' is refused"),
        ("a//b", "empty or '.' path components are refused"),
        ("./a", "empty or '.' path components are refused"),
        ("a/./b", "empty or '.' path components are refused"),
        ("a//", "empty or '.' path components are refused"),
    ]:
        assert _code(split_path, path) == (ErrorCode.PATH_OUTSIDE_WORKSPACE, message), path


@pytest.mark.req("GW-06", "GW-08")
@pytest.mark.parametrize(("name", "found"), [
    ("plain.txt", None), ("naïve 漢字 😀.md", None), ("run\u202etxt.sh", "U+202E"),
    ("zero\u200bwidth", "U+200B"), ("bell\x07", "U+0007"), ("\x7f", "U+007F"),
    ("a\u2066b\u2069", "U+2066"), ("soft\u00adhyphen", "U+00AD"),
])
def test_invisible_finds_the_first_control_or_format_character(name: str,
                                                               found: str | None) -> None:
    assert _invisible(name) == found


@pytest.mark.req("GW-06")
@pytest.mark.parametrize(("number", "code", "message"), [
    (errno.ELOOP, ErrorCode.PATH_OUTSIDE_WORKSPACE, "p: symlinks are never followed"),
    (errno.EMLINK, ErrorCode.PATH_OUTSIDE_WORKSPACE, "p: symlinks are never followed"),
    (errno.ENOENT, ErrorCode.FILE_NOT_FOUND, "p: no such file or directory"),
    (errno.ENOTDIR, ErrorCode.NOT_A_DIRECTORY, "p: not a directory"),
    (errno.EISDIR, ErrorCode.NOT_A_FILE, "p: is a directory"),
    (errno.EACCES, ErrorCode.TOOL_UNAVAILABLE, "p: EACCES"),
    (errno.ENAMETOOLONG, ErrorCode.TOOL_UNAVAILABLE, "p: ENAMETOOLONG"),
    (None, ErrorCode.TOOL_UNAVAILABLE, "p: error"),
])
def test_os_errors_become_tool_errors_by_errno(number: int | None, code: ErrorCode,
                                               message: str) -> None:
    error = _os_error(OSError(number, "text") if number is not None else OSError(), "p")
    assert (error.code, error.message) == (code, message)


@pytest.mark.req("GW-06")
def test_defaults_are_the_documented_bounds(root: Path) -> None:
    files = ConfinedFiles(root)
    assert (files.max_read_bytes, files.max_write_bytes, files.max_entries) == (
        256 * 1024, 256 * 1024, 1000)


@pytest.mark.req("GW-06", "AV-02")
def test_list_shows_files_and_directories_sorted_bounded_and_skips_the_rest(root: Path) -> None:
    (root / "b.txt").write_text("hello")
    (root / "a").mkdir()
    (root / "c.txt").write_text("")
    (root / "link").symlink_to(root.parent / "outside")
    os.mkfifo(root / "fifo")
    os.close(os.open(os.fsencode(root) + b"/bad\xffname", os.O_CREAT | os.O_WRONLY))
    listing = ConfinedFiles(root).list("")
    assert listing == {"path": "", "skipped": 1, "entries": [
        {"name": "a", "type": "directory"}, {"name": "b.txt", "type": "file", "size": 5},
        {"name": "c.txt", "type": "file", "size": 0}]}
    assert ConfinedFiles(root, max_entries=2).list(".")["entries"] == listing["entries"][:2]
    assert ConfinedFiles(root, max_entries=3).list(".")["entries"] == listing["entries"]
    (root / "a" / "inner.txt").write_text("x")
    assert ConfinedFiles(root).list("a/") == {"path": "a", "skipped": 0, "entries": [
        {"name": "inner.txt", "type": "file", "size": 1}]}


@pytest.mark.req("GW-06")
def test_reading_stops_at_the_bound_and_says_so(root: Path) -> None:
    files = ConfinedFiles(root, max_read_bytes=10)
    (root / "ten.txt").write_bytes(b"0123456789")
    assert files.read("ten.txt") == {"path": "ten.txt", "content": "0123456789",
                                     "truncated": False}
    (root / "eleven.txt").write_bytes(b"0123456789A")
    assert files.read("eleven.txt") == {"path": "eleven.txt", "content": "0123456789",
                                        "truncated": True}
    # A character cut by the bound is left out, not an error...
    (root / "cut.txt").write_bytes(b"012345678\xc3\xa9")
    assert files.read("cut.txt")["content"] == "012345678"
    # ...but a file that ends inside a character is not UTF-8.
    (root / "torn.txt").write_bytes(b"01\xc3")
    assert _code(files.read, "torn.txt") == (ErrorCode.NOT_UTF8, "torn.txt: not UTF-8 text")
    (root / "latin.txt").write_bytes(b"caf\xe9")
    assert _code(files.read, "latin.txt")[0] is ErrorCode.NOT_UTF8


@pytest.mark.req("GW-06")
def test_reading_refuses_what_is_not_a_regular_file_inside(root: Path) -> None:
    files = ConfinedFiles(root)
    (root / "d").mkdir()
    (root / "f.txt").write_text("x")
    os.mkfifo(root / "fifo")
    (root / "link.txt").symlink_to(root.parent / "outside" / "secret.txt")
    (root / "dlink").symlink_to(root.parent / "outside")
    assert _code(files.read, "") == (ErrorCode.NOT_A_FILE, "files.read needs a file path")
    assert _code(files.read, "d") == (
        ErrorCode.PATH_OUTSIDE_WORKSPACE, "d: not a regular file (devices and FIFOs are refused)")
    assert _code(files.read, "fifo")[0] is ErrorCode.PATH_OUTSIDE_WORKSPACE
    assert _code(files.read, "link.txt") == (ErrorCode.PATH_OUTSIDE_WORKSPACE,
                                             "link.txt: a symlink leads out of files/")
    assert _code(files.read, "dlink/secret.txt") == (
        ErrorCode.PATH_OUTSIDE_WORKSPACE, "dlink: a symlink leads out of files/")
    assert _code(files.read, "missing.txt") == (ErrorCode.FILE_NOT_FOUND,
                                                "missing.txt: no such file or directory")
    assert _code(files.read, "nodir/x.txt") == (ErrorCode.FILE_NOT_FOUND,
                                                "nodir: no such file or directory")
    assert _code(files.read, "f.txt/x") == (ErrorCode.NOT_A_DIRECTORY, "f.txt: not a directory")
    assert _code(files.read, "d/" + "n" * 300)[0] is ErrorCode.TOOL_UNAVAILABLE


@pytest.mark.req("GW-06")
def test_the_root_must_be_a_real_directory(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    (tmp_path / "file").write_text("x")
    assert _code(ConfinedFiles(tmp_path / "link").list, "") == (
        ErrorCode.PATH_OUTSIDE_WORKSPACE, "files/ is a symlink; it is never followed")
    assert _code(ConfinedFiles(tmp_path / "file").list, "") == (
        ErrorCode.NOT_A_DIRECTORY, "files/: not a directory")
    assert _code(ConfinedFiles(tmp_path / "none").list, "") == (
        ErrorCode.FILE_NOT_FOUND, "files/: no such file or directory")


@pytest.mark.req("GW-06")
def test_a_write_is_bounded_atomic_and_creates_its_directories(root: Path, umask: int) -> None:
    files = ConfinedFiles(root, max_write_bytes=4)
    assert files.write("new/deep/é.txt", "ééé"[:2]) == {"path": "new/deep/é.txt",
                                                        "bytes_written": 4}
    assert (root / "new" / "deep" / "é.txt").read_text() == "éé"
    assert stat.S_IMODE((root / "new").stat().st_mode) == 0o755 & ~umask
    assert stat.S_IMODE((root / "new" / "deep" / "é.txt").stat().st_mode) == 0o644 & ~umask
    assert _code(files.write, "x.txt", "ééa") == (ErrorCode.FILE_TOO_LARGE,
                                                  "content exceeds 4 bytes")
    assert files.write("new/deep/é.txt", "abcd")["bytes_written"] == 4
    assert files.write("new/empty.txt", "") == {"path": "new/empty.txt", "bytes_written": 0}
    assert sorted(p.name for p in (root / "new" / "deep").iterdir()) == ["é.txt"], "no temp left"
    assert not (root / "x.txt").exists()


@pytest.mark.req("GW-06")
def test_a_write_never_goes_through_a_link_or_onto_a_special_file(root: Path) -> None:
    files = ConfinedFiles(root)
    secret = root.parent / "outside" / "secret.txt"
    (root / "link.txt").symlink_to(secret)
    (root / "dlink").symlink_to(root.parent / "outside")
    os.link(secret, root / "hard.txt")
    (root / "d").mkdir()
    os.mkfifo(root / "fifo")
    (root / "f.txt").write_text("x")
    assert _code(files.write, "link.txt", "x") == (
        ErrorCode.PATH_OUTSIDE_WORKSPACE, "link.txt: a symlink leads out of files/")
    assert _code(files.write, "hard.txt", "x") == (
        ErrorCode.PATH_OUTSIDE_WORKSPACE, "hard.txt: has other hard links; it is not written")
    assert _code(files.write, "d", "x") == (ErrorCode.PATH_OUTSIDE_WORKSPACE,
                                            "d: not a regular file")
    assert _code(files.write, "fifo", "x") == (ErrorCode.PATH_OUTSIDE_WORKSPACE,
                                               "fifo: not a regular file")
    assert _code(files.write, "dlink/secret.txt", "x") == (
        ErrorCode.PATH_OUTSIDE_WORKSPACE, "dlink: a symlink leads out of files/")
    assert _code(files.write, "f.txt/x", "x") == (ErrorCode.NOT_A_DIRECTORY,
                                                  "f.txt: not a directory")
    assert _code(files.write, "", "x") == (ErrorCode.NOT_A_FILE, "files.write needs a file path")
    assert _code(files.write, "d/" + "n" * 300, "x")[0] is ErrorCode.TOOL_UNAVAILABLE
    assert secret.read_text() == "secret" and (root / "f.txt").read_text() == "x"
    assert sorted(p.name for p in root.iterdir()) == ["d", "dlink", "f.txt", "fifo", "hard.txt",
                                                      "link.txt"]


@pytest.mark.req("GW-06")
@pytest.mark.parametrize("char", ["a", "\u00e9", "\u20ac", "\U0001f600"])  # 1 to 4 bytes
def test_a_name_as_long_as_the_filesystem_takes_is_written_in_any_utf8_width(
        root: Path, char: str) -> None:
    longest = os.pathconf(root, "PC_NAME_MAX")
    width = len(char.encode())
    name = char * (longest // width) + "x" * (longest % width)
    assert len(name.encode()) == longest
    files = ConfinedFiles(root)
    assert files.write(name, "x") == {"path": name, "bytes_written": 1}
    assert files.read(name)["content"] == "x"
    assert [p.name for p in root.iterdir()] == [name], "no temporary file left"
    assert _code(files.write, name + "x", "x") == (ErrorCode.TOOL_UNAVAILABLE,
                                                   f"{name}x: ENAMETOOLONG")
    assert [p.name for p in root.iterdir()] == [name]


@pytest.mark.req("GW-06")
@pytest.mark.parametrize(("name", "kept"), [
    ("n.md", "n.md"),
    ("a" * 70, "a" * 64),
    ("\u00e9" * 32 + "x", "\u00e9" * 32),  # 65 bytes: the last character is cut
    ("x" + "\u00e9" * 32, "x" + "\u00e9" * 31),  # an é would end past byte 64
    ("\U0001f600" * 63, "\U0001f600" * 16),
])
def test_a_temporary_name_keeps_at_most_64_bytes_of_its_name(
        name: str, kept: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(secrets, "token_hex", lambda n: "0" * 2 * n)
    assert files_module._temp_name(name) == f".{kept}.000000000000.tmp"


@pytest.mark.req("GW-06", "GW-08")
def test_a_written_name_holds_no_invisible_character(root: Path) -> None:
    files = ConfinedFiles(root)
    assert _code(files.write, "a\u202e/b.txt", "x") == (
        ErrorCode.INVALID_ARGUMENTS, "files.write: a name holds the invisible or "
        "direction-control character U+202E; it would read as another name")
    assert _code(files.write, "ok/b\u200b.txt", "x")[0] is ErrorCode.INVALID_ARGUMENTS
    assert list(root.iterdir()) == []


def _close_on_exec(fd: int) -> bool:
    return bool(fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC)


@pytest.mark.req("GW-06")
def test_every_descriptor_is_close_on_exec(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The server starts subprocesses (llama-server): a descriptor of the workspace must never
    # be inherited. Each is looked at where the module first uses it, then used as before.
    seen: dict[str, list[bool]] = {"directory": [], "read": [], "write": []}
    scandir, fstat, fdopen = os.scandir, os.fstat, os.fdopen

    def scanning(fd: Any) -> Any:
        seen["directory"].append(_close_on_exec(fd))
        return scandir(fd)

    def stating(fd: int) -> os.stat_result:
        seen["read"].append(_close_on_exec(fd) and bool(fcntl.fcntl(fd, fcntl.F_GETFL)
                                                          & os.O_NONBLOCK))
        return fstat(fd)

    def opening(fd: int, *args: Any, **kwargs: Any) -> Any:
        seen["write"].append(_close_on_exec(fd))
        return fdopen(fd, *args, **kwargs)

    monkeypatch.setattr(os, "scandir", scanning)
    monkeypatch.setattr(os, "fstat", stating)
    monkeypatch.setattr(os, "fdopen", opening)
    files = ConfinedFiles(root)
    files.write("d/a.txt", "x")
    files.read("d/a.txt")
    files.list("d")
    assert seen == {"directory": [True], "read": [True], "write": [True]}


def _open_under(root: Path) -> list[str]:
    """This process's descriptors open on anything under ``root``."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed while listed (the listing's own descriptor)
            continue
        if target.startswith(f"{root}/") or target == str(root):
            found.append(target)
    return found


@pytest.mark.req("GW-06")
def test_writes_reads_hashes_and_listings_leave_no_descriptor_open(root: Path) -> None:
    files = ConfinedFiles(root)
    for turn in range(5):
        files.write("d/a.txt", f"turn {turn}")
        files.write("d/a.txt", f"turn {turn}", conditional=True, prior_sha256=None)
        assert files.read("d/a.txt")["content"] == f"turn {turn}"
        assert files.sha256("d/a.txt") is not None
        assert files.list("d")["entries"] == [{"name": "a.txt", "type": "file", "size": 6}]
    assert _open_under(root) == []


@pytest.mark.req("GW-06")
@pytest.mark.parametrize("link", ["symbolic", "hard"])
def test_a_guessed_temporary_name_planted_as_a_link_is_never_written_through(
        root: Path, monkeypatch: pytest.MonkeyPatch, link: str) -> None:
    # The temporary name is random; were it guessed, the link planted there must not be
    # written through (O_EXCL refuses any name that exists, a hard link to an outside
    # file included; O_NOFOLLOW a symbolic one): the write fails, the outside file is
    # untouched and the name written is not made a link to it.
    monkeypatch.setattr(secrets, "token_hex", lambda _n: "000000000000")
    secret = root.parent / "outside" / "secret.txt"
    planted = root / ".a.txt.000000000000.tmp"
    if link == "symbolic":
        planted.symlink_to(secret)
    else:
        os.link(secret, planted)
    files = ConfinedFiles(root)
    with pytest.raises(ToolError):
        files.write("a.txt", "overwritten")
    assert secret.read_text() == "secret" and not (root / "a.txt").exists()


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _temps(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.req("WK-12", "GW-06", "GW-08")
def test_a_conditional_write_lands_only_on_the_content_it_was_decided_on(root: Path) -> None:
    # ATTACKS.md §H, time of check / time of use: a Work effect decides a write on the
    # file's prior content; a later write by another holder must never be overwritten.
    files = ConfinedFiles(root)
    assert files.write("a/n.md", "one", conditional=True, prior_sha256=None) == {
        "path": "a/n.md", "bytes_written": 3}
    assert (root / "a" / "n.md").read_text() == "one"
    assert files.write("a/n.md", "two", conditional=True, prior_sha256=_sha("one")) == {
        "path": "a/n.md", "bytes_written": 3}
    assert (root / "a" / "n.md").read_text() == "two"
    for prior in (None, _sha("one"), "0" * 64):  # stale: the file holds "two" now
        code, message = _code(lambda p=prior: files.write(
            "a/n.md", "three", conditional=True, prior_sha256=p))
        assert code is ErrorCode.FILE_CHANGED
        assert message == "a/n.md: changed since this write was decided; nothing was written"
        assert (root / "a" / "n.md").read_text() == "two"
    assert _temps(root / "a") == []
    code, _ = _code(lambda: files.write("a/new.md", "x", conditional=True,
                                        prior_sha256=_sha("x")))
    assert code is ErrorCode.FILE_CHANGED, "absent is not the content decided on"
    assert not (root / "a" / "new.md").exists()


@pytest.mark.req("WK-12", "GW-08")
@pytest.mark.parametrize("prior", [None, "0" * 64, "f" * 64])
def test_a_fenced_write_puts_no_byte_anywhere_else_before_its_check(
        root: Path, monkeypatch: pytest.MonkeyPatch, prior: str | None) -> None:
    """The write a human approved is the one that runs, or nothing: its bytes go to a new
    file of its own (never through a link planted at the temporary name, were it guessed)
    and land only after the check, so a refused write leaves every other file as it was."""
    monkeypatch.setattr(secrets, "token_hex", lambda _n: "000000000000")
    files = ConfinedFiles(root)
    files.write("a.txt", "held")
    secret = root.parent / "outside" / "secret.txt"
    (root / ".a.txt.000000000000.tmp").symlink_to(secret)
    with pytest.raises(ToolError):
        files.write("a.txt", "overwritten", conditional=True, prior_sha256=prior)
    assert secret.read_text() == "secret"
    assert (root / "a.txt").read_text() == "held"


@pytest.mark.req("WK-12", "GW-06")
def test_a_conditional_write_of_what_the_file_already_holds_is_done_not_repeated(
        root: Path) -> None:
    files = ConfinedFiles(root)
    files.write("n.md", "same")
    before = (root / "n.md").stat()
    assert files.write("n.md", "same", conditional=True, prior_sha256="f" * 64) == {
        "path": "n.md", "bytes_written": 4}
    after = (root / "n.md").stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert _temps(root) == []
    # unconditional writes ignore the prior digest entirely
    assert files.write("n.md", "other", prior_sha256="f" * 64)["bytes_written"] == 5
    assert (root / "n.md").read_text() == "other"


@pytest.mark.req("GW-06")
def test_the_sha256_of_a_file_is_of_its_bytes_and_refuses_what_is_not_a_file(
        root: Path) -> None:
    files = ConfinedFiles(root)
    (root / "d").mkdir()
    (root / "d" / "big.bin").write_bytes(b"\xff" * (3 << 20))  # not UTF-8, several chunks
    assert files.sha256("d/big.bin") == hashlib.sha256(b"\xff" * (3 << 20)).hexdigest()
    assert files.sha256("d/absent.md") is None
    assert files.sha256("no/such/dir.md") is None
    (root / "link.md").symlink_to(root / "d" / "big.bin")  # inside: resolved (GW-06)
    assert files.sha256("link.md") == files.sha256("d/big.bin")
    os.mkfifo(root / "fifo")
    for path in ("fifo", "d", "../outside/secret.txt"):
        code, _ = _code(files.sha256, path)
        assert code in (ErrorCode.PATH_OUTSIDE_WORKSPACE, ErrorCode.NOT_A_FILE), (path, code)
    assert _code(files.sha256, "")[0] is ErrorCode.NOT_A_FILE


@pytest.mark.req("GW-06", "WK-12")
def test_a_write_waits_a_bounded_time_for_another_write_into_its_directory(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(files_module, "LOCK_WAIT_SECONDS", 0.2)
    files = ConfinedFiles(root)
    files.write("d/n.md", "before")
    holder = os.open(root / "d", os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)  # another writer is in the middle of its write
        code, message = _code(lambda: files.write("d/n.md", "after"))
        assert code is ErrorCode.FILE_CHANGED
        assert message == ("d/n.md: another write to its directory is still in progress; "
                           "nothing was written")
        assert (root / "d" / "n.md").read_text() == "before"
        assert _temps(root / "d") == []
        assert files.write("e/other.md", "free")["bytes_written"] == 4  # another directory
    finally:
        os.close(holder)
    files.write("d/n.md", "after")
    probe = os.open(root / "d", os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the write let its lock go
    finally:
        os.close(probe)


@pytest.mark.req("GW-06", "WK-12")
def test_a_write_waits_for_another_write_into_its_directory_to_finish(root: Path) -> None:
    files = ConfinedFiles(root)
    files.write("d/n.md", "before")
    holder = os.open(root / "d", os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(holder, fcntl.LOCK_EX)
    release = threading.Timer(0.5, lambda: os.close(holder))  # the other write finishes
    release.start()
    try:
        assert files.write("d/n.md", "after") == {"path": "d/n.md", "bytes_written": 5}
    finally:
        release.join()
    assert (root / "d" / "n.md").read_text() == "after"


@pytest.mark.req("GW-06")
def test_the_default_listing_bound_holds_past_the_small_integers(root: Path) -> None:
    files = ConfinedFiles(root)
    for index in range(files.max_entries + 1):
        (root / f"f{index:04d}").write_bytes(b"")
    listed = files.list("")["entries"]
    assert len(listed) == files.max_entries == 1000
    assert listed[-1]["name"] == "f0999"

"""ATTACKS.md §C (GW-06): file tools never read or write outside files/.

Every refusal is ``PATH_OUTSIDE_WORKSPACE`` with no side effect. The race test
swaps a path component between a directory and a symlink to an outside
directory for several seconds while tools read and write through it.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

import pytest

from labfy_ref.errors import ToolError
from labfy_ref.gateway import AgentGateway, CallContext, ConfinedFiles
from labfy_ref.modes import PermissionMode
from labfy_ref.workspace import init_workspace, open_workspace

WRITE = CallContext(PermissionMode.WORKSPACE_WRITE)
OUTSIDE_TEXT = "OUTSIDE-SECRET"


@pytest.fixture
def setup(tmp_path: Path) -> tuple[AgentGateway, Path, Path]:
    root = tmp_path / "ws"
    init_workspace(root, specimen=False)
    workspace = open_workspace(root)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(OUTSIDE_TEXT)
    sibling = tmp_path / "ws-evil"
    sibling.mkdir()
    (sibling / "x").write_text(OUTSIDE_TEXT)
    return AgentGateway(workspace, workspace.open_store()), root / "files", outside


def _outside_untouched(outside: Path) -> None:
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == OUTSIDE_TEXT


PATHS = ["../x", "/etc/passwd", "//etc/passwd", "a\x00b", "../ws-evil/x", "..", "a/../../x",
         "./../x", "a//b", "../../../../../../etc/passwd"]


@pytest.mark.req("GW-06")
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("tool_id", ["files.read", "files.write", "files.list"])
def test_paths_that_leave_files_are_refused(setup: tuple[AgentGateway, Path, Path], path: str,
                                            tool_id: str) -> None:
    gateway, _, outside = setup
    arguments = {"path": path, "content": "x"} if tool_id == "files.write" else {"path": path}
    outcome = gateway.call(tool_id, arguments, WRITE)
    assert outcome.error_code == "PATH_OUTSIDE_WORKSPACE", outcome.result
    _outside_untouched(outside)


@pytest.mark.req("GW-06")
@pytest.mark.parametrize("kind", ["relative", "absolute"])
def test_a_symlink_inside_pointing_outside_is_refused(
        setup: tuple[AgentGateway, Path, Path], kind: str) -> None:
    gateway, files, outside = setup
    target = os.path.relpath(outside / "secret.txt", files) if kind == "relative" \
        else str(outside / "secret.txt")
    (files / "link.txt").symlink_to(target)
    (files / "dirlink").symlink_to(outside if kind == "absolute"
                                   else os.path.relpath(outside, files))
    for tool_id, arguments in [("files.read", {"path": "link.txt"}),
                               ("files.write", {"path": "link.txt", "content": "x"}),
                               ("files.read", {"path": "dirlink/secret.txt"}),
                               ("files.write", {"path": "dirlink/new.txt", "content": "x"}),
                               ("files.list", {"path": "dirlink"})]:
        outcome = gateway.call(tool_id, arguments, WRITE)
        assert outcome.error_code == "PATH_OUTSIDE_WORKSPACE", (tool_id, outcome.result)
    listing = gateway.call("files.list", {"path": ""}, WRITE).result["data"]["entries"]
    assert listing == [], "symlinks are not listed"
    _outside_untouched(outside)


@pytest.mark.req("GW-06")
def test_a_dangling_symlink_aimed_outside_is_never_written_through(
        setup: tuple[AgentGateway, Path, Path]) -> None:
    gateway, files, outside = setup
    (files / "dangling.txt").symlink_to(outside / "created-by-attack.txt")
    outcome = gateway.call("files.write", {"path": "dangling.txt", "content": "x"}, WRITE)
    assert outcome.error_code == "PATH_OUTSIDE_WORKSPACE"
    _outside_untouched(outside)


@pytest.mark.req("GW-06")
def test_a_symlink_loop_is_refused(setup: tuple[AgentGateway, Path, Path]) -> None:
    gateway, files, _ = setup
    (files / "loop").symlink_to("loop")
    (files / "ping").symlink_to("pong/x")
    (files / "pong").symlink_to("ping")
    for tool_id in ("files.read", "files.list", "files.write"):
        for path in ("loop/x", "loop", "ping", "pong/y"):
            arguments = {"path": path, "content": "x"} if tool_id == "files.write" \
                else {"path": path}
            outcome = gateway.call(tool_id, arguments, WRITE)
            assert outcome.error_code == "PATH_LOOP", (tool_id, path, outcome.result)
    assert sorted(p.name for p in files.iterdir()) == ["loop", "ping", "pong"]


@pytest.mark.req("GW-06")
def test_a_hard_link_to_an_outside_file_is_not_written(
        setup: tuple[AgentGateway, Path, Path]) -> None:
    gateway, files, outside = setup
    os.link(outside / "secret.txt", files / "hard.txt")
    outcome = gateway.call("files.write", {"path": "hard.txt", "content": "overwritten"}, WRITE)
    assert outcome.error_code == "PATH_OUTSIDE_WORKSPACE"
    assert (outside / "secret.txt").read_text() == OUTSIDE_TEXT


@pytest.mark.req("GW-06")
def test_fifos_and_devices_are_refused_without_blocking(
        setup: tuple[AgentGateway, Path, Path]) -> None:
    gateway, files, _ = setup
    os.mkfifo(files / "pipe")
    outcome = gateway.call("files.read", {"path": "pipe"}, WRITE)
    assert outcome.error_code == "PATH_OUTSIDE_WORKSPACE"
    (files / "null").symlink_to("/dev/null")
    assert gateway.call("files.read", {"path": "null"}, WRITE).error_code == \
        "PATH_OUTSIDE_WORKSPACE"


@pytest.mark.req("GW-06")
def test_the_files_root_itself_being_a_symlink_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(OUTSIDE_TEXT)
    (tmp_path / "files").symlink_to(outside)
    files = ConfinedFiles(tmp_path / "files")
    with pytest.raises(ToolError) as caught:
        files.read("secret.txt")
    assert caught.value.code.value == "PATH_OUTSIDE_WORKSPACE"


@pytest.mark.req("GW-06")
def test_a_component_swapped_for_an_outside_symlink_never_leaks(
        setup: tuple[AgentGateway, Path, Path]) -> None:
    gateway, files, outside = setup
    real = files / "swap"
    real.mkdir()
    (real / "secret.txt").write_text("inside")
    parked = files / ".parked"
    stop = threading.Event()
    swaps = 0

    def put_back() -> None:
        # A write may create a fresh swap/ while the real one is parked: clear and retry.
        for _ in range(1000):
            try:
                if real.is_symlink():
                    real.unlink()
                elif real.exists():
                    shutil.rmtree(real)
                os.rename(parked, real)
                return
            except OSError:
                continue
        raise AssertionError("could not put the real directory back")

    def swapper() -> None:
        nonlocal swaps
        while not stop.is_set():
            os.rename(real, parked)
            try:
                os.symlink(outside, real)
            except FileExistsError:
                put_back()
                continue
            time.sleep(0)
            put_back()
            swaps += 1

    thread = threading.Thread(target=swapper, daemon=True)
    thread.start()
    leaks = reads = writes = 0
    deadline = time.monotonic() + 3.0
    try:
        while time.monotonic() < deadline:
            read = gateway.call("files.read", {"path": "swap/secret.txt"}, WRITE)
            if read.ok:
                reads += 1
                leaks += read.result["data"]["content"] == OUTSIDE_TEXT
            if gateway.call("files.write", {"path": "swap/secret.txt", "content": "inside"},
                            WRITE).ok:
                writes += 1
    finally:
        stop.set()
        thread.join(timeout=5)
    assert swaps > 100, "the race actually ran"
    assert reads > 0 and writes > 0
    assert leaks == 0
    _outside_untouched(outside)


@pytest.mark.req("GW-06", "GW-08")
@pytest.mark.parametrize("path", ["run\u202etxt.sh\u202c", "notes/\u2066a\u2069.txt", "a\u200b.txt",
                                  "\ufeffreport.md", "dir\u061c/x.txt", "tab\there.txt",
                                  "bell\x07.txt", "new\nline.txt"])
def test_a_written_name_never_holds_invisible_or_direction_characters(
        setup: tuple[AgentGateway, Path, Path], path: str) -> None:
    """``run\\u202etxt.sh`` shows as ``runhs.txt``: approving it would approve another name."""
    gateway, files, _ = setup
    before = sorted(p.relative_to(files) for p in files.rglob("*"))
    outcome = gateway.call("files.write", {"path": path, "content": "echo hi"}, WRITE)
    assert outcome.error_code == "INVALID_ARGUMENTS", outcome.result
    assert "U+" in str(outcome.result), outcome.result
    assert sorted(p.relative_to(files) for p in files.rglob("*")) == before, "nothing created"


@pytest.mark.req("GW-06", "GW-08")
def test_an_existing_file_with_such_a_name_can_still_be_read(
        setup: tuple[AgentGateway, Path, Path]) -> None:
    gateway, files, _ = setup
    (files / "family \u200d.txt").write_text("kept")
    outcome = gateway.call("files.read", {"path": "family \u200d.txt"}, WRITE)
    assert outcome.error_code is None, outcome.result
    assert gateway.call("files.write", {"path": "plain-ünïcödé 𝄞.txt", "content": "ok"},
                        WRITE).error_code is None


#: Compatibility forms of path syntax (NFKC folds them to "." and "/"): names, never syntax.
LOOKALIKES = ["\uff0e\uff0e/\uff0e\uff0e/x.txt", "\uff0e\uff0e\uff0fx.txt", "\u2024\u2024/x.txt",
              "a\u2215..\u2215x.txt", "\ufe52\ufe52/x.txt"]


@pytest.mark.req("GW-06")
@pytest.mark.parametrize("path", LOOKALIKES)
def test_compatibility_forms_of_dots_and_slashes_stay_names_inside_files(
        setup: tuple[AgentGateway, Path, Path], path: str) -> None:
    """A check made on one form and an open made on another (NFKC folds fullwidth
    ``\\uff0e\\uff0e\\uff0f`` to ``../``) would leave files/: each is written, read and
    listed under its own name."""
    gateway, files, outside = setup
    written = gateway.call("files.write", {"path": path, "content": "kept"}, WRITE)
    assert written.error_code is None, written.result
    assert (files / path).read_text() == "kept"
    read = gateway.call("files.read", {"path": path}, WRITE)
    assert read.error_code is None and "kept" in str(read.result["data"]), read.result
    top = path.split("/", maxsplit=1)[0]
    listed = gateway.call("files.list", {"path": ""}, WRITE)
    assert top in str(listed.result["data"]), listed.result
    _outside_untouched(outside)
    assert not (files.parent / "x.txt").exists() and not (files.parent.parent / "x.txt").exists()

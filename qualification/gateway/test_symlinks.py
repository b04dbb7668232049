"""GW-06: symlinks inside files/ are resolved — inside files/, by the walk itself.

A link to a file or directory under ``files/`` is followed (read, list, write: a write
replaces its target); a link that leaves ``files/`` stays ``PATH_OUTSIDE_WORKSPACE``, a
loop or more than 40 links in one path is ``PATH_LOOP``, a dangling link
``PATH_NOT_FOUND`` — and nothing is ever created through one. The walk keeps its
directory descriptors and ``O_NOFOLLOW``: the attack suite's vectors (file_boundary) stay
refused, the component-swap race included.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labfy_ref.errors import ErrorCode, ToolError
from labfy_ref.gateway import ConfinedFiles
from labfy_ref.gateway.files import MAX_LINKS

SECRET = "OUTSIDE-SECRET"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """``files/`` holding ``notes/a.txt`` and ``notes/deep/b.txt``, an outside secret beside."""
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text(SECRET)
    files = tmp_path / "files"
    (files / "notes" / "deep").mkdir(parents=True)
    (files / "notes" / "a.txt").write_text("alpha")
    (files / "notes" / "deep" / "b.txt").write_text("beta")
    return files


def _code(call: object, *args: str) -> ErrorCode:
    assert callable(call)
    with pytest.raises(ToolError) as caught:
        call(*args)
    code: ErrorCode = caught.value.code
    return code


@pytest.mark.req("GW-06")
def test_links_inside_files_are_followed_for_reads_lists_and_writes(root: Path) -> None:
    files = ConfinedFiles(root)
    (root / "a-link.txt").symlink_to("notes/a.txt")
    (root / "deep").symlink_to("notes/deep")  # a directory mid-path
    (root / "notes" / "deep" / "up.txt").symlink_to("../a.txt")  # up, still inside
    (root / "absolute.txt").symlink_to(root / "notes" / "deep" / "b.txt")
    (root / "chain.txt").symlink_to("a-link.txt")
    # an absolute target is walked from files/ itself, wherever the link lies
    (root / "notes" / "absolute.txt").symlink_to(root / "notes" / "deep" / "b.txt")
    (root / "notes" / "deep" / "absolute.txt").symlink_to(root / "notes" / "a.txt")
    assert files.read("a-link.txt")["content"] == "alpha"
    assert files.read("notes/absolute.txt")["content"] == "beta"
    assert files.read("notes/deep/absolute.txt")["content"] == "alpha"
    assert files.read("deep/b.txt")["content"] == "beta"
    assert files.read("deep/up.txt")["content"] == "alpha"
    assert files.read("absolute.txt")["content"] == "beta"
    assert files.read("chain.txt")["content"] == "alpha"
    assert [e["name"] for e in files.list("deep")["entries"]] == ["absolute.txt", "b.txt",
                                                                  "up.txt"]

    assert files.write("chain.txt", "written through two links")["bytes_written"] == 25
    assert (root / "notes" / "a.txt").read_text() == "written through two links"
    assert (root / "chain.txt").is_symlink() and (root / "a-link.txt").is_symlink(), \
        "the links stay links: their target was replaced"
    files.write("deep/new.txt", "made in the linked directory")
    assert (root / "notes" / "deep" / "new.txt").read_text() == "made in the linked directory"
    assert files.sha256("deep/new.txt") == files.sha256("notes/deep/new.txt")


@pytest.mark.req("GW-06")
def test_a_listing_shows_a_link_as_what_it_leads_to_inside_and_hides_the_rest(
        root: Path) -> None:
    files = ConfinedFiles(root)
    (root / "to-file").symlink_to("notes/a.txt")
    (root / "to-dir").symlink_to("notes")
    (root / "out").symlink_to("../outside/secret.txt")
    (root / "nowhere").symlink_to("notes/absent.txt")
    (root / "loop").symlink_to("loop")
    listed = {e["name"]: e for e in files.list("")["entries"]}
    assert listed == {"notes": {"name": "notes", "type": "directory"},
                      "to-dir": {"name": "to-dir", "type": "directory"},
                      "to-file": {"name": "to-file", "type": "file", "size": 5}}


@pytest.mark.req("GW-06")
def test_a_dangling_link_is_path_not_found_and_nothing_is_created_through_it(
        root: Path) -> None:
    files = ConfinedFiles(root)
    (root / "dangling.txt").symlink_to("notes/absent.txt")
    (root / "gone").symlink_to("notes/no-such-dir")
    before = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
    for call, args in ((files.read, ("dangling.txt",)), (files.write, ("dangling.txt", "x")),
                       (files.write, ("gone/new.txt", "x")), (files.list, ("gone",)),
                       (files.read, ("gone/x.txt",))):
        assert _code(call, *args) is ErrorCode.PATH_NOT_FOUND, (call, args)
    assert _code(files.sha256, "dangling.txt") is ErrorCode.PATH_NOT_FOUND
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*")) == before
    assert _code(files.read, "notes/absent.txt") is ErrorCode.FILE_NOT_FOUND, \
        "a plain missing file keeps its code"


@pytest.mark.req("GW-06")
def test_reading_or_listing_under_missing_directories_creates_nothing(root: Path) -> None:
    files = ConfinedFiles(root)
    before = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
    assert _code(files.read, "new/dir/x.txt") is ErrorCode.FILE_NOT_FOUND
    assert files.sha256("new/dir/x.txt") is None
    assert _code(files.list, "new/dir") is ErrorCode.FILE_NOT_FOUND
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*")) == before


@pytest.mark.req("GW-06")
def test_forty_links_are_followed_and_the_forty_first_is_a_loop(root: Path) -> None:
    files = ConfinedFiles(root)
    assert MAX_LINKS == 40, "Linux's own bound, as GW-06 says"
    (root / "l0").symlink_to("notes/a.txt")
    for index in range(1, 41):
        (root / f"l{index}").symlink_to(f"l{index - 1}")
    assert files.read("l39")["content"] == "alpha"  # l39 ... l0: forty links
    assert _code(files.read, "l40") is ErrorCode.PATH_LOOP


@pytest.mark.req("GW-06")
def test_links_that_leave_files_stay_outside_whatever_their_form(root: Path) -> None:
    files = ConfinedFiles(root)
    outside = root.parent / "outside"
    (root / "up").symlink_to("..")
    (root / "notes" / "upup").symlink_to("../..")
    (root / "rel").symlink_to("../outside/secret.txt")
    (root / "abs").symlink_to(outside / "secret.txt")
    (root / "sibling").symlink_to(str(root) + "-evil/x")  # the root's name as a prefix
    (root / "root-itself").symlink_to(root)  # absolute, files/ itself: inside
    for path in ("up/outside/secret.txt", "notes/upup/outside/secret.txt", "rel", "abs",
                 "sibling"):
        for call, args in ((files.read, (path,)), (files.write, (path, "x"))):
            assert _code(call, *args) is ErrorCode.PATH_OUTSIDE_WORKSPACE, (path, call)
    assert files.read("root-itself/notes/a.txt")["content"] == "alpha"
    assert _code(files.list, "up") is ErrorCode.PATH_OUTSIDE_WORKSPACE
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == SECRET


#: What a generated link may point at: inside and outside, relative and absolute, up and
#: round, existing and not.
_TARGETS = ["notes/a.txt", "notes", "notes/deep", "../outside/secret.txt", "..", ".", "../..",
            "l0", "l1", "l2", "notes/absent", "ABS_IN", "ABS_OUT", "notes/deep/../a.txt",
            "l0/b.txt", "", "notes//a.txt"]
_NAMES = ["l0", "l1", "l2", "notes/l3"]


@pytest.mark.req("GW-06")
@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(links=st.lists(st.sampled_from(_TARGETS), min_size=len(_NAMES), max_size=len(_NAMES)),
       path=st.lists(st.sampled_from(["l0", "l1", "l2", "notes", "l3", "a.txt", "deep", "b.txt",
                                      "x.txt"]), min_size=1, max_size=4))
def test_any_graph_of_links_never_reads_or_writes_outside(tmp_path_factory: pytest.TempPathFactory,
                                                          links: list[str],
                                                          path: list[str]) -> None:
    base = tmp_path_factory.mktemp("graph")
    (base / "outside").mkdir()
    (base / "outside" / "secret.txt").write_text(SECRET)
    root = base / "files"
    (root / "notes" / "deep").mkdir(parents=True)
    (root / "notes" / "a.txt").write_text("alpha")
    for name, target in zip(_NAMES, links, strict=True):
        real = {"ABS_IN": str(root / "notes"),
                "ABS_OUT": str(base / "outside")}.get(target, target)
        if real:
            os.symlink(real, root / name)
    files = ConfinedFiles(root)
    joined = "/".join(path)
    allowed = {ErrorCode.PATH_OUTSIDE_WORKSPACE, ErrorCode.PATH_LOOP, ErrorCode.PATH_NOT_FOUND,
               ErrorCode.FILE_NOT_FOUND, ErrorCode.NOT_A_DIRECTORY, ErrorCode.NOT_A_FILE}
    for call, args in ((files.read, (joined,)), (files.list, (joined,)),
                       (files.write, (joined, "written"))):
        try:
            result = call(*args)
        except ToolError as exc:
            assert exc.code in allowed, (joined, links, exc.code, exc.message)
            continue
        assert SECRET not in str(result)
    assert sorted(p.name for p in (base / "outside").iterdir()) == ["secret.txt"]
    assert (base / "outside" / "secret.txt").read_text() == SECRET


@contextlib.contextmanager
def _swapped_after_the_look(monkeypatch: pytest.MonkeyPatch, name: str,
                            looked_like: Path) -> Iterator[None]:
    """The walk's first look at ``name`` sees ``looked_like`` (a directory, a file); what
    it opens next is what is there — a link: a component swapped between look and use,
    at a moment no thread can pick."""
    real_stat = os.stat
    seen: list[str] = []

    def stat_then_swap(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if path == name and not kwargs.get("follow_symlinks", True) and not seen:
            seen.append(name)
            return real_stat(looked_like)
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat_then_swap)
    yield
    monkeypatch.undo()
    assert seen, "the walk looked"


@pytest.mark.req("GW-06")
@pytest.mark.parametrize("call", ["read", "write", "sha256", "list"])
def test_a_component_swapped_for_a_link_between_look_and_open_is_refused_as_outside(
        root: Path, monkeypatch: pytest.MonkeyPatch, call: str) -> None:
    files = ConfinedFiles(root)
    outside = root.parent / "outside"
    (root / "swapped").symlink_to(outside)  # it looked like a directory a moment ago
    (root / "swapped.txt").symlink_to(outside / "secret.txt")  # it looked like a file
    attempts = {"read": (files.read, "swapped/secret.txt", "swapped.txt"),
                "write": (lambda p: files.write(p, "x"), "swapped/secret.txt", None),
                "sha256": (files.sha256, "swapped/secret.txt", "swapped.txt"),
                "list": (files.list, "swapped", None)}
    run, through_dir, through_file = attempts[call]
    with _swapped_after_the_look(monkeypatch, "swapped", root / "notes"):
        assert _code(run, through_dir) is ErrorCode.PATH_OUTSIDE_WORKSPACE
    if through_file is not None:
        with _swapped_after_the_look(monkeypatch, "swapped.txt", root / "notes" / "a.txt"):
            assert _code(run, through_file) is ErrorCode.PATH_OUTSIDE_WORKSPACE
    assert (outside / "secret.txt").read_text() == SECRET


@pytest.mark.req("GW-06")
def test_a_listing_stops_looking_at_its_cap(root: Path) -> None:
    files = ConfinedFiles(root, max_entries=1)
    os.mkfifo(root / "x-pipe")  # listed past the cap it would not be: nothing is looked at
    (root / os.fsdecode(b"y-\xff.txt")).write_text("x")  # a name past the cap: not counted
    listed = files.list("")
    assert listed["entries"] == [{"name": "notes", "type": "directory"}]
    assert listed["skipped"] == 0, "nothing past the cap was examined"


@pytest.mark.req("GW-06")
def test_names_that_sort_before_dots_are_names(root: Path) -> None:
    files = ConfinedFiles(root)
    for name in ("-draft.txt", "#tags.md", "(copy).txt", "+plus", "!bang", " space"):
        files.write(f"notes/{name}", name)
        assert files.read(f"notes/{name}")["content"] == name
    (root / "-link").symlink_to("notes/-draft.txt")
    assert files.read("-link")["content"] == "-draft.txt"


@pytest.mark.req("GW-06")
@pytest.mark.parametrize("cap", [5, 6])
def test_a_read_is_cut_at_its_bound_odd_or_even(root: Path, cap: int) -> None:
    files = ConfinedFiles(root, max_read_bytes=cap)
    (root / "notes" / "long.txt").write_text("x" * (cap + 1))
    (root / "notes" / "fits.txt").write_text("y" * cap)
    assert files.read("notes/long.txt") == {"path": "notes/long.txt", "content": "x" * cap,
                                            "truncated": True}
    assert files.read("notes/fits.txt")["truncated"] is False


@pytest.mark.req("GW-06")
def test_a_refusal_names_the_path_up_to_where_the_walk_stopped(root: Path) -> None:
    files = ConfinedFiles(root)
    with pytest.raises(ToolError) as caught:
        files.read("notes/nodir/x.txt")
    assert caught.value.message == "notes/nodir: no such file or directory"
    (root / "notes" / "out").symlink_to("../../outside")
    with pytest.raises(ToolError) as caught:
        files.list("notes/out")
    assert caught.value.message == "notes/out: a symlink leads out of files/"


@pytest.mark.req("GW-06", "AV-01")
@pytest.mark.parametrize("failing", ["mkdir", "second look"])
def test_a_failing_filesystem_is_a_tool_error_never_a_traceback(
        root: Path, monkeypatch: pytest.MonkeyPatch, failing: str) -> None:
    """A read-only or failing disk (injected at the os boundary): the write says so."""
    files = ConfinedFiles(root)
    real_stat, looks = os.stat, []

    def read_only(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.EROFS, "Read-only file system")

    def fails_second_look(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if path == "a.txt":
            looks.append(path)
            if len(looks) == 2:
                raise OSError(errno.EIO, "Input/output error")
        return real_stat(path, *args, **kwargs)

    if failing == "mkdir":
        monkeypatch.setattr(os, "mkdir", read_only)
        path = "notes/new-dir/x.txt"
    else:
        monkeypatch.setattr(os, "stat", fails_second_look)
        path = "notes/a.txt"
    with pytest.raises(ToolError) as caught:
        files.write(path, "x")
    monkeypatch.undo()
    assert caught.value.code is ErrorCode.TOOL_UNAVAILABLE, caught.value.message
    assert (root / "notes" / "a.txt").read_text() == "alpha"
    assert not (root / "notes" / "new-dir").exists()

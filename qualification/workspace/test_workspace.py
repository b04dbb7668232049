"""WS-01..WS-03: the workspace directory, the store and the embedded SPECIMEN."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from labfy_ref.bridge.store.index import SessionIndex
from labfy_ref.errors import ErrorCode, WorkspaceError
from labfy_ref.gateway import AgentGateway, CallContext
from labfy_ref.modes import PermissionMode
from labfy_ref.workspace import WorkspaceKind, init_workspace, open_workspace
from qualification.harness import ServeProcess

OBJECT_ID = re.compile(r"obj_[0-9A-HJKMNP-TV-Z]{26}")


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "labfy_ref.cli.main", *args],
                          capture_output=True, text=True, timeout=60, check=False,
                          env={**os.environ, **(env or {})})


@pytest.mark.req("WS-01", "WS-03")
def test_workspace_init_creates_the_documented_layout(tmp_path: Path) -> None:
    target = tmp_path / "ws"
    done = _cli("workspace", "init", str(target), "--specimen", "--name", "Field lab")
    assert done.returncode == 0, done.stderr
    assert {p.name for p in target.iterdir()} >= {"labfy-workspace.toml", "labfy.sqlite",
                                                  "files", "sessions"}
    workspace = open_workspace(target)
    assert (workspace.kind, workspace.name) == (WorkspaceKind.SPECIMEN, "Field lab")
    assert (target / "files" / "notes" / "field-log.txt").is_file()
    live = tmp_path / "live"
    assert _cli("workspace", "init", str(live)).returncode == 0
    assert open_workspace(live).kind is WorkspaceKind.LIVE
    assert list((live / "files").iterdir()) == []


@pytest.mark.req("WS-01")
@pytest.mark.parametrize("damage", ["no-manifest", "bad-toml", "bad-kind", "no-files",
                                    "files-symlink", "no-store", "future-schema", "not-sqlite"])
def test_a_directory_that_is_not_a_workspace_is_a_clear_error(tmp_path: Path,
                                                              damage: str) -> None:
    target = tmp_path / "ws"
    init_workspace(target, specimen=False)
    manifest = target / "labfy-workspace.toml"
    if damage == "no-manifest":
        manifest.unlink()
    elif damage == "bad-toml":
        manifest.write_text("kind = [")
    elif damage == "bad-kind":
        manifest.write_text(manifest.read_text().replace('"LIVE"', '"CLOUD"'))
    elif damage == "no-files":
        (target / "files").rmdir()
    elif damage == "files-symlink":
        (target / "files").rmdir()
        (target / "files").symlink_to(tmp_path)
    elif damage == "no-store":
        (target / "labfy.sqlite").unlink()
    elif damage == "future-schema":
        with sqlite3.connect(target / "labfy.sqlite") as db:
            db.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    elif damage == "not-sqlite":
        (target / "labfy.sqlite").write_bytes(b"not a database" * 100)
    with pytest.raises(WorkspaceError) as caught:
        open_workspace(target)
    assert caught.value.code is ErrorCode.WORKSPACE_INVALID
    done = _cli("check-config")  # unrelated command still fine
    assert done.returncode == 0
    served = _cli("serve", "--workspace", str(target))
    assert served.returncode == 2
    assert served.stderr.startswith("WORKSPACE_INVALID: ") and "Traceback" not in served.stderr


@pytest.mark.req("WS-01")
def test_init_refuses_a_non_empty_directory_and_leaves_it_untouched(tmp_path: Path) -> None:
    target = tmp_path / "busy"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    done = _cli("workspace", "init", str(target))
    assert done.returncode == 2
    assert done.stderr.startswith("WORKSPACE_EXISTS: ")
    assert [p.name for p in target.iterdir()] == ["keep.txt"]


@pytest.mark.req("WS-02")
def test_objects_have_opaque_ids_kinds_titles_and_bodies(specimen: Path) -> None:
    workspace = open_workspace(specimen)
    store = workspace.open_store()
    try:
        objects = store.list_objects()
        assert len(objects) == 12
        assert {o.kind for o in objects} == {"fact", "observation", "source", "note"}
        assert all(OBJECT_ID.fullmatch(o.object_id) for o in objects)
        assert len({o.object_id for o in objects}) == 12
        assert all(o.title and o.body for o in objects)
    finally:
        store.close()


@pytest.mark.req("WS-02", "GW-02")
def test_no_tool_writes_objects(specimen: Path) -> None:
    workspace = open_workspace(specimen)
    gateway = AgentGateway(workspace, workspace.open_store())
    writers = [spec.tool_id for spec in gateway.catalog.values()
               if spec.tool_id.startswith("workspace.") and spec.effect.value != "read"]
    assert writers == []
    before = gateway.list_objects()
    for tool_id, args in [("workspace.list_objects", {}), ("files.list", {"path": ""})]:
        gateway.call(tool_id, args, CallContext(PermissionMode.WORKSPACE_WRITE))
    assert gateway.list_objects() == before


@pytest.mark.req("WS-03", "SV-01")
def test_serve_without_workspace_copies_the_embedded_specimen_once(tmp_path: Path) -> None:
    env = {"XDG_DATA_HOME": str(tmp_path / "data")}
    first = ServeProcess(ready_file=tmp_path / "ready1.json", env=env)
    try:
        first.wait_ready()
    finally:
        code, out, _ = first.stop()
    assert code == 0
    copied = tmp_path / "data" / "labfy-ref" / "specimen"
    workspace = open_workspace(copied)
    assert workspace.kind is WorkspaceKind.SPECIMEN
    assert "(SPECIMEN)" in out
    marker = copied / "files" / "mine.txt"
    marker.write_text("kept across runs")
    second = ServeProcess(ready_file=tmp_path / "ready2.json", env=env)
    try:
        second.wait_ready()
    finally:
        second.stop()
    assert marker.read_text() == "kept across runs"
    assert open_workspace(copied).workspace_id == workspace.workspace_id


@pytest.mark.req("WS-01")
def test_init_on_a_folder_name_that_is_not_utf8_makes_a_workspace_that_opens(
        tmp_path: Path) -> None:
    # ATTACKS.md §G: raw bytes where text is expected. The name is the folder's, kept
    # as far as it is text; before, init built everything, then could not read back
    # its own manifest and left a folder that could never be opened or re-initialised.
    target = Path(os.fsdecode(bytes(tmp_path) + b"/field\xff\xfelab"))
    done = _cli("workspace", "init", os.fsdecode(target))
    assert done.returncode == 0, done.stderr
    workspace = open_workspace(target)
    assert workspace.name == "field\ufffd\ufffdlab"
    assert workspace.kind is WorkspaceKind.LIVE
    control = tmp_path / "control\x07name"  # a control character is not printable either
    init_workspace(control, specimen=False)
    assert open_workspace(control).name == "control\ufffdname"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == [], "no staging"


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


@pytest.mark.req("WS-06")
def test_every_database_and_sidecar_is_owner_only_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o002)  # a permissive umask: group-writable, world-readable files
    try:
        workspace = init_workspace(tmp_path / "ws", specimen=True)
        store = workspace.open_store()
        store.add_object("note", "a title", "a body")  # a write: the -wal and -shm exist
        index = SessionIndex.beside(workspace.sessions_dir)
        assert index.path is not None
        databases = [workspace.store_path, index.path]
        written = [path for base in databases for path in (
            base, Path(f"{base}-wal"), Path(f"{base}-shm")) if path.exists()]
        assert len(written) >= 4, written
        assert {path.name: _mode(path) for path in written} == {
            path.name: 0o600 for path in written}
        index.close()
        store.close()
    finally:
        os.umask(old)


@pytest.mark.req("WS-06")
def test_a_store_an_older_release_made_world_readable_is_narrowed_when_opened(
        tmp_path: Path) -> None:
    workspace = init_workspace(tmp_path / "ws", specimen=True)
    workspace.open_store().close()
    for path in workspace.root.glob("labfy.sqlite*"):
        path.chmod(0o644)
    workspace.open_store().close()
    assert {path.name: _mode(path) for path in workspace.root.glob("labfy.sqlite*")} == {
        path.name: 0o600 for path in workspace.root.glob("labfy.sqlite*")}
    planted = tmp_path / "elsewhere.sqlite"
    planted.write_bytes(b"")
    workspace.store_path.unlink()
    workspace.store_path.symlink_to(planted)
    with pytest.raises(WorkspaceError) as caught:
        workspace.open_store()
    assert caught.value.code is ErrorCode.WORKSPACE_INVALID


@pytest.mark.req("WS-06")
@pytest.mark.parametrize("wide", [0o777, 0o755, 0o641])
def test_narrowing_takes_every_group_and_other_bit_and_keeps_the_owners(
        tmp_path: Path, wide: int) -> None:
    """Whatever an older release (or a user's chmod) left, opening the store leaves the
    owner's bits as they were and no bit for group or others, execute included."""
    workspace = init_workspace(tmp_path / "ws", specimen=True)
    workspace.store_path.chmod(wide)
    workspace.open_store().close()
    assert _mode(workspace.store_path) == wide & 0o700


@pytest.mark.req("WS-01", "WS-06")
def test_a_store_removed_after_the_workspace_was_read_is_missing_and_never_remade(
        tmp_path: Path) -> None:
    """``serve`` reads the workspace, then opens its store: a store deleted in between is
    refused as missing, and no empty database is left in its place (that would turn a lost
    ledger into a silent fresh start)."""
    workspace = open_workspace(init_workspace(tmp_path / "ws", specimen=True).root)
    workspace.store_path.unlink()
    with pytest.raises(WorkspaceError) as caught:
        workspace.open_store()
    assert (caught.value.code, "missing" in str(caught.value)) == (
        ErrorCode.WORKSPACE_INVALID, True)
    assert sorted(p.name for p in workspace.root.iterdir()) == [
        "files", "labfy-workspace.toml", "sessions"]


@pytest.mark.req("WS-06")
@pytest.mark.parametrize("sidecar", ["", "-wal", "-journal"])
def test_a_link_in_a_databases_place_is_refused_and_its_target_untouched(
        tmp_path: Path, sidecar: str) -> None:
    """A symbolic link where the store or one of its sidecars belongs is refused; the file
    it points at keeps its mode and its bytes (nothing is narrowed through the link)."""
    workspace = init_workspace(tmp_path / "ws", specimen=True)
    workspace.open_store().close()
    planted = tmp_path / "elsewhere"
    planted.write_bytes(b"not yours")
    planted.chmod(0o644)
    place = Path(f"{workspace.store_path}{sidecar}")
    place.unlink(missing_ok=True)
    place.symlink_to(planted)
    with pytest.raises(WorkspaceError) as caught:
        workspace.open_store().close()
    assert caught.value.code is ErrorCode.WORKSPACE_INVALID
    assert (_mode(planted), planted.read_bytes()) == (0o644, b"not yours")


@pytest.mark.req("WS-02")
def test_listing_objects_gives_a_hundred_at_most_and_a_match_only_what_it_names(
        specimen: Path) -> None:
    """``workspace.list_objects`` lists 100 objects unless asked for another limit; with
    ``match``, only objects holding a word that starts with one of its words (none when it
    has no word)."""
    from labfy_ref.gateway.services import ObjectService  # noqa: PLC0415

    workspace = open_workspace(specimen)
    store = workspace.open_store()
    try:
        for n in range(100):
            store.add_object("note", f"Tally {n}", f"counted bees, row {n}")
        service = ObjectService(store)
        assert len(store.list_objects(limit=1000)) == 112
        assert len(store.list_objects()) == 100, "the store's own listing: 100 unless asked"
        assert len(service.list_objects()["objects"]) == 100
        assert len(service.list_objects(limit=7)["objects"]) == 7
        tallies = service.list_objects(match="tall", limit=1000)["objects"]
        assert len(tallies) == 100 and all(o["title"].startswith("Tally") for o in tallies)
        for nothing in ("zzyzx-unheard", "!!! ...", ""):
            assert service.list_objects(match=nothing)["objects"] == [], nothing
    finally:
        store.close()


@pytest.mark.req("GW-04")
def test_a_campaign_is_found_by_its_exact_id_in_its_own_workspace_only(specimen: Path) -> None:
    """A campaign id is looked up as given: this workspace's campaign is found, an altered
    id or one of another workspace is CAMPAIGN_NOT_FOUND."""
    from labfy_ref.errors import ToolError  # noqa: PLC0415
    from labfy_ref.gateway.services import ResearchService  # noqa: PLC0415

    workspace = open_workspace(specimen)
    store = workspace.open_store()
    try:
        service = ResearchService(store, workspace)
        made = service.prepare("hedgerow bees", ["which bees?"])["campaign_id"]
        assert service.campaign(made).campaign_id == made
        other = store.add_campaign("ws_another", "other", ["q?"], []).campaign_id
        for wrong in (made[:-1] + ("A" if made[-1] != "A" else "B"), made.upper(), other):
            with pytest.raises(ToolError) as refused:
                service.campaign(wrong)
            assert refused.value.code is ErrorCode.CAMPAIGN_NOT_FOUND, wrong
    finally:
        store.close()

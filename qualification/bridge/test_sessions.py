"""BR-06..BR-08: JSONL session logs, durable, validated, crash-tolerant (ATTACKS.md §C, §F)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from labfy_ref.bridge.sessions import JsonlSessionStore
from labfy_ref.errors import RuntimeRefused, SessionInvalid
from labfy_ref.ids import new_id


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "sessions"
    path.mkdir()
    return path


@pytest.mark.req("BR-06")
def test_the_header_is_durable_at_creation_and_events_append(root: Path) -> None:
    store = JsonlSessionStore(root)
    sid = new_id("ses")
    store.create(sid, {"created_at": "t0", "settings": {"permission_mode": "read-only"}})
    store.close()
    reopened = JsonlSessionStore(root)
    header, events = reopened.read(sid)
    assert (header["session_id"], events) == (sid, [])
    reopened.append(sid, {"kind": "message", "text": "hé \u2028 \ud800"})
    assert reopened.read(sid)[1] == [{"kind": "message", "text": "hé \u2028 \ud800"}]
    assert reopened.list_ids() == [sid]


@pytest.mark.req("BR-07")
def test_a_torn_last_line_is_dropped_and_cut_before_the_next_append(root: Path) -> None:
    store = JsonlSessionStore(root)
    sid = new_id("ses")
    store.create(sid, {})
    for n in range(3):
        store.append(sid, {"kind": "message", "n": n})
    with (root / f"{sid}.jsonl").open("ab") as handle:
        handle.write(b'{"kind":"message","n":99,"te')
    assert [e["n"] for e in store.read(sid)[1]] == [0, 1, 2]
    store.append(sid, {"kind": "message", "n": 3})
    assert [e["n"] for e in store.read(sid)[1]] == [0, 1, 2, 3]


@pytest.mark.req("BR-07")
@pytest.mark.parametrize("damage", [b"not json\n", b"[1,2]\n", b"\xff\xfe\n"])
def test_a_corrupt_line_makes_the_log_invalid(root: Path, damage: bytes) -> None:
    store = JsonlSessionStore(root)
    sid = new_id("ses")
    store.create(sid, {})
    with (root / f"{sid}.jsonl").open("ab") as handle:
        handle.write(damage)
        handle.write(b'{"kind":"message"}\n')
    with pytest.raises(SessionInvalid) as caught:
        store.read(sid)
    assert caught.value.code.value == "SESSION_INVALID"


@pytest.mark.req("BR-07")
def test_symlinked_session_files_and_directories_are_refused(root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim.jsonl"
    victim.write_text('{"kind":"header"}\n')
    store = JsonlSessionStore(root)
    sid = new_id("ses")
    (root / f"{sid}.jsonl").symlink_to(victim)
    with pytest.raises(SessionInvalid):
        store.read(sid)
    with pytest.raises(SessionInvalid):
        store.append(sid, {"kind": "message"})
    assert victim.read_text() == '{"kind":"header"}\n'
    assert store.list_ids() == []
    linked = tmp_path / "linked"
    linked.symlink_to(outside)
    with pytest.raises(SessionInvalid):
        JsonlSessionStore(linked)
    via = tmp_path / "via"
    via.symlink_to(tmp_path)
    with pytest.raises(SessionInvalid):
        JsonlSessionStore(via / "sessions")


@pytest.mark.req("BR-07")
@pytest.mark.parametrize("session_id", ["../x", "ses_..", "ses_" + "0" * 25, "", "ses_/etc"])
def test_ids_outside_the_pattern_never_reach_the_file_system(root: Path,
                                                             session_id: str) -> None:
    store = JsonlSessionStore(root)
    with pytest.raises(RuntimeRefused) as caught:
        store.read(session_id)
    assert caught.value.status == 404


@pytest.mark.req("BR-08")
def test_delete_goes_through_a_tombstone_and_removes_the_log(root: Path) -> None:
    store = JsonlSessionStore(root)
    sid = new_id("ses")
    store.create(sid, {})
    store.delete(sid)
    assert list(root.iterdir()) == []
    with pytest.raises(RuntimeRefused):
        store.read(sid)
    with pytest.raises(RuntimeRefused):
        store.delete(sid)


@pytest.mark.req("BR-06", "BR-07")
def test_kill_9_at_random_points_never_loses_an_acknowledged_event(root: Path) -> None:
    store = JsonlSessionStore(root)
    sid = new_id("ses")
    store.create(sid, {})
    rng = random.Random(20261130)
    acked = 0
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    for _round in range(12):
        child = subprocess.Popen(
            [sys.executable, "-m", "qualification.bridge.append_child", str(root), sid,
             str(acked)], stdout=subprocess.PIPE, text=True, env=env)
        assert child.stdout is not None
        deadline = time.monotonic() + rng.uniform(0.3, 0.8)
        while time.monotonic() < deadline:
            line = child.stdout.readline()
            if line.startswith("acked "):
                acked = int(line.split()[1])
        os.kill(child.pid, signal.SIGKILL)
        for line in child.stdout:  # acknowledgements already written before the kill
            if line.startswith("acked "):
                acked = int(line.split()[1])
        child.stdout.close()
        child.wait(timeout=10)
        numbers = [e["n"] for e in store.read(sid)[1]]
        assert numbers == list(range(1, len(numbers) + 1)), "complete, ordered, no gaps"
        assert len(numbers) >= acked, "every acknowledged event is there"
        acked = len(numbers)
    assert acked > 100

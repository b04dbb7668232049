"""BR-06..BR-08, AV-06: JSONL session logs, durable, bounded, crash-tolerant (ATTACKS.md §C, §F)."""

from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from labfy_ref.bridge.store.logs import _SCAN_CHUNK, JsonlSessionStore, _complete_end
from labfy_ref.bridge.store.projection import check_log, project_settings
from labfy_ref.errors import RecordTooLarge, RuntimeRefused, SessionFull, SessionInvalid
from labfy_ref.ids import new_id
from qualification.bridge.append_child import event_of

MiB = 1024 * 1024


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
    reopened.append(sid, {"kind": "message", "text": "hé \u2028 😀"})
    assert reopened.read(sid)[1] == [{"kind": "message", "text": "hé \u2028 😀"}]
    assert reopened.list_ids() == [sid]
    assert "hé \u2028 😀".encode() in (root / f"{sid}.jsonl").read_bytes(), "plain UTF-8 lines"


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


def _log(root: Path, sid: str) -> Path:
    return root / f"{sid}.jsonl"


def _emoji_line(number: int, size: int) -> bytes:
    """A complete event line of ``size`` bytes: a refused write of many emoji, say."""
    line = json.dumps(event_of(number, size), ensure_ascii=False, separators=(",", ":"))
    return line.encode() + b"\n"


@pytest.mark.req("AV-06", "BR-07")
@pytest.mark.parametrize("complete_long_line", [False, True], ids=["torn-long", "long-then-torn"])
def test_a_torn_tail_longer_than_a_mebibyte_is_cut_and_nothing_else(
        root: Path, complete_long_line: bool) -> None:
    store = JsonlSessionStore(root)
    sid = new_id("ses")
    store.create(sid, {"created_at": "t0"})
    store.append(sid, {"kind": "message", "n": 1, "text": "short"})
    long_line = _emoji_line(2, 2_400_000)
    with _log(root, sid).open("ab") as handle:
        if complete_long_line:
            handle.write(long_line)
        handle.write(_emoji_line(3, 2_400_000)[:1_700_000])  # killed mid-write
    intact = _log(root, sid).read_bytes()[:-1_700_000]
    expected = [1, 2] if complete_long_line else [1]
    assert [e["n"] for e in store.read(sid)[1]] == expected
    store.append(sid, {"kind": "message", "n": 9, "text": "after the crash"})
    assert _log(root, sid).read_bytes().startswith(intact), "header and lines untouched"
    header, events = store.read(sid)
    assert (header["session_id"], header["created_at"]) == (sid, "t0")
    assert [e["n"] for e in events] == [*expected, 9]


@pytest.mark.req("AV-06", "BR-07")
@pytest.mark.parametrize("content", [b"", b'{"kind":"header","version":1,"session_id":"'],
                         ids=["empty", "torn-header"])
def test_a_log_without_one_complete_line_is_invalid_and_never_cut(root: Path,
                                                                  content: bytes) -> None:
    store = JsonlSessionStore(root)
    sid = new_id("ses")
    _log(root, sid).write_bytes(content)
    for action in (lambda: store.read(sid), lambda: store.append(sid, {"kind": "message"})):
        with pytest.raises(SessionInvalid):
            action()
    assert _log(root, sid).read_bytes() == content


@pytest.mark.req("AV-06")
def test_a_record_over_its_limit_is_refused_before_anything_is_written(root: Path) -> None:
    store = JsonlSessionStore(root, max_record_bytes=512, max_log_bytes=64 * 1024)
    sid = new_id("ses")
    with pytest.raises(RecordTooLarge) as caught:
        store.create(sid, {"note": "x" * 600})
    assert (caught.value.code.value, caught.value.status) == ("RECORD_TOO_LARGE", 413)
    assert store.list_ids() == []
    store.create(sid, {})
    before = _log(root, sid).read_bytes()
    with pytest.raises(RecordTooLarge):
        store.append(sid, event_of(1, 513))
    assert _log(root, sid).read_bytes() == before
    store.append(sid, event_of(1, 512))
    assert store.read(sid)[1] == [event_of(1, 512)]
    assert len(_log(root, sid).read_bytes()) == len(before) + 512


@pytest.mark.req("AV-06")
def test_a_record_of_four_mebibytes_is_stored_and_one_byte_more_is_refused(root: Path) -> None:
    store = JsonlSessionStore(root)
    assert store.max_record_bytes == 4 * MiB
    sid = new_id("ses")
    store.create(sid, {})
    before = _log(root, sid).stat().st_size
    with pytest.raises(RecordTooLarge):
        store.append(sid, event_of(1, 4 * MiB + 1))
    assert _log(root, sid).stat().st_size == before
    store.append(sid, event_of(1, 4 * MiB))
    assert _log(root, sid).stat().st_size == before + 4 * MiB
    assert store.read(sid)[1] == [event_of(1, 4 * MiB)]


@pytest.mark.req("AV-06")
def test_a_full_log_stays_readable_and_refuses_the_append_that_would_cross(root: Path) -> None:
    store = JsonlSessionStore(root, max_record_bytes=1000, max_log_bytes=4000)
    sid = new_id("ses")
    store.create(sid, {})
    for number in (1, 2, 3):
        store.append(sid, event_of(number, 1000))
    used = _log(root, sid).stat().st_size
    with pytest.raises(SessionFull) as caught:
        store.append(sid, event_of(4, 4000 - used + 1))
    assert (caught.value.code.value, caught.value.status) == ("SESSION_FULL", 409)
    assert _log(root, sid).stat().st_size == used, "refused whole"
    store.append(sid, event_of(4, 4000 - used))
    assert _log(root, sid).stat().st_size == 4000
    with pytest.raises(SessionFull):
        store.append(sid, {"kind": "message"})
    assert [e["n"] for e in store.read(sid)[1]] == [1, 2, 3, 4]


@pytest.mark.req("AV-06")
def test_a_log_over_the_real_limit_from_an_older_build_is_read_but_not_grown(
        root: Path) -> None:
    store = JsonlSessionStore(root)
    assert store.max_log_bytes == 64 * MiB
    sid = new_id("ses")
    store.create(sid, {})
    with _log(root, sid).open("ab") as handle:  # no limit held when it was written
        for number in range(1, 18):
            handle.write(_emoji_line(number, 4 * MiB))
    assert _log(root, sid).stat().st_size > 64 * MiB
    assert [e["n"] for e in store.read(sid)[1]] == list(range(1, 18))
    with pytest.raises(SessionFull):
        store.append(sid, {"kind": "message"})
    store.delete(sid)


# -- kill -9 at random points, records from 1 B to 4 MiB ------------------------------------
#
# Each round starts a child that appends numbered events, acknowledging each one,
# and kills it either at a random moment after it is ready, or (sizes whose children
# append a bounded count) in the middle of writing a line after a random number of
# complete ones. Bounded counts keep the large logs under their 64 MiB limit.

KILL_MATRIX = [
    pytest.param(1, None, id="1B"),
    pytest.param(1024, None, id="1KiB"),
    pytest.param(MiB + 1, 8, id="1MiB+1"),
    pytest.param(4 * MiB, 2, id="4MiB"),
]
ROUNDS = 6


def _ends_torn(log: int) -> bool:
    return os.pread(log, 1, os.fstat(log).st_size - 1) != b"\n"


def _kill_round(root: Path, sid: str, start: int, size: int, count: int | None,
                rng: random.Random, *, mid_line: bool) -> tuple[int, bool]:
    """One child, killed mid-run: the last number it acknowledged, and whether a tail is torn."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    args = [sys.executable, "-m", "qualification.bridge.append_child", str(root), sid,
            str(start), str(size), *([str(count)] if count else [])]
    child = subprocess.Popen(args, stdout=subprocess.PIPE, env=env)
    assert child.stdout is not None
    log = os.open(_log(root, sid), os.O_RDONLY)
    try:
        assert child.stdout.readline() == b"ready\n"
        if mid_line and count:
            # Kill while record k+1 is being written (each line is exactly size bytes).
            past = os.fstat(log).st_size + rng.randrange(count) * size
            deadline = time.monotonic() + 30  # bounded; the child stops after count
            while time.monotonic() < deadline and child.poll() is None:
                if os.fstat(log).st_size > past and _ends_torn(log):
                    break
        else:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=rng.uniform(0.0, 0.25))  # or stop at a random moment
        child.kill()
        output = child.stdout.read()  # acknowledgements written before the kill
        child.stdout.close()
        child.wait(timeout=10)
        torn = _ends_torn(log)
    finally:
        os.close(log)
    acks = [int(line.split()[1]) for line in output.splitlines() if line.startswith(b"acked ")]
    return max(acks, default=start), torn


@pytest.mark.req("AV-06", "BR-06", "BR-07")
@pytest.mark.parametrize(("size", "count"), KILL_MATRIX)
def test_kill_9_at_random_points_never_loses_an_acknowledged_event(
        root: Path, size: int, count: int | None) -> None:
    store = JsonlSessionStore(root)
    sid = new_id("ses")
    store.create(sid, {"created_at": "t0"})
    header_line = _log(root, sid).read_bytes()
    rng = random.Random(20261130 + size)
    acked, torn = 0, 0
    for number in range(ROUNDS):
        acked, left_torn = _kill_round(root, sid, acked, size, count, rng,
                                       mid_line=number % 2 == 1)
        torn += left_torn
        assert _log(root, sid).read_bytes()[:len(header_line)] == header_line
        header, events = store.read(sid)
        assert (header["session_id"], header["created_at"]) == (sid, "t0")
        numbers = [e["n"] for e in events]
        assert numbers == list(range(1, len(numbers) + 1)), "complete, ordered, no gaps"
        assert len(numbers) >= acked, "every acknowledged event is there"
        assert events == [event_of(n, size) for n in numbers], "every record whole"
        acked = len(numbers)
    print(f"{size} B records: {acked} appended, {torn} of {ROUNDS} kills left a torn tail")
    assert acked > 0
    store.delete(sid)


@pytest.mark.req("BR-07")
def test_a_hard_linked_session_log_is_session_invalid(root: Path, tmp_path: Path) -> None:
    """A second name for a log (a hard link from outside ``sessions/``) is refused on read and
    on append: writing through it would change the outside file."""
    store = JsonlSessionStore(root)
    sid = new_id("ses")
    store.create(sid, {"kind": "header"})
    outside = tmp_path / "outside.jsonl"
    os.link(root / f"{sid}.jsonl", outside)
    before = outside.read_bytes()
    with pytest.raises(SessionInvalid, match="not a plain file"):
        store.read(sid)
    with pytest.raises(SessionInvalid):
        store.append(sid, {"kind": "message"})
    assert outside.read_bytes() == before, "nothing was written through the second name"
    outside.unlink()  # one name again: the log is the session's own
    assert store.read(sid)


@pytest.mark.req("AV-06", "BR-07")
@pytest.mark.parametrize(("content", "end"), [
    (b"", 0), (b"\n", 1), (b"torn", 0), (b"a\nb", 2), (b"\n" + b"x" * _SCAN_CHUNK, 1),
    (b"ab\n" + b"x" * (2 * _SCAN_CHUNK + 5), 3), (b"a\n" * 3, 6)],
    ids=["empty", "newline", "torn", "short-tail", "tail-of-a-chunk", "tail-of-chunks",
         "complete"])
def test_the_end_of_the_last_complete_line_is_found_however_long_the_tail(
        tmp_path: Path, content: bytes, end: int) -> None:
    path = tmp_path / "log"
    path.write_bytes(content)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert _complete_end(fd, len(content)) == end
    finally:
        os.close(fd)


@pytest.mark.req("AV-06", "BR-07")
def test_a_read_log_ends_just_past_its_last_complete_line(root: Path) -> None:
    store = JsonlSessionStore(root)
    sid = new_id("ses")
    store.create(sid, {"created_at": "t0"})
    store.append(sid, {"kind": "message", "n": 1})
    size = _log(root, sid).stat().st_size
    log = store.read_log(sid)
    assert log.end == size and type(log.end) is int
    assert log.stamp.size == size
    with _log(root, sid).open("ab") as handle:
        handle.write(b'{"kind":"message","n":2')
    torn = store.read_log(sid)
    assert (torn.end, torn.stamp.size, len(torn.events)) == (size, size + 23, 1)
    store.close()


@pytest.mark.req("BR-07")
def test_a_header_needs_every_setting_while_a_settings_record_may_change_one() -> None:
    header = {"created_at": "2026-01-01T00:00:00Z",
              "settings": {"model": "engine:demo:d", "permission_mode": "read-only"}}
    change = {"kind": "settings", "settings": {"permission_mode": "workspace-write"}}
    check_log("ses_x", header, [change])
    for partial in ({"permission_mode": "read-only"}, {"model": "engine:demo:d"}, {}):
        with pytest.raises(SessionInvalid, match="header"):
            check_log("ses_x", {**header, "settings": partial}, [])


@pytest.mark.req("BR-07", "BR-06", "AV-06")
@pytest.mark.parametrize(("line", "raw", "why"), [
    (1, b'{"kind":"header",', "is corrupt"), (2, b"[1, 2]", "is not an object"),
    (4, b"NaN", "is corrupt"), (3, b'{"n": 1e5000000000}x', "is corrupt")])
def test_a_corrupt_line_is_named_by_its_number_counting_the_header_as_one(
        root: Path, line: int, raw: bytes, why: str) -> None:
    """A complete line that is not a JSON object makes the log SESSION_INVALID, and the
    reason names it by its line number in the file, the header being line 1."""
    store = JsonlSessionStore(root)
    sid = new_id("ses")
    store.create(sid, {"created_at": "t0"})
    for n in range(4):
        store.append(sid, {"kind": "message", "n": n})
    path = root / f"{sid}.jsonl"
    lines = path.read_bytes().split(b"\n")
    lines[line - 1] = raw
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(SessionInvalid) as invalid:
        store.read(sid)
    assert str(invalid.value).endswith(f"session {sid}: line {line} {why}"), invalid.value


@pytest.mark.req("BR-07")
def test_an_invalid_record_is_named_by_its_line_in_the_log() -> None:
    header = {"created_at": "2026-01-01T00:00:00Z",
              "settings": {"model": "engine:demo:d", "permission_mode": "read-only"}}
    good = {"kind": "message", "role": "user", "text": "hi"}
    bad = {"kind": "message", "role": "nobody", "text": "hi"}
    for events, line in (([bad], 2), ([good, bad], 3), ([good, good, good, bad], 5)):
        with pytest.raises(SessionInvalid, match=rf"line {line} is not a valid 'message'"):
            check_log("ses_x", header, events)


@pytest.mark.req("BR-09")
def test_the_settings_in_force_are_the_headers_updated_by_settings_records_only() -> None:
    header = {"created_at": "2026-01-01T00:00:00Z",
              "settings": {"model": "engine:demo:d", "permission_mode": "read-only"}}
    events: list[dict[str, Any]] = [
              {"kind": "message", "role": "user", "text": "hi"},
              {"kind": "settings", "settings": {"permission_mode": "workspace-write"}},
              {"kind": "tool", "call_id": "c", "tool_id": "files.list", "status": "ok"},
              {"kind": "approval", "approval_id": "a", "call_id": "c", "decision": "rejected"},
              {"kind": "note"}, {"kind": "settings", "settings": {"model": "engine:demo:e"}},
              {"kind": "message", "role": "assistant", "text": "done"}]
    assert project_settings(header, events) == {"model": "engine:demo:e",
                                                "permission_mode": "workspace-write"}
    assert project_settings(header, []) == header["settings"]

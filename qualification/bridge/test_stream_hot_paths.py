"""BR-03, BR-06, AV-06: each chunk encoded once; session-log appends off the event loop, in order.

A chunk's NDJSON line is made once, when it is emitted: the byte bound counts it
and the HTTP writer sends it. A turn's records are written in a worker thread,
so an append that waits on the disk stalls only its own turn, never the others;
they land in the order they were made, and ``done`` comes only once they are on disk.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import labfy_ref.bridge.stream as stream_module
from fake_provider import Answer, Scenario
from labfy_ref.bridge import JsonlSessionStore
from labfy_ref.bridge.ndjson import encode_line
from labfy_ref.bridge.store.journal import SessionWriter
from labfy_ref.bridge.store.logs import Appended
from labfy_ref.bridge.stream import StreamHandle
from labfy_ref.errors import SessionFull
from labfy_ref.ids import new_id
from qualification.conftest import ProviderFactory, ServerFactory, local_agent
from qualification.harness import TurnReader, wait_until

FINAL = json.dumps({"type": "final", "text": "done here"})
LIST = json.dumps({"type": "tool_call", "tool_id": "files.list", "arguments": {"path": ""}})
HEADER = {"created_at": "2026-01-01T00:00:00Z",
          "settings": {"model": "engine:demo:d", "permission_mode": "read-only"}}


@pytest.mark.req("BR-03", "BR-04")
def test_each_chunk_is_encoded_once_and_that_line_is_what_is_sent(
        monkeypatch: pytest.MonkeyPatch) -> None:
    encoded: list[bytes] = []

    def counting(value: Any) -> bytes:
        line = encode_line(value)
        encoded.append(line)
        return line

    monkeypatch.setattr(stream_module, "encode_line", counting)
    handle = StreamHandle("ses_X", "assistant")
    live: list[dict[str, Any]] = []
    handle.subscribe(live.append)
    texts = ["plain", "\u2028 and \u2029", "😀" * 3, "\ud800 lone", '"quoted"\n']
    for text in texts:
        handle.emit("text", text=text)
    handle.emit("done", reason="completed", interrupted=False)

    async def wire() -> list[bytes]:
        return [line async for line in handle.lines()]

    sent = asyncio.run(wire())
    assert len(encoded) == len(texts) + 1, "one encoding per chunk, none for the writer"
    assert sent == encoded[-1:], "after done only the ending is kept (AV-07)"
    assert [encode_line(chunk) for chunk in live] == encoded, "the wire line of each chunk"


@pytest.mark.req("BR-03")
def test_the_byte_bound_counts_the_lines_the_wire_carries() -> None:
    handle = StreamHandle("ses_X", "assistant", max_bytes=1000)
    lines: list[bytes] = []

    async def run() -> None:
        reader = asyncio.ensure_future(_collect(handle, lines))
        await asyncio.sleep(0)
        while handle.emit("text", text="é\u2028" * 7):
            pass
        await reader

    asyncio.run(run())
    types = [json.loads(line)["type"] for line in lines]
    assert types[-2:] == ["error", "done"]
    body = sum(len(line) for line in lines[:-2])
    assert body <= 1000 < body + len(lines[-3]), "the next chunk's line would have crossed"


async def _collect(handle: StreamHandle, into: list[bytes]) -> None:
    async for batch in handle.lines():  # lines waiting together come in one write
        into += [line + b"\n" for line in batch.split(b"\n")[:-1]]


def _kinds(path: Path) -> list[str]:
    records = [json.loads(line) for line in path.read_bytes().splitlines()[1:]]
    return [r["kind"] + (f":{r['role']}" if r["kind"] == "message" else "") for r in records]


@pytest.mark.req("AV-06", "BR-06", "BR-02")
def test_an_append_waiting_on_its_log_stalls_no_other_stream(
        specimen: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    provider = provider_factory(Scenario.always(FINAL))
    server = server_factory(specimen, bridge=True, **local_agent(provider.base_url))
    client = server.client()
    held, free = (client.post("/api/cordis/sessions", {}).json()["session"]["id"]
                  for _ in range(2))
    host = server.state.bridge.host
    assert host is not None
    store: JsonlSessionStore = host.service("sessions")
    with store.holding(held):  # this log's writes wait, as on a disk that does not answer
        stalled = TurnReader(client, held, "wait for the disk")
        wait_until(lambda: server.state.bridge.engine().get_session(held)["active_turn"])
        other = TurnReader(client, free, "go ahead").join()
        assert other[-1]["reason"] == "completed", "the other stream went on"
        assert client.get("/api/health").status_code == 200, "the event loop is free"
        assert stalled.chunks == [], "nothing is streamed before the user's message is on disk"
        assert provider.chat_requests() and len(provider.chat_requests()) == 1
    chunks = stalled.join()
    assert chunks[-1]["reason"] == "completed"
    assert _kinds(specimen / "sessions" / f"{held}.jsonl") == ["message:user",
                                                                "message:assistant"]


@pytest.mark.req("AV-06", "BR-06")
def test_a_held_log_holds_up_the_writes_of_no_other_log(tmp_path: Path) -> None:
    # Locks shared by several logs (a stripe per id hash) made a write waiting on one
    # log stall whichever others hashed alike: with 300 logs some always would.
    root = tmp_path / "sessions"
    root.mkdir()
    store = JsonlSessionStore(root)
    held, *others = (new_id("ses") for _ in range(301))
    for sid in (held, *others):
        store.create(sid, HEADER)
    written: list[str] = []

    def write_all() -> None:
        for sid in others:
            store.append(sid, {"kind": "message", "role": "user", "text": "go"})
            written.append(sid)

    with store.holding(held):
        writer = threading.Thread(target=write_all, daemon=True)
        writer.start()
        writer.join(timeout=30)
        assert written == others, f"{len(others) - len(written)} writes waited on the held log"
        blocked = threading.Thread(
            target=store.append, args=(held, {"kind": "message", "role": "user", "text": "x"}),
            daemon=True)
        blocked.start()
        blocked.join(timeout=0.2)
        assert blocked.is_alive(), "the held log's own write waits"
    blocked.join(timeout=30)
    assert not blocked.is_alive()


@pytest.mark.req("AV-06", "BR-06", "BR-02")
def test_records_of_concurrent_turns_land_in_the_order_they_were_made(
        specimen: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    # 15 calls at most for any one turn: it always ends within its 16 rounds.
    answers = (Answer(content=LIST), Answer(content=LIST), Answer(content=FINAL)) * 3 + (
        Answer(content=LIST), Answer(content=FINAL)) * 9
    provider = provider_factory(Scenario("calls", answers))
    server = server_factory(specimen, bridge=True, **local_agent(provider.base_url))
    client = server.client()
    session_ids = [client.post("/api/cordis/sessions", {}).json()["session"]["id"]
                   for _ in range(12)]
    for round_ in range(2):
        provider.set_scenario(Scenario("calls", answers))
        readers = [TurnReader(client, sid, f"round {round_}") for sid in session_ids]
        for reader in readers:
            chunks = reader.join()
            assert chunks[-1]["reason"] == "completed", chunks[-2:]
    for session_id in session_ids:
        path = specimen / "sessions" / f"{session_id}.jsonl"
        kinds = _kinds(path)
        assert kinds[0] == "message:user" and kinds[-1] == "message:assistant"
        assert kinds.count("message:user") == 2
        turns = "|".join(kinds).split("message:user")[1:]
        assert all(turn.strip("|").endswith("message:assistant") for turn in turns)
        ats = [json.loads(line)["at"] for line in path.read_bytes().splitlines()[1:]]
        assert ats == sorted(ats), "records in the order they were made"
        listed = client.get(f"/api/cordis/sessions/{session_id}").json()["session"]
        assert [m["role"] for m in listed["messages"]].count("tool") == kinds.count("tool")


class _Catalog:
    """Where the writer tells what landed (the engine's catalog does the same)."""

    def __init__(self) -> None:
        self.landed: list[tuple[dict[str, Any], Appended]] = []
        self.forgotten = 0

    def appended(self, session_id: str, records: list[tuple[dict[str, Any], Appended]]) -> None:
        self.landed += records

    def forget(self, session_id: str) -> None:
        self.forgotten += 1


@pytest.mark.req("AV-06", "BR-06")
def test_a_flush_returns_once_on_disk_and_a_cancelled_one_still_lands_in_order(
        tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    session_id = new_id("ses")
    store.create(session_id, HEADER)
    catalog = _Catalog()
    writer = SessionWriter(store, catalog, session_id)
    path = tmp_path / f"{session_id}.jsonl"

    def numbers() -> list[int]:
        return [json.loads(line)["n"] for line in path.read_bytes().splitlines()[1:]]

    async def run() -> None:
        for n in range(1, 6):
            writer.stage({"kind": "note", "n": n})
        await writer.flush()
        assert numbers() == [1, 2, 3, 4, 5] and not writer.busy
        with store.holding(session_id):
            writer.stage({"kind": "note", "n": 6})
            flushing = asyncio.ensure_future(writer.flush())
            await asyncio.sleep(0)
            flushing.cancel()  # the turn is cancelled while its write waits on the disk
            with pytest.raises(asyncio.CancelledError):
                await flushing
            assert writer.busy, "the write is still in flight"
            writer.stage({"kind": "note", "n": 7})
        await writer.flush()  # waits for 6, then writes 7
        assert numbers() == list(range(1, 8)) and not writer.busy
        assert [event["n"] for event, _ in catalog.landed] == list(range(1, 8))
        offsets = [appended.offset for _, appended in catalog.landed]
        assert offsets == sorted(offsets)

    asyncio.run(run())
    store.close()


@pytest.mark.req("AV-06")
def test_nothing_is_written_after_a_refused_record(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path, max_log_bytes=400)
    session_id = new_id("ses")
    store.create(session_id, HEADER)
    catalog = _Catalog()
    writer = SessionWriter(store, catalog, session_id)

    async def run() -> None:
        writer.stage({"kind": "note", "text": "x" * 100})
        writer.stage({"kind": "note", "text": "y" * 300})  # would cross 400 bytes
        writer.stage({"kind": "note", "text": "z"})
        with pytest.raises(SessionFull):
            await writer.flush()
        assert not writer.busy

    asyncio.run(run())
    texts = [json.loads(line)["text"] for line in
             (tmp_path / f"{session_id}.jsonl").read_bytes().splitlines()[1:]]
    assert texts == ["x" * 100] and len(catalog.landed) == 1
    store.close()


def _watched_writer(store: JsonlSessionStore) -> tuple[SessionWriter, _Catalog, list[bool]]:
    """A writer of a new session of ``store``, its catalog, and whether it was busy each
    time it said it went idle."""
    session_id = new_id("ses")
    store.create(session_id, HEADER)
    catalog = _Catalog()
    writer = SessionWriter(store, catalog, session_id)
    idle: list[bool] = []
    writer.on_idle = lambda: idle.append(writer.busy)
    return writer, catalog, idle


@pytest.mark.req("BR-06", "AV-06")
def test_a_drain_writes_what_a_finished_turn_staged_without_a_flush(tmp_path: Path) -> None:
    """A turn that ended without flushing (cancelled, or a title staged after it) still has
    its records written, in order: ``drain`` starts the write, and while a batch is in
    flight it starts none beside it (that batch's landing would be lost)."""
    store = JsonlSessionStore(tmp_path)
    writer, catalog, idle = _watched_writer(store)
    session_id = writer.session_id
    path = tmp_path / f"{session_id}.jsonl"

    def numbers() -> list[int]:
        return [json.loads(line)["n"] for line in path.read_bytes().splitlines()[1:]]

    async def run() -> None:
        writer.stage({"kind": "note", "n": 1})
        writer.drain()
        assert writer.busy
        await _until(lambda: not writer.busy)
        assert numbers() == [1] and idle == [False]
        with store.holding(session_id):
            writer.stage({"kind": "note", "n": 2})
            writer.drain()  # in flight, held on the disk
            writer.stage({"kind": "note", "n": 3})
            writer.drain()  # must wait for 2's batch, not start beside it
            await asyncio.sleep(0.05)
        await writer.flush()
        assert numbers() == [1, 2, 3] and not writer.busy
        assert [event["n"] for event, _ in catalog.landed] == [1, 2, 3]

    asyncio.run(run())
    store.close()


class _FailingStore(JsonlSessionStore):
    """A store whose disk fails outright (an ``OSError`` no refusal describes)."""

    def append_line(self, session_id: str, line: bytes) -> Appended:
        raise OSError(5, "Input/output error")


@pytest.mark.req("BR-06", "AV-06")
def test_a_batch_the_disk_failed_is_forgotten_and_the_writer_goes_idle(tmp_path: Path) -> None:
    """A write that failed with no refusal leaves no record counted as landed: the catalog
    forgets the session (it re-reads the log), the writer is idle and says so once."""
    store = _FailingStore(tmp_path)
    writer, catalog, idle = _watched_writer(store)

    async def run() -> None:
        writer.stage({"kind": "note", "n": 1})
        with pytest.raises(OSError, match="Input/output error"):
            await writer.flush()

    asyncio.run(run())
    assert (catalog.landed, catalog.forgotten, idle, writer.busy) == ([], 1, [False], False)
    store.close()


async def _until(done: Callable[[], bool], *, timeout: float = 10.0) -> None:
    """Yield to the loop until ``done()`` holds (bounded)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not done():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.01)

"""BR-02, BR-03, UI-06 (framing): the stream handle and NDJSON, under ATTACKS.md §F."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from labfy_ref.bridge.ndjson import NdjsonDecoder, encode_line
from labfy_ref.bridge.stream import CHUNK_TYPES, StreamHandle


def _handle(**limits: int) -> StreamHandle:
    return StreamHandle("ses_X", "assistant", **limits)


@pytest.mark.req("BR-03")
def test_a_chunk_emitted_before_anyone_subscribes_is_delivered() -> None:
    handle = _handle()
    handle.emit("text", text="first!")
    seen: list[dict[str, Any]] = []
    handle.subscribe(seen.append)
    handle.emit("done", reason="completed", interrupted=False)
    assert [c["type"] for c in seen] == ["text", "done"]
    assert seen[0]["text"] == "first!"
    assert handle.released, "done reached a reader: the buffer is released (AV-07)"
    late: list[dict[str, Any]] = []
    handle.subscribe(late.append)
    assert late == seen[-1:], "a subscriber attaching after that learns only the ending"


@pytest.mark.req("AV-07", "BR-03")
def test_a_stream_ended_at_its_bound_is_released_keeping_its_ending() -> None:
    handle = _handle(max_chunks=5)
    seen: list[dict[str, Any]] = []
    handle.subscribe(seen.append)
    assert handle.emit("text", text="first") and handle.emit("reasoning", text="why")
    assert not handle.released, "a turn still running keeps what it said for a late reader"
    while handle.emit("text", text="more"):
        pass
    assert [c["type"] for c in seen] == ["text", "reasoning", "text", "error", "done"]
    assert handle.released, "done reached a reader: the buffer is released"
    assert handle.chunks == seen[-2:], "only the ending is kept, as it was said"
    late: list[dict[str, Any]] = []
    handle.subscribe(late.append)
    assert late == seen[-2:] and handle.dropped_subscribers == 0


@pytest.mark.req("BR-02")
def test_chunks_carry_ids_and_seq_one_error_at_most_and_done_last() -> None:
    handle = _handle()
    assert handle.emit("text", text="a")
    assert handle.emit("error", code="MODEL_PROTOCOL_ERROR", message="bad")
    assert not handle.emit("error", code="OTHER", message="second")
    assert handle.emit("done", reason="error", interrupted=False)
    assert not handle.emit("text", text="after done")
    chunks = handle.chunks
    assert [c["seq"] for c in chunks] == [1, 2, 3]
    assert all(c["session_id"] == "ses_X" and c["agent_id"] == "assistant" for c in chunks)
    assert [c["type"] for c in chunks] == ["text", "error", "done"]
    with pytest.raises(ValueError, match="unknown chunk type"):
        _handle().emit("shout")


@pytest.mark.req("BR-02")
def test_after_its_one_error_a_turn_still_says_what_it_has_until_done() -> None:
    """Only a second error is refused: the chunks of every other type a producer still
    emits after its error (a tool's result, its reasoning, an approval's decision) are
    numbered on, and done ends it."""
    handle = _handle()
    assert handle.emit("error", code="MODEL_PROTOCOL_ERROR", message="bad")
    kinds = sorted(CHUNK_TYPES - {"error", "done"})
    assert [handle.emit(kind, note=kind) for kind in kinds] == [True] * len(kinds)
    assert not handle.emit("error", code="OTHER", message="second")
    assert handle.emit("done", reason="error", interrupted=True)
    assert [(c["type"], c["seq"]) for c in handle.chunks] == [
        ("error", 1), *((kind, n) for n, kind in enumerate(kinds, 2)), ("done", len(kinds) + 2)]


@pytest.mark.req("BR-02")
@pytest.mark.parametrize("before", sorted(CHUNK_TYPES - {"error", "done"}))
def test_the_one_error_is_taken_whatever_came_before_it(before: str) -> None:
    handle = _handle()
    assert handle.emit(before, note="first")
    assert handle.emit("error", code="MODEL_PROTOCOL_ERROR", message="bad")
    assert not handle.emit("error", code="OTHER", message="second")
    assert [c["type"] for c in handle.chunks] == [before, "error"]


@pytest.mark.req("BR-02", "BR-03")
@pytest.mark.parametrize("limits", [{"max_chunks": 7}, {"max_bytes": 900}])
def test_a_stream_that_said_its_error_ends_at_its_bound_with_no_second_one(
        limits: dict[str, int]) -> None:
    """After the turn's one error a producer may still say what it has (a tool's result,
    reasoning): past the bound, the stream ends with an interrupted done and no
    STREAM_LIMIT error, since a turn has at most one error; the producer is stopped."""
    handle = _handle(**limits)
    cancelled: list[bool] = []
    handle.on_cancel(lambda: cancelled.append(True))
    assert handle.emit("error", code="MODEL_PROTOCOL_ERROR", message="bad")
    sent = 0
    while handle.emit("text", text="y" * 120):
        sent += 1
    chunks = handle.chunks
    assert sent >= 3, "chunks after the error are taken until the bound"
    assert [c["type"] for c in chunks] == ["error", *["text"] * sent, "done"]
    assert chunks[0]["code"] == "MODEL_PROTOCOL_ERROR"
    assert (chunks[-1]["reason"], chunks[-1]["interrupted"]) == ("error", True)
    assert [c["seq"] for c in chunks] == list(range(1, sent + 3))
    assert cancelled == [True]


@pytest.mark.req("BR-02", "BR-03")
@pytest.mark.parametrize("limits", [{"max_chunks": 7}, {"max_bytes": 900}])
def test_a_stream_ended_at_its_bound_numbers_its_error_and_done_on(
        limits: dict[str, int]) -> None:
    """The STREAM_LIMIT error and the done after it continue the numbering (1..n, no gap),
    carry the session and agent, and done says the turn was interrupted."""
    handle = _handle(**limits)
    sent = 0
    while handle.emit("text", text="y" * 120):
        sent += 1
    chunks = handle.chunks
    assert [c["seq"] for c in chunks] == list(range(1, sent + 3))
    assert [(c["type"], c.get("code"), c.get("interrupted")) for c in chunks[-2:]] == [
        ("error", "STREAM_LIMIT", None), ("done", None, True)]
    assert {(c["session_id"], c["agent_id"]) for c in chunks} == {("ses_X", "assistant")}
    assert not handle.emit("text", text="after")


@pytest.mark.req("BR-03")
@given(kinds=st.lists(st.sampled_from(sorted(CHUNK_TYPES - {"done"})), max_size=12),
       late=st.integers(0, 12))
def test_a_subscriber_gets_each_accepted_chunk_once_in_order_whenever_it_attaches(
        kinds: list[str], late: int) -> None:
    """What is replayed and followed is exactly what emit accepted: each chunk once, in order,
    numbered 1..n, of every type (a turn's one error too), then its one done."""
    handle = _handle()
    early: list[dict[str, Any]] = []
    handle.subscribe(early.append)
    accepted = []
    joined: list[dict[str, Any]] = []
    for index, kind in enumerate(kinds):
        if index == late:
            handle.subscribe(joined.append)
        if handle.emit(kind, note=index):
            accepted.append((kind, index))
    if late >= len(kinds):
        handle.subscribe(joined.append)
    handle.emit("done", reason="completed", interrupted=False)
    assert [(c["type"], c.get("note")) for c in early] == [*accepted, ("done", None)]
    assert [c["seq"] for c in early] == list(range(1, len(accepted) + 2))
    assert sum(c["type"] == "error" for c in early) == min(1, kinds.count("error"))
    assert joined == early, "one attaching later gets the same: a replay, then the rest live"


@pytest.mark.req("BR-03")
@pytest.mark.parametrize("limits", [{"max_chunks": 10}, {"max_bytes": 2000}])
def test_overflow_emits_stream_limit_then_done_and_cancels(limits: dict[str, int]) -> None:
    handle = _handle(**limits)
    cancelled: list[bool] = []
    handle.on_cancel(lambda: cancelled.append(True))
    for _ in range(100):
        if not handle.emit("text", text="x" * 100):
            break
    tail = handle.chunks[-2:]
    assert [c["type"] for c in tail] == ["error", "done"]
    assert tail[0]["code"] == "STREAM_LIMIT"
    assert tail[1]["interrupted"] is True
    assert cancelled == [True]
    assert len(handle.chunks) <= limits.get("max_chunks", 10_000)


@pytest.mark.req("BR-03")
def test_a_throwing_subscriber_cannot_break_the_stream_for_others() -> None:
    handle = _handle()
    good: list[str] = []

    def bad(_: dict[str, Any]) -> None:
        raise RuntimeError("subscriber bug")

    handle.subscribe(bad)
    handle.subscribe(lambda c: good.append(c["type"]))
    handle.emit("text", text="a")
    handle.emit("done", reason="completed", interrupted=False)
    assert good == ["text", "done"]
    assert handle.dropped_subscribers == 1


@pytest.mark.req("BR-03")
def test_iterate_replays_then_follows_live() -> None:
    async def scenario() -> list[str]:
        handle = _handle()
        handle.emit("text", text="early")

        async def produce() -> None:
            await asyncio.sleep(0.01)
            handle.emit("text", text="late")
            handle.emit("done", reason="completed", interrupted=False)

        producer = asyncio.create_task(produce())
        seen = [chunk["type"] async for chunk in handle.iterate()]
        await producer
        return seen

    assert asyncio.run(scenario()) == ["text", "text", "done"]


HOSTILE_TEXTS = ["line\rreturn", "sep\u2028arator", "next\u0085line", "para\u2029graph",
                 "lone \ud800 surrogate", "nul \x00 byte", "emoji 𝄞 😀", "new\nline",
                 "x" * (1024 * 1024)]


@pytest.mark.req("BR-04")
@pytest.mark.parametrize("text", HOSTILE_TEXTS, ids=range(len(HOSTILE_TEXTS)))
def test_ndjson_framing_keeps_one_chunk_per_line(text: str) -> None:
    line = encode_line({"type": "text", "text": text})
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert len(line.decode("utf-8").splitlines()) == 1, "no reader sees a second line"
    [value] = list(NdjsonDecoder().feed(line))
    expected = text.encode("utf-8", "surrogatepass").decode("utf-8", "surrogatepass")
    assert value["text"] == expected


@pytest.mark.req("BR-04")
@given(st.lists(st.text(max_size=30), min_size=1, max_size=8),
       st.lists(st.integers(min_value=0, max_value=2000), max_size=12))
def test_a_client_reading_in_arbitrary_splits_reassembles_exactly(
        texts: list[str], cuts: list[int]) -> None:
    stream = b"".join(encode_line({"type": "text", "seq": i, "text": t})
                      for i, t in enumerate(texts))
    decoder = NdjsonDecoder()
    values: list[Any] = []
    last = 0
    for cut in [*sorted({c for c in cuts if c <= len(stream)}), len(stream)]:
        values.extend(decoder.feed(stream[last:cut]))  # mid-line, mid-UTF-8, several lines
        last = cut
    decoder.close()
    assert [v["text"] for v in values] == [json.loads(json.dumps(t)) for t in texts]


@pytest.mark.req("BR-03", "BR-04")
def test_lines_waiting_together_go_out_in_one_write_in_order() -> None:
    """A burst costs the HTTP writer one write; every line is there, in order, once."""
    handle = StreamHandle("ses_X", "assistant")

    async def run() -> list[bytes]:
        writes: list[bytes] = []

        async def writer() -> None:
            async for batch in handle.lines():
                writes.append(batch)

        task = asyncio.ensure_future(writer())
        await asyncio.sleep(0)  # the writer waits for its first line
        for number in range(50):  # a burst: emitted without the writer running between
            handle.emit("text", text=f"t{number}")
        handle.emit("done", reason="completed", interrupted=False)
        await task
        return writes

    writes = asyncio.run(run())
    lines = b"".join(writes).split(b"\n")[:-1]
    assert [json.loads(line)["seq"] for line in lines] == list(range(1, 52))
    assert len(writes) <= 2, f"{len(writes)} writes for one burst"

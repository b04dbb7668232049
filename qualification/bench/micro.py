"""Micro-benchmarks: what each boundary costs over the plain operation it replaces.

Each row times our code and the plain operation (best of five rounds) in this
process; the ratio is what the checks cost, informational (no goal) but one:
the streamed final text must stay linear, so its per-chunk cost at 8,000
chunks is held against its cost at 800.
"""

from __future__ import annotations

import json
import tempfile
import time
import tracemalloc
import urllib.parse
from collections.abc import Callable
from pathlib import Path

from labfy_ref.bridge.final_text import FinalTextExtractor
from labfy_ref.bridge.ndjson import encode_line
from labfy_ref.bridge.store.logs import JsonlSessionStore
from labfy_ref.bridge.stream import StreamHandle
from labfy_ref.gateway.files import ConfinedFiles
from labfy_ref.ids import new_id
from labfy_ref.model.endpoint import parse_endpoint
from labfy_ref.model.sse import SSEDecoder
from labfy_ref.protocol import ActionParser, loads_strict
from labfy_ref.tools import default_catalog
from qualification.bench.table import Row, at_most

SECTION = "micro"
ACTION = json.dumps({"type": "tool_call", "tool_id": "research.prepare",
                     "arguments": {"topic": "Early ivy bees", "questions": ["q1?", "q2?"],
                                   "object_refs": ["obj_01M8NXQH71KCN2XGQ6PD20719G"]}})


def best(fn: Callable[[], object], loops: int) -> float:
    """Seconds per call, best of five rounds."""
    times = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(loops):
            fn()
        times.append((time.perf_counter() - start) / loops)
    return min(times)


def _row(figure: str, ours: float, base: float, baseline: str) -> Row:
    return Row(SECTION, figure, ours * 1e6, base * 1e6, "µs", note="",
               detail={"baseline": baseline})


def _streamed_final(chunks: int) -> None:
    """A final answer streamed as ``chunks`` deltas, through the extractor and a handle."""
    handle = StreamHandle("ses_x", "assistant")
    handle.subscribe(lambda _: None)
    extractor = FinalTextExtractor()
    extractor.feed('{"type":"final","text":"')
    for _ in range(chunks):
        piece = extractor.feed("abcdefgh")
        if piece:
            handle.emit("text", text=piece)
    extractor.feed('"}')
    assert len(extractor.content) == 8 * chunks + 26
    handle.emit("done", reason="completed", interrupted=False)


def run(quick: bool) -> list[Row]:
    """Every micro-benchmark (loops divided by 4 with ``quick``)."""
    scale = 4 if quick else 1
    rows: list[Row] = []
    parser = ActionParser(default_catalog())
    rows.append(_row("strict JSON (action)", best(lambda: loads_strict(ACTION), 20000 // scale),
                     best(lambda: json.loads(ACTION), 20000 // scale), "json.loads"))
    rows.append(_row("action parse (strict + schemas)",
                     best(lambda: parser.parse(ACTION), 5000 // scale),
                     best(lambda: json.loads(ACTION), 5000 // scale), "json.loads"))
    url = "http://127.0.0.1:43117/v1"
    rows.append(_row("endpoint parse", best(lambda: parse_endpoint(url), 50000 // scale),
                     best(lambda: urllib.parse.urlsplit(url), 50000 // scale),
                     "urllib.parse.urlsplit"))

    event = b'data: {"choices":[{"delta":{"content":"abcdefgh"}}]}\n\n'
    stream = event * (1024 * 1024 // len(event))
    pieces = [stream[i : i + 1024] for i in range(0, len(stream), 1024)]

    def decode() -> None:
        decoder = SSEDecoder()
        for piece in pieces:
            for _ in decoder.feed(piece):
                pass

    rows.append(_row("SSE decode 1 MiB in 1 KiB reads", best(decode, 3),
                     best(lambda: stream.split(b"\n\n"), 3), "bytes.split (whole buffer)"))
    tracemalloc.start()
    decode()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    rows.append(Row(SECTION, "SSE decode peak memory / input size", peak, len(stream), "B"))

    chunk = {"type": "text", "session_id": "ses_x", "agent_id": "assistant", "seq": 1,
             "text": "Lavender drew 62 visits \u2028 ünïcödé 𝄞" * 4}
    rows.append(_row("NDJSON encode_line", best(lambda: encode_line(chunk), 20000 // scale),
                     best(lambda: json.dumps(chunk).encode() + b"\n", 20000 // scale),
                     "json.dumps + encode"))

    def handle_run() -> None:
        handle = StreamHandle("ses_x", "assistant")
        handle.subscribe(lambda _: None)
        for _ in range(2000):
            handle.emit("text", text="abcdefgh")

    def list_run() -> None:
        out: list[dict[str, object]] = []
        for index in range(2000):
            out.append({"type": "text", "seq": index, "text": "abcdefgh"})

    rows.append(_row("StreamHandle 2000 chunks, 1 subscriber", best(handle_run, 5),
                     best(list_run, 5), "list of dicts"))
    small, large = 800, 8000
    per_small = best(lambda: _streamed_final(small), 10 // (2 if quick else 1)) / small
    per_large = best(lambda: _streamed_final(large), 1) / large
    rows.append(Row(SECTION, f"streamed final text per chunk, {large:,} chunks vs {small}",
                    per_large * 1e6, per_small * 1e6, "µs", at_most(1.5),
                    detail={"what": "FinalTextExtractor.feed + StreamHandle.emit, linear "
                                    "if the per-chunk cost does not grow with the answer"}))

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "sessions").mkdir()
        store = JsonlSessionStore(root / "sessions")
        sid = new_id("ses")
        store.create(sid, {})
        record = {"kind": "message", "role": "user", "text": "hello " * 20}
        plain = root / "plain.jsonl"

        def plain_append() -> None:
            with plain.open("ab") as handle:
                handle.write(json.dumps(record).encode() + b"\n")

        rows.append(_row("JSONL append (O_NOFOLLOW, fsync)",
                         best(lambda: store.append(sid, record), 50),
                         best(plain_append, 50), "open + write, no fsync"))
        store.close()

        files = root / "files"
        (files / "a" / "b").mkdir(parents=True)
        target = files / "a" / "b" / "c.txt"
        target.write_text("x" * 4096)
        confined = ConfinedFiles(files)
        rows.append(_row("files.read (dir-fd walk, 3 levels)",
                         best(lambda: confined.read("a/b/c.txt"), 5000 // scale),
                         best(target.read_text, 5000 // scale), "Path.read_text"))
    return rows

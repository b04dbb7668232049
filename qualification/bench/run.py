"""``tox -e bench``: the cost of our boundaries, as ratios to a baseline measured in the same run.

Each line times our code and the plain operation it replaces (best of 5),
and prints the ratio: what the checks cost, not a pass/fail. Memory lines
give tracemalloc's peak relative to the input size.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import tracemalloc
import urllib.parse
from collections.abc import Callable
from pathlib import Path

from labfy_ref.bridge.ndjson import encode_line
from labfy_ref.bridge.sessions import JsonlSessionStore
from labfy_ref.bridge.stream import StreamHandle
from labfy_ref.gateway.files import ConfinedFiles
from labfy_ref.ids import new_id
from labfy_ref.model.endpoint import parse_endpoint
from labfy_ref.model.sse import SSEDecoder
from labfy_ref.protocol import ActionParser, loads_strict
from labfy_ref.tools import default_catalog

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


def line(name: str, ours: float, base: float, baseline: str) -> None:
    """One result line."""
    print(f"{name:<44} {ours * 1e6:>10.1f} µs  vs {baseline:<28} {base * 1e6:>9.1f} µs  "
          f"ratio {ours / base:>7.2f}")


def main() -> None:
    """Run every benchmark and print the table."""
    parser = ActionParser(default_catalog())
    line("strict JSON (action)", best(lambda: loads_strict(ACTION), 20000),
         best(lambda: json.loads(ACTION), 20000), "json.loads")
    line("action parse (strict + schemas)", best(lambda: parser.parse(ACTION), 5000),
         best(lambda: json.loads(ACTION), 5000), "json.loads")
    url = "http://127.0.0.1:43117/v1"
    line("endpoint parse", best(lambda: parse_endpoint(url), 50000),
         best(lambda: urllib.parse.urlsplit(url), 50000), "urllib.parse.urlsplit")

    event = b'data: {"choices":[{"delta":{"content":"abcdefgh"}}]}\n\n'
    stream = event * (1024 * 1024 // len(event))
    pieces = [stream[i : i + 1024] for i in range(0, len(stream), 1024)]

    def decode() -> None:
        decoder = SSEDecoder()
        for piece in pieces:
            for _ in decoder.feed(piece):
                pass

    line("SSE decode 1 MiB in 1 KiB reads", best(decode, 3),
         best(lambda: stream.split(b"\n\n"), 3), "bytes.split (whole buffer)")
    tracemalloc.start()
    decode()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    print(f"{'SSE decode peak memory / input size':<44} {peak / len(stream):>10.3f}")

    chunk = {"type": "text", "session_id": "ses_x", "agent_id": "assistant", "seq": 1,
             "text": "Lavender drew 62 visits \u2028 ünïcödé 𝄞" * 4}
    line("NDJSON encode_line", best(lambda: encode_line(chunk), 20000),
         best(lambda: json.dumps(chunk).encode() + b"\n", 20000), "json.dumps + encode")

    def handle_run() -> None:
        handle = StreamHandle("ses_x", "assistant")
        handle.subscribe(lambda _: None)
        for _ in range(2000):
            handle.emit("text", text="abcdefgh")

    def list_run() -> None:
        out: list[dict[str, object]] = []
        for index in range(2000):
            out.append({"type": "text", "seq": index, "text": "abcdefgh"})

    line("StreamHandle 2000 chunks, 1 subscriber", best(handle_run, 5), best(list_run, 5),
         "list of dicts")

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

        line("JSONL append (O_NOFOLLOW, fsync)", best(lambda: store.append(sid, record), 50),
             best(plain_append, 50), "open + write, no fsync")
        store.close()

        files = root / "files"
        (files / "a" / "b").mkdir(parents=True)
        target = files / "a" / "b" / "c.txt"
        target.write_text("x" * 4096)
        confined = ConfinedFiles(files)
        line("files.read (dir-fd walk, 3 levels)",
             best(lambda: confined.read("a/b/c.txt"), 5000),
             best(target.read_text, 5000), "Path.read_text")
    print(f"(python {sys.version.split()[0]}, {os.cpu_count()} cpu)")


if __name__ == "__main__":
    main()

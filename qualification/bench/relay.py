"""The bridge as a relay: a streamed final answer through ``serve --bridge`` vs straight
from the fake provider.

The fake streams ``{"type":"final","text":"..."}`` 8 characters per SSE event:
500 events carry text. *Direct*, a client reads that stream from the fake;
*through the bridge*, a client sends a session message to ``serve --bridge``
(local model = the same fake) and reads its NDJSON ``text`` chunks. Both
clients are httpx in this process and stamp each chunk when the read that
completed it returns. Paced (2 ms between events): time to the first chunk
that carries text, and the p50 / p99 of the gaps between chunks. Unpaced: the
time to the last text chunk. Repetitions alternate direct and bridge; each
bridge turn is a fresh session.
"""

from __future__ import annotations

import itertools
import json
import time
from typing import Any

import httpx

from labfy_ref.bridge.ndjson import NdjsonDecoder
from labfy_ref.model.sse import SSEDecoder
from qualification.bench.procs import FAKE_MODEL, Fake, Served
from qualification.bench.table import Row, at_most, median, percentile

SECTION = "relay"
CHUNKS = 500
CHUNK_CHARS = 8
PACE = 0.002
_PREFIX = '{"type":"final","text":"'
_TEXT = "".join(f"w{i:06d} " for i in range(CHUNKS))  # 8 characters per chunk, all distinct
assert len(_TEXT) == CHUNKS * CHUNK_CHARS


def _answer(pace: float) -> dict[str, Any]:
    return {"content": _PREFIX + _TEXT + '"}', "chunk_chars": CHUNK_CHARS, "chunk_delay": pace}


def _direct(http: httpx.Client, url: str) -> tuple[float, list[float]]:
    """(start, arrival time of each event carrying text) reading the fake's SSE directly."""
    body = {"model": FAKE_MODEL, "stream": True,
            "messages": [{"role": "user", "content": "Say it."}]}
    decoder, seen, stamps = SSEDecoder(), 0, []
    start = time.perf_counter()
    with http.stream("POST", url, json=body) as reply:
        for data in reply.iter_raw():
            now = time.perf_counter()
            for event in decoder.feed(data):
                if event == "[DONE]":
                    continue
                delta = json.loads(event)["choices"][0]["delta"].get("content") or ""
                if delta and len(_PREFIX) <= seen < len(_PREFIX) + len(_TEXT):
                    stamps.append(now)
                seen += len(delta)
    if seen != len(_PREFIX) + len(_TEXT) + 2:
        raise RuntimeError(f"direct stream carried {seen} characters")
    return start, stamps


def _bridged(server: Served) -> tuple[float, list[float]]:
    """(start, arrival time of each ``text`` chunk) reading a bridge turn's NDJSON."""
    api = server.api
    created = api.post("/api/cordis/sessions", {"permission_mode": "read-only"})
    session = created.json()["session"]["id"]
    decoder, stamps, text, last = NdjsonDecoder(), [], [], None
    start = time.perf_counter()
    with api.http.stream("POST", f"/api/cordis/sessions/{session}/messages",
                         json={"text": "Say it."}, headers=api.headers(True)) as reply:
        if reply.status_code != 200:
            raise RuntimeError(f"bridge turn answered {reply.status_code}: {reply.read()!r}")
        for data in reply.iter_raw():
            now = time.perf_counter()
            for chunk in decoder.feed(data):
                last = chunk
                if chunk["type"] == "text":
                    stamps.append(now)
                    text.append(chunk["text"])
    if "".join(text) != _TEXT or last is None or last.get("reason") != "completed":
        raise RuntimeError(f"bridge turn relayed {len(''.join(text))} characters, "
                           f"ended {last}")
    return start, stamps


def _gaps(stamps: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(stamps)]


def run(fake: Fake, server: Served, *, quick: bool) -> list[Row]:
    """Paced relay rows (first chunk, p50, p99) and the unpaced burst row."""
    reps = 3 if quick else 5
    url = fake.url + "/v1/chat/completions"
    paced: dict[str, list[tuple[float, float, float]]] = {"direct": [], "bridge": []}
    burst: dict[str, list[float]] = {"direct": [], "bridge": []}
    with httpx.Client(trust_env=False, timeout=120) as http:
        for rep in range(reps + 1):  # the first is a warm-up
            for pace in (PACE, 0.0):
                for side in ("direct", "bridge"):
                    fake.script([_answer(pace)], repeat_last=True)
                    start, stamps = _direct(http, url) if side == "direct" else _bridged(server)
                    if len(stamps) != CHUNKS:
                        raise RuntimeError(f"{side}: {len(stamps)} text chunks, not {CHUNKS}")
                    if not rep:
                        continue
                    if pace:
                        gaps = _gaps(stamps)
                        paced[side].append((stamps[0] - start, percentile(gaps, 0.5),
                                            percentile(gaps, 0.99)))
                    else:
                        burst[side].append(stamps[-1] - start)

    def paced_median(side: str, index: int) -> float:
        return median([figures[index] for figures in paced[side]]) * 1e3

    detail = {"repetitions": reps, "chunks": CHUNKS, "pace_ms": PACE * 1e3,
              "paced_ms": {side: [[round(v * 1e3, 4) for v in figures] for figures in values]
                           for side, values in paced.items()},
              "burst_ms": {side: [round(v * 1e3, 3) for v in values]
                           for side, values in burst.items()}}
    what = f"{CHUNKS} chunks {PACE * 1e3:g} ms apart"
    return [
        Row(SECTION, f"bridge relay: time to first chunk ({what}) / direct",
            paced_median("bridge", 0), paced_median("direct", 0), "ms", at_most(2),
            detail=detail),
        Row(SECTION, "bridge relay: per-chunk gap p50 / direct", paced_median("bridge", 1),
            paced_median("direct", 1), "ms", at_most(1.5)),
        Row(SECTION, "bridge relay: per-chunk gap p99 / direct", paced_median("bridge", 2),
            paced_median("direct", 2), "ms", at_most(1.5)),
        Row(SECTION, f"unpaced burst of {CHUNKS} chunks through the bridge / direct",
            median(burst["bridge"]) * 1e3, median(burst["direct"]) * 1e3, "ms", at_most(1.5)),
    ]


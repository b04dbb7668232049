"""256 concurrent NDJSON turns through ``serve --bridge``, every chunk accounted for.

Each of 256 sessions sends one message at the same time; the local model (the
fake provider) streams the same final answer to all of them, 64 text chunks.
Every stream is read whole: its ``seq`` numbers must run 1..n without a gap
or repeat, its text must be the answer exactly, and it must end with ``done``
``completed``. A chunk not received is *lost*; a stream that answered other
than 200, broke, carried an ``error`` chunk, wrong text or another ending is
an *error*. The goal is zero of each.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

from labfy_ref.bridge.ndjson import NdjsonDecoder
from qualification.bench.memory import new_session
from qualification.bench.procs import Fake, Served
from qualification.bench.table import Row, at_most

SECTION = "streams"
TEXT_CHUNKS = 64
_TEXT = "".join(f"s{i:06d} " for i in range(TEXT_CHUNKS))
_CONTENT = '{"type":"final","text":"' + _TEXT + '"}'


async def _one(http: httpx.AsyncClient, session: str, headers: dict[str, str]) -> list[Any]:
    decoder = NdjsonDecoder()
    chunks: list[Any] = []
    async with http.stream("POST", f"/api/cordis/sessions/{session}/messages",
                           json={"text": "Say it."}, headers=headers) as reply:
        if reply.status_code != 200:
            return [{"type": "http", "status": reply.status_code}]
        async for data in reply.aiter_raw():
            chunks.extend(decoder.feed(data))
    return chunks


def _account(result: list[Any] | BaseException) -> tuple[int, int, bool]:
    """(chunks received, chunks lost, error?) of one stream."""
    expected = TEXT_CHUNKS + 1  # the text, then done
    if isinstance(result, BaseException) or (result and result[0]["type"] == "http"):
        return 0, expected, True
    seqs = [chunk.get("seq") for chunk in result]
    last = result[-1] if result else {}
    if last.get("type") == "done":
        expected = max(expected, int(last["seq"]))
    lost = expected - len(set(seqs) & set(range(1, expected + 1)))
    text = "".join(chunk["text"] for chunk in result if chunk["type"] == "text")
    error = (seqs != list(range(1, len(seqs) + 1)) or text != _TEXT
             or any(chunk["type"] == "error" for chunk in result)
             or last.get("reason") != "completed")
    return len(result), lost, error


async def _all(server: Served, sessions: list[str]) -> list[list[Any] | BaseException]:
    limits = httpx.Limits(max_connections=len(sessions) + 8,
                          max_keepalive_connections=len(sessions) + 8)
    async with httpx.AsyncClient(base_url=server.url, trust_env=False, timeout=300,
                                 limits=limits) as http:
        headers = server.api.headers(True)
        return await asyncio.gather(*(_one(http, session, headers) for session in sessions),
                                    return_exceptions=True)


def run(fake: Fake, server: Served, *, quick: bool) -> list[Row]:
    """The lost-chunk and error rows for 256 concurrent streams."""
    del quick  # 256 streams either way: the point is the concurrency
    streams = 256
    fake.script([{"content": _CONTENT, "chunk_chars": 8}], repeat_last=True)
    sessions = [new_session(server) for _ in range(streams)]
    start = time.perf_counter()
    results = asyncio.run(_all(server, sessions))
    elapsed = time.perf_counter() - start
    accounts = [_account(result) for result in results]
    received = sum(a[0] for a in accounts)
    lost = sum(a[1] for a in accounts)
    errors = sum(a[2] for a in accounts)
    expected = streams * (TEXT_CHUNKS + 1)
    failures = [repr(r)[:200] for r in results if isinstance(r, BaseException)][:3]
    detail = {"streams": streams, "chunks_expected": expected, "chunks_received": received,
              "seconds": round(elapsed, 3), "failures": failures}
    return [
        Row(SECTION, f"{streams} concurrent NDJSON streams: chunks lost / sent", lost,
            expected, "count", at_most(0), ratio_value=lost / expected, detail=detail),
        Row(SECTION, f"{streams} concurrent NDJSON streams: streams with an error", errors,
            streams, "count", at_most(0), ratio_value=errors / streams),
    ]

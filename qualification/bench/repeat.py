"""One request on a kept-alive connection: our servers against a stdlib server's.

``GET /api/health`` to ``serve`` and ``POST /v1/chat/completions`` (an instant,
non-streamed answer) to the fake provider are each repeated on one kept-alive
httpx connection, alternately with a ``GET`` and a ``POST`` of the same size to the plain
stdlib server (:mod:`qualification.bench.plain_server`, one write per response,
``TCP_NODELAY``). The median per request is kept. A server that writes a
response in two pieces without ``TCP_NODELAY`` shows here as ~40 ms (Nagle's
algorithm waiting for the client's delayed ACK).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx

from qualification.bench.procs import FAKE_MODEL, Fake, Served
from qualification.bench.table import Row, at_most, median

SECTION = "http"
_BODY = {"model": FAKE_MODEL, "messages": [{"role": "user", "content": "hi"}]}


def _alternate(ours: Callable[[], httpx.Response], base: Callable[[], httpx.Response],
               count: int) -> tuple[float, float]:
    """Median seconds per request of ``ours`` and ``base``, sent alternately (so a busy
    moment of the machine touches both), after 5 warm-ups each on the same connection."""
    times: tuple[list[float], list[float]] = ([], [])
    for index in range(count + 5):
        for side, send in enumerate((ours, base)):
            start = time.perf_counter()
            reply = send()
            reply.read()
            elapsed = time.perf_counter() - start
            if reply.status_code != 200:
                raise RuntimeError(f"{reply.request.url} answered {reply.status_code}")
            if index >= 5:
                times[side].append(elapsed)
    return median(times[0]), median(times[1])


def run(fake: Fake, server: Served, plain_url: str, *, quick: bool) -> list[Row]:
    """The keep-alive GET row and the fake provider's POST row."""
    count = 200 if quick else 500
    fake.script([{"content": '{"type":"final","text":"plain"}'}], repeat_last=True)
    with httpx.Client(trust_env=False, timeout=30) as plain, \
            httpx.Client(trust_env=False, timeout=30) as ours:
        health = server.url + "/api/health"
        serve_get, plain_get = _alternate(lambda: ours.get(health),
                                          lambda: plain.get(plain_url + "/"), count)
        fake_post, plain_post = _alternate(
            lambda: ours.post(fake.url + "/v1/chat/completions", json=_BODY),
            lambda: plain.post(plain_url + "/v1/chat/completions", json=_BODY), count)
    return [
        Row(SECTION, "serve: repeat GET /api/health on a kept-alive connection / stdlib server",
            serve_get * 1e3, plain_get * 1e3, "ms", at_most(2), detail={"requests": count}),
        Row(SECTION, "fake provider: one POST /v1/chat/completions / stdlib server",
            fake_post * 1e3, plain_post * 1e3, "ms", at_most(2), detail={"requests": count}),
    ]

"""HO-07, HO-06: the bridge settles in the background, each row under a deadline.

A plugin that takes its time used to delay the whole server — the runtime page too — and
one that never returned kept it from ever answering. Now the server answers at once: the
engine routes say ``CORDIS_STARTING`` and the public health shows the row ``LOADING`` until
the bridge has settled; a row still activating after ``--bridge-row-timeout`` is ``FAILED``
with the reason.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from qualification.conftest import composition_with_slow_row
from qualification.harness import LiveServer, wait_until


def _rows(http: httpx.Client) -> dict[str, str]:
    health = http.get("/api/cordis/health").json()
    return {row["id"]: row["state"] for row in health["host"]["rows"]}


@pytest.mark.req("HO-07", "HO-06")
def test_the_server_answers_at_once_while_a_slow_row_settles(specimen: Path,
                                                             tmp_path: Path) -> None:
    slow = composition_with_slow_row(tmp_path, seconds=3)
    started = time.monotonic()
    server = LiveServer(specimen, bridge=True, composition=str(slow)).start(settled=False)
    try:
        client = server.client()
        assert time.monotonic() - started < 2.5, "the server waited for the slow row"
        assert client.get("/").status_code == 200  # the runtime page
        assert client.get("/api/v1/agent-runtime/status").json()["available"] is True
        starting = client.get("/api/cordis/sessions")
        assert (starting.status_code, starting.json()["error"]["code"]) == (
            503, "CORDIS_STARTING")
        health = client.http.get("/api/cordis/health").json()
        assert health["state"] == "starting" and _rows(client.http)["slow"] == "LOADING"
        wait_until(lambda: client.http.get("/api/cordis/health").json()["state"] == "ready",
                   timeout=15)
        assert _rows(client.http)["slow"] == "ACTIVE"
        assert client.get("/api/cordis/sessions").status_code == 200
    finally:
        server.stop()


@pytest.mark.req("HO-07", "HO-02")
def test_a_row_that_never_ends_is_failed_after_its_deadline(specimen: Path,
                                                            tmp_path: Path) -> None:
    never = composition_with_slow_row(tmp_path, seconds=3600)
    server = LiveServer(specimen, bridge=True, composition=str(never),
                        bridge_row_timeout="1").start(settled=False)
    try:
        client = server.client()
        wait_until(lambda: client.http.get("/api/cordis/health").json()["state"] != "starting",
                   timeout=15)
        health = client.http.get("/api/cordis/health").json()
        [row] = [r for r in health["host"]["rows"] if r["id"] == "slow"]
        assert row["state"] == "FAILED"
        assert row["detail"] == "did not activate within 1 s (--bridge-row-timeout)"
        # the slow row is no mandatory one: the engine serves beside its failure
        assert health["state"] == "ready", health
        assert client.get("/api/cordis/sessions").status_code == 200
    finally:
        server.stop()


@pytest.mark.req("HO-07", "SV-13")
def test_a_stop_while_the_bridge_settles_is_prompt(specimen: Path, tmp_path: Path) -> None:
    never = composition_with_slow_row(tmp_path, seconds=3600)
    server = LiveServer(specimen, bridge=True, composition=str(never)).start(settled=False)
    stopping = time.monotonic()
    server.stop()
    assert time.monotonic() - stopping < 5, "the settling bridge held the stop"

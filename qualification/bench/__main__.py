"""``tox -e bench``: the runtime, the bridge and our servers side by side with their baselines.

``python -m qualification.bench [--quick] [--only SECTION,...] [--out FILE]``

Every figure is held against a baseline measured in the same run (a raw HTTP
round trip, smolagents, a stdlib server, ``sha256sum``, the same figure at a
small size, one Work worker on SQLite), and every goal is a bound on that
ratio. It prints one table — figure, ours, baseline, ratio, goal, met — and
writes ``bench.json`` (rows, goals, machine facts). A missed goal is reported,
never an exit status: the exit status is 0 unless the bench itself failed (a
crash is 1). Every server it times is started and stopped by the bench itself,
on free loopback ports.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from labfy_ref.buildinfo import build_info
from labfy_ref.report.sources import sources_sha256
from qualification.bench import (
    gguf,
    listing,
    memory,
    micro,
    relay,
    repeat,
    rounds,
    streams,
    work,
)
from qualification.bench.procs import (
    fake_provider,
    local_model_flags,
    new_workspace,
    plain_server,
    serving,
)
from qualification.bench.table import Row, render

#: The table's order: the issue's table, then the micro-benchmarks.
SECTIONS = ("rounds", "http", "relay", "memory", "sessions", "streams", "gguf", "work",
            "micro")
DEFAULT_OUT = Path("qualification-report") / "bench.json"


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    facts: dict[str, Any] = {"python": sys.version.split()[0], "platform": platform.platform(),
                             "cpus": os.cpu_count(), "build": build_info()}
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        names = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
                 if line.startswith("model name")]
        facts["cpu"] = names[0] if names else None
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        total = next((line.split()[1] for line in meminfo.read_text().splitlines()
                      if line.startswith("MemTotal:")), None)
        facts["memory_gib"] = round(int(total) / 1024 / 1024, 1) if total else None
    facts["packages"] = {}
    for name in ("smolagents", "openai", "httpx", "uvicorn", "fastapi"):
        try:
            facts["packages"][name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            facts["packages"][name] = None
    return facts


def run_sections(workdir: Path, quick: bool, only: set[str]) -> tuple[list[Row], dict[str, float]]:
    """Run the chosen sections; (rows, seconds per section)."""
    rows: list[Row] = []
    seconds: dict[str, float] = {}

    def section(name: str, fn: Callable[[], list[Row]]) -> None:
        if name not in only:
            return
        print(f"bench: {name} ...", file=sys.stderr, flush=True)
        start = time.perf_counter()
        rows.extend(fn())
        seconds[name] = round(time.perf_counter() - start, 2)

    section("micro", lambda: micro.run(quick))
    if only & {"rounds", "http", "relay", "streams"}:
        with fake_provider(workdir) as fake:
            section("rounds", lambda: rounds.run(workdir, fake, quick=quick))
            # the relay measured alone: no title call after each new session's first turn
            with serving(new_workspace(workdir, "bridge"), workdir, "bridge", "--bridge",
                         "--session-titles", "preview", *local_model_flags(fake.url)) as server:
                with plain_server(workdir) as plain_url:
                    section("http", lambda: repeat.run(fake, server, plain_url, quick=quick))
                section("relay", lambda: relay.run(fake, server, quick=quick))
                section("streams", lambda: streams.run(fake, server, quick=quick))
    section("memory", lambda: memory.run(workdir, quick=quick))
    section("sessions", lambda: listing.run(workdir, quick=quick))
    section("gguf", lambda: gguf.run(workdir, quick=quick))
    section("work", lambda: work.run(workdir, quick=quick))
    rows.sort(key=lambda row: SECTIONS.index(row.section))
    return rows, seconds


def _dump_logs(workdir: Path) -> None:
    """The tail of every server the bench started, for a crash's diagnosis."""
    for log in sorted(workdir.glob("*.log")):
        tail = log.read_text("utf-8", "replace").splitlines()[-20:]
        if tail:
            print(f"bench: --- {log.name} (last {len(tail)} lines) ---", *tail, sep="\n",
                  file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Run the bench, print the table, write the JSON; 0 even when a goal is missed."""
    parser = argparse.ArgumentParser(prog="python -m qualification.bench",
                                     description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true",
                        help="smaller sizes and fewer repetitions (under 3 minutes)")
    parser.add_argument("--only", default=",".join(SECTIONS),
                        help=f"comma-separated sections (default all: {','.join(SECTIONS)})")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the JSON report")
    args = parser.parse_args(argv)
    only = {name.strip() for name in args.only.split(",") if name.strip()}
    unknown = only - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections: {', '.join(sorted(unknown))}")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="labfy-bench-") as tmp:
        try:
            rows, seconds = run_sections(Path(tmp), args.quick, only)
        except BaseException:
            _dump_logs(Path(tmp))
            raise
    total = round(time.perf_counter() - started, 1)
    print(render(rows))
    goals = [row for row in rows if row.met is not None]
    document = {
        "schema": "labfy.bench.v1",
        "at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "quick": args.quick, "seconds": {"total": total, **seconds},
        # the status report marks the figures stale once the tested sources differ (QR-05)
        "sources_sha256": sources_sha256(),
        "machine": machine(),
        "goals": {"total": len(goals), "met": sum(bool(row.met) for row in goals),
                  "missed": [row.figure for row in goals if not row.met]},
        "rows": [row.as_json() for row in rows],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = args.out.with_name(args.out.name + ".tmp")
    tmp_out.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", "utf-8")
    tmp_out.replace(args.out)
    print(f"bench: {total} s{' (quick)' if args.quick else ''}; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``python -m fake_provider --scenario FILE --port 0 --ready-file PATH [--api-key KEY]``."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from pathlib import Path

from fake_provider.scenario import Scenario, ScenarioError
from fake_provider.server import FakeProvider
from labfy_ref.netutil import RESERVED_PORTS


def main(argv: list[str] | None = None) -> int:
    """Serve a scenario until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(prog="python -m fake_provider")
    parser.add_argument("--scenario", required=True, help="scenario JSON file")
    parser.add_argument("--host", default="127.0.0.1", choices=["127.0.0.1", "::1"])
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--ready-file", help="write {url, port, host, pid} here when ready")
    parser.add_argument("--api-key", help="as llama-server: /v1/* answers 401 without "
                        "'Authorization: Bearer KEY'; /health stays public")
    args = parser.parse_args(argv)
    if args.port in RESERVED_PORTS or not 0 <= args.port <= 65535:
        print(f"fake_provider: port {args.port} is not allowed", file=sys.stderr)
        return 2
    try:
        scenario = Scenario.load(args.scenario)
    except (OSError, ValueError, ScenarioError) as exc:
        print(f"fake_provider: bad scenario: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with FakeProvider(scenario, host=args.host, port=args.port,
                      api_key=args.api_key) as provider:
        ready = {"url": provider.base_url, "port": provider.port, "host": provider.host,
                 "pid": os.getpid()}
        if args.ready_file:
            target = Path(args.ready_file)
            tmp = target.with_name(target.name + ".tmp")
            tmp.write_text(json.dumps(ready), "utf-8")
            tmp.replace(target)
        print(provider.base_url, flush=True)
        stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())

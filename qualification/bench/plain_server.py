"""The baseline HTTP server: Python's stdlib ``http.server``, written plainly and right.

HTTP/1.1 with keep-alive; each response goes out in one write (status line,
headers and body together) on a socket with ``TCP_NODELAY``: the best a
stdlib server does, so a ratio to it says what our servers add. ``GET``
answers ``{"status": "ok"}``; ``POST`` reads its body and answers a
chat-completion-sized JSON document.

``python -m qualification.bench.plain_server --ready-file PATH``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from labfy_ref.netutil import free_port

_GET = json.dumps({"status": "ok"}).encode()
_POST = json.dumps({
    "id": "chatcmpl-0", "object": "chat.completion", "created": 0, "model": "fake-model",
    "choices": [{"index": 0, "finish_reason": "stop", "message": {
        "role": "assistant", "content": '{"type":"final","text":"plain"}'}}],
    "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}}).encode()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: a log line per request would be part of what is timed."""

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _reply(self, body: bytes) -> None:
        head = (f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode("ascii")
        self.wfile.write(head + body)

    def do_GET(self) -> None:
        self._reply(_GET)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._reply(_POST)


def main() -> int:
    """Serve on a free ``127.0.0.1`` port until SIGTERM."""
    parser = argparse.ArgumentParser(prog="python -m qualification.bench.plain_server")
    parser.add_argument("--ready-file", required=True)
    args = parser.parse_args()
    # Bound like the product binds: a loopback port, never a reserved one (netutil).
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), _Handler)
    server.daemon_threads = True
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    ready = Path(args.ready_file)
    tmp = ready.with_name(ready.name + ".tmp")
    tmp.write_text(json.dumps({"url": f"http://127.0.0.1:{server.server_address[1]}",
                               "pid": os.getpid()}), "utf-8")
    tmp.replace(ready)
    stop.wait()
    server.shutdown()
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

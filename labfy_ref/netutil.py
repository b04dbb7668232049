"""Loopback socket helpers shared by the product and its tests.

Port 8080 is llama-server's default. Nothing of ours ever listens on it, picks
it or probes it (MC-04), so a user's own llama-server is never disturbed.
"""

from __future__ import annotations

import socket

#: Ports the product never listens on, picks, defaults to or probes.
RESERVED_PORTS = frozenset({8080})
_MAX_PICKS = 16


def free_port(host: str = "127.0.0.1") -> int:
    """A currently free TCP port on ``host``, never one of :data:`RESERVED_PORTS`."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for _ in range(_MAX_PICKS):
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port: int = sock.getsockname()[1]
        if port not in RESERVED_PORTS:
            return port
    raise OSError("could not pick a free port")

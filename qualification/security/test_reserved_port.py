"""MC-04: port 8080 (llama-server's default) is never picked, defaulted to or probed."""

from __future__ import annotations

import re
import socket
from pathlib import Path
from typing import Any

import pytest

from labfy_ref import netutil
from labfy_ref.cli.main import main

REPO = Path(__file__).resolve().parents[2]
RESERVED = str(min(netutil.RESERVED_PORTS))
# Files allowed to spell the reserved port: the one constant, tests proving refusals, and
# the mutation record of the constant's module (it quotes that module's lines).
ALLOWED = {"labfy_ref/netutil.py", "qualification/unit/test_config.py",
           "qualification/mutation/modules/labfy_ref.netutil.json"}


@pytest.mark.req("MC-04")
def test_no_code_spells_the_reserved_port_outside_its_one_constant() -> None:
    pattern = re.compile(rf"(?<![0-9]){RESERVED}(?![0-9])")
    offenders = []
    for root in ("labfy_ref", "fake_provider", "qualification", "fixtures"):
        for path in (REPO / root).rglob("*"):
            if path.suffix not in {".py", ".json", ".toml", ".yaml", ".yml", ".js", ".html"}:
                continue
            relative = path.relative_to(REPO).as_posix()
            if relative in ALLOWED or path == Path(__file__):
                continue
            if pattern.search(path.read_text("utf-8", errors="replace")):
                offenders.append(relative)
    assert offenders == []


@pytest.mark.req("MC-04")
def test_a_free_port_is_one_the_kernel_picked_from_its_ephemeral_range() -> None:
    """``free_port`` never chooses a number itself: it asks the kernel for one (bind to
    port 0), which picks from its ephemeral range, never a well-known port."""
    low, high = (int(n) for n in Path("/proc/sys/net/ipv4/ip_local_port_range")
                 .read_text().split())
    picked = [netutil.free_port() for _ in range(8)]
    assert all(low <= port <= high and port != int(RESERVED) for port in picked), picked


@pytest.mark.req("MC-04")
def test_free_port_skips_the_reserved_port_even_when_the_os_offers_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    offered = [int(RESERVED), 45123]

    class OfferingSocket(socket.socket):
        def getsockname(self) -> Any:
            return ("127.0.0.1", offered.pop(0))

    monkeypatch.setattr(socket, "socket", OfferingSocket)
    assert netutil.free_port() == 45123
    assert offered == []


@pytest.mark.req("MC-04", "MC-05")
def test_without_configuration_there_is_no_default_endpoint(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-config"]) == 0
    out = capsys.readouterr().out
    assert '"endpoint": null' in out and '"mode": "demo"' in out

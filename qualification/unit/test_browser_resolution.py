"""UI-07: where the browser scenarios find their browsers and drivers, offline, in one order."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from qualification.browser import browsers
from qualification.browser.browsers import BrowserAbsent, resolve_chromium, resolve_firefox

SHARED_GECKODRIVER = browsers.SHARED_TOOLS / "geckodriver"  # before a test points it elsewhere


def _executable(path: Path, body: bytes = b"#!/bin/sh\nexit 0\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(body)
    path.chmod(0o755)
    return path


@pytest.fixture
def bare(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No browser on PATH, no Debian locations, an empty shared tools folder."""
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setattr(browsers, "SHARED_TOOLS", tmp_path / "shared-tools")
    monkeypatch.setattr(browsers, "_autoinstalled_geckodriver", lambda: None)
    real_first = browsers._first
    monkeypatch.setattr(browsers, "_first", lambda candidates: real_first(
        [c for c in candidates if not (c or "").startswith("/usr/")]))
    return tmp_path


@pytest.mark.req("UI-07")
def test_a_missing_browser_or_driver_is_absent_with_the_reason(bare: Path) -> None:
    with pytest.raises(BrowserAbsent, match="firefox absent: install firefox-esr"):
        resolve_firefox({})
    firefox = _executable(bare / "bin" / "firefox-esr")
    with pytest.raises(BrowserAbsent, match="geckodriver absent: set LABFY_GECKODRIVER"):
        resolve_firefox({})
    with pytest.raises(BrowserAbsent, match="chromium absent"):
        resolve_chromium({})
    _executable(bare / "bin" / "chromium")
    with pytest.raises(BrowserAbsent, match="chromedriver absent"):
        resolve_chromium({})
    assert resolve_firefox({"LABFY_GECKODRIVER": str(firefox)}).binary == firefox


@pytest.mark.req("UI-07")
def test_drivers_are_looked_up_ours_then_seleniums_then_path_then_shared(bare: Path) -> None:
    _executable(bare / "bin" / "firefox-esr")
    ours, seleniums = _executable(bare / "ours"), _executable(bare / "selenium")
    on_path = _executable(bare / "bin" / "geckodriver")
    environ = {"LABFY_GECKODRIVER": str(ours), "SE_GECKODRIVER": str(seleniums)}
    assert resolve_firefox(environ).driver == ours
    assert resolve_firefox({"SE_GECKODRIVER": str(seleniums)}).driver == seleniums
    assert resolve_firefox({}).driver == on_path
    assert resolve_firefox({"LABFY_FIREFOX": str(ours)}).binary == ours


@pytest.mark.req("UI-07")
def test_the_shared_geckodriver_is_used_only_with_its_recorded_sha256(bare: Path) -> None:
    _executable(bare / "bin" / "firefox-esr")
    shared = _executable(bare / "shared-tools" / "geckodriver", b"#!/bin/sh\necho tampered\n")
    with pytest.raises(BrowserAbsent, match="geckodriver absent"):
        resolve_firefox({})
    if not SHARED_GECKODRIVER.is_file():
        pytest.skip(f"no shared geckodriver at {SHARED_GECKODRIVER} to compare with")
    shutil.copyfile(SHARED_GECKODRIVER, shared)
    assert resolve_firefox({}).driver == shared


@pytest.mark.req("UI-07")
def test_selenium_manager_is_kept_offline() -> None:
    assert os.environ["SE_OFFLINE"] == "true"

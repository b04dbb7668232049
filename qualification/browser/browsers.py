"""Which real browsers this machine has, and how to start them offline (UI-07).

A browser is a binary plus its WebDriver. Each is looked up in a fixed order —
an explicit environment variable of ours, Selenium's own variable, ``PATH``,
then the places Debian and ``../shared/tools`` put them — and is *absent* (the
scenarios skip with the reason, the stage is ``NOT_RUN``) when one half is
missing. The shared geckodriver is used only when its SHA-256 is the recorded
one. ``geckodriver-autoinstaller`` asks GitHub for the latest release, so it is
tried last, and only where it is installed. Selenium Manager never runs: every
driver path is explicit and ``SE_OFFLINE`` is set.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.remote.webdriver import WebDriver

os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must never reach the network

SHARED_TOOLS = Path(__file__).resolve().parents[3] / "shared" / "tools"
GECKODRIVER_SHA256 = "908e9151e412adc4b11f3d2545d61684d98cbccf5e8fba22911161523213ac61"
BROWSERS = ("firefox", "chromium")


class BrowserAbsent(Exception):
    """This machine cannot run the browser; the message says what is missing."""


@dataclasses.dataclass(frozen=True, slots=True)
class BrowserSetup:
    """A browser binary and the WebDriver that drives it."""

    name: str
    binary: Path
    driver: Path


def _first(candidates: list[str | None]) -> Path | None:
    for candidate in candidates:
        if not candidate:
            continue
        found = shutil.which(candidate) if os.sep not in candidate else candidate
        if found and os.access(found, os.X_OK):
            return Path(found)
    return None


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _shared_geckodriver() -> str | None:
    path = SHARED_TOOLS / "geckodriver"
    if path.is_file() and _sha256(path) == GECKODRIVER_SHA256:
        return str(path)
    return None


def _autoinstalled_geckodriver() -> str | None:
    """Last resort on a machine with internet: the autoinstaller downloads the latest."""
    try:
        import geckodriver_autoinstaller  # type: ignore[import-not-found]  # noqa: PLC0415
    except ImportError:
        return None
    try:
        return str(geckodriver_autoinstaller.install())
    except Exception:  # no network: the browser is absent, with the reason below
        return None


def resolve_firefox(environ: Mapping[str, str]) -> BrowserSetup:
    """Firefox (ESR) and geckodriver, or :class:`BrowserAbsent` naming what is missing."""
    binary = _first([environ.get("LABFY_FIREFOX"), "/usr/lib/firefox-esr/firefox-esr",
                     "firefox-esr", "firefox"])
    if binary is None:
        raise BrowserAbsent("firefox absent: install firefox-esr (apt) or set LABFY_FIREFOX")
    driver = _first([environ.get("LABFY_GECKODRIVER"), environ.get("SE_GECKODRIVER"),
                     "geckodriver", _shared_geckodriver()])
    if driver is None:
        driver = _first([_autoinstalled_geckodriver()])
    if driver is None:
        raise BrowserAbsent("geckodriver absent: set LABFY_GECKODRIVER, put it on PATH, or keep "
                            f"{SHARED_TOOLS / 'geckodriver'} (sha256 {GECKODRIVER_SHA256[:12]}…)")
    return BrowserSetup("firefox", binary, driver)


def resolve_chromium(environ: Mapping[str, str]) -> BrowserSetup:
    """Chromium and chromedriver, or :class:`BrowserAbsent` naming what is missing."""
    binary = _first([environ.get("LABFY_CHROMIUM"), "chromium", "chromium-browser"])
    if binary is None:
        raise BrowserAbsent("chromium absent: install chromium (apt) or set LABFY_CHROMIUM")
    driver = _first([environ.get("LABFY_CHROMEDRIVER"), environ.get("SE_CHROMEDRIVER"),
                     "chromedriver", "/usr/lib/chromium/chromedriver"])
    if driver is None:
        raise BrowserAbsent("chromedriver absent: install chromium-driver (apt) or set "
                            "LABFY_CHROMEDRIVER")
    return BrowserSetup("chromium", binary, driver)


RESOLVERS: dict[str, Callable[[Mapping[str, str]], BrowserSetup]] = {
    "firefox": resolve_firefox, "chromium": resolve_chromium}


def start(setup: BrowserSetup, profile: Path) -> WebDriver:
    """Start the browser headless on a fresh ``profile`` directory, with WebDriver BiDi on."""
    profile.mkdir(parents=True, exist_ok=True)
    if setup.name == "firefox":
        firefox = webdriver.FirefoxOptions()
        firefox.add_argument("-headless")
        firefox.add_argument("-profile")
        firefox.add_argument(str(profile))
        firefox.binary_location = str(setup.binary)
        firefox.enable_bidi = True
        return webdriver.Firefox(options=firefox,
                                 service=webdriver.FirefoxService(str(setup.driver)))
    chromium = webdriver.ChromeOptions()
    for argument in ("--headless", "--no-sandbox", "--disable-gpu",
                     "--disable-background-networking", "--disable-component-update",
                     "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                     f"--user-data-dir={profile}"):
        chromium.add_argument(argument)
    chromium.binary_location = str(setup.binary)
    chromium.enable_bidi = True
    return webdriver.Chrome(options=chromium, service=webdriver.ChromeService(str(setup.driver)))

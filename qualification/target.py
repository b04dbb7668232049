"""A server the suite tests over HTTP only: ours in-process, or another implementation (QR-03).

:class:`~qualification.harness.LiveServer` and :class:`RemoteTarget` both offer
what a conformance test may use: the base URL and port, the admin and user
login codes, the kit provider's URL when the target answers with it, and
logged-in :class:`~qualification.harness.ApiClient` objects. Nothing else of a
target is known: not its workspace, its ready file or its process.
"""

from __future__ import annotations

import dataclasses
import time
import urllib.parse
from typing import Protocol

import httpx

from qualification.harness import ApiClient


class Served(Protocol):
    """What a test of the HTTP contracts may know of the server it tests."""

    admin_token: str
    user_token: str | None
    provider_url: str | None

    @property
    def url(self) -> str:
        """``http://HOST:PORT``, no trailing slash."""
        ...

    @property
    def port(self) -> int:
        """The TCP port of :attr:`url`."""
        ...

    def client(self, *, login: bool = True, token: str | None = None) -> ApiClient:
        """An API client, logged in as admin unless ``token`` or ``login`` say otherwise."""
        ...


class TargetError(Exception):
    """The target given on the command line cannot be tested (one line for the user)."""


def normalise_url(url: str) -> str:
    """``scheme://host:port`` of a target URL; TargetError for anything else."""
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise TargetError(f"--target-url must be http(s)://HOST:PORT, not {url[:200]!r}")
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        raise TargetError(f"--target-url names the server only (no path, query or login): "
                          f"{url[:200]!r}")
    try:
        port = parts.port
    except ValueError as exc:
        raise TargetError(f"--target-url has a bad port: {url[:200]!r}") from exc
    default = 443 if parts.scheme == "https" else 80
    return f"{parts.scheme}://{parts.netloc}" if port is not None else \
        f"{parts.scheme}://{parts.netloc}:{default}"


@dataclasses.dataclass
class RemoteTarget:
    """Another running implementation, named by ``--target-url`` and its login codes."""

    base_url: str
    admin_token: str
    user_token: str | None = None
    provider_url: str | None = None
    _clients: list[ApiClient] = dataclasses.field(default_factory=list)

    @property
    def url(self) -> str:
        """The target's base URL."""
        return self.base_url

    @property
    def port(self) -> int:
        """The target's port (normalise_url always writes one)."""
        port = urllib.parse.urlsplit(self.base_url).port
        assert port is not None
        return port

    def client(self, *, login: bool = True, token: str | None = None) -> ApiClient:
        """A client that logs out when the run ends: the target's session caps stay free."""
        client = ApiClient(self.base_url, logout_on_close=True)
        self._clients.append(client)
        if login:
            answer = client.login(token or self.admin_token)
            if answer.status_code != 200:
                raise TargetError(f"the target refused the login code: HTTP "
                                  f"{answer.status_code} {answer.text[:200]}")
        return client

    def version(self) -> dict[str, object]:
        """The target's ``GET /api/version`` (API-02); TargetError if it does not answer one."""
        try:
            answer = httpx.get(f"{self.base_url}/api/version", trust_env=False, timeout=10)
        except httpx.HTTPError as exc:
            raise TargetError(f"the target at {self.base_url} does not answer: {exc}") from exc
        try:
            body = answer.json()
        except ValueError:
            body = None
        if answer.status_code != 200 or not isinstance(body, dict) \
                or not {"name", "version"} <= set(body):
            raise TargetError(f"the target's GET /api/version answered HTTP "
                              f"{answer.status_code}, not a version document")
        return body

    def wait_for_bridge(self, timeout: float = 60.0) -> None:
        """Until the target's bridge has settled (HO-07: it settles in the background, its
        public ``GET /api/cordis/health`` says ``starting`` meanwhile); bounded."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                answer = httpx.get(f"{self.base_url}/api/cordis/health", trust_env=False,
                                   timeout=10)
                if answer.status_code != 200 or answer.json().get("state") != "starting":
                    return
            except (httpx.HTTPError, ValueError, AttributeError):
                return  # a target without the route: nothing to wait for
            time.sleep(0.1)
        raise TargetError(f"the target's bridge was still starting after {timeout:g} s")

    def status(self) -> object:
        """The target's ``GET /api/v1/agent-runtime/status`` as its admin sees it (QR-07)."""
        try:
            answer = httpx.get(f"{self.base_url}/api/v1/agent-runtime/status", trust_env=False,
                               timeout=10, headers={"Authorization": f"Bearer {self.admin_token}"})
            return answer.json() if answer.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None

    def stop(self) -> None:
        """Log every client out and close it."""
        for client in self._clients:
            client.close()
        self._clients.clear()

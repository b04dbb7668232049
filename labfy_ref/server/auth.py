"""Login codes, accounts and sessions (SV-03).

The admin logs in with the launch code printed by ``serve``; ``user``
accounts come from ``--accounts FILE``, whose tokens are stored only as
SHA-256 hashes. A login yields a server-side session with its own CSRF
secret, referenced by a random cookie with a bounded lifetime. Expired
sessions are invalid for good; logging in again issues fresh secrets.

Sessions are bounded per account and per role (AV-03): an account keeps at
most :data:`MAX_SESSIONS_PER_ACCOUNT` (a new login ends that account's oldest),
and a role at most :data:`MAX_SESSIONS_PER_ROLE` (then a login is refused
``TOO_MANY_SESSIONS``). No login ever ends another account's session, so
ordinary accounts cannot log the administrator out by logging in many times.

API clients may instead send the same codes as ``Authorization: Bearer``
(SV-08). A bearer is checked on every request and yields a request-scoped
:class:`Session` that is never stored, so bearer traffic cannot fill the
per-role caps; such a session has no id and no CSRF secret (a bearer cannot be
sent cross-site without a CORS preflight, and CORS is never enabled).
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import hashlib
import hmac
import math
import re
import secrets
import time
import tomllib
from collections.abc import Callable
from pathlib import Path

from labfy_ref.errors import ConfigRefused, ErrorCode, RuntimeRefused
from labfy_ref.modes import DEFAULT_IDLE_SECONDS, DEFAULT_MAX_SESSION_SECONDS

SESSION_COOKIE_PREFIX = "labfy_session_"

MAX_SESSIONS_PER_ACCOUNT = 16
MAX_SESSIONS_PER_ROLE = 1024
MAX_TOKEN_CHARS = 256  # the login body's bound (LoginBody), the same for a bearer
# RFC 6750 §2.1 b64token: what may follow "Bearer " (launch codes are URL-safe base64).
_B64TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*", re.ASCII)
_BEARER_PREFIX = len("bearer ")
_SHA256 = re.compile(r"[0-9a-f]{64}", re.ASCII)
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}", re.ASCII)


class Role(enum.StrEnum):
    """``admin`` (the launch code) or ``user`` (an account)."""

    ADMIN = "admin"
    USER = "user"


def new_login_code() -> str:
    """A fresh login code (SV-10): 160 random bits in lowercase base32, letters and digits
    only, so a double-click in a terminal copies it whole."""
    return base64.b32encode(secrets.token_bytes(20)).decode("ascii").lower()


def cookie_name(port: int) -> str:
    """The session cookie's name: per port, since browsers share cookies across ports of a host.

    Two servers on one machine (two workspaces) would otherwise log each other out.
    """
    return f"{SESSION_COOKIE_PREFIX}{port}"


def token_hash(token: str) -> str:
    """The SHA-256 hex digest under which an account token is stored."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def bearer_token(values: list[str]) -> str | None:
    """The token of the request's ``Authorization`` header values, or None when malformed.

    Exactly one header, the scheme ``Bearer`` (case-insensitive, RFC 7235 §2.1), one
    space, and a b64token of 1..:data:`MAX_TOKEN_CHARS` characters. Anything else (Basic,
    an empty or two-part token, non-ASCII, an oversized value, a repeated header) is
    malformed, and the caller answers it exactly as it answers a wrong token.
    """
    if len(values) != 1 or len(values[0]) > _BEARER_PREFIX + MAX_TOKEN_CHARS:
        return None
    scheme, sep, token = values[0].partition(" ")
    if not sep or scheme.lower() != "bearer" or not _B64TOKEN.fullmatch(token):
        return None
    return token


@dataclasses.dataclass(frozen=True, slots=True)
class Account:
    """A ``user`` account: a name and the hash of its token."""

    name: str
    token_sha256: str


def load_accounts(path: Path) -> tuple[Account, ...]:
    """Read ``[[account]] name = "...", token_sha256 = "..."`` entries; refuse anything else."""
    try:
        document = tomllib.loads(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigRefused(f"--accounts: unreadable ({type(exc).__name__})") from exc
    accounts = []
    for entry in document.get("account", []):
        if (not isinstance(entry, dict) or set(entry) != {"name", "token_sha256"}
                or not _NAME.fullmatch(str(entry["name"]))
                or not _SHA256.fullmatch(str(entry["token_sha256"]))):
            raise ConfigRefused("--accounts: each [[account]] needs exactly a name "
                                "([A-Za-z0-9_.-]) and a token_sha256 (64 lower-case hex)")
        accounts.append(Account(entry["name"], entry["token_sha256"]))
    if set(document) - {"account"}:
        raise ConfigRefused("--accounts: only [[account]] tables are allowed")
    return tuple(accounts)


@dataclasses.dataclass(frozen=True, slots=True)
class Session:
    """A logged-in browser or client."""

    session_id: str
    role: Role
    name: str  # "admin" for the launch code, else the account's name
    csrf_token: str
    expires_at: float  # idle expiry: moved on by each authenticated request, never past ends_at
    bearer: bool = False  # a request-scoped bearer session: no id, no CSRF secret, not stored
    ends_at: float = math.inf  # the absolute cap: login time + the maximum lifetime


class Authenticator:
    """Checks login codes and keeps sessions; secrets are compared in constant time."""

    def __init__(self, launch_code: str, accounts: tuple[Account, ...] = (), *, cookie: str,
                 idle_seconds: float = DEFAULT_IDLE_SECONDS,
                 max_seconds: float = DEFAULT_MAX_SESSION_SECONDS) -> None:
        self.cookie = cookie
        self._launch_hash = token_hash(launch_code)
        self._accounts = accounts
        self.idle_seconds = idle_seconds
        self.max_seconds = max_seconds
        # Monotonic, so wall-clock jumps change no lifetime; tests may move it.
        self.clock: Callable[[], float] = time.monotonic
        self._sessions: dict[str, Session] = {}  # insertion order is age: oldest first

    def login(self, token: str) -> Session | None:
        """A fresh session for a valid code (surrounding whitespace trimmed: a pasted code
        often brings some, SV-10), else None.

        Raises :class:`RuntimeRefused` ``TOO_MANY_SESSIONS`` when the role is full
        even after expired sessions and this account's oldest are gone.
        """
        identity = self._identify(token.strip())
        if identity is None:
            return None
        role, name = identity
        self._make_room(role, name)
        now = self.clock()
        ends_at = now + self.max_seconds
        session = Session(secrets.token_urlsafe(32), role, name, secrets.token_urlsafe(32),
                          min(now + self.idle_seconds, ends_at), ends_at=ends_at)
        self._sessions[session.session_id] = session
        return session

    def bearer(self, token: str) -> Session | None:
        """The request-scoped session of a bearer token (SV-08), or None for a wrong one.

        It is never stored: it counts against no cap (AV-03) and ends with its request.
        """
        identity = self._identify(token)
        if identity is None:
            return None
        role, name = identity
        return Session("", role, name, "", math.inf, bearer=True)

    def _identify(self, token: str) -> tuple[Role, str] | None:
        """The role and name a code stands for, or None.

        Every stored hash is compared, in constant time and without stopping at a
        match, so the time taken says nothing about which code (if any) matched.
        """
        if not 0 < len(token) <= MAX_TOKEN_CHARS:
            return None
        digest = token_hash(token)
        role, name = None, ""
        if hmac.compare_digest(digest, self._launch_hash):
            role, name = Role.ADMIN, "admin"
        for account in self._accounts:
            if hmac.compare_digest(digest, account.token_sha256):
                role, name = Role.USER, account.name
        return None if role is None else (role, name)

    def session(self, session_id: str | None) -> Session | None:
        """The live session of a cookie value, or None (expired ones are dropped). Being
        asked for is use (SV-11): its idle expiry moves on, never past its absolute end."""
        if not session_id:
            return None
        session = self._sessions.get(session_id)
        if session is None:
            return None
        now = self.clock()
        if session.expires_at <= now:
            del self._sessions[session_id]
            return None
        session = dataclasses.replace(session,
                                      expires_at=min(now + self.idle_seconds, session.ends_at))
        self._sessions[session_id] = session
        return session

    def remaining(self, session: Session) -> dict[str, float]:
        """Seconds left before ``session`` ends idle (``idle_seconds``: were nothing asked
        meanwhile) and at the latest (``ends_in``) — what the page warns by."""
        now = self.clock()
        return {"idle_seconds": round(max(0.0, session.expires_at - now), 1),
                "ends_in": round(max(0.0, session.ends_at - now), 1)}

    def logout(self, session_id: str) -> None:
        """Forget a session."""
        self._sessions.pop(session_id, None)

    def _make_room(self, role: Role, name: str) -> None:
        """Drop expired sessions, then this account's oldest beyond its cap; refuse a full role.

        Only the logging-in account's own sessions are ever evicted: evicting by
        age across accounts would let anyone with an account end everybody
        else's sessions (the admin's included) just by logging in repeatedly.
        """
        now = self.clock()
        for sid in [s for s, v in self._sessions.items() if v.expires_at <= now]:
            del self._sessions[sid]
        own = [s for s, v in self._sessions.items() if v.role is role and v.name == name]
        for sid in own[:max(0, len(own) - MAX_SESSIONS_PER_ACCOUNT + 1)]:
            del self._sessions[sid]
        if sum(1 for v in self._sessions.values() if v.role is role) >= MAX_SESSIONS_PER_ROLE:
            raise RuntimeRefused(ErrorCode.TOO_MANY_SESSIONS,
                                 f"too many {role.value} sessions: try again when one ends")

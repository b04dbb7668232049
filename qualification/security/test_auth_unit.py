"""SV-03, SV-08, AV-03: the Authenticator, the bearer header and the accounts file, in-process.

The server tests prove these through HTTP; here every bound is pinned on both
sides without a server (the mutation run of QR-04 runs these per mutant): the
token length, the per-account and per-role caps, the lifetime to the tick of
its clock, the accounts file's grammar.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import math
import re
from pathlib import Path

import pytest

from labfy_ref.errors import ConfigRefused, ErrorCode, RuntimeRefused
from labfy_ref.modes import DEFAULT_IDLE_SECONDS, DEFAULT_MAX_SESSION_SECONDS
from labfy_ref.server.auth import (
    MAX_SESSIONS_PER_ACCOUNT,
    MAX_SESSIONS_PER_ROLE,
    MAX_TOKEN_CHARS,
    Account,
    Authenticator,
    Role,
    bearer_token,
    cookie_name,
    load_accounts,
    new_login_code,
    token_hash,
)

LAUNCH = "launch-code-0123456789"


class Clock:
    """A clock the test moves by hand (the Authenticator's ``clock`` is public for this)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _auth(*names: str, lifetime: int | None = None) -> tuple[Authenticator, Clock]:
    accounts = tuple(Account(name, token_hash(f"token-{name}")) for name in names)
    kwargs = {} if lifetime is None else {"idle_seconds": lifetime, "max_seconds": lifetime}
    auth = Authenticator(LAUNCH, accounts, cookie="labfy_session_43117", **kwargs)
    clock = Clock()
    auth.clock = clock
    return auth, clock


@pytest.mark.req("SV-03", "AV-03", "SV-08")
def test_the_bounds_are_the_documented_numbers() -> None:
    assert (DEFAULT_IDLE_SECONDS, DEFAULT_MAX_SESSION_SECONDS, MAX_SESSIONS_PER_ACCOUNT,
            MAX_SESSIONS_PER_ROLE, MAX_TOKEN_CHARS) == (8 * 3600, 7 * 86400, 16, 1024, 256)
    assert cookie_name(43117) == "labfy_session_43117"
    assert token_hash("é") == hashlib.sha256("é".encode()).hexdigest()


@pytest.mark.req("SV-03")
def test_the_launch_code_is_admin_an_account_token_is_that_user() -> None:
    auth, clock = _auth("ada", "bob")
    admin = auth.login(LAUNCH)
    assert admin is not None and (admin.role, admin.name, admin.bearer) == (Role.ADMIN, "admin",
                                                                          False)
    assert admin.expires_at == clock.now + DEFAULT_IDLE_SECONDS
    bob = auth.login("token-bob")
    assert bob is not None and (bob.role, bob.name) == (Role.USER, "bob")
    assert len({admin.session_id, admin.csrf_token, bob.session_id, bob.csrf_token}) == 4
    assert auth.session(admin.session_id) == admin and auth.session(bob.session_id) == bob
    for wrong in ("", "token-eve", LAUNCH + "x", LAUNCH[:-1], token_hash(LAUNCH)):
        assert auth.login(wrong) is None and auth.bearer(wrong) is None


@pytest.mark.req("SV-03", "SV-08")
def test_a_code_of_256_characters_is_read_and_of_257_never_compared() -> None:
    for length, readable in ((MAX_TOKEN_CHARS, True), (MAX_TOKEN_CHARS + 1, False)):
        auth = Authenticator("k" * length, cookie="c")
        assert (auth.login("k" * length) is not None) is readable
        assert (auth.bearer("k" * length) is not None) is readable


@pytest.mark.req("SV-03")
def test_a_session_lives_exactly_its_lifetime_and_is_then_gone_for_good() -> None:
    auth, clock = _auth(lifetime=60)
    session = auth.login(LAUNCH)
    assert session is not None and session.expires_at == clock.now + 60
    clock.now += 59.5
    assert auth.session(session.session_id) == session
    clock.now = session.expires_at
    assert auth.session(session.session_id) is None
    clock.now -= 30  # the clock going back brings nothing back: it was dropped
    assert auth.session(session.session_id) is None
    for cookie in (None, "", "unknown"):
        assert auth.session(cookie) is None


@pytest.mark.req("SV-03")
def test_logout_ends_that_session_only() -> None:
    auth, _ = _auth("ada")
    first, second = auth.login(LAUNCH), auth.login("token-ada")
    assert first is not None and second is not None
    auth.logout(first.session_id)
    auth.logout("never-issued")
    assert auth.session(first.session_id) is None
    assert auth.session(second.session_id) == second


@pytest.mark.req("SV-08", "AV-03")
def test_a_bearer_session_is_request_scoped_and_never_stored() -> None:
    auth, _ = _auth("ada")
    session = auth.bearer("token-ada")
    assert session is not None
    assert (session.session_id, session.role, session.name, session.csrf_token,
            session.expires_at, session.bearer) == ("", Role.USER, "ada", "", math.inf, True)
    assert auth.session("") is None
    admin = auth.bearer(LAUNCH)
    assert admin is not None and (admin.role, admin.name) == (Role.ADMIN, "admin")


@pytest.mark.req("AV-03", "SV-03")
def test_an_account_keeps_its_16_newest_sessions() -> None:
    auth, _ = _auth("admin")  # a user *named* admin is not the administrator
    administrator = auth.login(LAUNCH)
    sessions = [auth.login("token-admin") for _ in range(MAX_SESSIONS_PER_ACCOUNT)]
    assert all(s is not None and auth.session(s.session_id) == s for s in sessions)
    for evicted in range(3):
        newest = auth.login("token-admin")
        assert newest is not None and auth.session(newest.session_id) == newest
        gone = sessions[evicted]
        assert gone is not None and auth.session(gone.session_id) is None
        kept = sessions[evicted + 1]
        assert kept is not None and auth.session(kept.session_id) == kept
    assert administrator is not None and auth.session(administrator.session_id) == administrator


@pytest.mark.req("AV-03", "SV-03")
def test_a_role_holds_1024_sessions_then_refuses_and_evicts_nobody() -> None:
    names = [f"u{i}" for i in range(MAX_SESSIONS_PER_ROLE // MAX_SESSIONS_PER_ACCOUNT + 1)]
    auth, clock = _auth(*names, lifetime=100)
    first = auth.login("token-u0")
    assert first is not None
    clock.now += 50
    for name in names[:-1]:
        for _ in range(MAX_SESSIONS_PER_ACCOUNT - (name == "u0")):
            assert auth.login(f"token-{name}") is not None
    with pytest.raises(RuntimeRefused) as refused:
        auth.login(f"token-{names[-1]}")
    assert refused.value.code is ErrorCode.TOO_MANY_SESSIONS
    assert auth.session(first.session_id) == first, "a refused login evicts nobody"
    admin = auth.login(LAUNCH)  # the other role has room of its own
    assert admin is not None
    clock.now = first.expires_at  # exactly expired: its place is free again
    late = auth.login(f"token-{names[-1]}")
    assert late is not None and auth.session(first.session_id) is None


@pytest.mark.req("SV-08")
@pytest.mark.parametrize(("values", "token"), [
    (["Bearer abc"], "abc"), (["bearer a.b-c_d~e+f/g=="], "a.b-c_d~e+f/g=="),
    (["BEARER x"], "x"), ([], None), (["Bearer abc", "Bearer abc"], None),
    (["Basic abc"], None), (["Bearer"], None), (["Bearer "], None), (["Bearer a b"], None),
    (["Bearer  abc"], None), (["Bearer =abc"], None), (["Bearer é"], None),
    (["Bearerabc"], None), (["Bearer\tabc"], None),
    (["Bearer " + "t" * MAX_TOKEN_CHARS], "t" * MAX_TOKEN_CHARS),
    (["Bearer " + "t" * (MAX_TOKEN_CHARS + 1)], None),
])
def test_what_a_bearer_header_must_look_like(values: list[str], token: str | None) -> None:
    assert bearer_token(values) == token


def _accounts(tmp_path: Path, text: str | bytes) -> tuple[Account, ...]:
    path = tmp_path / "accounts.toml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return load_accounts(path)


@pytest.mark.req("SV-03")
def test_an_accounts_file_holds_names_and_token_hashes(tmp_path: Path) -> None:
    digest = token_hash("t")
    name = "A-z_0.9" + "n" * 57
    assert _accounts(tmp_path, f'[[account]]\nname = "{name}"\ntoken_sha256 = "{digest}"\n'
                               f'[[account]]\nname = "b"\ntoken_sha256 = "{digest}"\n') == (
        Account(name, digest), Account("b", digest))
    assert _accounts(tmp_path, "") == ()


@pytest.mark.req("SV-03")
@pytest.mark.parametrize("entry", [
    'name = "a"', f'token_sha256 = "{"0" * 64}"',
    f'name = "a"\ntoken_sha256 = "{"0" * 64}"\nrole = "admin"',
    f'name = "{"n" * 65}"\ntoken_sha256 = "{"0" * 64}"',
    f'name = "a b"\ntoken_sha256 = "{"0" * 64}"', f'name = ""\ntoken_sha256 = "{"0" * 64}"',
    f'name = "a"\ntoken_sha256 = "{"A" * 64}"', f'name = "a"\ntoken_sha256 = "{"0" * 63}"',
    f'name = "a"\ntoken_sha256 = "{"0" * 65}"', 'name = "a"\ntoken_sha256 = 5',
])
def test_an_account_entry_is_exactly_a_name_and_a_hash(tmp_path: Path, entry: str) -> None:
    with pytest.raises(ConfigRefused, match="each \\[\\[account\\]\\] needs exactly"):
        _accounts(tmp_path, f"[[account]]\n{entry}\n")


@pytest.mark.req("SV-03")
def test_an_accounts_file_refuses_anything_else(tmp_path: Path) -> None:
    with pytest.raises(ConfigRefused, match="only \\[\\[account\\]\\] tables"):
        _accounts(tmp_path, 'admin = "x"\n')
    with pytest.raises(ConfigRefused, match="each \\[\\[account\\]\\] needs exactly"):
        _accounts(tmp_path, 'account = ["x"]\n')
    for unreadable in (b"[[account]\n", b"name = '\xff'\n"):
        with pytest.raises(ConfigRefused, match="unreadable"):
            _accounts(tmp_path, unreadable)
    with pytest.raises(ConfigRefused, match=r"unreadable \(FileNotFoundError\)"):
        load_accounts(tmp_path / "missing.toml")


@pytest.mark.req("SV-03")
def test_a_session_id_and_its_csrf_secret_each_carry_256_random_bits() -> None:
    auth, _ = _auth()
    session = auth.login(LAUNCH)
    assert session is not None
    for secret in (session.session_id, session.csrf_token):
        # token_urlsafe(32): 32 random bytes, 43 characters of unpadded URL-safe base64
        assert len(secret) == 43 and re.fullmatch(r"[A-Za-z0-9_-]{43}", secret)
        assert len(base64.urlsafe_b64decode(secret + "=")) == 32


@pytest.mark.req("AV-03", "SV-03")
def test_the_administrators_logins_never_evict_a_user_of_the_same_name() -> None:
    auth, _ = _auth("admin")
    user = auth.login("token-admin")
    assert user is not None and user.role is Role.USER
    for _ in range(MAX_SESSIONS_PER_ACCOUNT + 2):
        assert auth.login(LAUNCH) is not None
    assert auth.session(user.session_id) == user


@pytest.mark.req("SV-03", "SV-08")
def test_an_empty_code_is_never_compared_even_to_an_empty_tokens_hash() -> None:
    auth = Authenticator(LAUNCH, (Account("blank", token_hash("")),), cookie="c")
    assert auth.login("") is None and auth.bearer("") is None


@pytest.mark.req("SV-03")
def test_a_session_cannot_be_altered_after_login() -> None:
    auth, _ = _auth("ada")
    session = auth.login("token-ada")
    assert session is not None
    with pytest.raises(dataclasses.FrozenInstanceError):
        session.role = Role.ADMIN  # type: ignore[misc]
    again = auth.session(session.session_id)
    assert again is not None and again.role is Role.USER


@pytest.mark.req("AV-03")
def test_the_per_account_cap_goes_by_name() -> None:
    # Two entries of one name (the file does not forbid it) are one account for the cap;
    # the names are equal strings, not one object, as two lines of a file would give.
    one, two = "".join(["a", "da"]), "".join(["ad", "a"])
    auth = Authenticator(LAUNCH, (Account(one, token_hash("t1")), Account(two, token_hash("t2"))),
                         cookie="c")
    first = [auth.login("t1") for _ in range(MAX_SESSIONS_PER_ACCOUNT)]
    assert auth.login("t2") is not None
    assert first[0] is not None and auth.session(first[0].session_id) is None
    kept = auth.session(first[1].session_id) if first[1] is not None else None
    assert kept is not None and first[1] is not None and kept.session_id == first[1].session_id


@pytest.mark.req("SV-03")
def test_a_one_character_code_is_a_code_and_a_session_seen_late_is_expired() -> None:
    auth = Authenticator("k", cookie="c", idle_seconds=10, max_seconds=10)
    clock = Clock()
    auth.clock = clock
    session = auth.login("k")
    assert session is not None and auth.bearer("k") is not None
    clock.now = session.expires_at + 0.5  # first looked at well after its end
    assert auth.session(session.session_id) is None


@pytest.mark.req("SV-03")
def test_an_account_cannot_be_altered_once_loaded() -> None:
    account = Account("ada", token_hash("t"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        account.token_sha256 = token_hash("other")  # type: ignore[misc]


@pytest.mark.req("AV-03", "SV-03")
def test_logging_in_many_times_never_ends_another_accounts_session() -> None:
    """The per-account cap evicts the logging-in account's own oldest sessions only: another
    user's session, and the administrator's, outlive any number of logins."""
    auth, _ = _auth("ada", "bob")
    bob = auth.login("token-bob")
    administrator = auth.login(LAUNCH)
    ada = [auth.login("token-ada") for _ in range(MAX_SESSIONS_PER_ACCOUNT + 3)]
    assert bob is not None and auth.session(bob.session_id) == bob
    assert administrator is not None and auth.session(administrator.session_id) == administrator
    alive = [s for s in ada if s is not None and auth.session(s.session_id) == s]
    assert alive == ada[3:], "ada keeps her 16 newest"


@pytest.mark.req("SV-11", "SV-03")
def test_use_moves_the_idle_expiry_on_and_the_absolute_cap_ends_it_anyway() -> None:
    auth = Authenticator(LAUNCH, cookie="c", idle_seconds=100, max_seconds=250)
    clock = Clock()
    auth.clock = clock
    session = auth.login(LAUNCH)
    assert session is not None
    assert (session.expires_at, session.ends_at) == (clock.now + 100, clock.now + 250)
    for _ in range(2):  # used every 90 s: never idle long enough to end
        clock.now += 90
        used = auth.session(session.session_id)
        assert used is not None and used.expires_at == min(clock.now + 100, session.ends_at)
    assert used is not None
    assert auth.remaining(used) == {"idle_seconds": 70.0, "ends_in": 70.0}, "held at the cap"
    clock.now = session.ends_at  # the cap, however busy
    assert auth.session(session.session_id) is None
    idle = auth.login(LAUNCH)
    assert idle is not None
    clock.now += 100  # idle for exactly its timeout
    assert auth.session(idle.session_id) is None


@pytest.mark.req("SV-10", "SV-11")
@pytest.mark.parametrize("pasted", [LAUNCH, f"  {LAUNCH}\n", f"\t{LAUNCH} "])
def test_a_pasted_code_opens_a_session_idle_for_its_timeout_from_that_login(
        pasted: str) -> None:
    """A code as pasted (surrounding whitespace trimmed) logs in; the session it opens
    lives the idle timeout counted from that login, within the absolute cap."""
    auth = Authenticator(LAUNCH, cookie="c", idle_seconds=100, max_seconds=250)
    auth.clock = lambda: 7_000.0
    session = auth.login(pasted)
    assert session is not None
    assert (session.expires_at, session.ends_at) == (7_100.0, 7_250.0)
    assert auth.login(pasted + "x") is None and auth.login(" ") is None


@pytest.mark.req("SV-10")
def test_a_login_code_is_32_base32_letters_and_digits_fresh_each_time() -> None:
    codes = {new_login_code() for _ in range(50)}
    assert len(codes) == 50
    assert all(re.fullmatch("[a-z2-7]{32}", code) for code in codes)


@pytest.mark.req("SV-11")
def test_what_a_session_has_left_is_in_tenths_and_never_below_zero() -> None:
    auth = Authenticator(LAUNCH, cookie="c", idle_seconds=100.25, max_seconds=300.5)
    clock = Clock()
    clock.now = 777.0
    auth.clock = clock
    session = auth.login(LAUNCH)
    assert session is not None
    clock.now += 10.0
    assert auth.remaining(session) == {"idle_seconds": 90.2, "ends_in": 290.5}
    clock.now += 1000.0
    assert auth.remaining(session) == {"idle_seconds": 0.0, "ends_in": 0.0}

"""The dashboard's sessions: a cookie names a session only with this process's signature,
and a signed-out or idle session names none."""

from __future__ import annotations

import pytest

from mqcore.dashboard import sessions
from mqcore.dashboard.sessions import Account, Sessions
from mqcore.remoting.signing import Credentials

ACCOUNT = Account(Credentials("ak", "the-secret"), admin=False)


def test_a_cookie_names_its_account_and_holds_no_secret() -> None:
    s = Sessions()
    cookie = s.open(ACCOUNT)
    assert s.account(cookie) == ACCOUNT
    assert "the-secret" not in cookie and "ak" not in cookie.split(".")[0]
    assert "the-secret" not in repr(ACCOUNT)


@pytest.mark.parametrize(
    "forge",
    [
        lambda c: c.rsplit(".", 1)[0] + "." + "0" * 64,  # another signature
        lambda c: "x" + c,  # another session id, same signature
        lambda c: c.rsplit(".", 1)[0],  # no signature
        lambda c: "",
        lambda c: "é." + c.rsplit(".", 1)[1],
    ],
)
def test_forged_cookies_name_no_account(forge: object) -> None:
    s = Sessions()
    cookie = s.open(ACCOUNT)
    assert callable(forge)
    assert s.account(forge(cookie)) is None


def test_another_process_key_is_refused() -> None:
    """A cookie of an earlier run (another key) names no session of this one."""
    assert Sessions().account(Sessions().open(ACCOUNT)) is None


def test_sign_out_and_idle_end_a_session(monkeypatch: pytest.MonkeyPatch) -> None:
    s = Sessions()
    first, second = s.open(ACCOUNT), s.open(ACCOUNT)
    assert s.close(first) == ACCOUNT
    assert s.account(first) is None and s.close(first) is None
    assert s.in_use(ACCOUNT.credentials)
    now = sessions._clock()
    monkeypatch.setattr(sessions, "_clock", lambda: now + sessions._IDLE_S + 1)
    assert s.account(second) is None
    assert not s.in_use(ACCOUNT.credentials)

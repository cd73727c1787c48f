"""Who is signed in to the dashboard when it runs against brokers with ACL on.

Each browser that signs in gets a random session id in a cookie signed with a key of this
process (HMAC-SHA256): the account (access key and secret key) stays in the dashboard's
memory, never in the cookie, a URL or a page. The cookie is HttpOnly and SameSite=Strict, so
neither a page's script nor another site's form carries it.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time

import attrs

from mqcore.remoting.signing import Credentials

__all__ = ["COOKIE", "Account", "Sessions"]

#: The session cookie's name.
COOKIE = "mqcore_dashboard_session"
_IDLE_S = 8 * 3600  # a session unused this long is forgotten (sign in again)
_clock = time.monotonic


@attrs.frozen
class Account:
    """A signed-in ACL account: its keys (the repr shows the access key only), and whether
    the brokers let it administer."""

    credentials: Credentials
    admin: bool

    @property
    def access_key(self) -> str:
        """The account's access key (shown on the pages; the secret key never is)."""
        return self.credentials.access_key


class Sessions:
    """The signed-in browsers: session id -> :class:`Account`, and the cookie's signature."""

    def __init__(self, key: bytes | None = None) -> None:
        self._key = key or secrets.token_bytes(32)
        self._accounts: dict[str, tuple[Account, float]] = {}
        self._lock = threading.Lock()

    def _sign(self, sid: str) -> str:
        return hmac.new(self._key, sid.encode("ascii"), hashlib.sha256).hexdigest()

    def open(self, account: Account) -> str:
        """A new session for ``account``; returns the cookie's value."""
        sid = secrets.token_urlsafe(32)
        with self._lock:
            self._accounts[sid] = (account, _clock())
        return f"{sid}.{self._sign(sid)}"

    def _sid(self, cookie: str | None) -> str | None:
        if not cookie or "." not in cookie:
            return None
        sid, signature = cookie.rsplit(".", 1)
        if not sid.isascii() or not hmac.compare_digest(signature, self._sign(sid)):
            return None
        return sid

    def account(self, cookie: str | None) -> Account | None:
        """The account of the session the cookie names; None when it is missing, forged,
        signed out or idle too long."""
        sid = self._sid(cookie)
        if sid is None:
            return None
        now = _clock()
        with self._lock:
            found = self._accounts.get(sid)
            if found is None:
                return None
            if now - found[1] > _IDLE_S:
                del self._accounts[sid]
                return None
            self._accounts[sid] = (found[0], now)
            return found[0]

    def close(self, cookie: str | None) -> Account | None:
        """Sign the cookie's session out; returns its account (None: there was none)."""
        sid = self._sid(cookie)
        with self._lock:
            found = self._accounts.pop(sid, None) if sid else None
        return found[0] if found else None

    def in_use(self, credentials: Credentials) -> bool:
        """Whether a session still holds ``credentials``."""
        with self._lock:
            return any(a.credentials == credentials for a, _ in self._accounts.values())

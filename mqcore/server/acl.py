"""RocketMQ's ``plain_acl.yml``: the accounts, their permissions and the address white lists,
read from the file and read again whenever it changes.

The format is RocketMQ's (4.4 and later), so an operator's existing file works unchanged::

    globalWhiteRemoteAddresses:      # requests from these need no account at all
      - 10.10.103.*
    accounts:
      - accessKey: RocketMQ          # more than 6 characters, as its secret key
        secretKey: 12345678
        whiteRemoteAddress:          # requests from here need the access key, no signature
        admin: false                 # admin codes (create or delete topics...) need true
        defaultTopicPerm: DENY       # DENY, PUB, SUB, PUB|SUB (missing: DENY)
        defaultGroupPerm: SUB
        topicPerms: [topicA=DENY, topicB=PUB|SUB, topicC=SUB]
        groupPerms: [groupA=DENY, groupB=PUB|SUB, groupC=SUB]

Addresses are RocketMQ's patterns: one IPv4 or IPv6 address, ``*`` (any), an IPv4 address
with ``*`` or ``a-b`` in place of any of its last three numbers (``192.168.*.*``,
``10.1.1.1-100``), a list ``a,b,c``, or ``192.168.1.{1,2,3}``.

:class:`AclFile` holds the last good version of the file and reloads it when its bytes
change (checked every :data:`RELOAD_INTERVAL_S`): a new version that does not parse is
logged and the last good one stays in force. Reading a bad file at start raises
:class:`~mqcore.errors.AclConfigError`.
"""

from __future__ import annotations

import ipaddress
import re
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from mqcore.errors import AclConfigError
from mqcore.logs import get_logger
from mqcore.protocol.names import RETRY_GROUP_TOPIC_PREFIX

__all__ = [
    "ANY",
    "DENY",
    "PUB",
    "RELOAD_INTERVAL_S",
    "SETTLE_S",
    "SUB",
    "Account",
    "AclConfig",
    "AclFile",
    "AddressPattern",
    "load_acl",
    "parse_acl",
    "parse_perm",
]

log = get_logger(__name__)

# RocketMQ's Permission bits.
DENY = 1
ANY = 1 << 1
PUB = 1 << 2
SUB = 1 << 3

#: How often the file is looked at; a change is in force within this time plus
#: :data:`SETTLE_S` and one read.
RELOAD_INTERVAL_S = 0.5
#: How long a changed file must stay unchanged before it is put in force.
SETTLE_S = 0.1

_MIN_KEY_LENGTH = 7  # RocketMQ: "length should longer than 6"
_PERMS = {"DENY": DENY, "PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB}


def parse_perm(text: Any) -> int:
    """A permission's bits from its name; anything else (and None) is DENY, as in RocketMQ."""
    if text is None:
        return DENY
    return _PERMS.get(str(text).strip(), DENY)


def group_resource(group: str) -> str:
    """The resource name of a consumer group in permission tables: its retry topic."""
    return RETRY_GROUP_TOPIC_PREFIX + group


# --- addresses -----------------------------------------------------------------------------


def _expand_v6(text: str) -> str | None:
    try:
        return ipaddress.IPv6Address(text).exploded
    except ValueError:
        return None


def _is_v4(text: str) -> bool:
    try:
        ipaddress.IPv4Address(text)
    except ValueError:
        return False
    return True


_OCTET = re.compile(r"^(\*|\d{1,3}|\d{1,3}-\d{1,3})$")


@attrs.frozen
class AddressPattern:
    """One of RocketMQ's white-list address patterns (see the module docstring)."""

    text: str
    any_address: bool = False
    exact: frozenset[str] = frozenset()  # IPv4 as written, IPv6 exploded
    octets: tuple[tuple[int, int], ...] = ()  # IPv4 ranges, one per number

    @classmethod
    def parse(cls, text: Any) -> AddressPattern | None:
        """The pattern, or None for a blank one (matches nothing).

        :raises AclConfigError: not one of RocketMQ's patterns.
        """
        raw = "" if text is None else str(text).strip()
        if not raw:
            return None
        if raw in ("*", "*.*.*.*", "*:*:*:*:*:*:*:*"):
            return cls(raw, any_address=True)
        if raw.endswith("}"):
            head, brace, tail = raw.rpartition("{")
            if not brace or not head.endswith((".", ":")):
                raise AclConfigError(f"address {raw!r}: a {{}} list must end the address")
            return cls._exact(raw, [head + part.strip() for part in tail[:-1].split(",")])
        if "," in raw:
            return cls._exact(raw, [part.strip() for part in raw.split(",")])
        if "*" in raw or "-" in raw:
            parts = raw.split(".")
            if len(parts) != 4 or not all(_OCTET.match(p.strip()) for p in parts):
                raise AclConfigError(
                    f"address {raw!r}: a range is an IPv4 address with * or a-b for any of "
                    "its last three numbers (ranges of IPv6 addresses are not supported)"
                )
            octets = []
            for i, part in enumerate(p.strip() for p in parts):
                if part == "*":
                    low, high = 0, 255
                elif "-" in part:
                    a, b = part.split("-")
                    low, high = int(a), int(b)
                else:
                    low = high = int(part)
                if (i == 0 and low != high) or not 0 <= low <= high <= 255:
                    raise AclConfigError(f"address {raw!r}: {part!r} is not a valid range")
                octets.append((low, high))
            return cls(raw, octets=tuple(octets))
        return cls._exact(raw, [raw])

    @classmethod
    def _exact(cls, raw: str, addresses: list[str]) -> AddressPattern:
        out = set()
        for addr in addresses:
            if _is_v4(addr):
                out.add(addr)
                continue
            v6 = _expand_v6(addr)
            if v6 is None:
                raise AclConfigError(f"address {raw!r}: {addr!r} is not an IP address")
            out.add(v6)
        return cls(raw, exact=frozenset(out))

    def matches(self, host: str) -> bool:
        """Whether the peer address ``host`` (no port) is one this pattern names."""
        if self.any_address:
            return True
        if self.octets:
            parts = host.split(".")
            if len(parts) != 4 or not all(p.isdigit() for p in parts):
                return False
            return all(lo <= int(p) <= hi for p, (lo, hi) in zip(parts, self.octets, strict=True))
        if host in self.exact:
            return True
        if ":" in host:
            v6 = _expand_v6(host)
            return v6 is not None and v6 in self.exact
        return False


# --- the file's model ------------------------------------------------------------------------


@attrs.frozen
class Account:
    """One entry of ``accounts``. ``perms`` maps topics by name and groups by their retry
    topic (:func:`group_resource`) to their permission bits."""

    access_key: str
    secret_key: str = attrs.field(repr=False)
    white_remote_address: AddressPattern | None = None
    admin: bool = False
    default_topic_perm: int = DENY
    default_group_perm: int = DENY
    perms: Mapping[str, int] = attrs.field(factory=dict)


@attrs.frozen
class AclConfig:
    """A whole ``plain_acl.yml``: the global white list and the accounts by access key."""

    global_white: tuple[AddressPattern, ...] = ()
    accounts: Mapping[str, Account] = attrs.field(factory=dict)


def _resource_perms(entries: Any, kind: str, key: str) -> dict[str, int]:
    if entries is None:
        return {}
    if not isinstance(entries, list):
        raise AclConfigError(f"account {key!r}: {kind}Perms must be a list of NAME=PERM")
    out: dict[str, int] = {}
    for entry in entries:
        name, sep, perm = str(entry).partition("=")
        name, perm = name.strip(), perm.strip()
        if not sep or not name or "=" in perm:
            raise AclConfigError(
                f"account {key!r}: {kind}Perms entry {entry!r} is not NAME=PERM (e.g. topicA=SUB)"
            )
        if perm not in _PERMS:
            raise AclConfigError(
                f"account {key!r}: {kind}Perms entry {entry!r}: the permission must be "
                "DENY, PUB, SUB, PUB|SUB or SUB|PUB"
            )
        out[group_resource(name) if kind == "group" else name] = _PERMS[perm]
    return out


def _account(entry: Any, index: int) -> Account:
    if not isinstance(entry, dict):
        raise AclConfigError(f"accounts[{index}] is not a mapping of accessKey, secretKey...")
    key = entry.get("accessKey")
    secret = entry.get("secretKey")
    if key is None or secret is None:
        raise AclConfigError(f"accounts[{index}] needs both accessKey and secretKey")
    key, secret = str(key), str(secret)
    if len(key) < _MIN_KEY_LENGTH or len(secret) < _MIN_KEY_LENGTH:
        # The secret's length is not said: a refusal never tells anything of a secret.
        raise AclConfigError(
            f"account {key!r}: accessKey and secretKey must be longer than 6 characters"
        )
    perms = _resource_perms(entry.get("groupPerms"), "group", key)
    perms.update(_resource_perms(entry.get("topicPerms"), "topic", key))
    admin = entry.get("admin", False)
    if not isinstance(admin, bool):
        admin = str(admin).strip().lower() == "true"
    return Account(
        access_key=key,
        secret_key=secret,
        white_remote_address=AddressPattern.parse(entry.get("whiteRemoteAddress")),
        admin=admin,
        default_topic_perm=parse_perm(entry.get("defaultTopicPerm")),
        default_group_perm=parse_perm(entry.get("defaultGroupPerm")),
        perms=perms,
    )


def parse_acl(text: str | bytes, source: str = "the ACL file") -> AclConfig:
    """The :class:`AclConfig` a ``plain_acl.yml`` holds.

    :raises AclConfigError: not YAML, or not RocketMQ's format (names the entry at fault,
        never a secret key).
    """
    import yaml  # PyYAML: imported here, so a server without --acl never loads it

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}" if where is not None else ""
        # The parser's own words only: its context would quote the file (and a secret).
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise AclConfigError(f"{source} is not valid YAML{at}: {problem}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise AclConfigError(
            f"{source} must be a mapping with globalWhiteRemoteAddresses and accounts"
        )
    white = data.get("globalWhiteRemoteAddresses") or []
    if not isinstance(white, list):
        raise AclConfigError(f"{source}: globalWhiteRemoteAddresses must be a list")
    patterns = tuple(p for p in (AddressPattern.parse(w) for w in white) if p is not None)
    entries = data.get("accounts") or []
    if not isinstance(entries, list):
        raise AclConfigError(f"{source}: accounts must be a list")
    accounts: dict[str, Account] = {}
    for i, entry in enumerate(entries):
        account = _account(entry, i)
        if account.access_key in accounts:
            raise AclConfigError(f"{source}: access key {account.access_key!r} appears twice")
        accounts[account.access_key] = account
    return AclConfig(global_white=patterns, accounts=accounts)


def load_acl(path: str | Path) -> AclConfig:
    """:func:`parse_acl` of the file at ``path``.

    :raises AclConfigError: it cannot be read, or does not parse.
    """
    try:
        text = Path(path).read_bytes()
    except OSError as exc:
        raise AclConfigError(f"cannot read the ACL file {path}: {exc.strerror or exc}") from None
    return parse_acl(text, f"the ACL file {path}")


class AclFile:
    """The ACL file in force: read at construction, read again when its bytes change.

    :param path: the ``plain_acl.yml``.
    :param interval: seconds between looks at the file (None: never reload).
    :param settle: a changed file is read again after this many seconds and put in force
        only if it did not change meanwhile (a file being written is not taken half-way).
    :raises AclConfigError: the file cannot be read or does not parse now.
    """

    def __init__(
        self,
        path: str | Path,
        interval: float | None = RELOAD_INTERVAL_S,
        settle: float = SETTLE_S,
    ) -> None:
        self.path = Path(path)
        self.settle = settle
        self._bytes: bytes | None = self._read()
        #: the configuration in force
        self.config = parse_acl(self._bytes or b"", f"the ACL file {self.path}")
        #: how many times a changed file was put in force (not counting the first read)
        self.reloads = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if interval is not None:
            self._thread = threading.Thread(
                target=self._watch, args=(interval,), name="mqcore-acl-watch", daemon=True
            )
            self._thread.start()

    def _read(self) -> bytes:
        try:
            return self.path.read_bytes()
        except OSError as exc:
            raise AclConfigError(
                f"cannot read the ACL file {self.path}: {exc.strerror or exc}"
            ) from None

    def check_now(self) -> bool:
        """Read the file; put a changed, valid version in force. True when it changed it."""
        try:
            data = self._read()
        except AclConfigError as exc:
            if self._bytes is not None:
                log.warning("acl_reload_failed", path=str(self.path), error=str(exc))
                self._bytes = None  # logged once until it can be read again
            return False
        if data == self._bytes:
            return False
        if self.settle > 0:
            time.sleep(self.settle)
            try:
                again = self._read()
            except AclConfigError:
                return False  # the next look reports it
            if again != data:
                return False  # still being written: the next look takes it
        self._bytes = data
        if not data.strip():
            # An emptied file is a write in progress far more often than a wish to refuse
            # every client: RocketMQ skips an empty file too.
            log.warning(
                "acl_reload_failed",
                path=str(self.path),
                error="the file is empty; the last version stays in force",
            )
            return False
        try:
            config = parse_acl(data, f"the ACL file {self.path}")
        except AclConfigError as exc:
            log.warning("acl_reload_failed", path=str(self.path), error=str(exc))
            return False
        self.config = config
        self.reloads += 1
        log.info("acl_reloaded", path=str(self.path), accounts=len(config.accounts))
        return True

    def _watch(self, interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                self.check_now()
            except Exception as exc:  # the watcher must outlive any surprise
                log.warning("acl_reload_failed", path=str(self.path), error=repr(exc))

    def close(self) -> None:
        """Stop watching the file."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)

"""The per-request ACL check, as RocketMQ's plain access validator makes it.

For every request, before its handler runs:

1. a peer in ``globalWhiteRemoteAddresses`` is let in, whatever the request carries;
2. otherwise the request must carry ``AccessKey`` naming an account of the file;
3. a peer in that account's ``whiteRemoteAddress`` is let in without a signature;
4. otherwise ``Signature`` must be the HMAC-SHA1 of the request's fields and body under the
   account's secret key (:mod:`mqcore.remoting.signing`), compared in constant time;
5. then the request code's row of :data:`~mqcore.server.operations.PERMISSION_TABLE`: admin
   codes need ``admin: true``; every topic and group the request touches needs the
   permission (PUB or SUB), from ``topicPerms``/``groupPerms`` or the account's defaults
   (an admin account with no entries has every permission).

A refusal is answered NO_PERMISSION (16, RocketMQ 5's answer; 4.x answered SYSTEM_ERROR)
with a remark saying what was missing, in RocketMQ's words; it names the access key the
request carried, never a secret, and the request is not served.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from typing import Any

from mqcore.logs import get_logger
from mqcore.protocol.codes import ResponseCode
from mqcore.protocol.names import RETRY_GROUP_TOPIC_PREFIX
from mqcore.remoting.command import RemotingCommand
from mqcore.remoting.signing import ACCESS_KEY, SIGNATURE, request_signature
from mqcore.server.acl import ANY, DENY, PUB, SUB, Account, AclConfig
from mqcore.server.operations import PERMISSION_TABLE
from mqcore.server.permissions import ADMIN, Needs

__all__ = ["AccessDenied", "AccessValidator", "authorize", "check_perm", "host_of"]

log = get_logger(__name__)

_UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"  # left out of the content by RocketMQ's broker
_SHOWN_KEY = 64  # characters of a refused access key a remark shows


class AccessDenied(Exception):
    """A refusal and its remark (internal: answered NO_PERMISSION, never raised out)."""


def check_perm(needed: int, owned: int) -> bool:
    """RocketMQ's ``Permission.checkPermission``: DENY refuses all; ANY takes PUB or SUB."""
    if owned & DENY:
        return False
    if needed & ANY:
        return bool(owned & (PUB | SUB))
    return bool(needed & owned)


def _shown(key: str) -> str:
    return key if len(key) <= _SHOWN_KEY else key[:_SHOWN_KEY] + "..."


def host_of(remote_address: str) -> str:
    """The host of ``host:port`` (``[v6]:port`` too), as whitelists match it."""
    host = remote_address.rpartition(":")[0] if ":" in remote_address else remote_address
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def _resource(name: str) -> str:
    if name.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return f"group:{name[len(RETRY_GROUP_TOPIC_PREFIX) :]}"
    return f"topic:{name}"


def _signature_ok(req: RemotingCommand, fields: dict[str, Any], account: Account) -> bool:
    given = fields.get(SIGNATURE)
    if not isinstance(given, str):
        return False
    wanted = request_signature(fields, req.body, account.secret_key)
    if hmac.compare_digest(wanted.encode(), given.encode("utf-8", "replace")):
        return True
    if _UNIQUE_KEY_QUERY in fields:
        # RocketMQ's Java client signs this field, its broker leaves it out: take either.
        leave_out = (SIGNATURE, _UNIQUE_KEY_QUERY)
        wanted = request_signature(fields, req.body, account.secret_key, leave_out)
        return hmac.compare_digest(wanted.encode(), given.encode("utf-8", "replace"))
    return False


class AccessValidator:
    """Checks requests against the ACL in force.

    :param config: a function giving the :class:`~mqcore.server.acl.AclConfig` in force now
        (an :class:`~mqcore.server.acl.AclFile`'s, which a reload replaces).
    """

    def __init__(self, config: Callable[[], AclConfig]) -> None:
        self._config = config

    def refusal(self, req: RemotingCommand, remote_address: str) -> str | None:
        """None when ``req`` from ``remote_address`` (``host:port``) may be served, else the
        remark its refusal carries."""
        try:
            self._validate(req, remote_address)
        except AccessDenied as exc:
            log.info("acl_refused", code=req.code, peer=remote_address, reason=str(exc))
            return str(exc)
        return None

    def refuse(self, req: RemotingCommand, remote_address: str) -> RemotingCommand | None:
        """None when ``req`` may be served, else its NO_PERMISSION answer."""
        remark = self.refusal(req, remote_address)
        if remark is None:
            return None
        return RemotingCommand.response(ResponseCode.NO_PERMISSION, remark, to=req)

    def _validate(self, req: RemotingCommand, remote_address: str) -> None:
        config = self._config()
        host = host_of(remote_address)
        for pattern in config.global_white:
            if pattern.matches(host):
                return
        fields = req.ext_fields or {}
        key = fields.get(ACCESS_KEY)
        if not isinstance(key, str) or not key:
            raise AccessDenied("[ACL] No accessKey is configured: the request carries no AccessKey")
        account = config.accounts.get(key)
        if account is None:
            raise AccessDenied(f"[ACL] No acl config for {_shown(key)}")
        white = account.white_remote_address
        if white is not None and white.matches(host):
            return
        if not _signature_ok(req, fields, account):
            raise AccessDenied(f"[ACL] Check signature failed for accessKey={_shown(key)}")
        rule = PERMISSION_TABLE.get(req.code)
        if rule is None:
            return
        if rule is ADMIN:
            if not account.admin:
                raise AccessDenied(
                    f"[ACL] Need admin permission for request code={req.code}, "
                    f"but accessKey={_shown(key)} is not"
                )
            return
        assert callable(rule)
        authorize(account, rule(fields, req.body))


def authorize(account: Account, needs: Needs) -> None:
    """Check that ``account`` owns every (resource, permission) of ``needs`` (topics by name,
    groups by their retry topic), from its entries or its defaults.

    :raises AccessDenied: one is missing; the remark names it and the access key.
    """
    key = account.access_key
    for resource, needed in needs:
        owned = account.perms.get(resource)
        if owned is None:
            if account.admin and not account.perms:
                continue  # RocketMQ: an admin without entries may do anything
            is_group = resource.startswith(RETRY_GROUP_TOPIC_PREFIX)
            owned = account.default_group_perm if is_group else account.default_topic_perm
            if not check_perm(needed, owned):
                raise AccessDenied(
                    f"[ACL] No default permission for {_resource(resource)}: "
                    f"accessKey={_shown(key)} needs {_name(needed)}"
                )
        elif not check_perm(needed, owned):
            raise AccessDenied(
                f"[ACL] No permission for {_resource(resource)}: "
                f"accessKey={_shown(key)} needs {_name(needed)}"
            )


def _name(perm: int) -> str:
    return {PUB: "PUB", SUB: "SUB"}.get(perm, "PUB or SUB")

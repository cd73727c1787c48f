"""The ACL on the gRPC port (``mqcore serve --acl`` with ``--grpc-listen``), as RocketMQ 5's
proxy checks its clients.

A 5.x client signs every call with metadata, not fields of the request:
``x-mq-date-time`` (``yyyyMMddTHHmmssZ``) and ``authorization``::

    MQv2-HMAC-SHA1 Credential=<accessKey>, SignedHeaders=x-mq-date-time, Signature=<hex>

where the signature is the hex HMAC-SHA1 of the ``x-mq-date-time`` value under the account's
secret key. The check is otherwise the remoting port's (:mod:`mqcore.server.access`): the
global white list, the account's own white address (no signature needed), then the
permissions the call needs (:func:`call_needs`) against the same accounts, by
:func:`mqcore.server.access.authorize`. A call without valid credentials is answered
UNAUTHORIZED, one whose account lacks a permission FORBIDDEN; the remark names at most the
access key, never a secret, and nothing of the call is served.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from typing import Any

from mqcore.grpc.convert import GrpcStatusError
from mqcore.grpc.pb import definition
from mqcore.logs import get_logger
from mqcore.protocol.names import RETRY_GROUP_TOPIC_PREFIX
from mqcore.server.access import AccessDenied, authorize, host_of
from mqcore.server.acl import ANY, PUB, SUB, AclConfig
from mqcore.server.permissions import Needs

__all__ = ["AUTHORIZATION", "DATE_TIME", "GrpcAccess", "call_needs", "sign"]

log = get_logger(__name__)

Code = definition.Code

#: The metadata keys a signed call carries.
AUTHORIZATION = "authorization"
DATE_TIME = "x-mq-date-time"
_ALGORITHM = "MQv2-HMAC-SHA1"
_SHOWN_KEY = 64


def sign(secret_key: str, date_time: str) -> str:
    """The signature of a call: hex HMAC-SHA1 of ``date_time`` under ``secret_key``."""
    return hmac.new(secret_key.encode(), date_time.encode(), hashlib.sha1).hexdigest()


def _parse(authorization: str) -> dict[str, str]:
    """The ``Credential``/``SignedHeaders``/``Signature`` of an ``authorization`` value."""
    algorithm, _, rest = authorization.strip().partition(" ")
    if algorithm != _ALGORITHM:
        return {}
    out = {}
    for part in rest.split(","):
        name, eq, value = part.strip().partition("=")
        if eq:
            out[name.strip()] = value.strip()
    return out


def _group(name: str) -> tuple[str, int]:
    return RETRY_GROUP_TOPIC_PREFIX + name, SUB


def _topic(name: str, perm: int) -> tuple[str, int]:
    if name.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return name, SUB
    return name, perm


def call_needs(call: str, request: Any) -> Needs:
    """What a call of the messaging service needs: PUB on the topics it sends to, SUB on the
    topics it reads and on its consumer group (by its retry topic), PUB or SUB on a topic
    whose route it asks for, as RocketMQ's proxy asks of its ACL."""
    if call == "QueryRoute":
        return [_topic(request.topic.name, ANY)]
    if call == "QueryAssignment":
        return [_topic(request.topic.name, ANY), _group(request.group.name)]
    if call == "SendMessage":
        return [_topic(m.topic.name, PUB) for m in request.messages]
    if call == "EndTransaction":
        return [_topic(request.topic.name, PUB)]
    if call in ("ReceiveMessage",):
        return [_topic(request.message_queue.topic.name, SUB), _group(request.group.name)]
    if call in ("AckMessage", "ChangeInvisibleDuration", "ForwardMessageToDeadLetterQueue"):
        return [_topic(request.topic.name, SUB), _group(request.group.name)]
    if call == "Heartbeat" and request.HasField("group"):
        return [_group(request.group.name)]
    if call == "Settings":
        which = request.WhichOneof("pub_sub")
        if which == "publishing":
            return [_topic(t.name, PUB) for t in request.publishing.topics]
        if which == "subscription":
            sub = request.subscription
            return [_group(sub.group.name)] + [_topic(e.topic.name, SUB) for e in sub.subscriptions]
    return []


def _shown(key: str) -> str:
    return key if len(key) <= _SHOWN_KEY else key[:_SHOWN_KEY] + "..."


class GrpcAccess:
    """Checks gRPC calls against the ACL in force.

    :param config: a function giving the :class:`~mqcore.server.acl.AclConfig` in force now.
    """

    def __init__(self, config: Callable[[], AclConfig]) -> None:
        self._config = config

    def check(self, call: str, request: Any, metadata: Any, peer: str) -> None:
        """Let the call through, or refuse it.

        :param request: the call's request message (None: only the signature is checked).
        :param metadata: the call's (key, value) metadata.
        :param peer: the caller's ``host:port``.
        :raises GrpcStatusError: UNAUTHORIZED (no or bad credentials) or FORBIDDEN (a
            permission missing)."""
        needs = call_needs(call, request) if request is not None else []
        try:
            self._check(metadata, peer, needs)
        except GrpcStatusError as exc:
            log.info("grpc_acl_refused", call=call, peer=peer, reason=str(exc))
            raise

    def _check(self, metadata: Any, peer: str, needs: Needs) -> None:
        config = self._config()
        host = host_of(peer)
        if any(pattern.matches(host) for pattern in config.global_white):
            return
        headers = {str(k).lower(): str(v) for k, v in metadata or ()}
        fields = _parse(headers.get(AUTHORIZATION, ""))
        key = fields.get("Credential", "").split("/")[0]
        if not key:
            raise GrpcStatusError(
                Code.UNAUTHORIZED, "[ACL] the call carries no MQv2-HMAC-SHA1 authorization"
            )
        account = config.accounts.get(key)
        if account is None:
            raise GrpcStatusError(Code.UNAUTHORIZED, f"[ACL] No acl config for {_shown(key)}")
        white = account.white_remote_address
        if white is None or not white.matches(host):
            date_time = headers.get(DATE_TIME, "")
            wanted = sign(account.secret_key, date_time)
            given = fields.get("Signature", "").lower()
            if not date_time or not hmac.compare_digest(
                wanted.encode(), given.encode("utf-8", "replace")
            ):
                raise GrpcStatusError(
                    Code.UNAUTHORIZED, f"[ACL] Check signature failed for accessKey={_shown(key)}"
                )
        try:
            authorize(account, needs)
        except AccessDenied as exc:
            raise GrpcStatusError(Code.FORBIDDEN, str(exc)) from None

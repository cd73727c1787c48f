"""RocketMQ's request signature (its plain ACL): what a client signs and how.

A client with credentials adds ``AccessKey`` (and ``SecurityToken`` when it has one) to a
request's extFields, then ``Signature``: the base64 of the HMAC-SHA1, keyed with the secret
key, of every extFields value but the signature itself, in the order of their names, followed
by the body (RocketMQ's ``AclClientRPCHook`` and ``AclUtils.combineRequestContent``). The
server computes the same over what it received (:mod:`mqcore.server.access`), so any change
to a field or to the body after signing makes the signature fail.

The secret key never leaves this process: it is not in any field, log event or repr.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from typing import Any

import attrs

from mqcore.errors import InvalidArgumentError

__all__ = [
    "ACCESS_KEY",
    "SECURITY_TOKEN",
    "SIGNATURE",
    "Credentials",
    "credentials_from",
    "request_signature",
    "sign",
    "signature_of",
    "signed_content",
]

ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"


def _hidden(value: str) -> str:
    return "***"


@attrs.frozen
class Credentials:
    """An ACL account's keys, as a client signs with them (RocketMQ's ``SessionCredentials``).

    The repr shows the access key only.
    """

    access_key: str
    secret_key: str = attrs.field(repr=_hidden)
    security_token: str | None = attrs.field(default=None, repr=False)


def credentials_from(value: Any) -> Credentials | None:
    """``credentials=`` as a client takes it: None, a :class:`Credentials`, or a pair
    ``(access_key, secret_key)``.

    :raises InvalidArgumentError: anything else, or an empty key (the message never holds
        the secret).
    """
    if value is None or isinstance(value, Credentials):
        creds = value
    elif isinstance(value, (tuple, list)) and len(value) == 2:
        creds = Credentials(str(value[0]), str(value[1]))
    else:
        raise InvalidArgumentError(
            "credentials must be (access_key, secret_key) or a Credentials, "
            f"got a {type(value).__name__}"
        )
    if creds is not None and (not creds.access_key or not creds.secret_key):
        raise InvalidArgumentError(
            "credentials need a non-empty access key and secret key "
            f"(access key {creds.access_key!r})"
        )
    return creds


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):  # as Java prints it
        return "true" if value else "false"
    return str(value)


def _fields_text(fields: Mapping[str, Any], leave_out: tuple[str, ...]) -> bytes:
    text = "".join(_text(fields[k]) for k in sorted(fields) if k not in leave_out)
    return text.encode("utf-8", "surrogatepass")


def signed_content(
    ext_fields: Mapping[str, Any] | None,
    body: bytes | bytearray | memoryview | None,
    leave_out: tuple[str, ...] = (SIGNATURE,),
) -> bytes:
    """The bytes a signature covers: the values of ``ext_fields`` in the order of their
    names, but those of ``leave_out``, as UTF-8, then the body."""
    head = _fields_text(ext_fields or {}, leave_out)
    return head + bytes(body) if body else head


def signature_of(content: bytes, secret_key: str) -> str:
    """Base64 of the HMAC-SHA1 of ``content`` keyed with ``secret_key`` (RocketMQ's
    ``AclSigner.calSignature``)."""
    mac = hmac.new(secret_key.encode("utf-8"), content, hashlib.sha1).digest()
    return base64.b64encode(mac).decode("ascii")


def request_signature(
    ext_fields: Mapping[str, Any] | None,
    body: bytes | bytearray | memoryview | None,
    secret_key: str,
    leave_out: tuple[str, ...] = (SIGNATURE,),
) -> str:
    """``signature_of(signed_content(...))`` without copying the body into the content."""
    mac = hmac.new(secret_key.encode("utf-8"), _fields_text(ext_fields or {}, leave_out),
                   hashlib.sha1)  # fmt: skip
    if body:
        mac.update(body)
    return base64.b64encode(mac.digest()).decode("ascii")


def sign(cmd: Any, credentials: Credentials) -> None:
    """Add ``AccessKey`` (and ``SecurityToken``) and the ``Signature`` to ``cmd``'s
    extFields (a :class:`~mqcore.remoting.command.RemotingCommand`); signing twice gives
    the same fields."""
    fields = dict(cmd.ext_fields or {})
    fields[ACCESS_KEY] = credentials.access_key
    if credentials.security_token is not None:
        fields[SECURITY_TOKEN] = credentials.security_token
    fields.pop(SIGNATURE, None)
    fields[SIGNATURE] = request_signature(fields, cmd.body, credentials.secret_key)
    cmd.ext_fields = fields

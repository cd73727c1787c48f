"""RocketMQ's request signature: HMAC-SHA1 of the sorted extFields values and the body."""

from __future__ import annotations

import pytest

from mqcore.errors import InvalidArgumentError
from mqcore.remoting.command import RemotingCommand
from mqcore.remoting.signing import (
    Credentials,
    credentials_from,
    request_signature,
    sign,
    signature_of,
    signed_content,
)


def test_signature_is_base64_of_hmac_sha1() -> None:
    """RFC 2202's HMAC-SHA1 test case 2, base64 as RocketMQ's AclSigner writes it."""
    assert signature_of(b"what do ya want for nothing?", "Jefe") == "7/zfauXrL6LSdBbV8YTfnCWafHk="


def test_content_is_values_sorted_by_name_then_body() -> None:
    fields = {"topic": "T", "AccessKey": "ak", "b": "2", "Signature": "left out", "a": 1}
    # Names sort as Java's TreeMap sorts them: upper case before lower case.
    assert signed_content(fields, b"BODY") == b"ak12TBODY"
    assert signed_content(fields, None) == b"ak12T"
    assert signed_content(None, b"x") == b"x"


def test_sign_adds_access_key_and_signature_and_is_idempotent() -> None:
    creds = Credentials("RocketMQ", "12345678")
    cmd = RemotingCommand.request(10, None, b"hello")
    cmd.ext_fields = {"topic": "T", "queueId": "1"}
    sign(cmd, creds)
    assert cmd.ext_fields is not None
    first = dict(cmd.ext_fields)
    assert first["AccessKey"] == "RocketMQ"
    assert first["Signature"] == signature_of(b"RocketMQ1T" + b"hello", "12345678")
    sign(cmd, creds)
    assert cmd.ext_fields == first


def test_credentials_never_show_the_secret() -> None:
    creds = credentials_from(("RocketMQ", "s3cr3t-value"))
    assert creds == Credentials("RocketMQ", "s3cr3t-value")
    assert "s3cr3t" not in repr(creds)
    assert credentials_from(None) is None
    with pytest.raises(InvalidArgumentError, match="non-empty") as exc:
        credentials_from(("RocketMQ", ""))
    with pytest.raises(InvalidArgumentError, match="access_key, secret_key"):
        credentials_from("RocketMQ:s3cr3t-value")
    assert "s3cr3t" not in str(exc.value)


def test_request_signature_equals_the_signature_of_the_content() -> None:
    fields = {"b": "x", "a": "é", "Signature": "old", "_UNIQUE_KEY_QUERY": "true"}
    body = memoryview(b"\x00body\xff")
    for leave_out in (("Signature",), ("Signature", "_UNIQUE_KEY_QUERY")):
        assert request_signature(fields, body, "k" * 8, leave_out) == signature_of(
            signed_content(fields, body, leave_out), "k" * 8
        )
    assert request_signature(None, None, "key") == signature_of(b"", "key")

"""The per-request check alone: which resources each request code's row names, and what
an account's permissions let through (the wire and the clients: test_acl_serve.py)."""

from __future__ import annotations

import json

import pytest

from mqcore.protocol.codes import RequestCode
from mqcore.remoting.command import RemotingCommand
from mqcore.remoting.signing import Credentials, sign
from mqcore.server.access import AccessValidator
from mqcore.server.acl import parse_acl

USER = Credentials("access-user", "access-secret")
CONFIG = parse_acl(
    f"""\
accounts:
  - accessKey: {USER.access_key}
    secretKey: {USER.secret_key}
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [Orders=PUB|SUB, Reports=SUB]
    groupPerms: [billing=SUB]
"""
)
VALIDATOR = AccessValidator(lambda: CONFIG)


def _refusal(code: int, fields: dict[str, str], body: bytes | None = None) -> str | None:
    cmd = RemotingCommand(code, ext_fields=dict(fields), body=body)
    sign(cmd, USER)
    return VALIDATOR.refusal(cmd, "10.0.0.9:5555")


@pytest.mark.parametrize(
    ("code", "fields", "refused"),
    [
        (RequestCode.SEND_MESSAGE_V2, {"a": "pg", "b": "Orders"}, None),
        (RequestCode.SEND_MESSAGE_V2, {"a": "pg", "b": "Reports"}, "topic:Reports"),
        # retry and dead-letter topics count as their group, with SUB
        (RequestCode.SEND_MESSAGE, {"topic": "%RETRY%billing"}, None),
        (RequestCode.SEND_MESSAGE, {"topic": "%DLQ%billing"}, None),
        (RequestCode.SEND_MESSAGE, {"topic": "%RETRY%payroll"}, "group:payroll"),
        (RequestCode.PULL_MESSAGE, {"topic": "Reports", "consumerGroup": "billing"}, None),
        (RequestCode.PULL_MESSAGE, {"topic": "Reports", "consumerGroup": "hr"}, "group:hr"),
        (RequestCode.PULL_MESSAGE, {"topic": "%DLQ%hr", "consumerGroup": "billing"}, "group:hr"),
        (RequestCode.END_TRANSACTION, {"producerGroup": "pg", "topic": "Orders"}, None),
        (
            RequestCode.END_TRANSACTION,
            {"producerGroup": "pg", "topic": "Reports"},
            "topic:Reports",
        ),
        (RequestCode.POP_MESSAGE, {"topic": "Reports", "consumerGroup": "billing"}, None),
        (RequestCode.ACK_MESSAGE, {"topic": "Secret", "consumerGroup": "billing"}, "topic:Secret"),
        (RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "Orders"}, "Need admin permission"),
        (RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Anything"}, None),  # signature only
    ],
)
def test_rows_of_the_permission_table(
    code: int, fields: dict[str, str], refused: str | None
) -> None:
    got = _refusal(code, fields)
    if refused is None:
        assert got is None
    else:
        assert got is not None and refused in got


def test_heartbeat_and_locks_are_read_from_the_body() -> None:
    def beat(group: str, topic: str) -> bytes:
        return json.dumps({"clientID": "c", "producerDataSet": [{"groupName": "any-producer"}],
                           "consumerDataSet": [{"groupName": group, "subscriptionDataSet": [
                               {"topic": topic, "subString": "*"}]}]}).encode()  # fmt: skip

    assert _refusal(RequestCode.HEART_BEAT, {}, beat("billing", "Orders")) is None
    assert "group:hr" in (_refusal(RequestCode.HEART_BEAT, {}, beat("hr", "Orders")) or "")
    assert "topic:Secret" in (_refusal(RequestCode.HEART_BEAT, {}, beat("billing", "Secret")) or "")
    lock = {"consumerGroup": "billing", "clientId": "c",
            "mqSet": [{"topic": "Secret", "brokerName": "b", "queueId": 0}]}  # fmt: skip
    assert "topic:Secret" in (
        _refusal(RequestCode.LOCK_BATCH_MQ, {}, json.dumps(lock).encode()) or ""
    )
    lock["mqSet"] = [{"topic": "Orders", "brokerName": "b", "queueId": 0}]
    assert _refusal(RequestCode.LOCK_BATCH_MQ, {}, json.dumps(lock).encode()) is None
    acks = {"brokerName": "b", "acks": [{"c": "billing", "t": "Orders", "so": 0, "q": 0},
                                        {"c": "hr", "t": "Orders", "so": 0, "q": 0}]}  # fmt: skip
    refused = _refusal(RequestCode.BATCH_ACK_MESSAGE, {}, json.dumps(acks).encode()) or ""
    assert "group:hr" in refused
    acks["acks"] = acks["acks"][:1]
    assert _refusal(RequestCode.BATCH_ACK_MESSAGE, {}, json.dumps(acks).encode()) is None
    # A body that is not JSON names nothing: the handler refuses it on its own.
    assert _refusal(RequestCode.HEART_BEAT, {}, b"\xff not json") is None

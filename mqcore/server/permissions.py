"""What a request needs of an ACL account, by kind: the rules the permission table
(:data:`mqcore.server.operations.PERMISSION_TABLE`) is made of.

A rule reads the request's extFields (and, for a heartbeat or a queue lock, its body) and
gives the resources the request touches with the permission each needs: a topic by its name,
a consumer group by its retry topic (``%RETRY%<group>``, as RocketMQ keeps them). A retry or
dead-letter topic counts as its group, with SUB: a consumer sends back to, and reads from, its
own group's retry topic. :data:`ADMIN` marks a code only an admin account may send. A code
without a rule needs a valid signature and nothing else, as in RocketMQ.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from mqcore.protocol.names import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX

__all__ = [
    "ADMIN",
    "PUB",
    "SUB",
    "AccessRule",
    "Needs",
    "batch_ack_needs",
    "group_needs",
    "heartbeat_needs",
    "lock_needs",
    "publishes",
    "subscribes",
]

# RocketMQ's Permission bits (the same as mqcore.server.acl's).
PUB = 1 << 2
SUB = 1 << 3

#: (resource, permission bits) pairs a request needs
Needs = list[tuple[str, int]]

#: A rule: (extFields, body) -> what the request needs.
AccessRule = Callable[[Mapping[str, Any], "bytes | bytearray | memoryview | None"], Needs]


class _Admin:
    """The marker of admin-only codes (see :data:`ADMIN`)."""

    def __repr__(self) -> str:
        return "ADMIN"


#: Admin codes: only an account with ``admin: true`` may send them.
ADMIN = _Admin()


def _group(group: Any) -> tuple[str, int] | None:
    if group is None or group == "":
        return None
    return RETRY_GROUP_TOPIC_PREFIX + str(group), SUB


def _topic(topic: Any, perm: int) -> tuple[str, int] | None:
    """``topic`` with ``perm``; a retry or dead-letter topic as its group, with SUB."""
    if topic is None:
        return None
    name = str(topic)
    if name.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return name, SUB
    if name.startswith(DLQ_GROUP_TOPIC_PREFIX):
        return _group(name[len(DLQ_GROUP_TOPIC_PREFIX) :])
    return name, perm


def _kept(items: Iterable[tuple[str, int] | None]) -> Needs:
    return [item for item in items if item is not None]


def publishes(topic_field: str) -> AccessRule:
    """A send: PUB on the topic named by extField ``topic_field``."""

    def rule(fields: Mapping[str, Any], body: Any) -> Needs:
        return _kept([_topic(fields.get(topic_field), PUB)])

    return rule


def subscribes(topic_field: str | None = None, group_field: str | None = None) -> AccessRule:
    """A read: SUB on the topic and on the group the named extFields hold."""

    def rule(fields: Mapping[str, Any], body: Any) -> Needs:
        return _kept(
            [
                _topic(fields.get(topic_field), SUB) if topic_field else None,
                _group(fields.get(group_field)) if group_field else None,
            ]
        )

    return rule


def group_needs(group_field: str) -> AccessRule:
    """SUB on the group extField ``group_field`` names."""
    return subscribes(group_field=group_field)


def _json(body: Any) -> Any:
    if not body:
        return {}
    try:
        return json.loads(bytes(body))
    except ValueError:
        return {}  # the handler refuses it; nothing here to check


def heartbeat_needs(fields: Mapping[str, Any], body: Any) -> Needs:
    """A heartbeat: SUB on every consumer group in it and every topic they subscribe to
    (producer groups need nothing, as in RocketMQ)."""
    data = _json(body)
    out: Needs = []
    consumers = data.get("consumerDataSet") if isinstance(data, dict) else None
    for consumer in consumers if isinstance(consumers, list) else []:
        if not isinstance(consumer, dict):
            continue
        out += _kept([_group(consumer.get("groupName"))])
        subs = consumer.get("subscriptionDataSet")
        for sub in subs if isinstance(subs, list) else []:
            if isinstance(sub, dict):
                out += _kept([_topic(sub.get("topic"), SUB)])
    return out


def lock_needs(fields: Mapping[str, Any], body: Any) -> Needs:
    """A queue lock or unlock: SUB on the group and on every topic of its queues."""
    data = _json(body)
    if not isinstance(data, dict):
        return []
    out = _kept([_group(data.get("consumerGroup"))])
    mqs = data.get("mqSet")
    for mq in mqs if isinstance(mqs, list) else []:
        if isinstance(mq, dict):
            out += _kept([_topic(mq.get("topic"), SUB)])
    return out


def batch_ack_needs(fields: Mapping[str, Any], body: Any) -> Needs:
    """A batch of pop acks: SUB on every group and topic of its acks (short or long names)."""
    data = _json(body)
    acks = data.get("acks") if isinstance(data, dict) else None
    out: Needs = []
    for ack in acks if isinstance(acks, list) else []:
        if isinstance(ack, dict):
            group = ack.get("c", ack.get("consumerGroup"))
            topic = ack.get("t", ack.get("topic"))
            out += _kept([_group(group), _topic(topic, SUB)])
    return out

"""Transactional messages on the wire: RocketMQ's topics, properties, sys flag values and the
END_TRANSACTION (37) and CHECK_TRANSACTION_STATE (39) headers, shared by broker and clients.

A producer sends a *half* message (property ``TRAN_MSG=true`` and its group in ``PGROUP``);
the broker keeps it in :data:`HALF_TOPIC` until the producer commits or rolls it back
(END_TRANSACTION), records each outcome in :data:`OP_HALF_TOPIC`, and asks the group back
(CHECK_TRANSACTION_STATE, broker to client) about halves left undecided.
"""

from __future__ import annotations

import attrs

from mqcore.protocol.fields import CommandHeader, Kind, wire_field

__all__ = [
    "CHECK_MAX_TIME_TOPIC",
    "HALF_TOPIC",
    "OP_HALF_TOPIC",
    "PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS",
    "PROPERTY_PRODUCER_GROUP",
    "PROPERTY_TRANSACTION_CHECK_TIMES",
    "PROPERTY_TRANSACTION_ID",
    "PROPERTY_TRANSACTION_PREPARED",
    "PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET",
    "REMOVE_TAG",
    "TRANSACTION_COMMIT_TYPE",
    "TRANSACTION_NOT_TYPE",
    "TRANSACTION_PREPARED_TYPE",
    "TRANSACTION_ROLLBACK_TYPE",
    "TRANSACTION_TOPICS",
    "CheckTransactionStateRequestHeader",
    "EndTransactionRequestHeader",
    "is_transactional",
    "reset_transaction_value",
]

#: Where half messages wait (RocketMQ's ``RMQ_SYS_TRANS_HALF_TOPIC``), queue 0.
HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
#: Where each commit or rollback is recorded (``RMQ_SYS_TRANS_OP_HALF_TOPIC``): tag ``d``,
#: body the half queue offsets it removes, comma-separated.
OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
#: Where a half checked ``transaction_check_max`` times without an answer goes.
CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
#: The topics of transactions: never user data (not listed, not pulled, not sent to).
TRANSACTION_TOPICS = frozenset({HALF_TOPIC, OP_HALF_TOPIC})
#: The op message tag of a removed (committed or rolled back) half.
REMOVE_TAG = "d"

#: ``"true"`` on a half message (``MessageConst.PROPERTY_TRANSACTION_PREPARED``).
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
#: The producer group of a half message, asked back by the check.
PROPERTY_PRODUCER_GROUP = "PGROUP"
#: How often the broker has asked the producer about the half.
PROPERTY_TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
#: Seconds before a half's first check (instead of the broker's ``transaction_timeout``).
PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
#: On a half written again by a check: the half queue offset of the first copy (the one
#: the producer's send result named), which every later copy keeps.
PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
#: The transaction id (the message's ``UNIQ_KEY``), as the broker stores it on the half.
PROPERTY_TRANSACTION_ID = "__transactionId__"

# MessageSysFlag's transaction values (bits 2-3 of a record's sys flag).
TRANSACTION_NOT_TYPE = 0
TRANSACTION_PREPARED_TYPE = 0x1 << 2
TRANSACTION_COMMIT_TYPE = 0x2 << 2
TRANSACTION_ROLLBACK_TYPE = 0x3 << 2


def reset_transaction_value(flag: int, value: int) -> int:
    """``flag`` with its transaction bits set to ``value`` (RocketMQ's
    ``MessageSysFlag.resetTransactionValue``)."""
    return (flag & ~TRANSACTION_ROLLBACK_TYPE) | value


def is_transactional(properties: dict[str, str] | None) -> bool:
    """Whether a sent message is a half message (``TRAN_MSG`` read as Java reads a boolean)."""
    if not properties:
        return False
    value = properties.get(PROPERTY_TRANSACTION_PREPARED)
    return value is not None and value.lower() == "true"


@attrs.frozen(kw_only=True)
class EndTransactionRequestHeader(CommandHeader):
    """END_TRANSACTION (37), producer to broker, oneway: commit, roll back or leave
    undecided (``commit_or_rollback`` one of the ``TRANSACTION_*_TYPE`` values) the half at
    ``commit_log_offset`` / ``tran_state_table_offset`` (its half queue offset)."""

    producer_group: str = wire_field("producerGroup", Kind.STRING, required=True)
    tran_state_table_offset: int = wire_field("tranStateTableOffset", Kind.LONG, required=True)
    commit_log_offset: int = wire_field("commitLogOffset", Kind.LONG, required=True)
    commit_or_rollback: int = wire_field("commitOrRollback", Kind.INT, required=True)
    from_transaction_check: bool = wire_field("fromTransactionCheck", Kind.BOOLEAN, default=False)
    msg_id: str = wire_field("msgId", Kind.STRING, required=True)
    transaction_id: str | None = wire_field("transactionId", Kind.STRING)
    topic: str | None = wire_field("topic", Kind.STRING)
    broker_name: str | None = wire_field("brokerName", Kind.STRING)


@attrs.frozen(kw_only=True)
class CheckTransactionStateRequestHeader(CommandHeader):
    """CHECK_TRANSACTION_STATE (39), broker to producer, oneway: what became of the local
    transaction of the half at ``commit_log_offset``? The body is the half as a record, with
    its real topic and queue. The producer answers with an END_TRANSACTION marked
    ``from_transaction_check``."""

    tran_state_table_offset: int = wire_field("tranStateTableOffset", Kind.LONG, required=True)
    commit_log_offset: int = wire_field("commitLogOffset", Kind.LONG, required=True)
    msg_id: str | None = wire_field("msgId", Kind.STRING)
    transaction_id: str | None = wire_field("transactionId", Kind.STRING)
    offset_msg_id: str | None = wire_field("offsetMsgId", Kind.STRING)
    topic: str | None = wire_field("topic", Kind.STRING)
    broker_name: str | None = wire_field("brokerName", Kind.STRING)

"""Transactional messages for the 5.x clients: EndTransaction, and the broker's transaction
check sent down a producer's Telemetry stream (RecoverOrphanedTransactionCommand).

As the Java proxy, the producer group of a gRPC producer's halves is the topic: a producer
that publishes to a topic is registered with the broker as a producer of that group, with a
channel that turns the check service's CHECK_TRANSACTION_STATE into a telemetry command. The
transaction id the client is given names the half (its commit-log offset and its half queue
offset), so EndTransaction needs no state of the endpoint's and works across restarts.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from mqcore.broker import Broker
from mqcore.grpc.checks import check_topic
from mqcore.grpc.consume import to_proto
from mqcore.grpc.convert import GrpcStatusError, status
from mqcore.grpc.pb import definition, service
from mqcore.logs import get_logger
from mqcore.message import MessageExt, MessageQueue
from mqcore.protocol.transaction import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    CheckTransactionStateRequestHeader,
)

__all__ = ["GrpcProducerChannel", "Transactions", "format_transaction_id", "parse_transaction_id"]

log = get_logger(__name__)

Code = definition.Code
_ID = re.compile(r"TX([0-9A-F]{1,16})-([0-9A-F]{1,16})\Z")


def format_transaction_id(commit_log_offset: int, tran_state_table_offset: int) -> str:
    """The transaction id of the half at ``commit_log_offset`` (half queue offset
    ``tran_state_table_offset``)."""
    return f"TX{commit_log_offset:X}-{tran_state_table_offset:X}"


def parse_transaction_id(text: str) -> tuple[int, int]:
    """``(commit_log_offset, tran_state_table_offset)``; INVALID_TRANSACTION_ID otherwise."""
    found = _ID.match(text or "")
    if found is None:
        raise GrpcStatusError(
            Code.INVALID_TRANSACTION_ID,
            f"transaction id {text[:80]!r} is not one this endpoint gave (TX<offset>-<offset>)",
        )
    return int(found.group(1), 16), int(found.group(2), 16)


class GrpcProducerChannel:
    """How the broker reaches a gRPC producer: its transaction checks become
    RecoverOrphanedTransactionCommands on the client's telemetry stream (``push`` is called
    on the check service's thread and must hand the command to the server's loop)."""

    def __init__(self, client_id: str, push: Callable[[str, Any], None]) -> None:
        self.client_id = client_id
        self._push = push

    def check_transaction_state(
        self, header: CheckTransactionStateRequestHeader, msg: MessageExt
    ) -> None:
        """CHECK_TRANSACTION_STATE, as a telemetry command."""
        tid = format_transaction_id(header.commit_log_offset, header.tran_state_table_offset)
        proto = to_proto(msg, definition.Resource(name=msg.topic), "", 1, 0)
        proto.system_properties.message_type = definition.MessageType.TRANSACTION
        command = service.TelemetryCommand(
            status=status(Code.OK),
            recover_orphaned_transaction_command=service.RecoverOrphanedTransactionCommand(
                message=proto, transaction_id=tid
            ),
        )
        self._push(self.client_id, command)

    def consumer_ids_changed(self, group: str) -> None:
        """A producer is no consumer: nothing to rebalance."""

    def reset_offset(self, group: str, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """A producer is no consumer: no offsets."""

    def consumer_running_info(self, group: str) -> Any:
        """A producer is no consumer: refused."""
        raise GrpcStatusError(Code.UNSUPPORTED, f"{self.client_id} is a gRPC producer")


class Transactions:
    """Answers EndTransaction for one broker."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def end(self, request: Any) -> Any:
        """Commit or roll back the half the transaction id names."""
        topic = check_topic(request.topic)
        commit_log_offset, table_offset = parse_transaction_id(request.transaction_id)
        resolution = request.resolution
        if resolution == definition.TransactionResolution.COMMIT:
            kind = TRANSACTION_COMMIT_TYPE
        elif resolution == definition.TransactionResolution.ROLLBACK:
            kind = TRANSACTION_ROLLBACK_TYPE
        else:
            kind = TRANSACTION_NOT_TYPE
        self.broker.end_transaction(
            topic,  # the proxy's producer group is the topic
            table_offset,
            commit_log_offset,
            kind,
            from_transaction_check=request.source
            == definition.TransactionSource.SOURCE_SERVER_CHECK,
            msg_id=request.message_id,
        )
        return service.EndTransactionResponse(status=status(Code.OK))

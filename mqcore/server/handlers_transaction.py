"""Remoting handler for transactional messages: END_TRANSACTION (37), a producer's commit,
rollback or "unknown" for a half message, sent oneway after its local transaction or in
answer to the broker's CHECK_TRANSACTION_STATE (39, which the broker sends over the
producer's own connection: see
:meth:`mqcore.server.processor.RemoteChannel.check_transaction_state`).
"""

from __future__ import annotations

from typing import Any

from mqcore.errors import MQError
from mqcore.logs import get_logger
from mqcore.protocol.codes import RequestCode, ResponseCode
from mqcore.remoting.command import RemotingCommand
from mqcore.server.operations import Reply, Serving, error, ok, operation

__all__ = ["end_transaction"]

log = get_logger(__name__)


@operation(RequestCode.END_TRANSACTION)
def end_transaction(processor: Serving, req: RemotingCommand, h: Any, conn: Any) -> Reply:
    """Commit or roll back the half the header names (nothing for "unknown")."""
    try:
        processor.broker.end_transaction(
            h.producer_group,
            h.tran_state_table_offset,
            h.commit_log_offset,
            h.commit_or_rollback,
            from_transaction_check=bool(h.from_transaction_check),
            msg_id=h.msg_id,
            remark=req.remark,
        )
    except MQError as exc:
        code = getattr(exc, "code", None)
        code = code if code and code > 0 else ResponseCode.SYSTEM_ERROR
        if req.is_oneway:  # no one hears the answer: the refusal is logged instead
            log.warning(
                "end_transaction_refused", group=h.producer_group, msg_id=h.msg_id,
                offset=h.tran_state_table_offset, code=code, error=str(exc),
                peer=getattr(conn, "remote_address", ""),
            )  # fmt: skip
            return None
        return error(req, code, str(exc))
    return None if req.is_oneway else ok(req)

"""Request handlers of pop consumption: POP_MESSAGE (200050), ACK_MESSAGE (200051),
CHANGE_MESSAGE_INVISIBLETIME (200053), NOTIFICATION (200054), BATCH_ACK_MESSAGE (200151).

They call the broker methods the embedded transport calls (see :mod:`mqcore.broker.pop`). A
pop that finds nothing is held (``pollTime``) on the broker's waiters as a future of the
server's event loop, as a held pull is; the pop itself runs on a worker thread.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from mqcore.broker.pop import PopResult, check_poll
from mqcore.protocol import pop as wire
from mqcore.protocol.codes import RequestCode
from mqcore.remoting.command import RemotingCommand
from mqcore.server.operations import Reply, Serving, ok, operation

__all__: list[str] = []


def _pop_reply(req: RemotingCommand, res: PopResult) -> RemotingCommand:
    header = wire.PopMessageResponseHeader(
        pop_time=res.pop_time,
        invisible_time=res.invisible_time,
        revive_qid=res.revive_qid,
        rest_num=res.rest_num,
        start_offset_info=res.start_offset_info or None,
        msg_offset_info=res.msg_offset_info or None,
        order_count_info=res.order_count_info or None,
    )
    body = b"".join(res.records) if res.records else None
    return RemotingCommand.response(int(res.code), None, header, body, to=req)


@operation(RequestCode.POP_MESSAGE)
def _pop(server: Serving, req: RemotingCommand, h: Any, conn: Any) -> Reply:
    broker = server.broker
    check_poll(h.born_time, h.poll_time)

    def once() -> PopResult:
        return broker.pop.pop(
            h.consumer_group, h.topic, h.queue_id, h.max_msg_nums, h.invisible_time,
            expression=h.exp or "*", expression_type=h.exp_type or "TAG", order=h.order,
            init_mode=h.init_mode,
        )  # fmt: skip

    keys = broker.pop.watch_keys(h.consumer_group, h.topic, h.queue_id)
    seqs = [broker.waiters.sequence(k) for k in keys]
    res = once()
    hold_ms = min(max(h.poll_time, 0), broker.config.suspend_max_time_ms)
    if res.records or hold_ms <= 0:
        return _pop_reply(req, res)

    async def held() -> RemotingCommand:
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + hold_ms / 1000
        nonlocal seqs
        result = res
        while True:
            arrived = loop.create_future()

            def wake(fut: asyncio.Future[None] = arrived) -> None:  # the notifying thread
                loop.call_soon_threadsafe(_resolve, fut)

            parked = [
                k for k, seq in zip(keys, seqs, strict=True) if broker.waiters.park(k, seq, wake)
            ]
            try:
                if len(parked) == len(keys):
                    remaining = deadline - time.monotonic()
                    if remaining > 0:
                        try:
                            await asyncio.wait_for(asyncio.shield(arrived), remaining)
                        except asyncio.TimeoutError:
                            pass
            finally:
                for k in parked:
                    broker.waiters.unpark(k, wake)
            if broker.closed:
                return _pop_reply(req, result)
            seqs = [broker.waiters.sequence(k) for k in keys]
            result = await loop.run_in_executor(None, once)
            if result.records or time.monotonic() >= deadline:
                return _pop_reply(req, result)

    return held()


@operation(RequestCode.ACK_MESSAGE)
def _ack(server: Serving, req: RemotingCommand, h: Any, conn: Any) -> Reply:
    server.broker.ack_message(h.consumer_group, h.topic, h.queue_id, h.extra_info, h.offset)
    return None if req.is_oneway else ok(req)


@operation(RequestCode.BATCH_ACK_MESSAGE)
def _batch_ack(server: Serving, req: RemotingCommand, h: Any, conn: Any) -> Reply:
    server.broker.batch_ack_message(wire.decode_batch_ack_body(req.body))
    return None if req.is_oneway else ok(req)


@operation(RequestCode.CHANGE_MESSAGE_INVISIBLETIME)
def _change_invisible(server: Serving, req: RemotingCommand, h: Any, conn: Any) -> Reply:
    pop_time, invisible, revive_qid = server.broker.change_invisible_time(
        h.consumer_group, h.topic, h.queue_id, h.extra_info, h.offset, h.invisible_time
    )
    header = wire.ChangeInvisibleTimeResponseHeader(
        pop_time=pop_time, invisible_time=invisible, revive_qid=revive_qid
    )
    return ok(req, header)


@operation(RequestCode.NOTIFICATION)
def _notification(server: Serving, req: RemotingCommand, h: Any, conn: Any) -> Reply:
    broker = server.broker

    async def held() -> RemotingCommand:
        loop = asyncio.get_running_loop()
        has = await loop.run_in_executor(
            None, broker.notification, h.consumer_group, h.topic, h.queue_id, h.poll_time
        )
        return ok(req, wire.NotificationResponseHeader(has_msg=has))

    if h.poll_time <= 0:
        has = broker.notification(h.consumer_group, h.topic, h.queue_id, 0)
        return ok(req, wire.NotificationResponseHeader(has_msg=has))
    return held()


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)

"""The server's one request table, and what every request handler shares.

:data:`OPERATION_TABLE` maps each request code the server answers to its handler and its
request header class (from :data:`mqcore.protocol.headers.REQUEST_HEADERS`). Handlers are
registered with :func:`operation` by the modules that define them
(:mod:`mqcore.server.processor` and the ``handlers_*`` modules beside it); a code missing
from the table is answered REQUEST_CODE_NOT_SUPPORTED. A handler takes the server's
:class:`Serving` side, the request, its typed header (or None) and the client's connection,
and returns the answer: a command, an awaitable of one (a held pull), or None (one-way).

:data:`PERMISSION_TABLE`, beside it, says what each code needs of an account when the server
checks RocketMQ's ACL (``mqcore serve --acl``, :mod:`mqcore.server.access`): a handler added
for a new code adds its row there too (a code without a row needs a valid signature only).

This module imports no handler, so the handler modules and the processor that dispatches
through the table form no import circle.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from mqcore.protocol import headers
from mqcore.protocol.codes import RequestCode, ResponseCode
from mqcore.remoting.command import RemotingCommand
from mqcore.server.permissions import (
    ADMIN,
    AccessRule,
    batch_ack_needs,
    group_needs,
    heartbeat_needs,
    lock_needs,
    publishes,
    subscribes,
)

if TYPE_CHECKING:
    from mqcore.broker.broker import Broker

__all__ = [
    "OPERATION_TABLE",
    "PERMISSION_TABLE",
    "Handler",
    "Reply",
    "Serving",
    "error",
    "ok",
    "operation",
]

#: A handler's answer: a command, an awaitable of one (a held pull), or None (one-way).
Reply = RemotingCommand | Awaitable[RemotingCommand] | None

#: A request handler: (serving side, request, typed header or None, connection) -> answer.
Handler = Callable[..., Reply]

H = TypeVar("H", bound=Handler)

#: request code -> (handler, request header class or None)
OPERATION_TABLE: dict[int, tuple[Handler, type[headers.CommandHeader] | None]] = {}

#: request code -> what it needs of an ACL account: a rule giving the topics and groups it
#: touches with PUB or SUB (see mqcore.server.permissions), or ADMIN. RocketMQ's plain ACL
#: rows, and rows for the codes it leaves to the signature alone that read a topic or a
#: group's state, or change the broker (those are ADMIN).
PERMISSION_TABLE: dict[int, AccessRule | object] = {
    # sends: PUB on the topic (a retry or dead-letter topic: SUB on its group)
    RequestCode.SEND_MESSAGE: publishes("topic"),
    RequestCode.SEND_MESSAGE_V2: publishes("b"),
    RequestCode.SEND_BATCH_MESSAGE: publishes("b"),
    RequestCode.CONSUMER_SEND_MSG_BACK: group_needs("group"),
    # a transaction's end: PUB on its topic when the producer names it (RocketMQ 5's field)
    RequestCode.END_TRANSACTION: publishes("topic"),
    # reads: SUB on the topic and the group
    RequestCode.PULL_MESSAGE: subscribes("topic", "consumerGroup"),
    RequestCode.QUERY_MESSAGE: subscribes("topic"),
    RequestCode.VIEW_MESSAGE_BY_ID: ADMIN,  # any message by its offset, whatever its topic
    RequestCode.HEART_BEAT: heartbeat_needs,
    RequestCode.UNREGISTER_CLIENT: group_needs("consumerGroup"),
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: group_needs("consumerGroup"),
    RequestCode.QUERY_CONSUMER_OFFSET: subscribes("topic", "consumerGroup"),
    RequestCode.UPDATE_CONSUMER_OFFSET: subscribes("topic", "consumerGroup"),
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: subscribes("topic"),
    RequestCode.GET_MAX_OFFSET: subscribes("topic"),
    RequestCode.GET_MIN_OFFSET: subscribes("topic"),
    RequestCode.QUERY_BROKER_OFFSET: subscribes("topic"),
    RequestCode.GET_EARLIEST_MSG_STORETIME: subscribes("topic"),
    RequestCode.LOCK_BATCH_MQ: lock_needs,
    RequestCode.UNLOCK_BATCH_MQ: lock_needs,
    RequestCode.GET_TOPIC_STATS_INFO: subscribes("topic"),
    RequestCode.GET_CONSUME_STATS: subscribes("topic", "consumerGroup"),
    RequestCode.GET_CONSUMER_CONNECTION_LIST: group_needs("consumerGroup"),
    # pop consumption (RocketMQ 5): SUB on the topic and the group, as a pull
    RequestCode.POP_MESSAGE: subscribes("topic", "consumerGroup"),
    RequestCode.ACK_MESSAGE: subscribes("topic", "consumerGroup"),
    RequestCode.CHANGE_MESSAGE_INVISIBLETIME: subscribes("topic", "consumerGroup"),
    RequestCode.NOTIFICATION: subscribes("topic", "consumerGroup"),
    RequestCode.BATCH_ACK_MESSAGE: batch_ack_needs,
    # admin: RocketMQ's five, and what else changes the broker or asks its clients
    RequestCode.UPDATE_AND_CREATE_TOPIC: ADMIN,
    RequestCode.UPDATE_BROKER_CONFIG: ADMIN,
    RequestCode.DELETE_TOPIC_IN_BROKER: ADMIN,
    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: ADMIN,
    RequestCode.DELETE_SUBSCRIPTIONGROUP: ADMIN,
    RequestCode.DELETE_TOPIC_IN_NAMESRV: ADMIN,
    RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: ADMIN,
    RequestCode.GET_CONSUMER_RUNNING_INFO: ADMIN,
    # Every topic's and group's config (21, 201) needs a signature only, as in RocketMQ:
    # consumers and the console read them to find their place.
}


class Serving(Protocol):
    """What a handler sees of the server: the broker it serves, and its address."""

    @property
    def broker(self) -> Broker:
        """The broker the requests go to."""
        ...

    @property
    def address(self) -> str:
        """The ``host:port`` clients reach the server at (routes name it)."""
        ...


def operation(*codes: RequestCode) -> Callable[[H], H]:
    """Register the decorated function as the handler of request ``codes``."""

    def mark(func: H) -> H:
        for code in codes:
            OPERATION_TABLE[int(code)] = (func, headers.REQUEST_HEADERS.get(int(code)))
        return func

    return mark


def ok(req: RemotingCommand, header: Any = None, body: Any = None) -> RemotingCommand:
    """SUCCESS answering ``req``, with an optional response header and body."""
    return RemotingCommand.response(ResponseCode.SUCCESS, None, header, body, to=req)


def error(req: RemotingCommand, code: int, remark: str) -> RemotingCommand:
    """Response ``code`` answering ``req``, with ``remark`` saying why."""
    return RemotingCommand.response(code, remark, to=req)

"""The server's one request table, and what every request handler shares.

:data:`OPERATION_TABLE` maps each request code the server answers to its handler and its
request header class (from :data:`mqcore.protocol.headers.REQUEST_HEADERS`). Handlers are
registered with :func:`operation` by the modules that define them
(:mod:`mqcore.server.processor` and the ``handlers_*`` modules beside it); a code missing
from the table is answered REQUEST_CODE_NOT_SUPPORTED. A handler takes the server's
:class:`Serving` side, the request, its typed header (or None) and the client's connection,
and returns the answer: a command, an awaitable of one (a held pull), or None (one-way).

This module imports no handler, so the handler modules and the processor that dispatches
through the table form no import circle.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from mqcore.protocol import headers
from mqcore.protocol.codes import RequestCode, ResponseCode
from mqcore.remoting.command import RemotingCommand

if TYPE_CHECKING:
    from mqcore.broker.broker import Broker

__all__ = ["OPERATION_TABLE", "Handler", "Reply", "Serving", "error", "ok", "operation"]

#: A handler's answer: a command, an awaitable of one (a held pull), or None (one-way).
Reply = RemotingCommand | Awaitable[RemotingCommand] | None

#: A request handler: (serving side, request, typed header or None, connection) -> answer.
Handler = Callable[..., Reply]

H = TypeVar("H", bound=Handler)

#: request code -> (handler, request header class or None)
OPERATION_TABLE: dict[int, tuple[Handler, type[headers.CommandHeader] | None]] = {}


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

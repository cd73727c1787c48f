"""``apache.rocketmq.v2.MessagingService`` on a broker: every call answers a Status.

The handlers run on the gRPC server's event loop; what touches the broker (stores, locks,
files) runs in a small thread pool, so a slow disk never stalls the other calls. A handler
that fails answers its response type with the failure's code (:func:`status_of`); a call the
endpoint does not serve answers NOT_IMPLEMENTED the same way. Nothing a client sends ends a
stream without a status.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import Executor
from typing import Any, Protocol, TypeVar

from mqcore.broker import Broker
from mqcore.errors import MQError
from mqcore.grpc.checks import check_group, check_topic
from mqcore.grpc.clients import ClientRegistry
from mqcore.grpc.consume import Consumer
from mqcore.grpc.convert import GrpcStatusError, status, status_of
from mqcore.grpc.pb import definition, service, service_grpc
from mqcore.grpc.route import Router
from mqcore.grpc.send import Sender, topic_message_type
from mqcore.grpc.settings import merged_settings
from mqcore.grpc.transaction import GrpcProducerChannel, Transactions
from mqcore.logs import get_logger
from mqcore.protocol.heartbeat import SubscriptionData

__all__ = ["MessagingService", "client_id_of", "peer_host"]

log = get_logger(__name__)

Code = definition.Code
ClientType = definition.ClientType
T = TypeVar("T")

#: Replies a telemetry stream may hold unsent before the oldest server command is dropped.
STREAM_BACKLOG = 64


def client_id_of(context: Any) -> str:
    """The ``x-mq-client-id`` header of a call ("" when absent)."""
    for key, value in context.invocation_metadata() or ():
        if key == "x-mq-client-id":
            return str(value)
    return ""


def peer_host(context: Any) -> str:
    """``HOST:PORT`` of the caller (gRPC's ``ipv4:h:p`` / ``ipv6:[h]:p`` peer)."""
    peer = str(context.peer() or "")
    kind, _, rest = peer.partition(":")
    if kind == "ipv6" and rest.startswith("["):
        host, _, port = rest[1:].partition("]:")
        return f"{host}:{port}"
    return rest if kind == "ipv4" else ""


def _answers(response: str) -> Callable[[Callable[..., Awaitable[Any]]], Callable[..., Any]]:
    """A unary handler that answers ``response`` with the failure's status when it fails."""
    cls = getattr(service, response)

    def wrap(fn: Callable[..., Awaitable[Any]]) -> Callable[..., Any]:
        @functools.wraps(fn)
        async def handler(self: MessagingService, request: Any, context: Any) -> Any:
            try:
                self.check_access(fn.__name__, request, context)
                return await fn(self, request, context)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if not isinstance(exc, MQError):  # a refusal is the client's; this is ours
                    log.warning("grpc_call_failed", call=fn.__name__, error=str(exc))
                return cls(status=status_of(exc))

        return handler

    return wrap


def _not_served(call: str, response: str) -> Callable[..., Any]:
    cls = getattr(service, response)

    async def handler(self: MessagingService, request: Any, context: Any) -> Any:
        return cls(status=status(Code.NOT_IMPLEMENTED, f"{call} is not served by mqcore"))

    handler.__name__ = call
    return handler


def _subscriptions(settings: Any) -> list[SubscriptionData]:
    out = []
    for entry in settings.subscription.subscriptions:
        kind = entry.expression.type
        out.append(
            SubscriptionData(
                topic=entry.topic.name,
                sub_string=entry.expression.expression or "*",
                expression_type="SQL92" if kind == definition.FilterType.SQL else "TAG",
            )
        )
    return out


class CallAccess(Protocol):
    """The ACL check of a call (the server's, :mod:`mqcore.server.grpc_access`): refuses with
    GrpcStatusError UNAUTHORIZED or FORBIDDEN."""

    def check(self, call: str, request: Any, metadata: Any, peer: str) -> None: ...


class MessagingService(service_grpc.MessagingServiceServicer):  # type: ignore[misc]
    """The servicer of one broker, served at ``address``.

    :param executor: where broker calls run.
    """

    def __init__(
        self, broker: Broker, address: str, executor: Executor, receivers: Executor | None = None
    ) -> None:
        self.broker = broker
        self.address = address
        self.executor = executor
        #: where held receives wait (they may each take a thread for the long-polling time)
        self.receivers = receivers or executor
        self.clients = ClientRegistry()
        self.router = Router(broker, address)
        self.sender = Sender(broker)
        self.consumer = Consumer(broker)
        self.transactions = Transactions(broker)
        #: the ACL check of every call (``mqcore serve --acl``), or None: every call served
        self.access: CallAccess | None = None
        try:
            #: the server's event loop (the service is made on it)
            self.loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self.loop = None

    def check_access(self, call: str, request: Any, context: Any) -> None:
        """Refuse ``call`` (GrpcStatusError UNAUTHORIZED or FORBIDDEN) unless the ACL in
        force lets its caller make it; nothing when there is no ACL."""
        if self.access is not None:
            self.access.check(call, request, context.invocation_metadata(), peer_host(context))

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, functools.partial(fn, *args))

    def group_is_fifo(self, group: str, settings: Any = None) -> bool:
        """Whether ``group`` consumes in order. RocketMQ keeps this in the group's config
        (``consumeMessageOrderly``), which mqcore has not: a group is FIFO when every topic
        its consumers subscribe to is a FIFO topic (``message.type`` FIFO)."""
        if settings is None:
            for client in self.clients.clients():
                if client.group == group and client.settings is not None:
                    settings = client.settings
                    break
        if settings is None or not settings.HasField("subscription"):
            return False
        topics = [entry.topic.name for entry in settings.subscription.subscriptions]
        return bool(topics) and all(topic_message_type(self.broker, t) == "FIFO" for t in topics)

    # -- route -------------------------------------------------------------------------------

    @_answers("QueryRouteResponse")
    async def QueryRoute(self, request: Any, context: Any) -> Any:
        return await self._run(self.router.query_route, request)

    @_answers("QueryAssignmentResponse")
    async def QueryAssignment(self, request: Any, context: Any) -> Any:
        group = check_group(request.group)
        return await self._run(self.router.query_assignment, request, self.group_is_fifo(group))

    # -- send --------------------------------------------------------------------------------

    @_answers("SendMessageResponse")
    async def SendMessage(self, request: Any, context: Any) -> Any:
        host = peer_host(context)
        return await self._run(self.sender.send, request, host)

    # -- clients -----------------------------------------------------------------------------

    def _register(self, client_id: str, settings: Any) -> None:
        """Tell the broker of a producer: of each topic it publishes to, as the producer group
        the topic names (a transaction check asks it through its telemetry stream). Check a
        consumer's subscriptions: gRPC consumers pop, and are not entered in the broker's
        table of (classic, pulling) consumers, which would bar their group from popping."""
        if settings.client_type == ClientType.PRODUCER:
            topics = [t.name for t in settings.publishing.topics]
            channel = GrpcProducerChannel(client_id, self.push_threadsafe)
            self.broker.heartbeat(client_id, producer_groups=topics, channel=channel)
            return
        if settings.client_type not in (ClientType.PUSH_CONSUMER, ClientType.SIMPLE_CONSUMER):
            return
        for sub in _subscriptions(settings):
            self.broker.kernel.filter(sub.expression_type, sub.sub_string)

    @_answers("HeartbeatResponse")
    async def Heartbeat(self, request: Any, context: Any) -> Any:
        client = self.clients.get(client_id_of(context))
        if client is None or client.settings is None:
            raise GrpcStatusError(
                Code.UNRECOGNIZED_CLIENT_TYPE, "cannot find client settings for this client"
            )
        settings = client.settings
        if settings.client_type == ClientType.PRODUCER:
            await self._run(self._register, client.client_id, settings)
            return service.HeartbeatResponse(status=status(Code.OK))
        if client.is_consumer:
            check_group(request.group)
            await self._run(self._register, client.client_id, settings)
            return service.HeartbeatResponse(status=status(Code.OK))
        raise GrpcStatusError(Code.UNRECOGNIZED_CLIENT_TYPE, ClientType.Name(settings.client_type))

    @_answers("NotifyClientTerminationResponse")
    async def NotifyClientTermination(self, request: Any, context: Any) -> Any:
        client_id = client_id_of(context)
        client = self.clients.remove(client_id)
        if client is None or client.settings is None:
            raise GrpcStatusError(
                Code.UNRECOGNIZED_CLIENT_TYPE, "cannot find client settings for this client"
            )
        if client.settings.client_type == ClientType.PRODUCER:
            for topic in client.settings.publishing.topics:
                await self._run(
                    functools.partial(
                        self.broker.unregister_client, client_id, producer_group=topic.name
                    )
                )
        return service.NotifyClientTerminationResponse(status=status(Code.OK))

    # -- telemetry ---------------------------------------------------------------------------

    def _settings(self, client_id: str, command: Any, context: Any = None) -> Any:
        """The reply to a client's Settings: the merged settings, or a refusal."""
        settings = command.settings
        if context is not None:
            self.check_access("Settings", settings, context)
        which = settings.WhichOneof("pub_sub")
        if which == "publishing":
            for topic in settings.publishing.topics:
                check_topic(topic)
        elif which == "subscription":
            group = check_group(settings.subscription.group)
            for entry in settings.subscription.subscriptions:
                check_topic(entry.topic)
        else:
            raise GrpcStatusError(
                Code.BAD_REQUEST, "there is no publishing or subscription data in settings"
            )
        if not client_id:
            raise GrpcStatusError(Code.CLIENT_ID_REQUIRED, "the x-mq-client-id header is missing")
        self.clients.update_settings(client_id, settings)
        self._register(client_id, settings)
        fifo = which == "subscription" and self.group_is_fifo(group, settings)
        return service.TelemetryCommand(
            status=status(Code.OK), settings=merged_settings(settings, self.broker, fifo)
        )

    def _telemetry(self, client_id: str, command: Any, context: Any = None) -> Any:
        """The reply to one command of a client's stream."""
        which = command.WhichOneof("command")
        if which == "settings":
            return self._settings(client_id, command, context)
        if which in ("thread_stack_trace", "verify_message_result"):
            # Answers to commands this endpoint sends; it sends none, so none is awaited.
            nonce = getattr(command, which).nonce
            raise GrpcStatusError(
                Code.BAD_REQUEST, f"no {which} with nonce {nonce!r} was asked of this client"
            )
        if which is None:
            raise GrpcStatusError(Code.BAD_REQUEST, "the telemetry command is empty")
        raise GrpcStatusError(
            Code.BAD_REQUEST, f"{which} is a command the server sends, not the client"
        )

    async def Telemetry(self, request_iterator: Any, context: Any) -> AsyncIterator[Any]:
        """The client's commands in, replies and server commands (a transaction check) out."""
        client_id = client_id_of(context)
        out: asyncio.Queue[Any] = asyncio.Queue(STREAM_BACKLOG)
        attached = False

        async def read() -> None:
            try:
                async for command in request_iterator:
                    try:
                        reply = await self._run(self._telemetry, client_id, command, context)
                    except Exception as exc:
                        reply = service.TelemetryCommand(status=status_of(exc))
                    await out.put(reply)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the client went away mid-stream
                log.debug("grpc_telemetry_read_ended", client_id=client_id, error=str(exc))
            finally:
                out.put_nowait(None) if not out.full() else None

        try:
            self.check_access("Telemetry", None, context)
        except GrpcStatusError as exc:
            yield service.TelemetryCommand(status=status_of(exc))
            return
        if client_id:
            try:
                self.clients.attach(client_id, out)
                attached = True
            except GrpcStatusError as exc:
                yield service.TelemetryCommand(status=status_of(exc))
                return
        reader = asyncio.ensure_future(read())
        try:
            while True:
                if reader.done() and out.empty():
                    break
                item = await out.get()
                if item is None:
                    break
                yield item
        finally:
            reader.cancel()
            if attached:
                self.clients.detach(client_id, out)

    def push_threadsafe(self, client_id: str, command: Any) -> None:
        """:meth:`push` from any thread (the broker's check service calls it)."""
        if self.loop is None or self.loop.is_closed():
            raise GrpcStatusError(Code.INTERNAL_SERVER_ERROR, "the gRPC endpoint is closed")
        if not self.clients.streams_of(client_id):
            raise GrpcStatusError(
                Code.NOT_FOUND, f"gRPC client {client_id} has no telemetry stream open"
            )
        self.loop.call_soon_threadsafe(self.push, client_id, command)

    def push(self, client_id: str, command: Any) -> bool:
        """Send a server command to ``client_id`` over one of its streams (call on the
        server's loop); False when it has none or its backlog is full."""
        for stream in self.clients.streams_of(client_id):
            if not stream.full():
                stream.put_nowait(command)
                return True
        return False

    # -- consume ---------------------------------------------------------------------------

    async def ReceiveMessage(self, request: Any, context: Any) -> AsyncIterator[Any]:
        """A held pop: OK and the messages, or MESSAGE_NOT_FOUND after the polling time."""
        gone = False

        def cancelled() -> bool:
            return gone

        try:
            self.check_access("ReceiveMessage", request, context)
            group = check_group(request.group)
            fifo = self.group_is_fifo(group)
            loop = asyncio.get_running_loop()
            replies = await loop.run_in_executor(
                self.receivers,
                functools.partial(
                    self.consumer.receive, request, fifo, context.time_remaining(), cancelled
                ),
            )
        except asyncio.CancelledError:
            gone = True
            raise
        except Exception as exc:
            if not isinstance(exc, MQError):
                log.warning("grpc_call_failed", call="ReceiveMessage", error=str(exc))
            replies = [service.ReceiveMessageResponse(status=status_of(exc))]
        for reply in replies:
            yield reply

    @_answers("AckMessageResponse")
    async def AckMessage(self, request: Any, context: Any) -> Any:
        return await self._run(self.consumer.ack, request)

    @_answers("ChangeInvisibleDurationResponse")
    async def ChangeInvisibleDuration(self, request: Any, context: Any) -> Any:
        return await self._run(self.consumer.change_invisible_duration, request)

    @_answers("ForwardMessageToDeadLetterQueueResponse")
    async def ForwardMessageToDeadLetterQueue(self, request: Any, context: Any) -> Any:
        return await self._run(self.consumer.forward_to_dead_letter_queue, request)

    # -- transactions ------------------------------------------------------------------------

    @_answers("EndTransactionResponse")
    async def EndTransaction(self, request: Any, context: Any) -> Any:
        return await self._run(self.transactions.end, request)

    # -- not served --------------------------------------------------------------------------

    RecallMessage = _not_served("RecallMessage", "RecallMessageResponse")
    UpdateOffset = _not_served("UpdateOffset", "UpdateOffsetResponse")
    GetOffset = _not_served("GetOffset", "GetOffsetResponse")
    QueryOffset = _not_served("QueryOffset", "QueryOffsetResponse")
    SyncLiteSubscription = _not_served("SyncLiteSubscription", "SyncLiteSubscriptionResponse")

    async def PullMessage(self, request: Any, context: Any) -> AsyncIterator[Any]:
        yield service.PullMessageResponse(
            status=status(Code.NOT_IMPLEMENTED, "PullMessage is not served by mqcore")
        )

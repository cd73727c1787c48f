"""The broker's request processor: RocketMQ remoting commands in, broker operations, answers out.

:class:`BrokerProcessor` dispatches each command through the one request table,
:data:`mqcore.server.operations.OPERATION_TABLE`, which maps a request code to its handler and
its request header class. The handlers here (and in :mod:`mqcore.server.handlers_admin` and
:mod:`mqcore.server.handlers_ha`) read the typed header and the body, call the same
:class:`~mqcore.broker.Broker` method the embedded transport calls, and build the response.
Pulls that find nothing are parked on the broker's long-poll waiters as futures of the server's
event loop, never as threads, so thousands of held polls cost nothing but memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import random
import time
import zlib
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

import attrs

# The admin and replication handlers register themselves in the request table when imported.
import mqcore.server.handlers_admin
import mqcore.server.handlers_ha
import mqcore.server.handlers_pop
import mqcore.server.handlers_transaction  # noqa: F401
from mqcore.batch import prepare_sent_batch
from mqcore.broker.groupcommit import PreparedSend, SendRequest, send_one
from mqcore.broker.schedule import is_timer_message
from mqcore.errors import (
    BrokerError,
    FilterExpressionError,
    InvalidArgumentError,
    MessageIllegalError,
    MQError,
    NotRegisteredError,
    ProtocolError,
    SlaveNotAcknowledgedError,
)
from mqcore.hostport import split_host_port
from mqcore.logs import get_logger
from mqcore.message import PROPERTY_UNIQ_KEY, ConsumeFromWhere, MessageModel, MessageQueue
from mqcore.protocol import admin_bodies, bodies, headers
from mqcore.protocol.attributes import parse_topic_attributes
from mqcore.protocol.codes import RequestCode, ResponseCode
from mqcore.protocol.headers import SendMessageRequestHeaderV2
from mqcore.protocol.heartbeat import ConsumerData, SubscriptionData
from mqcore.protocol.route import TopicRoute
from mqcore.protocol.send import decode_batch, message_from_wire
from mqcore.record.layout import MAX_TOPIC_LENGTH
from mqcore.record.sysflag import COMPRESSED_FLAG
from mqcore.remoting.command import FLAG_ONEWAY, RemotingCommand, SerializeType
from mqcore.remoting.send_answer import encode_send_answer
from mqcore.server.operations import OPERATION_TABLE, Reply, error, ok, operation
from mqcore.server.sendlane import GroupItem, prepare_sent_group, prepare_sent_single
from mqcore.store import TIMER_TOPIC

if TYPE_CHECKING:
    from mqcore.broker.broker import Broker
    from mqcore.server.access import AccessValidator
    from mqcore.server.registration import NamesrvRegistrar

__all__ = ["BrokerProcessor", "RemoteChannel"]

log = get_logger(__name__)

_SYS_FLAG_KEPT = COMPRESSED_FLAG  # the only sender sys flag bit a stored record keeps
RUNNING_INFO_TIMEOUT_S = 5.0  # how long the broker waits for a client's running info

# How long a request that created a topic waits for the name servers to hear of it before it
# is answered anyway (below the clients' 3 s call timeout).
_REGISTER_WAIT_S = 2.0


def _joined(cluster: TopicRoute | None, own: TopicRoute | None) -> TopicRoute:
    """The name servers' route with this broker's group added when it is missing from it."""
    if cluster is None:
        assert own is not None
        return own
    if own is None:
        return cluster
    names = {b.broker_name for b in cluster.broker_datas}
    missing = [b for b in own.broker_datas if b.broker_name not in names]
    if not missing:
        return cluster
    added = {b.broker_name for b in missing}
    return TopicRoute(
        cluster.topic,
        sorted([*cluster.broker_datas, *missing], key=lambda b: b.broker_name),
        sorted(
            [*cluster.queue_datas, *(q for q in own.queue_datas if q.broker_name in added)],
            key=lambda q: q.broker_name,
        ),
        cluster.order_topic_conf,
    )


class RemoteChannel:
    """The broker's way to one remote client: requests over the client's own connection."""

    def __init__(self, connection: Any, language: Any) -> None:
        self.connection = connection
        self.language = language

    def consumer_ids_changed(self, group: str) -> None:
        """Send NOTIFY_CONSUMER_IDS_CHANGED (40), one-way."""
        header = headers.NotifyConsumerIdsChangedRequestHeader(consumer_group=group)
        self.connection.send_oneway(
            RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, header, oneway=True)
        )

    def reset_offset(self, group: str, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """Send RESET_CONSUMER_CLIENT_OFFSET (220) with the new offsets, one-way."""
        header = headers.ResetOffsetRequestHeader(topic=topic, group=group, timestamp=0)
        for_cpp = getattr(self.language, "name", "") == "CPP"
        body = bodies.ResetOffsetBody(offset_table=offsets).encode(for_cpp=for_cpp)
        self.connection.send_oneway(
            RemotingCommand.request(
                RequestCode.RESET_CONSUMER_CLIENT_OFFSET, header, body, oneway=True
            )
        )

    def check_transaction_state(self, header: Any, message: Any) -> None:
        """Send CHECK_TRANSACTION_STATE (39), one-way: the half as a record in the body
        (its real topic and queue), the producer answers with END_TRANSACTION."""
        self.connection.send_oneway(
            RemotingCommand.request(
                RequestCode.CHECK_TRANSACTION_STATE, header, message.record_bytes(), oneway=True
            )
        )

    def consumer_running_info(self, group: str) -> admin_bodies.ConsumerRunningInfo:
        """Ask the client (GET_CONSUMER_RUNNING_INFO, 307) and wait for its answer.

        :raises BrokerError: the client refused or does not serve the request.
        :raises RemotingError: no answer in time, or the connection closed.
        """
        client_id = getattr(self.connection, "client_id", None) or ""
        header = headers.GetConsumerRunningInfoRequestHeader(
            consumer_group=group, client_id=client_id
        )
        cmd = RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO, header)
        resp = self.connection.request(cmd, RUNNING_INFO_TIMEOUT_S)
        if resp.code != ResponseCode.SUCCESS:
            raise BrokerError(
                f"client {client_id} of group {group} did not give its running info: "
                f"{resp.remark or 'code ' + str(resp.code)}",
                code=resp.code,
            )
        return admin_bodies.ConsumerRunningInfo.decode(resp.body or b"{}")


def _consumer_data(wire: bodies.ConsumerData) -> ConsumerData:
    return ConsumerData(
        group_name=wire.group_name,
        consume_type=wire.consume_type,
        message_model=MessageModel[wire.message_model],
        consume_from_where=ConsumeFromWhere[wire.consume_from_where]
        if wire.consume_from_where in ConsumeFromWhere.__members__
        else ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        subscriptions=[
            SubscriptionData(
                topic=s.topic, sub_string=s.sub_string, expression_type=s.expression_type
            )
            for s in wire.subscription_data_set
        ],
    )


class BrokerProcessor:
    """Serves remoting commands with a :class:`~mqcore.broker.Broker` (and its name server role).

    :param broker: the broker.
    :param address: the ``host:port`` clients reach this server at (routes name it).
    """

    def __init__(self, broker: Broker, address: str) -> None:
        self.broker = broker
        self.address = address
        #: What keeps the broker registered with its name servers (``mqcore serve
        #: --namesrv``), or None.
        self.registrar: NamesrvRegistrar | None = None
        #: The ACL check every request passes first (``mqcore serve --acl``), or None.
        self.access: AccessValidator | None = None
        #: Called with (group, topic, message count) once per pull answered with messages,
        #: or None (metrics off: nothing is counted).
        self.pulled: Callable[[str, str, int], None] | None = None
        # Run on the server's event loop, without a hop to a worker thread: these only read or
        # append in memory (the store's maps, offset tables). With SYNC_FLUSH a send waits for
        # the disk, so sends then go to the worker pool with the other slow operations.
        inline = {
            RequestCode.PULL_MESSAGE,
            RequestCode.LITE_PULL_MESSAGE,
            RequestCode.HEART_BEAT,
            RequestCode.GET_ROUTEINFO_BY_TOPIC,
            RequestCode.GET_CONSUMER_LIST_BY_GROUP,
            RequestCode.QUERY_CONSUMER_OFFSET,
            RequestCode.UPDATE_CONSUMER_OFFSET,
            RequestCode.GET_MAX_OFFSET,
            RequestCode.GET_MIN_OFFSET,
            RequestCode.LOCK_BATCH_MQ,
            RequestCode.UNLOCK_BATCH_MQ,
        }
        flush = str(broker.config.store_options.get("flush_mode", "ASYNC_FLUSH"))
        waits = "SYNC" in flush.upper().replace("ASYNC", "")
        if not waits and broker.config.broker_role != "SYNC_MASTER":  # it waits for a slave
            inline |= {
                RequestCode.SEND_MESSAGE,
                RequestCode.SEND_MESSAGE_V2,
                RequestCode.SEND_BATCH_MESSAGE,
            }
        #: codes the remoting server may run on its event loop (see mqcore.remoting.server)
        self.inline_codes = frozenset(int(c) for c in inline)
        #: Serve the single sends and pulls directly (process_frame); False: every request
        #: through the generic dispatch (the reference the direct branch is compared with).
        self.direct = True
        #: the single-send codes the server may gather for one store write (process_group):
        #: only when sends are served on the event loop
        self.group_codes = frozenset(
            int(c)
            for c in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2)
            if int(c) in self.inline_codes
        )
        self._direct: dict[int, tuple[Callable[..., Any], type[headers.CommandHeader]]] = {
            RequestCode.SEND_MESSAGE: (BrokerProcessor._send_direct,
                                       headers.SendMessageRequestHeader),
            RequestCode.SEND_MESSAGE_V2: (BrokerProcessor._send_direct,
                                          SendMessageRequestHeaderV2),
            RequestCode.PULL_MESSAGE: (BrokerProcessor._pull, headers.PullMessageRequestHeader),
            RequestCode.LITE_PULL_MESSAGE: (BrokerProcessor._pull,
                                            headers.PullMessageRequestHeader),
        }  # fmt: skip

    def _registered(self, req: RemotingCommand, version: int) -> Reply:
        """``req``'s answer, once the name servers know of the topics created since the topic
        table was at ``version`` (a route asked right after names every master that has
        them; see :mod:`mqcore.server.registration`)."""
        registrar = self.registrar
        if registrar is None or self.broker.topics.version == version:
            return ok(req)
        registered = registrar.register_now()

        async def answer() -> RemotingCommand:
            with contextlib.suppress(asyncio.TimeoutError):  # a name server is slow or down
                await asyncio.wait_for(
                    asyncio.shield(asyncio.wrap_future(registered)), _REGISTER_WAIT_S
                )
            return ok(req)

        return answer()

    def connection_closed(self, connection: Any) -> None:
        """A client's connection ended: it leaves its groups at once (RocketMQ's
        ClientHousekeepingService), so the others rebalance without waiting for expiry."""
        client_id = getattr(connection, "client_id", None)
        if client_id and not self.broker.closed:
            # Only the groups it joined over this connection: another client of the same id
            # (a producer beside a consumer under one instance name) closing its own must not
            # take the consumer out of its group until its next heartbeat.
            self.broker.consumers.unregister_connection(client_id, connection)
            self.broker.producers.unregister_connection(client_id, connection)

    def process(self, req: RemotingCommand, connection: Any) -> Reply:
        """The answer to ``req``: a command, an awaitable of one (a held pull), or None."""
        refused = self._refused(req, connection)
        if refused is not None:
            return refused
        return self._generic(req, connection)

    def _refused(self, req: RemotingCommand, connection: Any) -> RemotingCommand | None:
        """The ACL's refusal of ``req`` (None: allowed, or no ACL), asked before anything of
        the request is read or served."""
        access = self.access
        if access is None:
            return None
        return access.refuse(req, getattr(connection, "remote_address", ""))

    def _generic(self, req: RemotingCommand, connection: Any) -> Reply:
        """:meth:`process` past the ACL check: the table's handler with the typed header."""
        entry = OPERATION_TABLE.get(req.code)
        if entry is None:
            # Logged: a client feature that needs an operation this server does not serve
            # shows up here, by code, instead of only as the client's own error.
            log.warning("request_not_supported", code=req.code)
            return error(
                req,
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                f"request type {req.code} not supported",
            )
        handler, header_cls = entry
        try:
            header = req.read_header(header_cls) if header_cls is not None else None
            return handler(self, req, header, connection)
        except MQError as exc:
            return _error_reply(req, exc)

    # -- the direct branch and group commit ---------------------------------------------------

    def process_frame(self, req: RemotingCommand, connection: Any) -> Reply | bytes:
        """:meth:`process`, with the single sends and the pulls served directly: their header
        read in C straight into the broker call (no table lookup, no header object) and a
        send answered with its whole frame (bytes) from one C call. Everything else, and any
        request the C reader leaves to the reference, goes through :meth:`process`; the
        answers are the same (tests/server/test_direct_path.py)."""
        direct = self._direct.get(req.code) if self.direct else None
        if direct is None or req.serialize_type is not SerializeType.JSON:
            return self.process(req, connection)
        refused = self._refused(req, connection)
        if refused is not None:
            return refused
        fields = direct[1].read_plain(req.ext_fields)
        if fields is None or fields.get("batch"):
            return self._generic(req, connection)
        if direct[0] is BrokerProcessor._send_direct:
            answer = self._send_prepared_single(req, fields, connection)
            if answer is not _TAKE_GENERAL:
                return cast("Reply | bytes", answer)
        try:
            return direct[0](self, req, _fields(direct[1], fields), connection)  # type: ignore[no-any-return]
        except MQError as exc:
            return _error_reply(req, exc)

    def _send_direct(self, req: RemotingCommand, h: Any, conn: Any) -> Reply | bytes:
        prepared = self._prepare_send(req, h, conn)
        results, code, remark = self._send_one(prepared)
        return self._send_frame(req, prepared, code, remark, results)

    def _send_prepared_single(
        self, req: RemotingCommand, fields: dict[str, Any], conn: Any
    ) -> Reply | bytes | object:
        """A plain single send served as a one-message batch is: its header's fields and
        body straight to a prepared record (:func:`~mqcore.server.sendlane.prepare_sent_single`,
        in C), stored by :meth:`Broker.send_prepared <mqcore.broker.Broker.send_prepared>`,
        with no header object and no :class:`~mqcore.message.Message`. :data:`_TAKE_GENERAL`
        when the send is not plain (a system topic, any queue asked for, no body, a property
        the broker reads, a store without ``put_prepared``): :meth:`_send_direct` serves it.
        The answers and the stored records are the reference's
        (tests/server/test_direct_path.py)."""
        send = self._prepared_single(req, fields, conn)
        if send is None:
            return _TAKE_GENERAL
        code, remark = ResponseCode.SUCCESS, None
        try:
            results = self.broker.send_prepared(
                send.topic, send.queue_id, [send.record], [send.uniq], born_host=send.born_host
            )
        except SlaveNotAcknowledgedError as exc:
            # Stored, without a slave's confirmation (see _send_one).
            results, code, remark = exc.results, ResponseCode(exc.code), str(exc)
        except MQError as exc:
            return _error_reply(req, exc)
        return self._prepared_frame(req, send, code, remark, results)

    def _prepared_single(
        self, req: RemotingCommand, fields: dict[str, Any], conn: Any
    ) -> PreparedSend | None:
        """The plain single send ``req`` (its header's ``fields`` as the C reader gives
        them) as a prepared record, or None when it is not plain (see
        :meth:`_send_prepared_single`)."""
        broker = self.broker
        topic: str = fields["topic"]
        queue_id: int = fields["queue_id"]
        body = req.body
        if (
            not body
            or queue_id < 0
            or topic[:1] == "%"  # retry, DLQ: the broker's own handling
            or topic == TIMER_TOPIC
            or not broker.takes_prepared()
        ):
            return None
        got = prepare_sent_single(
            topic,
            body,
            fields.get("properties"),
            fields["flag"],
            broker.config.max_message_size,
            fields["born_timestamp"],
            fields.get("reconsume_times") or 0,
            fields["sys_flag"] & _SYS_FLAG_KEPT,
        )
        if got is None:
            return None
        return PreparedSend(topic, queue_id, got[0], got[1], _born_host(conn))

    @staticmethod
    def _prepared_frame(
        req: RemotingCommand, send: PreparedSend, code: int, remark: str | None, results: Any
    ) -> bytes | None:
        """The answer to the prepared send ``send`` stored as ``results``."""
        if req.is_oneway:
            return None
        first = results[0]
        return encode_send_answer(
            code, req.opaque, remark, first.msg_id, send.queue_id, first.queue_offset, send.uniq
        )

    def _send_one(self, prepared: SendRequest) -> tuple[list[Any], int, str | None]:
        """The single send ``prepared`` stored: its results, the answer's code and remark."""
        try:
            return send_one(self.broker, prepared), ResponseCode.SUCCESS, None
        except SlaveNotAcknowledgedError as exc:
            # Stored, without a slave's confirmation: RocketMQ answers the stored message's
            # header with SLAVE_NOT_AVAILABLE or FLUSH_SLAVE_TIMEOUT as the code.
            return exc.results, ResponseCode(exc.code), str(exc)

    def _send_frame(
        self,
        req: RemotingCommand,
        prepared: SendRequest,
        code: int,
        remark: str | None,
        results: list[Any],
    ) -> bytes | None:
        if req.is_oneway:
            return None
        return encode_send_answer(
            code,
            req.opaque,
            remark,
            results[0].msg_id if len(results) == 1 else ",".join(r.msg_id for r in results),
            prepared.queue_id,
            results[0].queue_offset,
            # As a RocketMQ broker answers every single send: the message's unique id.
            prepared.messages[0].properties.get(PROPERTY_UNIQ_KEY),
        )

    def process_group(self, items: Sequence[tuple[RemotingCommand, Any]]) -> list[Reply | bytes]:
        """The answers to several requests, in order, each what :meth:`process_frame` gives
        it; the single sends among them are stored together (group commit, through
        :meth:`Broker.send_many <mqcore.broker.Broker.send_many>`) and answered after that
        write. A request served otherwise first has the sends before it stored, so the
        stores happen in the requests' order."""
        if len(items) == 1:  # nothing to gather: the single send's own path
            req, conn = items[0]
            return [self.process_frame(req, conn)]
        answers: list[Reply | bytes] = [None] * len(items)
        gathered: list[tuple[int, RemotingCommand, SendRequest | PreparedSend]] = []
        # The plain sends made records in one C call; the rest (None) are served below as
        # process_frame serves them.
        ready = self._ready_sends(items)
        for i, (req, conn) in enumerate(items):
            if ready is not None:
                one = ready[i]
                if one is not None:
                    gathered.append((i, req, one))
                    continue
            code = req.code
            if (
                not self.direct
                or code not in _SINGLE_SEND_HEADERS
                or req.serialize_type is not SerializeType.JSON
            ):
                self._commit(gathered, answers)
                gathered = []
                answers[i] = self.process_frame(req, conn)
                continue
            refused = self._refused(req, conn)
            if refused is not None:
                answers[i] = refused
                continue
            header_cls = _SINGLE_SEND_HEADERS[code]
            try:
                fields = header_cls.read_plain(req.ext_fields)
                # A plain send as a prepared record (as process_frame serves it alone): no
                # header object, no message. Without the C reader (or for a header it leaves
                # to the reference), the header object: the sends are gathered all the same.
                send: SendRequest | PreparedSend | None = None
                h: Any = None
                if fields is None:
                    h = req.read_header(header_cls)
                    batch = h.batch
                else:
                    batch = fields.get("batch")
                    if not batch:
                        send = self._prepared_single(req, fields, conn)
                if batch:  # a batch sent under a single-send code: the batch handler's
                    self._commit(gathered, answers)
                    gathered = []
                    answers[i] = self._generic(req, conn)
                    continue
                if send is None:
                    if h is None:
                        h = _fields(header_cls, fields)  # type: ignore[arg-type]
                    try:
                        send = self._prepare_send(req, h, conn)
                    except MQError:
                        if not gathered:
                            raise
                        # Any queue of a topic not there yet: a send gathered before it may
                        # create the topic (a retry topic, auto-creation), as it would have
                        # one by one. Stored first, the lookup is asked again after it.
                        self._commit(gathered, answers)
                        gathered = []
                        send = self._prepare_send(req, h, conn)
                gathered.append((i, req, send))
            except MQError as exc:
                answers[i] = _error_reply(req, exc)
        self._commit(gathered, answers)
        return answers

    def _ready_sends(
        self, items: Sequence[tuple[RemotingCommand, Any]]
    ) -> list[PreparedSend | None] | None:
        """Each of ``items`` that is a plain single send as a prepared send (see
        :meth:`_send_prepared_single`), None for the others; all of them read and prepared
        in one C call (:func:`~mqcore.server.sendlane.prepare_sent_group`). None for the
        whole group when the sends are served one by one: the direct branch off, an ACL
        (its refusal comes before anything of a request is read), a store without
        ``put_prepared``, no C speedups."""
        broker = self.broker
        if not self.direct or self.access is not None or not broker.takes_prepared():
            return None
        plans = _SEND_PLANS
        json = SerializeType.JSON
        batch: list[GroupItem] = []
        for req, conn in items:
            plan = plans.get(req.code)
            if plan is None or req.serialize_type is not json:
                batch.append(_NOT_A_SEND)
            else:
                batch.append((req.ext_fields, req.body, plan, _born_host(conn)))
        return prepare_sent_group(batch, broker.config.max_message_size, _SYS_FLAG_KEPT)

    def _commit(
        self,
        gathered: list[tuple[int, RemotingCommand, SendRequest | PreparedSend]],
        answers: list[Reply | bytes],
    ) -> None:
        if not gathered:
            return
        outcomes = self.broker.send_many([p for _, _, p in gathered])
        for (i, req, prepared), outcome in zip(gathered, outcomes, strict=True):
            if type(prepared) is PreparedSend:
                if outcome.__class__ is list:  # stored: _prepared_frame's answer, inlined
                    if not req.flag & FLAG_ONEWAY:
                        first = outcome[0]
                        answers[i] = encode_send_answer(
                            ResponseCode.SUCCESS, req.opaque, None, first.msg_id,
                            prepared.queue_id, first.queue_offset, prepared.uniq,
                        )  # fmt: skip
                elif isinstance(outcome, SlaveNotAcknowledgedError):
                    answers[i] = self._prepared_frame(
                        req, prepared, outcome.code, str(outcome), outcome.results
                    )
                elif isinstance(outcome, MQError):
                    answers[i] = _error_reply(req, outcome)
                else:
                    answers[i] = self._prepared_frame(
                        req, prepared, ResponseCode.SUCCESS, None, outcome
                    )
                continue
            assert isinstance(prepared, SendRequest)
            if isinstance(outcome, SlaveNotAcknowledgedError):
                answers[i] = self._send_frame(
                    req, prepared, outcome.code, str(outcome), outcome.results
                )
            elif isinstance(outcome, MQError):
                answers[i] = _error_reply(req, outcome)
            else:
                answers[i] = self._send_frame(req, prepared, ResponseCode.SUCCESS, None, outcome)

    # -- name server role ------------------------------------------------------------------------

    @operation(RequestCode.GET_ROUTEINFO_BY_TOPIC)
    def _route(self, req: RemotingCommand, h: Any, conn: Any) -> Reply:
        registrar = self.registrar
        if registrar is None or not registrar.namesrvs:
            route = self.broker.get_route_info_by_topic(h.topic, address=self.address)
            return ok(req, body=route.encode())
        # Registered with name servers: this broker is one group of several, and a route of
        # its own group alone would have a client pointed here (broker="host:port" of one
        # master) consume the topic's queues on this group only, forever. The name servers'
        # route names every group; this group is added when they do not know of it yet (a
        # topic created here a moment ago), and it alone answers when none of them answers.

        async def answer() -> RemotingCommand:
            loop = asyncio.get_running_loop()
            cluster = await loop.run_in_executor(None, registrar.route, h.topic)
            try:
                own = self.broker.get_route_info_by_topic(h.topic, address=self.address)
            except MQError as exc:
                if cluster is None:
                    code = getattr(exc, "code", None)
                    return error(req, code if code and code > 0 else ResponseCode.SYSTEM_ERROR,
                                  str(exc))  # fmt: skip
                own = None
            return ok(req, body=_joined(cluster, own).encode())

        return answer()

    @operation(RequestCode.GET_BROKER_CLUSTER_INFO)
    def _cluster_info(self, req: RemotingCommand, h: Any, conn: Any) -> Reply:
        return ok(req, body=json.dumps(self.broker.cluster_info(self.address)).encode())

    # -- topics ----------------------------------------------------------------------------------

    @operation(RequestCode.UPDATE_AND_CREATE_TOPIC)
    def _create_topic(self, req: RemotingCommand, h: Any, conn: Any) -> Reply:
        version = self.broker.topics.version
        self.broker.create_topic(
            h.topic,
            read_queue_nums=h.read_queue_nums,
            write_queue_nums=h.write_queue_nums,
            perm=h.perm,
            order=h.order,
            attributes=parse_topic_attributes(h.attributes),
        )
        return self._registered(req, version)

    @operation(RequestCode.DELETE_TOPIC_IN_BROKER)
    def _delete_topic(self, req: RemotingCommand, h: Any, conn: Any) -> Reply:
        self.broker.delete_topic(h.topic)
        return ok(req)

    @operation(RequestCode.GET_ALL_TOPIC_CONFIG)
    def _all_topics(self, req: RemotingCommand, h: Any, conn: Any) -> Reply:
        table = {
            t.topic_name: {
                "topicName": t.topic_name,
                "readQueueNums": t.read_queue_nums,
                "writeQueueNums": t.write_queue_nums,
                "perm": t.perm,
                "order": t.order,
                **({"attributes": t.attributes} if t.attributes else {}),
            }
            for t in self.broker.list_topics()
        }
        return ok(req, body=json.dumps({"topicConfigTable": table}).encode())

    # -- send ------------------------------------------------------------------------------------

    @operation(RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2)
    def _send(self, req: RemotingCommand, h: Any, conn: Any) -> Reply:
        if h.batch:  # a V1/V2 send whose header says it carries a batch
            return self._send_batch(req, h, conn)
        prepared = self._prepare_send(req, h, conn)
        results, code, remark = self._send_one(prepared)
        first = results[0]
        header = headers.SendMessageResponseHeader(
            msg_id=",".join(r.msg_id for r in results),
            queue_id=prepared.queue_id,
            queue_offset=first.queue_offset,
            # As a RocketMQ broker answers every single send: the message's unique id. The
            # Java TransactionMQProducer returns it as the transaction id of its result.
            transaction_id=prepared.messages[0].properties.get(PROPERTY_UNIQ_KEY),
        )
        return RemotingCommand.response(code, remark, header, None, to=req)

    def _prepare_send(self, req: RemotingCommand, h: Any, conn: Any) -> SendRequest:
        """The send ``req`` asks for, as the broker takes it (messages built, queue chosen)."""
        body = bytes(req.body or b"")
        sys_flag = h.sys_flag & _SYS_FLAG_KEPT
        msg = message_from_wire(h.topic, body, h.flag, h.properties)
        if sys_flag and (msg.delay_level or is_timer_message(msg)):
            # A held message is copied again when due, from its decoded body: keep it plain.
            msg = message_from_wire(h.topic, _inflate(body), h.flag, h.properties)
            sys_flag = 0
        messages = [msg]
        queue_id = h.queue_id
        if queue_id < 0:  # RocketMQ: any writable queue
            route = self.broker.get_route_info_by_topic(h.topic, address=self.address)
            queue_id = random.randrange(max(1, len(route.write_queues())))
        return SendRequest(
            h.topic,
            queue_id,
            messages,
            producer_group=h.producer_group,
            born_timestamp=h.born_timestamp,
            born_host=_born_host(conn),
            reconsume_times=h.reconsume_times or 0,
            sys_flag=sys_flag,
        )

    @operation(RequestCode.SEND_BATCH_MESSAGE)
    def _send_batch(self, req: RemotingCommand, h: Any, conn: Any) -> Reply:
        """SEND_BATCH_MESSAGE (and a V1/V2 send whose header says ``batch``).

        A batch of plain messages goes from its body straight to prepared records and the
        store's ``put_prepared`` (:func:`mqcore.batch.prepare_sent_batch`), with no message
        object per record; any other batch, or a store without ``put_prepared``, takes
        :meth:`Broker.send_message <mqcore.broker.Broker.send_message>`. Both store the same
        records and give the same answers and errors.
        """
        broker = self.broker
        topic = h.topic
        sys_flag = h.sys_flag & _SYS_FLAG_KEPT
        born_host = _born_host(conn)
        got = self._prepared_batch(req, h, sys_flag)
        messages = None if got is not None else decode_batch(topic, bytes(req.body or b""))
        queue_id = h.queue_id
        if queue_id < 0:  # RocketMQ: any writable queue
            route = broker.get_route_info_by_topic(topic, address=self.address)
            queue_id = random.randrange(max(1, len(route.write_queues())))
        code, remark = ResponseCode.SUCCESS, None
        try:
            if got is not None:
                results = broker.send_prepared(topic, queue_id, *got, born_host=born_host)
            else:
                assert messages is not None
                results = broker.send_message(
                    topic,
                    queue_id,
                    messages,
                    producer_group=h.producer_group,
                    born_timestamp=h.born_timestamp,
                    born_host=born_host,
                    reconsume_times=h.reconsume_times or 0,
                    sys_flag=sys_flag,
                )
        except SlaveNotAcknowledgedError as exc:
            # Stored, without a slave's confirmation (see _send_one).
            results, code, remark = exc.results, ResponseCode(exc.code), str(exc)
        header = headers.SendMessageResponseHeader(
            msg_id=",".join([r.msg_id for r in results]),
            queue_id=queue_id,
            queue_offset=results[0].queue_offset,
        )
        return RemotingCommand.response(code, remark, header, None, to=req)

    def _prepared_batch(
        self, req: RemotingCommand, h: Any, sys_flag: int
    ) -> tuple[list[Any], list[str | None]] | None:
        """The batch's prepared records and unique ids, or None when it takes the general
        path (see :func:`mqcore.batch.prepare_sent_batch`)."""
        broker = self.broker
        topic = h.topic
        if topic == TIMER_TOPIC or not broker.takes_prepared():
            return None
        name = topic.encode()
        if not 0 < len(name) <= MAX_TOPIC_LENGTH:
            return None  # refused, with the general path's error
        born = h.born_timestamp
        return prepare_sent_batch(
            bytes((len(name),)) + name,
            req.body or b"",
            broker.config.max_message_size,
            time.time_ns() // 1_000_000 if born is None else born,
            h.reconsume_times or 0,
            sys_flag,
        )

    # -- pull ------------------------------------------------------------------------------------

    @operation(RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE)
    def _pull(self, req: RemotingCommand, h: Any, conn: Any) -> Reply:
        flags = h.sys_flag  # plain ints (see headers.PULL_FLAG_*)
        if flags & headers.PULL_FLAG_SUBSCRIPTION and h.subscription is not None:
            expression, expression_type = h.subscription, h.expression_type or "TAG"
        else:
            expression, expression_type = self._subscription(h.consumer_group, h.topic)
        commit = h.commit_offset if flags & headers.PULL_FLAG_COMMIT_OFFSET else None
        broker = self.broker
        key = (h.topic, h.queue_id)
        seq = broker.waiters.sequence(key)
        resp = broker.pull_message(
            h.consumer_group,
            h.topic,
            h.queue_id,
            h.queue_offset,
            h.max_msg_nums,
            sub_expression=expression,
            expression_type=expression_type,
            commit_offset=commit,
            client_host=getattr(conn, "remote_address", ""),
            raw=True,
        )
        hold_ms = h.suspend_timeout_millis if flags & headers.PULL_FLAG_SUSPEND else 0
        hold_ms = min(hold_ms, broker.config.suspend_max_time_ms)
        if resp.code != ResponseCode.PULL_NOT_FOUND or hold_ms <= 0:
            return self._pull_reply(req, resp, h)
        return self._held_pull(req, h, expression, expression_type, key, seq, hold_ms)

    async def _held_pull(
        self,
        req: RemotingCommand,
        h: Any,
        expression: str,
        expression_type: str,
        key: tuple[str, int],
        seq: int,
        hold_ms: int,
    ) -> RemotingCommand:
        loop = asyncio.get_running_loop()
        arrived = loop.create_future()

        def wake() -> None:  # runs on the producing thread
            loop.call_soon_threadsafe(_resolve, arrived)

        waiters = self.broker.waiters
        if waiters.park(key, seq, wake):
            try:
                await asyncio.wait_for(asyncio.shield(arrived), hold_ms / 1000)
            except asyncio.TimeoutError:
                pass
            finally:
                waiters.unpark(key, wake)
        resp = self.broker.pull_message(
            h.consumer_group,
            h.topic,
            h.queue_id,
            h.queue_offset,
            h.max_msg_nums,
            sub_expression=expression,
            expression_type=expression_type,
            raw=True,
        )
        return self._pull_reply(req, resp, h)

    def _pull_reply(self, req: RemotingCommand, resp: Any, h: Any) -> RemotingCommand:
        pulled = self.pulled
        if pulled is not None and resp.records:
            pulled(h.consumer_group, h.topic, len(resp.records))
        header = headers.PullMessageResponseHeader(
            suggest_which_broker_id=resp.suggest_which_broker_id,
            next_begin_offset=resp.next_begin_offset,
            min_offset=resp.min_offset,
            max_offset=resp.max_offset,
        )
        # One copy out of the store's maps: the frame must not pin them after this call.
        body = b"".join(resp.records) if resp.records else None
        return RemotingCommand.response(int(resp.code), None, header, body, to=req)

    def _subscription(self, group: str, topic: str) -> tuple[str, str]:
        data = self.broker.consumers.group_data(group)
        if data is not None:
            for sub in data.subscriptions:
                if sub.topic == topic:
                    return sub.sub_string, sub.expression_type
        return "*", "TAG"

    # -- groups ----------------------------------------------------------------------------------

    @operation(RequestCode.HEART_BEAT)
    def _heartbeat(self, req: RemotingCommand, h: Any, conn: Any) -> Reply:
        data = bodies.HeartbeatData.decode(req.body or b"{}")
        channel = RemoteChannel(conn, req.language)
        bind = getattr(conn, "bind_client_id", None)
        if bind is not None:
            bind(data.client_id)
        version = self.broker.topics.version  # a group's first heartbeat creates its retry topic
        self.broker.heartbeat(
            data.client_id,
            [_consumer_data(c) for c in data.consumer_data_set],
            [p.group_name for p in data.producer_data_set],
            channel,
        )
        return self._registered(req, version)

    @operation(RequestCode.CHECK_CLIENT_CONFIG)
    def _check_client_config(self, req: RemotingCommand, h: Any, conn: Any) -> Reply:
        # RocketMQ's Java push consumer sends this at start for every SQL92 (non-TAG)
        # subscription and refuses to start on any answer but SUCCESS; an expression that
        # does not compile is SUBSCRIPTION_PARSE_FAILED with the parser's message (process()).
        body = bodies.CheckClientRequestBody.decode(req.body or b"{}")
        sub = body.subscription_data
        if sub is not None and sub.expression_type not in ("", "TAG"):
            self.broker.kernel.filter(sub.expression_type, sub.sub_string)
        return ok(req)

    @operation(RequestCode.UNREGISTER_CLIENT)
    def _unregister(self, req: RemotingCommand, h: Any, conn: Any) -> Reply:
        self.broker.unregister_client(h.client_id, h.consumer_group, h.producer_group)
        return ok(req)

    @operation(RequestCode.GET_CONSUMER_LIST_BY_GROUP)
    def _consumer_list(self, req: RemotingCommand, h: Any, conn: Any) -> Reply:
        ids = self.broker.get_consumer_list_by_group(h.consumer_group)
        body = bodies.GetConsumerListByGroupResponseBody(consumer_id_list=ids).encode()
        return ok(req, body=body)

    # -- offsets ---------------------------------------------------------------------------------

    @operation(RequestCode.QUERY_CONSUMER_OFFSET)
    def _query_offset(self, req: RemotingCommand, h: Any, conn: Any) -> Reply:
        offset = self.broker.query_consumer_offset(h.consumer_group, h.topic, h.queue_id)
        if offset < 0:
            return error(req, ResponseCode.QUERY_NOT_FOUND, "Not found, V3_0_6_SNAPSHOT maybe")
        return ok(req, headers.QueryConsumerOffsetResponseHeader(offset=offset))

    @operation(RequestCode.UPDATE_CONSUMER_OFFSET)
    def _update_offset(self, req: RemotingCommand, h: Any, conn: Any) -> Reply:
        self.broker.update_consumer_offset(
            h.consumer_group,
            h.topic,
            h.queue_id,
            h.commit_offset,
            getattr(conn, "remote_address", ""),
            reset_clients=False,  # a consumer's own commit (RocketMQ's admin uses 222 to reset)
        )
        return None if req.is_oneway else ok(req)

    @operation(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET)
    def _reset_offset(self, req: RemotingCommand, h: Any, conn: Any) -> Reply:
        table = self.broker.reset_offset_by_timestamp(
            h.group, h.topic, h.timestamp, force=h.is_force
        )
        return ok(req, body=bodies.ResetOffsetBody(offset_table=table).encode())

    @operation(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP)
    def _search_offset(self, req: RemotingCommand, h: Any, conn: Any) -> Reply:
        offset = self.broker.search_offset_by_timestamp(h.topic, h.queue_id, h.timestamp)
        return ok(req, headers.SearchOffsetResponseHeader(offset=offset))

    @operation(RequestCode.GET_MAX_OFFSET, RequestCode.QUERY_BROKER_OFFSET)
    def _max_offset(self, req: RemotingCommand, h: Any, conn: Any) -> Reply:
        offset = self.broker.get_max_offset(h.topic, h.queue_id)
        return ok(req, headers.GetMaxOffsetResponseHeader(offset=offset))

    @operation(RequestCode.GET_MIN_OFFSET)
    def _min_offset(self, req: RemotingCommand, h: Any, conn: Any) -> Reply:
        offset = self.broker.get_min_offset(h.topic, h.queue_id)
        return ok(req, headers.GetMinOffsetResponseHeader(offset=offset))

    @operation(RequestCode.GET_EARLIEST_MSG_STORETIME)
    def _earliest(self, req: RemotingCommand, h: Any, conn: Any) -> Reply:
        ts = self.broker.get_earliest_msg_storetime(h.topic, h.queue_id)
        return ok(req, headers.GetEarliestMsgStoretimeResponseHeader(timestamp=ts))

    # -- queries and retries -----------------------------------------------------------------

    @operation(RequestCode.VIEW_MESSAGE_BY_ID)
    def _view(self, req: RemotingCommand, h: Any, conn: Any) -> Reply:
        record = self.broker.record_at(h.offset)
        if record is None:
            return error(
                req, ResponseCode.SYSTEM_ERROR, f"can not find message by offset {h.offset}"
            )
        return ok(req, body=record)

    @operation(RequestCode.QUERY_MESSAGE)
    def _query(self, req: RemotingCommand, h: Any, conn: Any) -> Reply:
        found = self.broker.query_message(
            h.topic, h.key, h.max_num, h.begin_timestamp, h.end_timestamp
        )
        if not found:
            return error(
                req,
                ResponseCode.QUERY_NOT_FOUND,
                "can not find message, maybe time range not correct",
            )
        header = headers.QueryMessageResponseHeader(
            index_last_update_timestamp=max(m.store_timestamp for m in found),
            index_last_update_phyoffset=max(m.commitlog_offset for m in found),
        )
        return ok(req, header, b"".join(m.record_bytes() for m in found))

    @operation(RequestCode.CONSUMER_SEND_MSG_BACK)
    def _send_back(self, req: RemotingCommand, h: Any, conn: Any) -> Reply:
        self.broker.consumer_send_msg_back(
            h.group,
            h.offset,
            h.delay_level,
            origin_msg_id=h.origin_msg_id,
            origin_topic=h.origin_topic,
            max_reconsume_times=h.max_reconsume_times,
        )
        return ok(req)

    # -- orderly consumption -----------------------------------------------------------------

    @operation(RequestCode.LOCK_BATCH_MQ)
    def _lock(self, req: RemotingCommand, h: Any, conn: Any) -> Reply:
        body = bodies.LockBatchRequestBody.decode(req.body or b"{}")
        locked = self.broker.lock_batch_mq(body.consumer_group, body.client_id, body.mq_set)
        return ok(req, body=bodies.LockBatchResponseBody(lock_ok_mq_set=locked).encode())

    @operation(RequestCode.UNLOCK_BATCH_MQ)
    def _unlock(self, req: RemotingCommand, h: Any, conn: Any) -> Reply:
        body = bodies.UnlockBatchRequestBody.decode(req.body or b"{}")
        self.broker.unlock_batch_mq(body.consumer_group, body.client_id, body.mq_set)
        return None if req.is_oneway else ok(req)


def _born_host(conn: Any) -> str | None:
    """The peer's ``ip:port`` when it is IPv4 (what the record's born host can hold)."""
    addr = getattr(conn, "remote_address", None)
    return _ipv4_peer(addr) if addr else None


@functools.lru_cache(maxsize=4096)  # one per connection: a send asks for its own each time
def _ipv4_peer(addr: str) -> str | None:
    try:
        host, _ = split_host_port(addr)
    except InvalidArgumentError:
        return None
    parts = host.split(".")
    return str(addr) if len(parts) == 4 and all(p.isdigit() for p in parts) else None


def _inflate(body: bytes) -> bytes:
    try:
        return zlib.decompress(body)
    except zlib.error as exc:
        raise MessageIllegalError(
            f"the body is flagged compressed but is not zlib data: {exc}",
            code=ResponseCode.MESSAGE_ILLEGAL,
        ) from None


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _fields(cls: type[headers.CommandHeader], read: dict[str, Any]) -> SimpleNamespace:
    """A request header's fields as the C reader gives them (``read``), as attributes, the
    absent optional ones at the header class's defaults: what a handler reads of the header
    object, for a fraction of its construction."""
    values = _DEFAULTS.get(cls)
    if values is None:
        values = _DEFAULTS[cls] = {
            f.name: f.default
            for f in attrs.fields(cls)  # type: ignore[arg-type]
            if f.default is not attrs.NOTHING
        }
    merged = values.copy()
    merged.update(read)
    return SimpleNamespace(**merged)


_DEFAULTS: dict[type, dict[str, Any]] = {}

# The codes process_group gathers, and their request headers.
#: what _send_prepared_single gives a send it leaves to the reference path
_TAKE_GENERAL = object()

_SINGLE_SEND_HEADERS: dict[int, type[headers.CommandHeader]] = {
    RequestCode.SEND_MESSAGE: headers.SendMessageRequestHeader,
    RequestCode.SEND_MESSAGE_V2: SendMessageRequestHeaderV2,
}
#: the read plans of their headers (for prepare_sent_group)
_SEND_PLANS = {int(code): cls.read_plan() for code, cls in _SINGLE_SEND_HEADERS.items()}
#: what prepare_sent_group is given for a request that is not a single send: it answers None
_NOT_A_SEND: GroupItem = (None, None, (), None)


def _error_reply(req: RemotingCommand, exc: MQError) -> RemotingCommand:
    """The answer to ``req`` that failed with ``exc`` (the same mapping on every path)."""
    if isinstance(exc, ProtocolError):
        return error(req, ResponseCode.INVALID_PARAMETER, str(exc))
    if isinstance(exc, FilterExpressionError | NotRegisteredError):
        return error(req, ResponseCode.SUBSCRIPTION_PARSE_FAILED, str(exc))
    if isinstance(exc, BrokerError):
        return error(req, exc.code if exc.code > 0 else ResponseCode.SYSTEM_ERROR, str(exc))
    code = getattr(exc, "code", None)
    return error(req, code if code and code > 0 else ResponseCode.SYSTEM_ERROR, str(exc))

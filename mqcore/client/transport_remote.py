"""The remote transport: the client/broker seam as RocketMQ remoting frames over TCP.

It speaks to name servers (routes) and brokers (everything else) the way RocketMQ's
``MQClientAPIImpl`` does, so it works against ``mqcore serve`` (name server and broker on one
address) and against an Apache RocketMQ 4.x cluster alike. Broker-to-client requests
(NOTIFY_CONSUMER_IDS_CHANGED, RESET_CONSUMER_CLIENT_OFFSET, GET_CONSUMER_RUNNING_INFO) reach
the client's channel.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import random
import ssl
import struct
import threading
import time
import zlib
from binascii import a2b_hex
from collections.abc import Callable, Iterable, Sequence
from itertools import repeat
from typing import Any

import attrs

from mqcore import speedups
from mqcore.codec import decode_message_id
from mqcore.errors import (
    BrokerClosedError,
    BrokerError,
    FilterExpressionError,
    InvalidArgumentError,
    MessageIllegalError,
    MQClientError,
    NoPermissionError,
    RemotingConnectError,
    SlaveNotAcknowledgedError,
    TopicNotExistError,
)
from mqcore.hostport import split_host_port
from mqcore.kernel import Kernel
from mqcore.logs import get_logger
from mqcore.message import Message, MessageExt, MessageModel, MessageQueue, format_properties
from mqcore.protocol import bodies, headers
from mqcore.protocol import pop as pop_wire
from mqcore.protocol.channel import ClientChannel
from mqcore.protocol.codes import RequestCode, ResponseCode
from mqcore.protocol.fastjson import loads
from mqcore.protocol.heartbeat import ConsumerData
from mqcore.protocol.names import RETRY_GROUP_TOPIC_PREFIX
from mqcore.protocol.pull import PullResponse
from mqcore.protocol.route import MASTER_ID, TopicRoute
from mqcore.protocol.send import encode_batch
from mqcore.protocol.transaction import (
    TRANSACTION_PREPARED_TYPE,
    CheckTransactionStateRequestHeader,
    EndTransactionRequestHeader,
    is_transactional,
)
from mqcore.record.sysflag import COMPRESSED_FLAG
from mqcore.remoting.client import Answer, RemotingClient
from mqcore.remoting.command import (
    PreparedRequest,
    RemotingCommand,
    encode_request_head,
    next_opaque,
)
from mqcore.remoting.signing import credentials_from
from mqcore.remoting.tls import client_context
from mqcore.store import PutResult

__all__ = ["RemoteTransport", "split_records"]

log = get_logger(__name__)

COMPRESS_OVER = 4096  # RocketMQ's compressMsgBodyOverHowmuch
COMPRESS_LEVEL = 5  # RocketMQ's zipCompressLevel default
DEFAULT_TOPIC = "TBW102"
_RECORD_SIZE = struct.Struct(">I")  # a stored record's first word: its size
#: ">{2n}q" by n: n offset message ids as raw bytes, each two longs (store host, offset)
_LONGS: dict[int, struct.Struct] = {}
ROUTE_TTL_S = 30.0  # RocketMQ's pollNameServerInterval
CALL_TIMEOUT_S = 3.0
PULL_TIMEOUT_MARGIN_S = 15.0  # a held pull may take its suspend time, plus this


def split_records(body: bytes | bytearray | memoryview | None) -> list[memoryview]:
    """Cut a pull or query response body into records (each starts with its total size)."""
    if not body:
        return []
    view = memoryview(body)
    out: list[memoryview] = []
    append, size_at = out.append, _RECORD_SIZE.unpack_from
    pos, end = 0, len(view)
    while pos + 4 <= end:
        (size,) = size_at(view, pos)
        if size <= 0 or pos + size > end:
            raise MQClientError(f"malformed record in the response at byte {pos} (size {size})")
        append(view[pos : pos + size])
        pos += size
    return out


#: Response codes raised as the error the embedded broker raises for the same refusal.
_ERRORS: dict[int, type[BrokerError]] = {
    ResponseCode.MESSAGE_ILLEGAL: MessageIllegalError,
    ResponseCode.SERVICE_NOT_AVAILABLE: BrokerClosedError,
    ResponseCode.NO_PERMISSION: NoPermissionError,
    ResponseCode.TOPIC_NOT_EXIST: TopicNotExistError,
}


def _check(resp: RemotingCommand, *ok: int) -> RemotingCommand:
    """``resp`` when its code is one of ``ok`` (SUCCESS); else the broker's refusal raised."""
    if resp.code in (ok or (ResponseCode.SUCCESS,)):
        return resp
    remark = resp.remark or f"the broker refused the request (code {resp.code})"
    if resp.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED:
        raise FilterExpressionError(remark)
    raise _ERRORS.get(resp.code, BrokerError)(remark, code=resp.code)


def _check_handle(resp: RemotingCommand) -> RemotingCommand:
    """As :func:`_check`, a refused receipt handle (NO_MESSAGE) raised as the embedded
    broker raises it."""
    if resp.code in (ResponseCode.NO_MESSAGE, ResponseCode.INVALID_PARAMETER):
        raise pop_wire.ReceiptHandleError(resp.remark or "no such message", code=resp.code)
    return _check(resp)


class _Notices:
    """Turns broker-to-client requests into calls on the client's channel."""

    def __init__(self) -> None:
        self.channel: ClientChannel | None = None
        #: broker address -> name, for a check that does not name its broker
        self.broker_names: Callable[[str], str] = lambda addr: addr
        #: broker name -> the address its last check came from (where the answer goes
        #: when no route names that broker yet: a producer that has sent nothing since)
        self.checked_from: dict[str, str] = {}

    def __call__(self, cmd: RemotingCommand, addr: str) -> RemotingCommand | None:
        channel = self.channel
        if cmd.code == RequestCode.CHECK_TRANSACTION_STATE:
            check = cmd.read_header(CheckTransactionStateRequestHeader)
            asked = getattr(channel, "check_transaction_state", None)
            if asked is not None and cmd.body:
                if not check.broker_name:  # a RocketMQ 4.x broker: answered where it asked
                    check = attrs.evolve(check, broker_name=self.broker_names(addr))
                self.checked_from[check.broker_name or addr] = addr
                asked(check, MessageExt(bytes(cmd.body)))
            return None
        if cmd.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED:
            h = cmd.read_header(headers.NotifyConsumerIdsChangedRequestHeader)
            if channel is not None:
                channel.consumer_ids_changed(h.consumer_group)
            return None
        if cmd.code == RequestCode.RESET_CONSUMER_CLIENT_OFFSET:
            reset = cmd.read_header(headers.ResetOffsetRequestHeader)
            table = bodies.ResetOffsetBody.decode(cmd.body or b"{}").offset_table
            if channel is not None:
                channel.reset_offset(reset.group, reset.topic, dict(table))
            return RemotingCommand.response(ResponseCode.SUCCESS, to=cmd)
        if cmd.code == RequestCode.GET_CONSUMER_RUNNING_INFO and channel is not None:
            asked = cmd.read_header(headers.GetConsumerRunningInfoRequestHeader)
            info = channel.consumer_running_info(asked.consumer_group)
            return RemotingCommand.response(ResponseCode.SUCCESS, None, None, info.encode(), to=cmd)
        return RemotingCommand.response(
            ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f"request type {cmd.code} not supported"
        )


# A single send as prepared request: the V2 header's wire names in the order its writer
# gives them, and the plan its answer is read with (SendMessageResponseHeader's fields).
_SEND_V2_NAMES = headers.SendMessageRequestHeaderV2.wire_names()
# The codes as plain ints: an enum member's lookup costs more than the rest of a line.
_SEND_MESSAGE_V2 = int(RequestCode.SEND_MESSAGE_V2)
_SEND_BATCH_MESSAGE = int(RequestCode.SEND_BATCH_MESSAGE)
_SUCCESS = int(ResponseCode.SUCCESS)
_SEND_ANSWER_PLAN = (
    ("msgId", 0, True),
    ("queueId", 1, True),
    ("queueOffset", 2, True),
    ("transactionId", 0, False),
)


# A pull answered at once as a prepared request: PullMessageRequestHeader's wire names in its
# writer's order, and the plan its answer is read with (PullMessageResponseHeader's fields).
_PULL_NAMES = headers.PullMessageRequestHeader.wire_names()
_PULL_ANSWER_PLAN = (
    ("suggestWhichBrokerId", 2, True),
    ("nextBeginOffset", 2, True),
    ("minOffset", 2, True),
    ("maxOffset", 2, True),
)
_PULL_ANSWERS = frozenset(
    {
        ResponseCode.SUCCESS,
        ResponseCode.PULL_NOT_FOUND,
        ResponseCode.PULL_RETRY_IMMEDIATELY,
        ResponseCode.PULL_OFFSET_MOVED,
    }
)


def _commitlog_offset(msg_id: str) -> int:
    """The commit-log offset an offset message id names; -1 when it is not one."""
    # Its last 16 hex digits (what decode_message_id reads, without the store host's text).
    if len(msg_id) == 32 and msg_id.isascii() and msg_id.isalnum():
        try:
            offset = int(msg_id[16:], 16)
        except ValueError:
            return -1
        return offset - (1 << 64) if offset >= 1 << 63 else offset  # a signed long
    return -1


def _commitlog_offsets(joined: str, ids: list[str]) -> list[int]:
    """The commit-log offsets of a send's comma-joined offset message ids (-1 for one that
    is not an offset id): every id decoded in one call when all are 32 hex digits."""
    if set(map(len, ids)) == {32}:
        try:
            # a2b_hex takes hex digits only (no blank, no sign, ASCII): a fifth of the cost
            # of str.isalnum on the joined ids, which a batch's answer spent most time in.
            raw = a2b_hex(joined.replace(",", ""))
        except ValueError:  # binascii.Error is one
            pass
        else:
            # Each id is two big-endian longs (store host, offset): all read in one unpack.
            words = _LONGS.get(len(ids))
            if words is None:
                words = _LONGS[len(ids)] = struct.Struct(f">{2 * len(ids)}q")
            return list(words.unpack(raw)[1::2])
    return [_commitlog_offset(msg_id) for msg_id in ids]


def _put_results(joined: str, queue_offset: int) -> list[PutResult]:
    """The results a send's answer names: one per comma-separated id of ``joined``, their
    queue offsets counting from ``queue_offset``, their commit-log offsets read from the
    ids (-1 for an id that is not an offset message id).

    In one C call when the speedups are built and every id is an offset message id;
    :func:`py_put_results` is the reference, and reads the rest."""
    if _c_answer_results is not None and joined.__class__ is str and queue_offset.__class__ is int:
        got = _c_answer_results(PutResult, joined, queue_offset)
        if got is not None:
            return got  # type: ignore[no-any-return]
    return py_put_results(joined, queue_offset)


def py_put_results(joined: str, queue_offset: int) -> list[PutResult]:
    """:func:`_put_results` in Python (the reference for the C ``answer_results`` of
    ``mqcore._codec``)."""
    ids = joined.split(",")
    n = len(ids)
    # tuple.__new__ over ready rows: a namedtuple's own __new__ is a Python call per result.
    return list(
        map(_new_tuple, repeat(PutResult, n),
            zip(ids, range(queue_offset, queue_offset + n), _commitlog_offsets(joined, ids),
                repeat(0, n), repeat(0, n), strict=True))
    )  # fmt: skip


_new_tuple = tuple.__new__
_codec = speedups.load("codec")
_c_answer_results = None if _codec is None else _codec.answer_results


class RemoteTransport:
    """:class:`~mqcore.client.api.BrokerAPI` over TCP to ``mqcore serve`` or RocketMQ.

    :param namesrv_addr: ``host:port`` of the name server(s), ``;``-separated (for
        ``mqcore serve``, its listening address: it answers as name server too).
    :param kernel: plugins for the client side (allocators, filters, offset stores);
        a new :class:`~mqcore.Kernel` by default.
    :param timeout: seconds to wait for an answer to an ordinary call.
    :param credentials: ``(access_key, secret_key)`` (or a
        :class:`~mqcore.remoting.signing.Credentials`) of an ACL account: every request is
        signed with them; None: unsigned.
    :param tls: True (TLS, verifying the server against the system's CAs), an
        :class:`ssl.SSLContext` of your own, or None/False for plain TCP.
    """

    def __init__(
        self,
        namesrv_addr: str,
        *,
        kernel: Kernel | None = None,
        timeout: float = CALL_TIMEOUT_S,
        credentials: Any = None,
        tls: bool | ssl.SSLContext | None = None,
    ) -> None:
        addrs = [a.strip() for a in namesrv_addr.split(";") if a.strip()]
        for a in addrs:
            split_host_port(a, "name server address")
        if not addrs:
            raise InvalidArgumentError(f"no name server address in {namesrv_addr!r}")
        self.namesrv_addrs = addrs
        self.timeout = timeout
        self._kernel = kernel
        self._notices = _Notices()
        self._notices.broker_names = self._broker_name_of
        self.client = RemotingClient(
            self._notices,
            credentials=credentials_from(credentials),
            ssl_context=client_context(tls),
        )
        self._pulls: set[concurrent.futures.Future[RemotingCommand]] = set()
        self._pulls_cancelled = False
        self._routes: dict[str, tuple[float, TopicRoute]] = {}
        self._brokers: dict[str, str] = {}  # broker name -> master address
        self._members: dict[str, dict[int, str]] = {}  # broker name -> id -> address
        # The member each queue's next pull goes to, as the last pull's answer suggested
        # (RocketMQ's PullAPIWrapper.pullFromWhichNodeTable).
        self._pull_from: dict[MessageQueue, int] = {}
        self._lock = threading.Lock()
        self._closed = False
        # The last heartbeat sent, for a master a route names anew (see get_route_info_by_topic).
        self._heartbeat_body: bytes | None = None

    # -- lifecycle --------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran."""
        return self._closed

    @property
    def kernel(self) -> Kernel:
        """The client-side kernel (made on first use)."""
        if self._kernel is None:
            self._kernel = Kernel()
        return self._kernel

    def close(self) -> None:
        """Close every connection and stop the client's threads."""
        if not self._closed:
            self._closed = True
            self.client.close()

    def _call(
        self,
        addr: str,
        code: int,
        header: Any = None,
        body: Any = None,
        timeout: float | None = None,
    ) -> RemotingCommand:
        if self._closed:
            raise MQClientError("the client is shut down", code=ResponseCode.SERVICE_NOT_AVAILABLE)
        cmd = RemotingCommand.request(code, header, body)
        # A busy answer (the server starting, or overloaded) is sent again within the call's
        # time, never raised at once: a client started beside its server must not fail.
        return self.client.invoke_retry_busy(
            addr, cmd, self.timeout if timeout is None else timeout
        )

    def _namesrv_call(self, code: int, header: Any) -> RemotingCommand:
        error: Exception | None = None
        start = random.randrange(len(self.namesrv_addrs))
        for i in range(len(self.namesrv_addrs)):
            addr = self.namesrv_addrs[(start + i) % len(self.namesrv_addrs)]
            try:
                return self._call(addr, code, header)
            except BrokerError:
                raise
            except Exception as exc:  # try the next name server
                error = exc
        raise MQClientError(
            f"no name server answered ({';'.join(self.namesrv_addrs)}): {error}"
        ) from error

    # -- routes and membership --------------------------------------------------------------------

    def get_route_info_by_topic(self, topic: str) -> TopicRoute:
        """The topic's route from the name server (cached for 30 s)."""
        return self._route(topic, introduce=True)

    def refresh_route(self, topic: str) -> TopicRoute:
        """The topic's route from the name server now, not from the cache."""
        self._routes.pop(topic, None)
        return self._route(topic, introduce=True)

    def _route(self, topic: str, *, introduce: bool) -> TopicRoute:
        """The topic's route; with ``introduce``, masters a fresh route names anew are sent
        the last heartbeat (see :meth:`_introduce`)."""
        now = time.monotonic()
        cached = self._routes.get(topic)
        if cached is not None and now - cached[0] < ROUTE_TTL_S:
            return cached[1]
        header = headers.GetRouteInfoRequestHeader(topic=topic)
        resp = _check(self._namesrv_call(RequestCode.GET_ROUTEINFO_BY_TOPIC, header))
        route = TopicRoute.from_json(topic, loads(resp.body or b"{}"))
        with self._lock:
            self._routes[topic] = (now, route)
            known = set(self._brokers.values())
            for b in route.broker_datas:
                if b.master_addr:
                    self._brokers[b.broker_name] = b.master_addr
                else:  # its master is down: reads and offsets go to a slave meanwhile
                    self._brokers.pop(b.broker_name, None)
                self._members[b.broker_name] = dict(b.broker_addrs)
            fresh = sorted(set(self._brokers.values()) - known)
            body = self._heartbeat_body
        if introduce and fresh and body is not None:
            self._introduce(fresh, body)
        return route

    def _introduce(self, addrs: list[str], body: bytes) -> None:
        """Send the last heartbeat to masters a route has just named (new, or back after a
        restart) rather than at the next heartbeat, up to 30 s later: until then such a
        master leaves this client out of the group's members, and clients that ask it alone
        (RocketMQ's ask one master) would rebalance on that partial list. A master that
        fails it gets the next periodic heartbeat."""
        self._each(addrs, RequestCode.HEART_BEAT, None, body, "heartbeat_failed", required=False)

    def _each(
        self,
        addrs: Sequence[str],
        code: int,
        header: Any,
        body: Any,
        event: str,
        *,
        required: bool = True,
        level: str = "info",
    ) -> list[RemotingCommand]:
        """One request to each of ``addrs``: the answers of those that took it. One that
        fails (or refuses) is logged as ``event`` at ``level`` and skipped; when
        ``required`` and none took it, the first failure is raised."""
        answers: list[RemotingCommand] = []
        failed: list[Exception] = []
        for addr in addrs:
            try:
                answers.append(_check(self._call(addr, code, header, body)))
            except Exception as exc:
                getattr(log, level)(event, addr=addr, error=str(exc))
                failed.append(exc)
        if required and failed and not answers:
            raise failed[0]
        return answers

    def _pull_addr(self, mq: MessageQueue) -> str:
        """Where ``mq``'s next pull goes: the suggested member, else the master (RocketMQ's
        findBrokerAddressInSubscribe, which falls back to any member it knows)."""
        if mq.topic not in self._routes:  # dropped after a failure: learn who serves it now
            with contextlib.suppress(Exception):
                self.get_route_info_by_topic(mq.topic)
        wanted = self._pull_from.get(mq, MASTER_ID)
        members = self._members.get(mq.broker_name)
        if not members:
            return self._broker_addr(mq.broker_name, mq.topic)
        if wanted in members:
            return members[wanted]
        if MASTER_ID in members:
            return members[MASTER_ID]
        return members[min(members)]  # no master (it died): its slave still serves reads

    def _broker_call(
        self, broker_name: str, topic: str, code: int, header: Any = None, body: Any = None
    ) -> RemotingCommand:
        """A request to ``broker_name``'s master, else a member (see :meth:`_refreshing`)."""
        resp = self._refreshing(self._broker_addr, broker_name, topic, code, header, body)
        assert resp is not None  # _broker_addr raises rather than name no one
        return resp

    def _master_call(
        self, broker_name: str, topic: str, code: int, header: Any = None, body: Any = None
    ) -> RemotingCommand | None:
        """A request to ``broker_name``'s master alone; None while the group has none."""
        return self._refreshing(self._master_addr, broker_name, topic, code, header, body)

    def _refreshing(
        self,
        where: Callable[[str, str], str | None],
        broker_name: str,
        topic: str,
        code: int,
        header: Any,
        body: Any,
    ) -> RemotingCommand | None:
        """The request sent where ``where`` points (None: nowhere, no request). A refused
        connection (the member died) asks the name server for the topic's route again at
        once, and the request goes once more where that route points (offsets, locks and
        their queries are idempotent, so the second try is safe)."""
        addr = where(broker_name, topic)
        if addr is None:
            return None
        try:
            return self._call(addr, code, header, body)
        except RemotingConnectError:
            self._routes.pop(topic, None)
            with contextlib.suppress(Exception):
                self.get_route_info_by_topic(topic)
            retry = where(broker_name, topic)
            if retry is None:
                return None  # e.g. the master died: no lock anywhere until it is back
            if retry == addr:
                raise
            return self._call(retry, code, header, body)

    def _master_addr(self, broker_name: str, topic: str) -> str | None:
        """The group's master (RocketMQ's findBrokerAddressInSubscribe with
        onlyThisBroker): queue locks live on the master alone, so a group without one
        grants none, and orderly consumption of its queues waits for it."""
        addr = self._brokers.get(broker_name)
        if addr is None and topic not in self._routes:
            with contextlib.suppress(Exception):
                self.get_route_info_by_topic(topic)
            addr = self._brokers.get(broker_name)
        return addr

    def _broker_addr(self, broker_name: str, topic: str | None = None) -> str:
        addr = self._brokers.get(broker_name)
        if addr is None and topic is not None:
            self._routes.pop(topic, None)
            self.get_route_info_by_topic(topic)
            addr = self._brokers.get(broker_name)
        members = self._members.get(broker_name)
        if addr is None and members:
            # No master now (RocketMQ's findBrokerAddressInAdmin): any member of the group.
            addr = members[min(members)]
        if addr is None:
            raise MQClientError(f"The broker[{broker_name}] not exist")
        return addr

    def _broker_name_of(self, addr: str) -> str:
        """The name of the broker group whose master is at ``addr`` (else ``addr``)."""
        with self._lock:
            for name, master in self._brokers.items():
                if master == addr:
                    return name
        return addr

    def _all_brokers(self) -> list[str]:
        with self._lock:
            addrs = sorted(set(self._brokers.values()))
        return addrs or list(self.namesrv_addrs[:1])

    def heartbeat(
        self,
        client_id: str,
        consumer_data: Iterable[ConsumerData] = (),
        producer_groups: Iterable[str] = (),
        channel: ClientChannel | None = None,
    ) -> None:
        """Send a heartbeat to every broker the client knows of."""
        consumer_data = list(consumer_data)
        if channel is not None:
            self._notices.channel = channel
        for data in consumer_data:  # know the brokers of every subscribed topic first
            for sub in data.subscriptions:
                try:  # the heartbeat below reaches new masters: no introduction first
                    self._route(sub.topic, introduce=False)
                except BrokerError:
                    pass  # not created yet: the heartbeat still goes out
        self._clean_offline_brokers()
        body = bodies.HeartbeatData(
            client_id=client_id,
            producer_data_set=[bodies.ProducerData(group_name=g) for g in producer_groups],
            consumer_data_set=[_wire_consumer(d) for d in consumer_data],
        ).encode()
        self._heartbeat_body = body
        with self._lock:
            known = set(self._brokers.values())
            if consumer_data:
                # A group whose master is down: its slave serves the reads, and tells the
                # consumers who their group's members are (RocketMQ's consumers heartbeat
                # every member of a group, slaves too).
                for name, members in self._members.items():
                    if name not in self._brokers:
                        known.update(members.values())
            brokers = sorted(known)
        if brokers:
            # Every broker gets its heartbeat even when one fails (a dead master listed first
            # must not keep the group off the others for a round, as in RocketMQ); the first
            # failure is raised only when no broker took the heartbeat.
            self._each(
                brokers, RequestCode.HEART_BEAT, None, body, "heartbeat_failed", level="warning"
            )
            self._forget_partial_retry_routes(consumer_data, brokers)
            return
        # No broker known yet (no route found): mqcore serve answers as broker on its name
        # server address, so register there; a plain RocketMQ name server refuses the code,
        # and the next heartbeat, once a route names the brokers, reaches them instead.
        # One that cannot be reached (a dead master of a one-group layout, named beside its
        # slave) is skipped while another answers.
        failed: list[Exception] = []
        for addr in self.namesrv_addrs:
            try:
                resp = self._call(addr, RequestCode.HEART_BEAT, None, body)
            except RemotingConnectError as exc:
                log.info("heartbeat_failed", addr=addr, error=str(exc))
                failed.append(exc)
                continue
            if resp.code != ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                _check(resp)
        if failed and len(failed) == len(self.namesrv_addrs):
            raise failed[0]

    def _clean_offline_brokers(self) -> None:
        """Forget the brokers no route this client holds names any more, and close their
        connections (RocketMQ's MQClientInstance.cleanOfflineBroker, run before each
        heartbeat): a group that shut down would otherwise be heartbeated, and fail, every
        round for as long as the client runs."""
        with self._lock:
            named = {
                addr
                for _, route in self._routes.values()
                for b in route.broker_datas
                for _, addr in b.broker_addrs
            }
            known = set(self._brokers.values())
            for name, members in list(self._members.items()):
                known.update(members.values())
                kept = {i: a for i, a in members.items() if a in named}
                if kept:
                    self._members[name] = kept
                else:
                    del self._members[name]
            for name, addr in list(self._brokers.items()):
                if addr not in named:
                    del self._brokers[name]
            for mq in [mq for mq in self._pull_from if mq.broker_name not in self._members]:
                del self._pull_from[mq]
        # A name server's address may also be a broker's (mqcore serve answers as both).
        for addr in sorted(known - named - set(self.namesrv_addrs)):
            log.info("offline_broker_removed", addr=addr)
            self.client.close_connection(addr)

    def _forget_partial_retry_routes(
        self, consumer_data: list[ConsumerData], masters: list[str]
    ) -> None:
        """Drop the cached route of a clustering group's retry topic that does not name every
        master the heartbeat went to.

        Each master creates the group's retry topic on its first heartbeat (RocketMQ), and
        answers once the name servers know of it. A route asked before (the heartbeat's own
        route lookups come first; another member's heartbeat may have reached one master
        only) can name some masters only; kept for 30 s, the rebalance would leave the other
        masters' retry queues unowned, and the messages sent back to them would wait.
        """
        for data in consumer_data:
            if data.message_model is not MessageModel.CLUSTERING:
                continue
            topic = RETRY_GROUP_TOPIC_PREFIX + data.group_name
            with self._lock:
                cached = self._routes.get(topic)
                if cached is None:
                    continue
                named = {b.master_addr for b in cached[1].broker_datas}
                if not named.issuperset(masters):
                    del self._routes[topic]

    def unregister_client(
        self, client_id: str, producer_group: str | None = None, consumer_group: str | None = None
    ) -> None:
        """Tell every known broker the client left its group."""
        if self._closed:
            return
        self._heartbeat_body = None  # no master a route names later is told of it again
        header = headers.UnregisterClientRequestHeader(
            client_id=client_id, producer_group=producer_group, consumer_group=consumer_group
        )
        for addr in self._all_brokers():
            try:
                self._call(addr, RequestCode.UNREGISTER_CLIENT, header)
            except Exception as exc:  # leaving anyway; the broker expires us later
                log.info("unregister_failed", addr=addr, error=str(exc))

    def get_consumer_list_by_group(self, consumer_group: str, topic: str) -> list[str]:
        """The group's client ids: every master of ``topic`` is asked, and the answers joined.

        RocketMQ asks one master chosen at random. A master that has just restarted knows only
        the members whose heartbeat has reached it since; a member that rebalanced on its
        partial list would take queues that others still own (and redeliver), or give up all
        of its own. Each member heartbeats every live master, so the union is the group.
        A master that does not answer is left out; the first failure is raised only when no
        master answered.
        """
        route = self.get_route_info_by_topic(topic)
        # A group without a master: its first slave (which the consumers heartbeat meanwhile).
        addrs = sorted(
            {b.master_addr or min(b.broker_addrs)[1] for b in route.broker_datas if b.broker_addrs}
        )
        header = headers.GetConsumerListByGroupRequestHeader(consumer_group=consumer_group)
        code = RequestCode.GET_CONSUMER_LIST_BY_GROUP
        members: set[str] = set()
        for resp in self._each(addrs, code, header, None, "consumer_list_failed"):
            ids = bodies.GetConsumerListByGroupResponseBody.decode(resp.body or b"{}")
            members.update(ids.consumer_id_list)
        return sorted(members)

    # -- messages ---------------------------------------------------------------------------------

    def send_message(
        self,
        mq: MessageQueue,
        messages: Sequence[Message],
        *,
        producer_group: str,
        born_timestamp: int,
    ) -> list[PutResult]:
        """Send a batch to ``mq``'s broker (SEND_MESSAGE_V2, or SEND_BATCH_MESSAGE)."""
        # The master's address straight from the table (_broker_addr when it has none).
        addr = self._brokers.get(mq.broker_name) or self._broker_addr(mq.broker_name, mq.topic)
        sys_flag = 0
        if len(messages) == 1:
            msg = messages[0]
            body = msg.body
            if body.__class__ is not bytes:
                body = bytes(body)
            if len(body) > COMPRESS_OVER:
                body = zlib.compress(body, COMPRESS_LEVEL)
                sys_flag |= COMPRESSED_FLAG
            properties = format_properties(msg.all_properties())  # wire_properties inlined
            flag, code, batch = msg.flag, _SEND_MESSAGE_V2, False
            if is_transactional(msg.properties):
                sys_flag |= TRANSACTION_PREPARED_TYPE  # as RocketMQ's sendKernelImpl
            if self.client.credentials is None and not self._closed:
                return self._send_prepared(mq, addr, producer_group, born_timestamp,
                                           sys_flag, flag, properties, body)  # fmt: skip
        else:
            body = encode_batch(list(messages))
            properties, flag, code, batch = "", 0, RequestCode.SEND_BATCH_MESSAGE, True
            if self.client.credentials is None and not self._closed:
                return self._send_prepared(mq, addr, producer_group, born_timestamp,
                                           0, 0, "", body, batch=True)  # fmt: skip
        header = headers.SendMessageRequestHeaderV2(
            producer_group=producer_group,
            topic=mq.topic,
            default_topic=DEFAULT_TOPIC,
            default_topic_queue_nums=4,
            queue_id=mq.queue_id,
            sys_flag=sys_flag,
            born_timestamp=born_timestamp,
            flag=flag,
            properties=properties,
            reconsume_times=0,
            batch=batch,
        )
        try:
            sent = self._call(addr, code, header, body)
        except RemotingConnectError:
            self._routes.pop(mq.topic, None)  # the broker may be gone: fetch the route again
            raise
        return self.send_results(sent)

    def _send_prepared(
        self,
        mq: MessageQueue,
        addr: str,
        producer_group: str,
        born_timestamp: int,
        sys_flag: int,
        flag: int,
        properties: str,
        body: bytes,
        batch: bool = False,
    ) -> list[PutResult]:
        """A single SEND_MESSAGE_V2 (or, with ``batch``, a SEND_BATCH_MESSAGE of an
        encoded batch ``body``) encoded in one call and its answer read in one call
        (:func:`~mqcore.remoting.command.encode_request_head`, the direct call): the same
        frame and results as the header object and :meth:`send_results` give. A refusal
        or an answer of another shape is read by :meth:`send_results`; a busy answer is
        sent again as :meth:`_call` does."""
        # The values in _SEND_V2_NAMES's order: a..j, then k (unitMode), m (batch), l.
        values = (producer_group, mq.topic, DEFAULT_TOPIC, 4, mq.queue_id, sys_flag,
                  born_timestamp, flag, properties, 0, False, batch, None)  # fmt: skip
        opaque = next_opaque()
        code = _SEND_BATCH_MESSAGE if batch else _SEND_MESSAGE_V2
        head = encode_request_head(code, opaque, _SEND_V2_NAMES, values, len(body))
        request = PreparedRequest(code, opaque, head, body, _SEND_ANSWER_PLAN)
        try:
            answer = self.client.invoke_prepared(addr, request, self.timeout)
            if isinstance(answer, RemotingCommand) and answer.code == ResponseCode.SYSTEM_BUSY:
                header = headers.SendMessageRequestHeaderV2(
                    producer_group=producer_group, topic=mq.topic, default_topic=DEFAULT_TOPIC,
                    default_topic_queue_nums=4, queue_id=mq.queue_id, sys_flag=sys_flag,
                    born_timestamp=born_timestamp, flag=flag, properties=properties,
                    reconsume_times=0, batch=batch,
                )  # fmt: skip
                answer = self._call(addr, code, header, body)
        except RemotingConnectError:
            self._routes.pop(mq.topic, None)  # the broker may be gone: fetch the route again
            raise
        if answer.__class__ is not tuple:
            assert isinstance(answer, RemotingCommand)
            return self.send_results(answer)
        status, _, _, remark, (msg_id, queue_id, queue_offset, transaction_id), _ = answer
        if status != _SUCCESS:
            # Stored without a slave's confirmation: the general reading.
            sent = headers.SendMessageResponseHeader(
                msg_id=msg_id, queue_id=queue_id, queue_offset=queue_offset,
                transaction_id=transaction_id,
            )  # fmt: skip
            return self.send_results(RemotingCommand.response(status, remark, sent))
        # One id or a batch's comma-joined ids alike: one C call reads them (a single id's
        # result through Python costs twice as much).
        return _put_results(msg_id, queue_offset)

    def send_batch_async(
        self,
        mq: MessageQueue,
        body: bytes,
        *,
        producer_group: str,
        born_timestamp: int,
        timeout: float | None = None,
    ) -> concurrent.futures.Future[RemotingCommand]:
        """Send an encoded SEND_BATCH_MESSAGE ``body`` (see
        :func:`~mqcore.protocol.send.encode_batch`) to ``mq``'s master without waiting for
        the answer, which :meth:`send_results` reads; several may be in flight. Raises
        :class:`RemotingConnectError` at once when the master cannot be reached, and
        :class:`MQClientError` when the group has no master now."""
        addr = self._master_addr(mq.broker_name, mq.topic)
        if addr is None:
            raise MQClientError(
                f"broker group {mq.broker_name} has no master now: {mq} is not writable",
                code=ResponseCode.SERVICE_NOT_AVAILABLE,
            )
        if self._closed:
            raise MQClientError("the client is shut down", code=ResponseCode.SERVICE_NOT_AVAILABLE)
        header = headers.SendMessageRequestHeaderV2(
            producer_group=producer_group,
            topic=mq.topic,
            default_topic=DEFAULT_TOPIC,
            default_topic_queue_nums=4,
            queue_id=mq.queue_id,
            sys_flag=0,
            born_timestamp=born_timestamp,
            flag=0,
            properties="",
            reconsume_times=0,
            batch=True,
        )
        cmd = RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE, header, body)
        try:
            return self.client.invoke_async(addr, cmd, self.timeout if timeout is None else timeout)
        except RemotingConnectError:
            self._routes.pop(mq.topic, None)  # the broker may be gone: fetch the route again
            raise

    def forget_route(self, topic: str) -> None:
        """Drop the cached route of ``topic``: the next use asks the name server again."""
        self._routes.pop(topic, None)

    @staticmethod
    def send_results(sent: RemotingCommand) -> list[PutResult]:
        """What a send's answer says was stored, one result per message; a refusal raised
        (:class:`SlaveNotAcknowledgedError`, with the results, when stored by a SYNC_MASTER
        that no slave confirmed)."""
        resp = _check(
            sent,
            ResponseCode.SUCCESS,
            ResponseCode.SLAVE_NOT_AVAILABLE,
            ResponseCode.FLUSH_SLAVE_TIMEOUT,
        )
        h = resp.read_header(headers.SendMessageResponseHeader)
        out = _put_results(h.msg_id, h.queue_offset)
        if resp.code != ResponseCode.SUCCESS:  # stored by a SYNC_MASTER, no slave confirmed
            raise SlaveNotAcknowledgedError(
                resp.remark or f"stored without a slave's confirmation (code {resp.code})",
                code=resp.code,
                results=out,
            )
        return out

    def end_transaction(
        self, broker_name: str, header: EndTransactionRequestHeader, remark: str | None = None
    ) -> None:
        """Send END_TRANSACTION one-way to ``broker_name``'s master (or to the address a
        check came from, when ``broker_name`` is one)."""
        if self._closed:
            raise MQClientError("the client is shut down", code=ResponseCode.SERVICE_NOT_AVAILABLE)
        with self._lock:
            addr = self._brokers.get(broker_name) or self._notices.checked_from.get(broker_name)
        if addr is None:
            addr = broker_name if ":" in broker_name else self._broker_addr(broker_name)
        cmd = RemotingCommand.request(RequestCode.END_TRANSACTION, header)
        cmd.remark = remark
        self.client.invoke_oneway(addr, cmd, self.timeout)

    def pull_message(
        self,
        mq: MessageQueue,
        consumer_group: str,
        queue_offset: int,
        max_msg_nums: int,
        *,
        sub_expression: str = "*",
        expression_type: str = "TAG",
        suspend_timeout_ms: int = 0,
        commit_offset: int | None = None,
        client_id: str = "",
        timeout: float | None = None,
    ) -> PullResponse:
        """Pull from ``mq``'s broker (the broker holds it up to ``suspend_timeout_ms``).

        The pull goes to the member of the broker group the previous answer for ``mq``
        suggested (``suggestWhichBrokerId``: a slave when the consumer lags far behind).
        """
        addr = self._pull_addr(mq)
        flags = headers.PULL_FLAG_SUBSCRIPTION  # plain ints (see headers.PULL_FLAG_*)
        if commit_offset is not None and commit_offset >= 0:
            flags |= headers.PULL_FLAG_COMMIT_OFFSET
        if suspend_timeout_ms > 0:
            flags |= headers.PULL_FLAG_SUSPEND
        header = headers.PullMessageRequestHeader(
            consumer_group=consumer_group,
            topic=mq.topic,
            queue_id=mq.queue_id,
            queue_offset=queue_offset,
            max_msg_nums=max_msg_nums,
            sys_flag=flags,
            commit_offset=commit_offset if commit_offset is not None else 0,
            suspend_timeout_millis=suspend_timeout_ms,
            subscription=sub_expression or "*",
            sub_version=int(time.time() * 1000),
            expression_type=expression_type,
        )
        wait = timeout if timeout is not None else suspend_timeout_ms / 1000 + PULL_TIMEOUT_MARGIN_S
        if self._pulls_cancelled:
            header = attrs.evolve(
                header,
                sys_flag=header.sys_flag & ~headers.PULL_FLAG_SUSPEND,
                suspend_timeout_millis=0,
            )
        if self._closed:
            raise MQClientError("the client is shut down", code=ResponseCode.SERVICE_NOT_AVAILABLE)
        future: concurrent.futures.Future[RemotingCommand] | None = None
        request = RemotingCommand.request(RequestCode.PULL_MESSAGE, header)
        resp: RemotingCommand | Answer
        try:
            if not header.sys_flag & headers.PULL_FLAG_SUSPEND:
                # Answered at once: a plain call, which reads its own answer (a prepared
                # request, its answer's header read in the same call, when not signed).
                if self.client.credentials is None:
                    resp = self._pull_prepared(addr, header, wait)
                    if isinstance(resp, RemotingCommand) and resp.code == ResponseCode.SYSTEM_BUSY:
                        resp = self.client.invoke_retry_busy(addr, request, wait)
                else:
                    resp = self.client.invoke_retry_busy(addr, request, wait)
            else:
                # Held by the broker: cancellable (cancel_pulls) while it waits.
                # A refused connection (a dead member) raises here, before there is a future.
                future = self.client.invoke_async(addr, request, wait)
                with self._lock:
                    self._pulls.add(future)
                resp = future.result(wait + 1.0)
        except concurrent.futures.CancelledError:  # cancel_pulls(): nothing new, at once
            return PullResponse(ResponseCode.PULL_NOT_FOUND, queue_offset, 0, 0)
        except Exception:
            # A member that fails: back to the master, and ask for the route again (the
            # member may be gone, and another one may serve the queue).
            self._pull_from.pop(mq, None)
            self._routes.pop(mq.topic, None)
            raise
        finally:
            if future is not None:
                with self._lock:
                    self._pulls.discard(future)
        if isinstance(resp, RemotingCommand):
            if resp.code not in _PULL_ANSWERS:
                _check(resp)
            h = resp.read_header(headers.PullMessageResponseHeader)
            code, body = resp.code, resp.body
            suggest, next_begin, min_offset, max_offset = (
                h.suggest_which_broker_id, h.next_begin_offset, h.min_offset, h.max_offset
            )  # fmt: skip
        else:
            code, _, _, remark, (suggest, next_begin, min_offset, max_offset), body = resp
            if code not in _PULL_ANSWERS:
                _check(RemotingCommand.response(code, remark))
        if suggest == MASTER_ID:
            self._pull_from.pop(mq, None)
        else:
            self._pull_from[mq] = int(suggest)
        records = split_records(body) if code == ResponseCode.SUCCESS else []
        return PullResponse(
            ResponseCode(code), next_begin, min_offset, max_offset, records, suggest
        )

    def _pull_prepared(
        self, addr: str, header: headers.PullMessageRequestHeader, wait: float
    ) -> RemotingCommand | Answer:
        """A pull that is answered at once, as a prepared request (its frame encoded in one
        call, its answer's header read with the pull answer's plan in one call)."""
        values = (header.consumer_group, header.topic, header.queue_id, header.queue_offset,
                  header.max_msg_nums, header.sys_flag, header.commit_offset,
                  header.suspend_timeout_millis, header.subscription, header.sub_version,
                  header.expression_type)  # fmt: skip
        opaque = next_opaque()
        code = RequestCode.PULL_MESSAGE
        head = encode_request_head(code, opaque, _PULL_NAMES, values, 0)
        return self.client.invoke_prepared(
            addr, PreparedRequest(code, opaque, head, b"", _PULL_ANSWER_PLAN), wait
        )

    def cancel_pulls(self) -> None:
        """End this client's held pulls at once and hold no later one (shutting down)."""
        self._pulls_cancelled = True
        with self._lock:
            pulls = list(self._pulls)
        for future in pulls:
            future.cancel()

    def _addr_of_message(self, msg: MessageExt) -> str:
        # The record names the broker that stored it (its store host, the server's address).
        host = msg.store_host
        with self._lock:
            if host in self._brokers.values():
                return host
        return self._all_brokers()[0]

    def consumer_send_msg_back(
        self,
        consumer_group: str,
        msg: MessageExt,
        delay_level: int,
        max_reconsume_times: int,
    ) -> None:
        """CONSUMER_SEND_MSG_BACK to the broker holding ``msg``."""
        header = headers.ConsumerSendMsgBackRequestHeader(
            offset=msg.commitlog_offset,
            group=consumer_group,
            delay_level=delay_level,
            origin_msg_id=msg.get_property("ORIGIN_MESSAGE_ID")
            or getattr(msg, "offset_msg_id", msg.msg_id),
            origin_topic=msg.topic,
            max_reconsume_times=max_reconsume_times,
        )
        _check(self._call(self._addr_of_message(msg), RequestCode.CONSUMER_SEND_MSG_BACK, header))

    def view_message_by_id(self, msg_id: str, topic: str | None = None) -> MessageExt:
        """The message with offset id ``msg_id``; else, with ``topic``, the one whose unique
        id is ``msg_id`` (RocketMQ's ``viewMessage`` falling back to ``queryMessageByUniqKey``)."""
        try:
            host, offset = decode_message_id(msg_id)
        except Exception:
            host, offset = "", -1
        with self._lock:
            known = host in self._brokers.values() or host in self.namesrv_addrs
        if offset >= 0 and (known or topic is None):
            resp = self._call(
                host if known else self._all_brokers()[0],
                RequestCode.VIEW_MESSAGE_BY_ID,
                headers.ViewMessageRequestHeader(offset=offset),
            )
            if resp.code == ResponseCode.SUCCESS:
                records = split_records(resp.body)
                if records:
                    return MessageExt(bytes(records[0]))
            if topic is None:
                _check(resp)
        if topic is not None:
            for m in self.query_message(topic, msg_id, 32):
                if m.msg_id == msg_id:
                    return m
        raise BrokerError(f"no message with id {msg_id}", code=ResponseCode.QUERY_NOT_FOUND)

    def query_message(
        self,
        topic: str,
        key: str,
        max_num: int = 32,
        begin_timestamp: int = 0,
        end_timestamp: int = 2**63 - 1,
    ) -> list[MessageExt]:
        """Messages of ``topic`` indexed under ``key``, from every broker of the topic."""
        route = self.get_route_info_by_topic(topic)
        header = headers.QueryMessageRequestHeader(
            topic=topic,
            key=key,
            max_num=max_num,
            begin_timestamp=begin_timestamp,
            end_timestamp=end_timestamp,
        )
        out: list[MessageExt] = []
        for b in route.broker_datas:
            if not b.master_addr:
                continue
            resp = self._call(b.master_addr, RequestCode.QUERY_MESSAGE, header)
            if resp.code == ResponseCode.QUERY_NOT_FOUND:
                continue
            _check(resp)
            out.extend(MessageExt(bytes(r)) for r in split_records(resp.body))
        return out[:max_num]

    # -- offsets ----------------------------------------------------------------------------------

    def query_consumer_offset(self, consumer_group: str, mq: MessageQueue) -> int:
        """The group's committed offset in ``mq`` (-1: none)."""
        header = headers.QueryConsumerOffsetRequestHeader(
            consumer_group=consumer_group, topic=mq.topic, queue_id=mq.queue_id
        )
        resp = self._broker_call(
            mq.broker_name, mq.topic, RequestCode.QUERY_CONSUMER_OFFSET, header
        )
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return -1
        return int(_check(resp).read_header(headers.QueryConsumerOffsetResponseHeader).offset)

    def update_consumer_offset(self, consumer_group: str, mq: MessageQueue, offset: int) -> None:
        """Commit the group's next offset in ``mq``."""
        header = headers.UpdateConsumerOffsetRequestHeader(
            consumer_group=consumer_group,
            topic=mq.topic,
            queue_id=mq.queue_id,
            commit_offset=offset,
        )
        _check(
            self._broker_call(mq.broker_name, mq.topic, RequestCode.UPDATE_CONSUMER_OFFSET, header)
        )

    def _offset_call(self, code: int, header: Any, response: Any, mq: MessageQueue) -> int:
        resp = _check(self._broker_call(mq.broker_name, mq.topic, code, header))
        return int(resp.read_header(response).offset)

    def get_min_offset(self, mq: MessageQueue) -> int:
        """Smallest offset stored in ``mq``."""
        header = headers.GetMinOffsetRequestHeader(topic=mq.topic, queue_id=mq.queue_id)
        return self._offset_call(
            RequestCode.GET_MIN_OFFSET, header, headers.GetMinOffsetResponseHeader, mq
        )

    def get_max_offset(self, mq: MessageQueue) -> int:
        """One past the last offset of ``mq``."""
        header = headers.GetMaxOffsetRequestHeader(topic=mq.topic, queue_id=mq.queue_id)
        return self._offset_call(
            RequestCode.GET_MAX_OFFSET, header, headers.GetMaxOffsetResponseHeader, mq
        )

    def search_offset_by_timestamp(self, mq: MessageQueue, timestamp: int) -> int:
        """First offset of ``mq`` stored at or after ``timestamp``."""
        header = headers.SearchOffsetRequestHeader(
            topic=mq.topic, queue_id=mq.queue_id, timestamp=timestamp
        )
        return self._offset_call(
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, header, headers.SearchOffsetResponseHeader, mq
        )

    # -- orderly consumption ----------------------------------------------------------------------

    # -- pop consumption --------------------------------------------------------------------------

    def pop_message(
        self,
        mq: MessageQueue,
        consumer_group: str,
        max_msg_nums: int,
        invisible_time_ms: int,
        *,
        poll_time_ms: int = 0,
        expression: str = "*",
        expression_type: str = "TAG",
        order: bool = False,
        init_mode: int = 1,
    ) -> pop_wire.PopResult:
        """POP_MESSAGE to ``mq``'s master (held up to ``poll_time_ms``; cancel_pulls ends
        the wait at once)."""
        if self._pulls_cancelled:
            poll_time_ms = 0
        addr = self._broker_addr(mq.broker_name, mq.topic)
        header = pop_wire.PopMessageRequestHeader(
            consumer_group=consumer_group,
            topic=mq.topic,
            queue_id=mq.queue_id,
            max_msg_nums=max_msg_nums,
            invisible_time=invisible_time_ms,
            poll_time=poll_time_ms,
            born_time=int(time.time() * 1000),
            init_mode=init_mode,
            exp_type=expression_type,
            exp=expression,
            order=order,
        )
        if self._closed:
            raise MQClientError("the client is shut down", code=ResponseCode.SERVICE_NOT_AVAILABLE)
        wait = poll_time_ms / 1000 + PULL_TIMEOUT_MARGIN_S
        request = RemotingCommand.request(RequestCode.POP_MESSAGE, header)
        future = self.client.invoke_async(addr, request, wait)
        with self._lock:
            self._pulls.add(future)
        try:
            resp = future.result(wait + 1.0)
        except concurrent.futures.CancelledError:
            return pop_wire.PopResult(ResponseCode.POLLING_TIMEOUT, 0, invisible_time_ms, 0, 0)
        finally:
            with self._lock:
                self._pulls.discard(future)
        if resp.code not in (ResponseCode.SUCCESS, ResponseCode.POLLING_TIMEOUT,
                             ResponseCode.PULL_NOT_FOUND, ResponseCode.POLLING_FULL):  # fmt: skip
            _check(resp)
        h = resp.read_header(pop_wire.PopMessageResponseHeader)
        found = resp.code == ResponseCode.SUCCESS
        return pop_wire.PopResult(
            ResponseCode.SUCCESS if found else ResponseCode.POLLING_TIMEOUT,
            h.pop_time,
            h.invisible_time,
            h.revive_qid,
            h.rest_num,
            h.start_offset_info or "",
            h.msg_offset_info or "",
            h.order_count_info or "",
            split_records(resp.body) if found else [],
        )

    def ack_message(
        self, mq: MessageQueue, consumer_group: str, extra_info: str, offset: int
    ) -> None:
        """ACK_MESSAGE to ``mq``'s master."""
        header = pop_wire.AckMessageRequestHeader(
            consumer_group=consumer_group,
            topic=mq.topic,
            queue_id=mq.queue_id,
            extra_info=extra_info,
            offset=offset,
        )
        _check_handle(self._broker_call(mq.broker_name, mq.topic, RequestCode.ACK_MESSAGE, header))

    def batch_ack_message(self, broker_name: str, acks: Sequence[pop_wire.BatchAck]) -> None:
        """BATCH_ACK_MESSAGE to ``broker_name``'s master."""
        topic = acks[0].topic if acks else ""
        body = pop_wire.encode_batch_ack_body(acks)
        _check_handle(
            self._broker_call(broker_name, topic, RequestCode.BATCH_ACK_MESSAGE, None, body)
        )

    def change_invisible_time(
        self,
        mq: MessageQueue,
        consumer_group: str,
        extra_info: str,
        offset: int,
        invisible_time_ms: int,
    ) -> tuple[int, int, int]:
        """CHANGE_MESSAGE_INVISIBLETIME to ``mq``'s master."""
        header = pop_wire.ChangeInvisibleTimeRequestHeader(
            consumer_group=consumer_group,
            topic=mq.topic,
            queue_id=mq.queue_id,
            extra_info=extra_info,
            offset=offset,
            invisible_time=invisible_time_ms,
        )
        resp = _check_handle(
            self._broker_call(
                mq.broker_name, mq.topic, RequestCode.CHANGE_MESSAGE_INVISIBLETIME, header
            )
        )
        h = resp.read_header(pop_wire.ChangeInvisibleTimeResponseHeader)
        return h.pop_time, h.invisible_time, h.revive_qid

    def _by_broker(self, mqs: Iterable[MessageQueue]) -> dict[str, list[MessageQueue]]:
        groups: dict[str, list[MessageQueue]] = {}
        for mq in mqs:
            groups.setdefault(mq.broker_name, []).append(mq)
        return groups

    def lock_batch_mq(
        self, consumer_group: str, client_id: str, mqs: Iterable[MessageQueue]
    ) -> set[MessageQueue]:
        """LOCK_BATCH_MQ on each broker of ``mqs``; the queues now held."""
        locked: set[MessageQueue] = set()
        for name, group in self._by_broker(mqs).items():
            body = bodies.LockBatchRequestBody(
                consumer_group=consumer_group, client_id=client_id, mq_set=group
            ).encode()
            resp = self._master_call(name, group[0].topic, RequestCode.LOCK_BATCH_MQ, None, body)
            if resp is None:
                continue  # no master now: none of these queues is locked
            _check(resp)
            locked |= set(bodies.LockBatchResponseBody.decode(resp.body or b"{}").lock_ok_mq_set)
        return locked

    def unlock_batch_mq(
        self, consumer_group: str, client_id: str, mqs: Iterable[MessageQueue]
    ) -> None:
        """UNLOCK_BATCH_MQ on each broker of ``mqs``."""
        if self._closed:
            return
        for name, group in self._by_broker(mqs).items():
            body = bodies.UnlockBatchRequestBody(
                consumer_group=consumer_group, client_id=client_id, mq_set=group
            ).encode()
            resp = self._master_call(name, group[0].topic, RequestCode.UNLOCK_BATCH_MQ, None, body)
            if resp is not None:  # no master: its locks went with it
                _check(resp)


def _wire_consumer(data: ConsumerData) -> bodies.ConsumerData:
    return bodies.ConsumerData(
        group_name=data.group_name,
        consume_type=data.consume_type,
        message_model=data.message_model.name,
        consume_from_where=data.consume_from_where.name,
        subscription_data_set=[
            bodies.SubscriptionData(
                topic=s.topic, sub_string=s.sub_string, expression_type=s.expression_type
            )
            for s in data.subscriptions
        ],
    )

"""The admin client: what an operator asks of mqcore's brokers over the remoting protocol
(RocketMQ's ``DefaultMQAdminExt``).

It starts from a name server, as ``mqadmin -n`` does: ``mqcore namesrv`` with any number of
broker groups behind it, or a single ``mqcore serve`` (which answers as its own name server).
The broker groups come from the name server's cluster info (GET_BROKER_CLUSTER_INFO); each
request goes to every group's master (a group without one: to its lowest-numbered member, for
reads) or to the groups of the topic concerned, and the answers are merged.

The ``mqcore topic|group|lag|message|dlq|offset`` commands are thin layers over
:class:`MQAdmin`; scripts can use it directly::

    with MQAdmin("127.0.0.1:9876") as admin:
        for row in admin.lag("cg"):
            print(row.queue, row.lag, row.owner)
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import attrs

from mqcore.client.transport_remote import RemoteTransport, split_records
from mqcore.errors import (
    BrokerError,
    InvalidArgumentError,
    MQClientError,
    NoPermissionError,
    RemotingError,
    TopicNotExistError,
)
from mqcore.logs import get_logger
from mqcore.message import MessageExt, MessageQueue, system_message
from mqcore.protocol import admin_bodies, bodies, headers
from mqcore.protocol.admin_bodies import TIMER_RUNTIME_KEYS
from mqcore.protocol.attributes import MESSAGE_TYPE
from mqcore.protocol.codes import RequestCode, ResponseCode
from mqcore.protocol.fastjson import loads
from mqcore.protocol.route import MASTER_ID
from mqcore.remoting.command import RemotingCommand
from mqcore.validation import SYSTEM_PROPERTY_NAMES

__all__ = ["DLQ_PREFIX", "RETRY_PREFIX", "LagRow", "MQAdmin", "ResendResult", "TopicInfo"]

log = get_logger(__name__)

DLQ_PREFIX = "%DLQ%"
RETRY_PREFIX = "%RETRY%"
TOOLS_CONSUMER_GROUP = "TOOLS_CONSUMER"  # RocketMQ's MixAll.TOOLS_CONSUMER_GROUP
TOOLS_PRODUCER_GROUP = "CLIENT_INNER_PRODUCER"  # RocketMQ's MixAll.CLIENT_INNER_PRODUCER_GROUP
_KEPT_SYSTEM_PROPERTIES = frozenset({"UNIQ_KEY"})  # a resent dead letter keeps its id
RUNNING_INFO_WAIT_S = 8.0  # longer than the server waits for the client (5 s)


@attrs.frozen
class TopicInfo:
    """A topic's config as its brokers hold it: queue counts summed over the broker groups
    that serve it (``brokers``), as a producer and a consumer see them."""

    topic: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    order: bool
    brokers: tuple[str, ...] = ()
    #: each broker group's own counts: (broker name, read queues, write queues)
    queue_nums: tuple[tuple[str, int, int], ...] = ()


@attrs.frozen
class LagRow:
    """One queue of a group's progress, with the client that owns the queue now (several,
    comma-separated, in a broadcasting group; None when no member holds it)."""

    queue: MessageQueue
    broker_offset: int
    consumer_offset: int
    lag: int
    last_timestamp: int
    owner: str | None


@attrs.frozen
class ResendResult:
    """What ``dlq resend`` did: messages sent back, by original topic, and the DLQ offsets
    (by broker group and queue id)."""

    resent: int
    by_topic: dict[str, int]
    skipped: int
    dlq_offsets: dict[MessageQueue, int]


@attrs.frozen
class _Member:
    """Where requests for one broker group go: its master, else (reads only) a member."""

    broker_name: str
    addr: str
    master: bool


class MQAdmin:
    """Admin calls through a name server: ``mqcore namesrv`` (every broker group registered
    with it) or a single ``mqcore serve`` (itself).

    :param server: ``host:port`` of the name server (several separated by ``;``).
    :param timeout: seconds to wait for each answer.
    :param credentials: an ACL account's ``(access_key, secret_key)``: every request is
        signed (admin calls need an account with ``admin: true``).
    :param tls: True or an :class:`ssl.SSLContext`: TLS to the servers.
    """

    def __init__(
        self, server: str, *, timeout: float = 5.0, credentials: Any = None, tls: Any = None
    ) -> None:
        self.server = server
        self.transport = RemoteTransport(server, timeout=timeout, credentials=credentials, tls=tls)

    def close(self) -> None:
        """Close the connections."""
        self.transport.close()

    def __enter__(self) -> MQAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- brokers ------------------------------------------------------------------------------

    def brokers(self) -> dict[str, dict[int, str]]:
        """The brokers this admin talks to, by group: broker name -> member id -> address.

        Through a name server: every group registered with it, with all its members. A single
        ``mqcore serve`` answers as its own name server, naming itself among its group's
        members: then it alone is asked (a slave's own topics and offsets, not its master's).

        :raises BrokerError: a name server with no broker registered.
        """
        resp = self.transport._namesrv_call(RequestCode.GET_BROKER_CLUSTER_INFO, None)
        if resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
            # A broker that is not a name server (RocketMQ's own, asked directly): itself.
            return {"": {MASTER_ID: self.transport.namesrv_addrs[0]}}
        self._check(resp, RequestCode.GET_BROKER_CLUSTER_INFO)
        table = loads(resp.body or b"{}").get("brokerAddrTable") or {}
        groups = {
            str(name): {int(i): str(a) for i, a in (data.get("brokerAddrs") or {}).items()}
            for name, data in table.items()
        }
        groups = {name: members for name, members in sorted(groups.items()) if members}
        if not groups:
            raise BrokerError(
                f"the name server at {self.server} knows no broker yet: start one with "
                f"`mqcore serve --namesrv {self.server}`, or point --server at `mqcore serve`",
                code=ResponseCode.SYSTEM_ERROR,
            )
        for name, members in groups.items():
            for member_id, addr in members.items():
                if addr in self.transport.namesrv_addrs:
                    return {name: {member_id: addr}}
        return groups

    def _members(self, names: Sequence[str] | None = None, *, write: bool = False) -> list[_Member]:
        """One address per broker group (of ``names``, or all): its master; else, unless
        ``write``, its lowest-numbered member (a slave serves reads while its master is down).

        :raises BrokerError: a group named that does not exist, or (``write``) has no master.
        """
        groups = self.brokers()
        if names is not None:
            unknown = sorted(set(names) - set(groups))
            if unknown:
                raise BrokerError(
                    f"no broker group {', '.join(map(repr, unknown))} at {self.server}; "
                    f"known: {', '.join(groups)}",
                    code=ResponseCode.SYSTEM_ERROR,
                )
            groups = {n: groups[n] for n in sorted(set(names))}
        out: list[_Member] = []
        for name, members in groups.items():
            if not members:
                continue  # brokers() leaves out a group without members: never picked from
            if MASTER_ID in members:
                out.append(_Member(name, members[MASTER_ID], True))
            elif write and members.get(min(members)) in self.transport.namesrv_addrs:
                raise BrokerError(
                    f"the server at {self.server} is a slave (broker {name!r}, id "
                    f"{min(members)}) and takes no writes: point --server at its master or at "
                    f"the name server",
                    code=ResponseCode.SERVICE_NOT_AVAILABLE,
                )
            elif write:
                raise BrokerError(
                    f"broker group {name!r} has no master now and takes no writes; start its "
                    f"master (`mqcore cluster status --server {self.server}` shows the members)",
                    code=ResponseCode.SERVICE_NOT_AVAILABLE,
                )
            else:
                out.append(_Member(name, members[min(members)], False))
        return out

    def _topic_members(self, topic: str) -> list[_Member]:
        """The broker groups that serve ``topic`` (its route).

        :raises TopicNotExistError: no group serves it.
        """
        try:
            route = self.transport._route(topic, introduce=False)
        except TopicNotExistError:
            raise TopicNotExistError(
                f"topic {topic!r} does not exist; `mqcore topic list` shows the topics",
                code=ResponseCode.TOPIC_NOT_EXIST,
            ) from None
        names = [b.broker_name for b in route.broker_datas]
        known = self.brokers()
        return self._members([n for n in names if n in known] or None)

    @staticmethod
    def _check(resp: RemotingCommand, code: int) -> RemotingCommand:
        if resp.code != ResponseCode.SUCCESS:
            remark = resp.remark or f"the server refused request code {code} (code {resp.code})"
            if resp.code == ResponseCode.TOPIC_NOT_EXIST:
                raise TopicNotExistError(remark, code=resp.code)
            if resp.code == ResponseCode.NO_PERMISSION:  # the server's ACL
                raise NoPermissionError(remark, code=resp.code)
            raise BrokerError(remark, code=resp.code)
        return resp

    def _call(
        self,
        addr: str,
        code: int,
        header: Any = None,
        body: Any = None,
        timeout: float | None = None,
    ) -> RemotingCommand:
        return self._check(self.transport._call(addr, code, header, body, timeout), code)

    def _each(
        self,
        members: Sequence[_Member],
        code: int,
        header: Any = None,
        body: Any = None,
        *,
        skip: Sequence[int] = (),
        empty: Sequence[int] = (),
        timeout: float | None = None,
    ) -> list[tuple[_Member, RemotingCommand]]:
        """The request sent to each member; the answers of those that took it (or said it
        had nothing, with a code in ``empty``). A member that cannot be reached is logged and
        left out, as one refusing with a code in ``skip``; when no member answered, the
        first failure (or refusal) is raised."""
        answers: list[tuple[_Member, RemotingCommand]] = []
        failures: list[Exception] = []
        for member in members:
            try:
                resp = self.transport._call(member.addr, code, header, body, timeout)
                if resp.code not in empty:
                    self._check(resp, code)
                answers.append((member, resp))
            except BrokerError as exc:
                if exc.code not in skip:
                    raise
                failures.append(exc)
            except (RemotingError, MQClientError) as exc:
                log.warning(
                    "admin_broker_unreachable",
                    broker=member.broker_name,
                    addr=member.addr,
                    error=str(exc),
                )
                failures.append(exc)
        if not answers and failures:
            raise failures[0]
        return answers

    def timer_stats(self) -> dict[str, dict[str, int | None]]:
        """Each broker group's timer messages, from its master's runtime info
        (GET_BROKER_RUNTIME_INFO): broker name -> the fields of ``TimerStats`` (pending,
        in_wheel, enqueue_backlog, next_due_ms, lag_ms, read_ms). A group whose broker runs
        no timer scheduler is left out."""
        out: dict[str, dict[str, int | None]] = {}
        for member, resp in self._each(self._members(), RequestCode.GET_BROKER_RUNTIME_INFO):
            table = loads(resp.body or b"{}").get("table") or {}
            if TIMER_RUNTIME_KEYS["pending"] not in table:
                continue
            out[member.broker_name] = {
                name: int(table[key]) if key in table else None
                for name, key in TIMER_RUNTIME_KEYS.items()
            }
        return out

    # -- topics -----------------------------------------------------------------------------------

    def topics(self) -> list[TopicInfo]:
        """Every topic's config (GET_ALL_TOPIC_CONFIG of each broker group), by name."""
        merged: dict[str, dict[str, Any]] = {}
        for member, resp in self._each(self._members(), RequestCode.GET_ALL_TOPIC_CONFIG):
            configs = loads(resp.body or b"{}").get("topicConfigTable") or {}
            for name, cfg in configs.items():
                row = merged.setdefault(
                    str(name),
                    {"read": 0, "write": 0, "perm": 6, "order": False, "brokers": [], "each": []},
                )
                if not row["brokers"]:
                    row["perm"] = int(cfg.get("perm", 6))
                row["read"] += int(cfg.get("readQueueNums", 0))
                row["write"] += int(cfg.get("writeQueueNums", 0))
                row["order"] = row["order"] or bool(cfg.get("order", False))
                row["brokers"].append(member.broker_name)
                row["each"].append(
                    (
                        member.broker_name,
                        int(cfg.get("readQueueNums", 0)),
                        int(cfg.get("writeQueueNums", 0)),
                    )
                )
        return [
            TopicInfo(
                topic=name,
                read_queue_nums=row["read"],
                write_queue_nums=row["write"],
                perm=row["perm"],
                order=row["order"],
                brokers=tuple(sorted(row["brokers"])),
                queue_nums=tuple(sorted(row["each"])),
            )
            for name, row in sorted(merged.items())
        ]

    def topic(self, topic: str) -> TopicInfo:
        """One topic's config. :raises TopicNotExistError: no such topic."""
        for info in self.topics():
            if info.topic == topic:
                return info
        raise TopicNotExistError(
            f"topic {topic!r} does not exist; `mqcore topic list` shows the topics",
            code=ResponseCode.TOPIC_NOT_EXIST,
        )

    def create_topic(
        self,
        topic: str,
        queue_nums: int = 8,
        *,
        read_queue_nums: int | None = None,
        write_queue_nums: int | None = None,
        perm: int = 6,
        order: bool = False,
        brokers: Sequence[str] | None = None,
        message_type: str | None = None,
    ) -> TopicInfo:
        """Create or update ``topic`` (UPDATE_AND_CREATE_TOPIC) on the master of every broker
        group, or of the groups named in ``brokers`` (RocketMQ's ``updateTopic -c`` and
        ``-b``), with that many queues on each; its config afterwards.

        ``message_type`` (NORMAL, FIFO, DELAY, TRANSACTION or MIXED) sets RocketMQ 5's
        ``message.type`` topic attribute: the messages the 5.x clients may send to it."""
        if queue_nums < 1:
            raise InvalidArgumentError(f"a topic needs at least 1 queue, got {queue_nums}")
        header = headers.CreateTopicRequestHeader(
            topic=topic,
            default_topic="TBW102",
            read_queue_nums=read_queue_nums or queue_nums,
            write_queue_nums=write_queue_nums or queue_nums,
            perm=perm,
            topic_filter_type="SINGLE_TAG",
            order=order,
            attributes=None if message_type is None else f"+{MESSAGE_TYPE}={message_type}",
        )
        for member in self._members(brokers, write=True):
            self._call(member.addr, RequestCode.UPDATE_AND_CREATE_TOPIC, header)
        return self.topic(topic)

    def delete_topic(self, topic: str) -> None:
        """Delete ``topic`` (DELETE_TOPIC_IN_BROKER) from every broker group that has it.

        :raises TopicNotExistError: none has it.
        """
        info = self.topic(topic)
        header = headers.DeleteTopicRequestHeader(topic=topic)
        for member in self._members(info.brokers or None, write=True):
            self._call(member.addr, RequestCode.DELETE_TOPIC_IN_BROKER, header)

    def topic_stats(self, topic: str) -> admin_bodies.TopicStatsTable:
        """Each queue's offsets and last store time (GET_TOPIC_STATS_INFO), every group's."""
        header = headers.GetTopicStatsInfoRequestHeader(topic=topic)
        table: dict[MessageQueue, admin_bodies.TopicOffset] = {}
        answers = self._each(
            self._members(self.topic(topic).brokers or None),
            RequestCode.GET_TOPIC_STATS_INFO,
            header,
            skip=(ResponseCode.TOPIC_NOT_EXIST,),
        )
        for _, resp in answers:
            table.update(admin_bodies.TopicStatsTable.decode(resp.body or b"{}").offset_table)
        return admin_bodies.TopicStatsTable(offset_table=table)

    # -- groups -----------------------------------------------------------------------------------

    def groups(self) -> list[str]:
        """The consumer groups the brokers know (GET_ALL_SUBSCRIPTIONGROUP_CONFIG), sorted."""
        found: set[str] = set()
        for _, resp in self._each(self._members(), RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG):
            found.update(admin_bodies.SubscriptionGroupWrapper.decode(resp.body or b"{}").groups)
        return sorted(found)

    def _require_group(self, group: str) -> None:
        if group not in self.groups():
            raise BrokerError(
                f"consumer group {group!r} is unknown to the server (no member online, no "
                f"offset committed); `mqcore group list` shows the groups it knows",
                code=ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
            )

    def consume_stats(self, group: str, topic: str | None = None) -> admin_bodies.ConsumeStats:
        """The group's broker and consumer offsets per queue (GET_CONSUME_STATS), merged over
        the broker groups (of ``topic``, or all).

        :raises BrokerError: a group no broker knows (SUBSCRIPTION_GROUP_NOT_EXIST), or a
            topic none has.
        """
        members = self._topic_members(topic) if topic else self._members()
        header = headers.GetConsumeStatsRequestHeader(consumer_group=group, topic=topic)
        answers = self._each(
            members,
            RequestCode.GET_CONSUME_STATS,
            header,
            skip=(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, ResponseCode.TOPIC_NOT_EXIST),
        )
        table: dict[MessageQueue, admin_bodies.OffsetWrapper] = {}
        tps = 0.0
        for _, resp in answers:
            stats = admin_bodies.ConsumeStats.decode(resp.body or b"{}")
            table.update(stats.offset_table)
            tps += stats.consume_tps
        return admin_bodies.ConsumeStats(offset_table=table, consume_tps=tps)

    def connections(self, group: str) -> admin_bodies.ConsumerConnection | None:
        """The group's live clients (GET_CONSUMER_CONNECTION_LIST), joined over the broker
        groups (a client heartbeats the brokers of its topics only); None when none is."""
        header = headers.GetConsumerConnectionListRequestHeader(consumer_group=group)
        try:
            answers = self._each(
                self._members(),
                RequestCode.GET_CONSUMER_CONNECTION_LIST,
                header,
                skip=(ResponseCode.CONSUMER_NOT_ONLINE,),
            )
        except BrokerError as exc:
            if exc.code == ResponseCode.CONSUMER_NOT_ONLINE:
                return None
            raise
        found = [admin_bodies.ConsumerConnection.decode(r.body or b"{}") for _, r in answers]
        if not found:
            return None
        clients = {c.client_id: c for conn in found for c in conn.connection_set}
        subscriptions = {t: s for conn in found for t, s in conn.subscription_table.items()}
        return attrs.evolve(
            found[0], connection_set=clients.values(), subscription_table=subscriptions
        )

    def running_info(self, group: str, client_id: str) -> admin_bodies.ConsumerRunningInfo:
        """What client ``client_id`` owns and holds now (GET_CONSUMER_RUNNING_INFO, which a
        broker the client is connected to passes on to it)."""
        header = headers.GetConsumerRunningInfoRequestHeader(
            consumer_group=group, client_id=client_id
        )
        # A broker the client does not heartbeat answers SYSTEM_ERROR ("not online"): the
        # next one is asked.
        answers = self._each(
            self._members(),
            RequestCode.GET_CONSUMER_RUNNING_INFO,
            header,
            skip=(ResponseCode.SYSTEM_ERROR,),
            timeout=max(self.transport.timeout, RUNNING_INFO_WAIT_S),
        )
        return admin_bodies.ConsumerRunningInfo.decode(answers[0][1].body or b"{}")

    def can_administer(self) -> bool:
        """Whether the brokers let this client's account send admin requests: asks a broker
        for the running info of a client nobody runs (an admin code that changes nothing);
        False when the broker's ACL refuses it (NO_PERMISSION)."""
        header = headers.GetConsumerRunningInfoRequestHeader(
            consumer_group="mqcore_admin_probe", client_id="mqcore-admin-probe"
        )
        try:
            self._each(self._members()[:1], RequestCode.GET_CONSUMER_RUNNING_INFO, header)
        except NoPermissionError:
            return False
        except BrokerError:
            pass  # the client is not online: the request itself was let in
        return True

    def owners(self, group: str) -> dict[MessageQueue, list[str]]:
        """The clients that own each queue now, from every live member's running info (a
        member that does not answer owns nothing here). Clustering: one per queue;
        broadcasting: every member holds every queue."""
        conns = self.connections(group)
        owners: dict[MessageQueue, list[str]] = {}
        for conn in conns.connection_set if conns else ():
            try:
                info = self.running_info(group, conn.client_id)
            except (BrokerError, RemotingError):
                continue  # gone meanwhile, or a client that does not serve the request
            for mq, pq in info.mq_table.items():
                if not pq.droped:
                    owners.setdefault(mq, []).append(conn.client_id)
        return owners

    def lag(self, group: str, topic: str | None = None) -> list[LagRow]:
        """Per queue: broker offset, consumer offset, lag and owner client(s)."""
        stats = self.consume_stats(group, topic)
        owners = self.owners(group)
        # A client names each queue's broker group as its route did: the broker's own name.
        by_queue = {mq: ", ".join(sorted(c)) for mq, c in owners.items()}
        return [
            LagRow(
                queue=mq,
                broker_offset=w.broker_offset,
                consumer_offset=w.consumer_offset,
                lag=w.lag,
                last_timestamp=w.last_timestamp,
                owner=by_queue.get(mq),
            )
            for mq, w in sorted(stats.offset_table.items())
        ]

    # -- offsets ------------------------------------------------------------------------------

    def reset_offset(
        self, group: str, topic: str, timestamp_ms: int, *, force: bool = True
    ) -> dict[MessageQueue, int]:
        """Move ``group``'s offsets in ``topic`` to the first message stored at or after
        ``timestamp_ms`` (INVOKE_BROKER_TO_RESET_OFFSET to each broker group of the topic);
        running members are told to follow.

        Without ``force`` a queue's offset only moves back (RocketMQ's ``isForce``).

        :raises TopicNotExistError: no such topic.
        :raises BrokerError: a group the server does not know (a misspelt name must not
            create offsets for a group nobody runs; RocketMQ refuses it too).
        """
        info = self.topic(topic)
        self._require_group(group)
        header = headers.ResetOffsetRequestHeader(
            topic=topic, group=group, timestamp=timestamp_ms, is_force=force
        )
        offsets: dict[MessageQueue, int] = {}
        for member in self._members(info.brokers or None, write=True):
            resp = self._call(member.addr, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, header)
            offsets.update(bodies.ResetOffsetBody.decode(resp.body or b"{}").offset_table)
        return offsets

    # -- messages -----------------------------------------------------------------------------

    def view_message(self, msg_id: str, topic: str | None = None) -> list[MessageExt]:
        """The message(s) with id ``msg_id``: an offset id names one stored copy; a unique id
        (what a producer's send returned) is looked up in ``topic``, or in every topic, and
        finds the message and its retry and dead-letter copies."""
        found = self._by_offset_id(msg_id)
        if found is not None:
            return [found]
        topics = [topic] if topic else [t.topic for t in self.topics()]
        if topic:
            self.topic(topic)
        out: list[MessageExt] = []
        for name in topics:
            out.extend(m for m in self.query_by_key(name, msg_id) if m.msg_id == msg_id)
        return out

    def _by_offset_id(self, msg_id: str) -> MessageExt | None:
        if len(msg_id) != 32:
            return None
        try:
            offset = int(msg_id[16:], 16)
        except ValueError:
            return None
        header = headers.ViewMessageRequestHeader(offset=offset)
        # The id names the broker that stored it by address; every member is asked (a slave
        # holds its master's records at the same offsets), the one that stored it first.
        addrs = sorted(
            (a for members in self.brokers().values() for a in members.values()),
            key=lambda a: a != _host_of(msg_id),
        )
        for addr in addrs:
            try:
                resp = self.transport._call(addr, RequestCode.VIEW_MESSAGE_BY_ID, header)
            except (RemotingError, MQClientError):
                continue
            if resp.code != ResponseCode.SUCCESS:
                continue
            records = split_records(resp.body)
            msg = MessageExt(bytes(records[0])) if records else None
            # A unique id read as an offset id may land on a record by chance: check the id.
            if msg is not None and msg.offset_msg_id == msg_id.upper():
                return msg
        return None

    def query_by_key(self, topic: str, key: str, max_num: int = 64) -> list[MessageExt]:
        """Messages of ``topic`` indexed under ``key`` (QUERY_MESSAGE to each broker group of
        the topic), oldest first."""
        header = headers.QueryMessageRequestHeader(
            topic=topic, key=key, max_num=max_num, begin_timestamp=0, end_timestamp=2**63 - 1
        )
        answers = self._each(
            self._members(self.topic(topic).brokers or None),
            RequestCode.QUERY_MESSAGE,
            header,
            skip=(ResponseCode.TOPIC_NOT_EXIST,),
            empty=(ResponseCode.QUERY_NOT_FOUND,),
        )
        found = [
            MessageExt(bytes(r))
            for _, resp in answers
            if resp.code == ResponseCode.SUCCESS
            for r in split_records(resp.body)
        ]
        found.sort(key=lambda m: (m.store_timestamp, m.store_host, m.commitlog_offset))
        return found[:max_num]

    def messages_by_time(
        self, topic: str, begin_ms: int, end_ms: int, *, limit: int = 64
    ) -> list[MessageExt]:
        """Messages of ``topic`` stored from ``begin_ms`` to ``end_ms`` (inclusive), at most
        ``limit``, oldest first: each queue is searched for the offset of ``begin_ms``
        (SEARCH_OFFSET_BY_TIMESTAMP) and read from there (RocketMQ's ``queryMsgByTopic``).

        :raises TopicNotExistError: no such topic.
        """
        found: list[MessageExt] = []
        for mq in sorted(self.topic_stats(topic).offset_table):
            start = self.transport.search_offset_by_timestamp(mq, begin_ms)
            taken = 0
            for msg in self._read(mq, start):
                if msg.store_timestamp > end_ms or taken >= limit:
                    break
                if msg.store_timestamp >= begin_ms:
                    found.append(msg)
                    taken += 1
        found.sort(key=lambda m: (m.store_timestamp, m.store_host, m.commitlog_offset))
        return found[:limit]

    def topic_groups(self, topic: str) -> list[str]:
        """The consumer groups with an offset in ``topic`` (the groups that read it; RocketMQ's
        ``queryTopicConsumeByWho``), sorted."""
        out: list[str] = []
        for group in self.groups():
            if group.startswith(TOOLS_CONSUMER_GROUP):
                continue
            try:
                stats = self.consume_stats(group, topic)
            except (BrokerError, RemotingError):
                continue
            if stats.offset_table:
                out.append(group)
        return out

    def consumed_by(self, msg: MessageExt) -> dict[str, bool]:
        """For each group that reads the message's topic: whether its committed offset in the
        message's queue is past the message (RocketMQ's message track, CONSUMED or
        NOT_CONSUME_YET)."""
        out: dict[str, bool] = {}
        broker = _store_broker(msg, self.brokers())
        for group in self.topic_groups(msg.topic):
            table = self.consume_stats(group, msg.topic).offset_table
            for mq, wrapper in table.items():
                if mq.queue_id == msg.queue_id and broker in (None, mq.broker_name):
                    out[group] = wrapper.consumer_offset > msg.queue_offset
        return out

    def resend_to_group(self, group: str, msg: MessageExt) -> None:
        """Send a stored message again to ``group`` alone, through its retry topic, as
        :meth:`resend_dead_letters` does (other groups of the topic do not get it again).

        :raises BrokerError: a group the server does not know.
        """
        self._require_group(group)
        original = msg.get_property("RETRY_TOPIC") or msg.topic
        if original.startswith((DLQ_PREFIX, RETRY_PREFIX)):
            raise InvalidArgumentError(
                f"message {msg.msg_id} names no original topic (it is in {original}); "
                f"resend a message of a user topic"
            )
        brokers = {mq.broker_name for mq in self.consume_stats(group).offset_table}
        broker_name = _store_broker(msg, self.brokers()) or min(brokers or self.brokers())
        self._send_to_group(group, broker_name, original, msg)

    # -- dead letters -----------------------------------------------------------------------

    def _dlq_queues(self, group: str) -> list[MessageQueue]:
        """Every queue of ``group``'s dead-letter topic, on every broker group that has it."""
        self._require_group(group)
        topic = DLQ_PREFIX + group
        try:
            route = self.transport._route(topic, introduce=False)
        except TopicNotExistError:
            return []
        return sorted(
            MessageQueue(topic, q.broker_name, i)
            for q in route.queue_datas
            for i in range(q.read_queue_nums)
        )

    def _dlq_start(self, group: str, mq: MessageQueue) -> int:
        # Resending commits the group's offset in its DLQ queue: that marks what was resent.
        low = self.transport.get_min_offset(mq)
        committed = self.transport.query_consumer_offset(group, mq)
        return max(low, committed) if committed >= 0 else low

    def dead_letters(
        self, group: str, *, include_resent: bool = False, limit: int = 1000
    ) -> Iterator[MessageExt]:
        """The messages in ``group``'s dead-letter queue (``%DLQ%<group>``, on every broker
        group), oldest first per queue; those already resent only with ``include_resent``."""
        count = 0
        for mq in self._dlq_queues(group):
            start = self.transport.get_min_offset(mq)
            if not include_resent:
                start = self._dlq_start(group, mq)
            for msg in self._read(mq, start):
                if count >= limit:
                    return
                count += 1
                yield msg

    def _read(self, mq: MessageQueue, offset: int) -> Iterator[MessageExt]:
        end = self.transport.get_max_offset(mq)
        while offset < end:
            resp = self.transport.pull_message(mq, TOOLS_CONSUMER_GROUP, offset, 32)
            if resp.code != ResponseCode.SUCCESS or resp.next_begin_offset <= offset:
                return
            yield from resp.messages
            offset = resp.next_begin_offset

    def resend_dead_letters(self, group: str, *, limit: int = 100_000) -> ResendResult:
        """Send the group's dead letters not resent yet back to ``group`` alone, and commit
        the group's offset in the dead-letter queue past them, so a second run resends
        nothing.

        As a consumer's failed message is retried, each goes to the group's retry topic
        ``%RETRY%<group>`` (on the broker group that dead-lettered it), with its original
        topic in ``RETRY_TOPIC``: only ``group`` subscribes to that topic, and its members
        see the message under its original topic again, with a fresh count of retries.
        Other groups of the original topic, which consumed it already, do not get it again.
        """
        by_topic: dict[str, int] = {}
        skipped, resent = 0, 0
        offsets: dict[MessageQueue, int] = {}
        for mq in self._dlq_queues(group):
            start = self._dlq_start(group, mq)
            next_offset = start
            for msg in self._read(mq, start):
                if resent + skipped >= limit:
                    break
                original = msg.get_property("RETRY_TOPIC") or msg.topic
                if original.startswith((DLQ_PREFIX, RETRY_PREFIX)):
                    skipped += 1  # no original topic to show it under again
                else:
                    self._send_to_group(group, mq.broker_name, original, msg)
                    by_topic[original] = by_topic.get(original, 0) + 1
                    resent += 1
                next_offset = msg.queue_offset + 1
                # Committed per message: an interrupted run resumes after the last one sent.
                self.transport.update_consumer_offset(group, mq, next_offset)
            offsets[mq] = next_offset
        return ResendResult(resent, by_topic, skipped, offsets)

    def _send_to_group(self, group: str, broker_name: str, original: str, msg: MessageExt) -> None:
        props = {
            k: v
            for k, v in msg.properties.items()
            if k not in SYSTEM_PROPERTY_NAMES or k in _KEPT_SYSTEM_PROPERTIES
        }
        props["RETRY_TOPIC"] = original
        origin = msg.get_property("ORIGIN_MESSAGE_ID")
        if origin:
            props["ORIGIN_MESSAGE_ID"] = origin
        retry_topic = RETRY_PREFIX + group
        # The broker group that dead-lettered it has the group's retry topic (a member's
        # heartbeat made it there, and a broker makes a retry topic on its first send).
        copy = system_message(
            topic=retry_topic, body=msg.body, tags=msg.tags, keys=msg.keys, properties=props
        )
        self.transport.send_message(
            MessageQueue(retry_topic, broker_name, 0),
            [copy],
            producer_group=TOOLS_PRODUCER_GROUP,
            born_timestamp=msg.born_timestamp,
        )


def _store_broker(msg: MessageExt, groups: dict[str, dict[int, str]]) -> str | None:
    """The broker group whose member stored ``msg`` (by its store host), if one did."""
    for name, members in groups.items():
        if msg.store_host in members.values():
            return name
    return None


def _host_of(msg_id: str) -> str:
    """The ``host:port`` an offset message id names ('' when it names none)."""
    try:
        raw = bytes.fromhex(msg_id[:16])
    except ValueError:
        return ""
    return f"{'.'.join(str(b) for b in raw[:4])}:{int.from_bytes(raw[4:8], 'big')}"

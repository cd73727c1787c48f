"""The admin client: what an operator asks of ``mqcore serve`` over the remoting protocol
(RocketMQ's ``DefaultMQAdminExt``, for one server that is both name server and broker).

The ``mqcore topic|group|lag|message|dlq|offset`` commands are thin layers over
:class:`MQAdmin`; scripts can use it directly::

    with MQAdmin("127.0.0.1:9876") as admin:
        for row in admin.lag("cg"):
            print(row.queue, row.lag, row.owner)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import attrs

from mqcore.client.transport_remote import RemoteTransport, split_records
from mqcore.errors import BrokerError, InvalidArgumentError, TopicNotExistError
from mqcore.message import MessageExt, MessageQueue, system_message
from mqcore.protocol import admin_bodies, bodies, headers
from mqcore.protocol.codes import RequestCode, ResponseCode
from mqcore.protocol.fastjson import loads
from mqcore.protocol.validation import SYSTEM_PROPERTY_NAMES
from mqcore.remoting.command import RemotingCommand

__all__ = ["DLQ_PREFIX", "LagRow", "MQAdmin", "ResendResult", "TopicInfo"]

DLQ_PREFIX = "%DLQ%"
RETRY_PREFIX = "%RETRY%"
TOOLS_CONSUMER_GROUP = "TOOLS_CONSUMER"  # RocketMQ's MixAll.TOOLS_CONSUMER_GROUP
TOOLS_PRODUCER_GROUP = "CLIENT_INNER_PRODUCER"  # RocketMQ's MixAll.CLIENT_INNER_PRODUCER_GROUP
_KEPT_SYSTEM_PROPERTIES = frozenset({"UNIQ_KEY"})  # a resent dead letter keeps its id
RUNNING_INFO_WAIT_S = 8.0  # longer than the server waits for the client (5 s)


@attrs.frozen
class TopicInfo:
    """A topic's config as the broker holds it."""

    topic: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    order: bool


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
    """What ``dlq resend`` did: messages sent back, by original topic, and the DLQ offsets."""

    resent: int
    by_topic: dict[str, int]
    skipped: int
    dlq_offsets: dict[int, int]


class MQAdmin:
    """Admin calls to one ``mqcore serve`` address (its name server and broker roles).

    :param server: ``host:port`` of the server.
    :param timeout: seconds to wait for each answer.
    """

    def __init__(self, server: str, *, timeout: float = 5.0) -> None:
        self.server = server
        self.transport = RemoteTransport(server, timeout=timeout)

    def close(self) -> None:
        """Close the connection."""
        self.transport.close()

    def __enter__(self) -> MQAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(
        self, code: int, header: Any = None, body: Any = None, timeout: float | None = None
    ) -> RemotingCommand:
        resp = self.transport._call(self.server, code, header, body, timeout)
        if resp.code != ResponseCode.SUCCESS:
            remark = resp.remark or f"the server refused request code {code} (code {resp.code})"
            if resp.code == ResponseCode.TOPIC_NOT_EXIST:
                raise TopicNotExistError(remark, code=resp.code)
            raise BrokerError(remark, code=resp.code)
        return resp

    # -- topics -----------------------------------------------------------------------------------

    def topics(self) -> list[TopicInfo]:
        """Every topic's config (GET_ALL_TOPIC_CONFIG), by name."""
        table = loads(self._call(RequestCode.GET_ALL_TOPIC_CONFIG).body or b"{}")
        configs = table.get("topicConfigTable") or {}
        return [
            TopicInfo(
                topic=str(name),
                read_queue_nums=int(cfg.get("readQueueNums", 0)),
                write_queue_nums=int(cfg.get("writeQueueNums", 0)),
                perm=int(cfg.get("perm", 6)),
                order=bool(cfg.get("order", False)),
            )
            for name, cfg in sorted(configs.items())
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
    ) -> TopicInfo:
        """Create or update ``topic`` (UPDATE_AND_CREATE_TOPIC); its config afterwards."""
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
        )
        self._call(RequestCode.UPDATE_AND_CREATE_TOPIC, header)
        return self.topic(topic)

    def delete_topic(self, topic: str) -> None:
        """Delete ``topic`` (DELETE_TOPIC_IN_BROKER). :raises TopicNotExistError: none such."""
        self.topic(topic)
        self._call(
            RequestCode.DELETE_TOPIC_IN_BROKER, headers.DeleteTopicRequestHeader(topic=topic)
        )

    def topic_stats(self, topic: str) -> admin_bodies.TopicStatsTable:
        """Each queue's offsets and last store time (GET_TOPIC_STATS_INFO)."""
        header = headers.GetTopicStatsInfoRequestHeader(topic=topic)
        resp = self._call(RequestCode.GET_TOPIC_STATS_INFO, header)
        return admin_bodies.TopicStatsTable.decode(resp.body or b"{}")

    # -- groups -----------------------------------------------------------------------------------

    def groups(self) -> list[str]:
        """The consumer groups the server knows (GET_ALL_SUBSCRIPTIONGROUP_CONFIG)."""
        resp = self._call(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        return list(admin_bodies.SubscriptionGroupWrapper.decode(resp.body or b"{}").groups)

    def _require_group(self, group: str) -> None:
        if group not in self.groups():
            raise BrokerError(
                f"consumer group {group!r} is unknown to the server (no member online, no "
                f"offset committed); `mqcore group list` shows the groups it knows",
                code=ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
            )

    def consume_stats(self, group: str, topic: str | None = None) -> admin_bodies.ConsumeStats:
        """The group's broker and consumer offsets per queue (GET_CONSUME_STATS).

        :raises BrokerError: an unknown group (SUBSCRIPTION_GROUP_NOT_EXIST) or topic.
        """
        header = headers.GetConsumeStatsRequestHeader(consumer_group=group, topic=topic)
        resp = self._call(RequestCode.GET_CONSUME_STATS, header)
        return admin_bodies.ConsumeStats.decode(resp.body or b"{}")

    def connections(self, group: str) -> admin_bodies.ConsumerConnection | None:
        """The group's live clients (GET_CONSUMER_CONNECTION_LIST); None when none is."""
        header = headers.GetConsumerConnectionListRequestHeader(consumer_group=group)
        try:
            resp = self._call(RequestCode.GET_CONSUMER_CONNECTION_LIST, header)
        except BrokerError as exc:
            if exc.code == ResponseCode.CONSUMER_NOT_ONLINE:
                return None
            raise
        return admin_bodies.ConsumerConnection.decode(resp.body or b"{}")

    def running_info(self, group: str, client_id: str) -> admin_bodies.ConsumerRunningInfo:
        """What client ``client_id`` owns and holds now (GET_CONSUMER_RUNNING_INFO, which the
        server passes on to the client)."""
        header = headers.GetConsumerRunningInfoRequestHeader(
            consumer_group=group, client_id=client_id
        )
        resp = self._call(
            RequestCode.GET_CONSUMER_RUNNING_INFO,
            header,
            timeout=max(self.transport.timeout, RUNNING_INFO_WAIT_S),
        )
        return admin_bodies.ConsumerRunningInfo.decode(resp.body or b"{}")

    def owners(self, group: str) -> dict[MessageQueue, list[str]]:
        """The clients that own each queue now, from every live member's running info (a
        member that does not answer owns nothing here). Clustering: one per queue;
        broadcasting: every member holds every queue."""
        conns = self.connections(group)
        owners: dict[MessageQueue, list[str]] = {}
        for conn in conns.connection_set if conns else ():
            try:
                info = self.running_info(group, conn.client_id)
            except BrokerError:
                continue  # gone meanwhile, or a client that does not serve the request
            for mq, pq in info.mq_table.items():
                if not pq.droped:
                    owners.setdefault(mq, []).append(conn.client_id)
        return owners

    def lag(self, group: str, topic: str | None = None) -> list[LagRow]:
        """Per queue: broker offset, consumer offset, lag and owner client(s)."""
        stats = self.consume_stats(group, topic)
        owners = self.owners(group)
        # Queues are matched by topic and queue id: a client names its broker by the name
        # its route gave, which is the server's own.
        by_id = {(mq.topic, mq.queue_id): ", ".join(sorted(c)) for mq, c in owners.items()}
        return [
            LagRow(
                queue=mq,
                broker_offset=w.broker_offset,
                consumer_offset=w.consumer_offset,
                lag=w.lag,
                last_timestamp=w.last_timestamp,
                owner=by_id.get((mq.topic, mq.queue_id)),
            )
            for mq, w in sorted(stats.offset_table.items())
        ]

    # -- offsets ------------------------------------------------------------------------------

    def reset_offset(
        self, group: str, topic: str, timestamp_ms: int, *, force: bool = True
    ) -> dict[MessageQueue, int]:
        """Move ``group``'s offsets in ``topic`` to the first message stored at or after
        ``timestamp_ms`` (INVOKE_BROKER_TO_RESET_OFFSET); running members are told to follow.

        Without ``force`` a queue's offset only moves back (RocketMQ's ``isForce``).

        :raises TopicNotExistError: no such topic.
        :raises BrokerError: a group the server does not know (a misspelt name must not
            create offsets for a group nobody runs; RocketMQ refuses it too).
        """
        self.topic(topic)
        self._require_group(group)
        header = headers.ResetOffsetRequestHeader(
            topic=topic, group=group, timestamp=timestamp_ms, is_force=force
        )
        resp = self._call(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, header)
        return dict(bodies.ResetOffsetBody.decode(resp.body or b"{}").offset_table)

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
        resp = self.transport._call(self.server, RequestCode.VIEW_MESSAGE_BY_ID, header)
        if resp.code != ResponseCode.SUCCESS:
            return None
        records = split_records(resp.body)
        msg = MessageExt(bytes(records[0])) if records else None
        # A unique id read as an offset id may land on a record by chance: check the id.
        return msg if msg is not None and msg.offset_msg_id == msg_id.upper() else None

    def query_by_key(self, topic: str, key: str, max_num: int = 64) -> list[MessageExt]:
        """Messages of ``topic`` indexed under ``key`` (QUERY_MESSAGE), oldest first."""
        header = headers.QueryMessageRequestHeader(
            topic=topic, key=key, max_num=max_num, begin_timestamp=0, end_timestamp=2**63 - 1
        )
        resp = self.transport._call(self.server, RequestCode.QUERY_MESSAGE, header)
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return []
        if resp.code != ResponseCode.SUCCESS:
            raise BrokerError(resp.remark or f"query failed (code {resp.code})", code=resp.code)
        found = [MessageExt(bytes(r)) for r in split_records(resp.body)]
        return sorted(found, key=lambda m: (m.store_timestamp, m.commitlog_offset))

    # -- dead letters -----------------------------------------------------------------------

    def _dlq_topic(self, group: str) -> TopicInfo | None:
        self._require_group(group)
        for info in self.topics():
            if info.topic == DLQ_PREFIX + group:
                return info
        return None

    def _dlq_start(self, group: str, mq: MessageQueue) -> int:
        # Resending commits the group's offset in its DLQ queue: that marks what was resent.
        low = self.transport.get_min_offset(mq)
        committed = self.transport.query_consumer_offset(group, mq)
        return max(low, committed) if committed >= 0 else low

    def dead_letters(
        self, group: str, *, include_resent: bool = False, limit: int = 1000
    ) -> Iterator[MessageExt]:
        """The messages in ``group``'s dead-letter queue (``%DLQ%<group>``), oldest first;
        those already resent only with ``include_resent``."""
        info = self._dlq_topic(group)
        if info is None:
            return
        count = 0
        for queue_id in range(info.read_queue_nums):
            mq = self._mq(info.topic, queue_id)
            start = self.transport.get_min_offset(mq)
            if not include_resent:
                start = self._dlq_start(group, mq)
            for msg in self._read(mq, start):
                if count >= limit:
                    return
                count += 1
                yield msg

    def _mq(self, topic: str, queue_id: int) -> MessageQueue:
        route = self.transport.get_route_info_by_topic(topic)
        name = route.broker_datas[0].broker_name if route.broker_datas else "broker-a"
        return MessageQueue(topic, name, queue_id)

    def _read(self, mq: MessageQueue, offset: int) -> Iterator[MessageExt]:
        end = self.transport.get_max_offset(mq)
        while offset < end:
            resp = self.transport.pull_message(mq, TOOLS_CONSUMER_GROUP, offset, 32)
            if resp.code != ResponseCode.SUCCESS or resp.next_begin_offset <= offset:
                return
            yield from resp.messages
            offset = resp.next_begin_offset

    def resend_dead_letters(self, group: str, *, limit: int = 100_000) -> ResendResult:
        """Send the group's dead letters not resent yet back to their original topic (the
        ``RETRY_TOPIC`` property) through the ordinary send path, and commit the group's
        offset in the dead-letter queue past them, so a second run resends nothing."""
        info = self._dlq_topic(group)
        by_topic: dict[str, int] = {}
        skipped, resent = 0, 0
        offsets: dict[int, int] = {}
        if info is None:
            return ResendResult(0, {}, 0, {})
        for queue_id in range(info.read_queue_nums):
            mq = self._mq(info.topic, queue_id)
            start = self._dlq_start(group, mq)
            next_offset = start
            for msg in self._read(mq, start):
                if resent + skipped >= limit:
                    break
                target = msg.get_property("RETRY_TOPIC") or msg.topic
                if target.startswith((DLQ_PREFIX, RETRY_PREFIX)):
                    skipped += 1  # no original topic to send it back to
                else:
                    self._send_back(target, msg)
                    by_topic[target] = by_topic.get(target, 0) + 1
                    resent += 1
                next_offset = msg.queue_offset + 1
                # Committed per message: an interrupted run resumes after the last one sent.
                self.transport.update_consumer_offset(group, mq, next_offset)
            offsets[queue_id] = next_offset
        return ResendResult(resent, by_topic, skipped, offsets)

    def _send_back(self, topic: str, msg: MessageExt) -> None:
        props = {
            k: v
            for k, v in msg.properties.items()
            if k not in SYSTEM_PROPERTY_NAMES or k in _KEPT_SYSTEM_PROPERTIES
        }
        route = self.transport.get_route_info_by_topic(topic)
        queues = route.write_queues()
        if not queues:
            raise BrokerError(
                f"topic {topic!r} has no writable queue", code=ResponseCode.NO_PERMISSION
            )
        # Spread by offset, as a producer's round robin would.
        mq = queues[msg.queue_offset % len(queues)]
        copy = system_message(
            topic=topic, body=msg.body, tags=msg.tags, keys=msg.keys, properties=props
        )
        self.transport.send_message(
            mq, [copy], producer_group=TOOLS_PRODUCER_GROUP, born_timestamp=msg.born_timestamp
        )

"""Malformed, hostile and abandoned gRPC calls get statuses, never a crash or a leak: the
endpoint is driven with raw ``MessagingService`` stubs against an in-process server."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rocketmq.grpc_protocol import definition_pb2 as d
from rocketmq.grpc_protocol import service_pb2 as s
from rocketmq.grpc_protocol import service_pb2_grpc as sg

from mqcore.grpc.convert import consistent_hash, java_string_hash
from mqcore.server import Server

pytestmark = pytest.mark.timeout(300)

META = (("x-mq-client-id", "fuzz-client"),)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    srv = Server(tmp_path, "127.0.0.1:0", grpc_listen="127.0.0.1:0")
    srv.broker.create_topic("T", 4)
    srv.broker.create_topic("FIFO_T", 4, attributes={"message.type": "FIFO"})
    try:
        yield srv
    finally:
        srv.close()


@pytest.fixture
def stub(server: Server) -> Iterator[sg.MessagingServiceStub]:
    assert server.grpc is not None
    with grpc.insecure_channel(server.grpc.address) as channel:
        yield sg.MessagingServiceStub(channel)


def _msg(topic: str = "T", body: bytes = b"x", **sysp: object) -> d.Message:
    sysp.setdefault("message_id", "01ABC")
    return d.Message(
        topic=d.Resource(name=topic), body=body, system_properties=d.SystemProperties(**sysp)
    )


def test_java_hashes_match_the_proxy():
    """String.hashCode and Guava's consistentHash, checked against values Java computes."""
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("\u4e2d\u6587") == 646394
    got = [
        consistent_hash(java_string_hash(g), n) for g in ("group-1", "order-42") for n in (4, 8, 16)
    ]
    assert got == [1, 7, 15, 3, 3, 10]
    assert (consistent_hash(-1, 1000), consistent_hash(-(1 << 63), 7)) == (313, 5)


@pytest.mark.parametrize(
    ("message", "code"),
    [
        (_msg(topic=""), d.Code.ILLEGAL_TOPIC),
        (_msg(topic="bad topic!"), d.Code.ILLEGAL_TOPIC),
        (_msg(topic="SCHEDULE_TOPIC_XXXX"), d.Code.ILLEGAL_TOPIC),
        (_msg(topic="NoSuchTopicAnywhere"), d.Code.TOPIC_NOT_FOUND),
        (_msg(body=b""), d.Code.MESSAGE_BODY_EMPTY),
        (_msg(body=b"x" * (4 * 1024 * 1024 + 1)), d.Code.MESSAGE_BODY_TOO_LARGE),
        (_msg(message_id=""), d.Code.ILLEGAL_MESSAGE_ID),
        (_msg(tag="a|b"), d.Code.ILLEGAL_MESSAGE_TAG),
        (_msg(keys=["\x00"]), d.Code.ILLEGAL_MESSAGE_KEY),
        (_msg(message_group=" "), d.Code.ILLEGAL_MESSAGE_GROUP),
        (_msg(message_group="g" * 64), d.Code.ILLEGAL_MESSAGE_GROUP),
        (_msg(message_group="g"), d.Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
        (_msg(topic="FIFO_T"), d.Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
        (_msg(topic="FIFO_T", message_group="g"), d.Code.OK),
        (_msg(body=b"not gzip", body_encoding=d.Encoding.GZIP), d.Code.MESSAGE_CORRUPTED),
    ],
)
def test_bad_sends_get_the_proxys_codes(stub, message, code):
    reply = stub.SendMessage(s.SendMessageRequest(messages=[message]), metadata=META)
    assert reply.status.code == code, reply.status.message


def test_send_checks_properties_and_delivery_time(stub):
    too_far = _msg(delivery_timestamp={"seconds": int(time.time()) + 2 * 24 * 3600})
    reply = stub.SendMessage(s.SendMessageRequest(messages=[too_far]), metadata=META)
    assert reply.status.code == d.Code.ILLEGAL_DELIVERY_TIME
    system = _msg()
    system.user_properties["UNIQ_KEY"] = "forged"
    reply = stub.SendMessage(s.SendMessageRequest(messages=[system]), metadata=META)
    assert reply.status.code == d.Code.ILLEGAL_MESSAGE_PROPERTY_KEY
    many = _msg()
    many.user_properties.update({f"k{i}": "v" for i in range(129)})
    reply = stub.SendMessage(s.SendMessageRequest(messages=[many]), metadata=META)
    assert reply.status.code == d.Code.MESSAGE_PROPERTIES_TOO_LARGE
    assert stub.SendMessage(s.SendMessageRequest(), metadata=META).status.code == (
        d.Code.MESSAGE_CORRUPTED
    )
    mixed = s.SendMessageRequest(messages=[_msg(), _msg(topic="FIFO_T")])
    assert stub.SendMessage(mixed, metadata=META).status.code == d.Code.MESSAGE_CORRUPTED


def test_a_huge_batch_is_refused_with_a_grpc_status(stub):
    batch = s.SendMessageRequest(messages=[_msg(body=os.urandom(1024)) for _ in range(6000)])
    with pytest.raises(grpc.RpcError) as err:
        stub.SendMessage(batch, metadata=META)
    assert err.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED


@pytest.mark.parametrize(
    "handle",
    ["", "garbage", "1 2 3", "0 0 0 0 0 broker-a 0 999999", "a b c d e f g h", "-1 " * 7 + "-1"],
)
def test_bogus_and_expired_receipt_handles(stub, handle):
    group, topic = d.Resource(name="G"), d.Resource(name="T")
    ack = stub.AckMessage(
        s.AckMessageRequest(
            group=group,
            topic=topic,
            entries=[s.AckMessageEntry(message_id="x", receipt_handle=handle)],
        ),
        metadata=META,
    )
    assert ack.status.code == d.Code.INVALID_RECEIPT_HANDLE
    assert [e.status.code for e in ack.entries] == [d.Code.INVALID_RECEIPT_HANDLE]
    change = stub.ChangeInvisibleDuration(
        s.ChangeInvisibleDurationRequest(
            group=group, topic=topic, receipt_handle=handle, invisible_duration={"seconds": 30}
        ),
        metadata=META,
    )
    assert change.status.code == d.Code.INVALID_RECEIPT_HANDLE


def test_calls_without_settings_or_not_served(stub):
    assert stub.Heartbeat(s.HeartbeatRequest(), metadata=META).status.code == (
        d.Code.UNRECOGNIZED_CLIENT_TYPE
    )
    assert (
        stub.NotifyClientTermination(s.NotifyClientTerminationRequest(), metadata=META).status.code
        == d.Code.UNRECOGNIZED_CLIENT_TYPE
    )
    assert stub.GetOffset(s.GetOffsetRequest(), metadata=META).status.code == d.Code.NOT_IMPLEMENTED
    pulled = list(stub.PullMessage(s.PullMessageRequest(), metadata=META))
    assert [r.status.code for r in pulled] == [d.Code.NOT_IMPLEMENTED]
    route = stub.QueryRoute(
        s.QueryRouteRequest(topic=d.Resource(name="Nope_Not_There")), metadata=META
    )
    assert route.status.code == d.Code.TOPIC_NOT_FOUND
    received = list(
        stub.ReceiveMessage(
            s.ReceiveMessageRequest(
                group=d.Resource(name="G"),
                message_queue=d.MessageQueue(topic=d.Resource(name="T"), id=-1),
                batch_size=1000,
            ),
            metadata=META,
        )
    )
    assert [r.status.code for r in received] == [d.Code.BAD_REQUEST]


def test_route_answers_the_address_asked_and_the_topic_type(stub):
    asked = d.Endpoints(addresses=[d.Address(host="mq.example", port=8081)])
    route = stub.QueryRoute(
        s.QueryRouteRequest(topic=d.Resource(name="FIFO_T"), endpoints=asked), metadata=META
    )
    assert route.status.code == d.Code.OK
    assert [q.id for q in route.message_queues] == [0, 1, 2, 3]
    assert {q.broker.endpoints.addresses[0].host for q in route.message_queues} == {"mq.example"}
    assert {tuple(q.accept_message_types) for q in route.message_queues} == {(d.MessageType.FIFO,)}


def test_telemetry_answers_every_command_with_a_status(stub):
    commands = [
        s.TelemetryCommand(),
        s.TelemetryCommand(settings=d.Settings()),
        s.TelemetryCommand(thread_stack_trace=s.ThreadStackTrace(nonce="n1")),
        s.TelemetryCommand(verify_message_result=s.VerifyMessageResult(nonce="n2")),
        s.TelemetryCommand(
            settings=d.Settings(
                client_type=d.ClientType.PRODUCER,
                publishing=d.Publishing(topics=[d.Resource(name="T")]),
            )
        ),
    ]
    replies = list(stub.Telemetry(iter(commands), metadata=META))
    codes = [r.status.code for r in replies]
    assert codes == [d.Code.BAD_REQUEST] * 4 + [d.Code.OK]
    assert replies[-1].settings.publishing.validate_message_type
    assert replies[-1].settings.backoff_policy.max_attempts == 3


def test_fuzzed_requests_get_statuses(server: Server):
    """Random bytes as every unary request: a status, or gRPC's UNKNOWN for bytes that do
    not parse, and the server still answers afterwards."""

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.sampled_from(["SendMessage", "QueryRoute", "AckMessage", "Heartbeat",
                            "QueryAssignment", "ChangeInvisibleDuration", "EndTransaction",
                            "ForwardMessageToDeadLetterQueue"]),
           st.binary(max_size=300))  # fmt: skip
    def one(method: str, raw: bytes) -> None:
        call = channel.unary_unary(  # raw bytes, as a broken client would send them
            f"/apache.rocketmq.v2.MessagingService/{method}",
            request_serializer=None,
            response_deserializer=None,
        )
        try:
            call(raw, metadata=META, timeout=10)
        except grpc.RpcError as exc:
            # grpcio answers bytes that do not parse as the request with UNKNOWN, naming the
            # DecodeError; the server goes on.
            assert exc.code() is grpc.StatusCode.UNKNOWN, exc
            assert "Error parsing message" in str(exc.details())

    assert server.grpc is not None
    with grpc.insecure_channel(server.grpc.address) as channel:
        one()
        stub = sg.MessagingServiceStub(channel)
        route = stub.QueryRoute(s.QueryRouteRequest(topic=d.Resource(name="T")), metadata=META)
        assert route.status.code == d.Code.OK


def test_abandoned_streams_and_200_clients_leak_nothing(server: Server):
    """200 concurrent clients open telemetry streams and held receives and walk away; the
    server's threads, streams and clients come back to where they were."""
    assert server.grpc is not None
    address = server.grpc.address
    service = server.grpc.service

    async def client(i: int) -> None:
        meta = (("x-mq-client-id", f"c{i}"),)
        async with grpc.aio.insecure_channel(address) as channel:
            stub = sg.MessagingServiceStub(channel)
            settings_cmd = s.TelemetryCommand(
                settings=d.Settings(
                    client_type=d.ClientType.SIMPLE_CONSUMER,
                    subscription=d.Subscription(
                        group=d.Resource(name="GX"),
                        subscriptions=[d.SubscriptionEntry(topic=d.Resource(name="T"))],
                    ),
                )
            )
            stream = stub.Telemetry(metadata=meta)
            await stream.write(settings_cmd)
            reply = await stream.read()
            assert reply.status.code == d.Code.OK
            receive = stub.ReceiveMessage(
                s.ReceiveMessageRequest(
                    group=d.Resource(name="GX"),
                    message_queue=d.MessageQueue(topic=d.Resource(name="T"), id=-1),
                    batch_size=1,
                    invisible_duration={"seconds": 30},
                    long_polling_timeout={"seconds": 20},
                ),
                metadata=meta,
            )
            await asyncio.sleep(0.2)
            receive.cancel()  # abandoned midway
            stream.cancel()

    threads_before = threading.active_count()
    fds_before = len(os.listdir("/proc/self/fd"))

    async def main() -> None:
        await asyncio.gather(*(client(i) for i in range(200)))

    def rss() -> int:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    asyncio.run(main())  # the first round warms up (grpcio's and Python's own allocations)
    warm = rss()
    for _ in range(2):
        asyncio.run(main())
    # Two more rounds of 200 clients cost no more than some noise: nothing per client stays.
    assert rss() - warm < 32 * 1024 * 1024
    assert len(service.clients) <= 200  # one entry per client id, reused
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        streams = sum(len(c.streams) for c in service.clients.clients())
        if streams == 0 and threading.active_count() <= threads_before + 40:
            break
        time.sleep(0.2)
    assert sum(len(c.streams) for c in service.clients.clients()) == 0
    # Held receives end once their client is gone; their pool is bounded (32) either way.
    assert threading.active_count() <= threads_before + 40
    assert len(os.listdir("/proc/self/fd")) <= fds_before + 20
    with grpc.insecure_channel(address) as channel:
        route = sg.MessagingServiceStub(channel).QueryRoute(
            s.QueryRouteRequest(topic=d.Resource(name="T")), metadata=META
        )
    assert route.status.code == d.Code.OK

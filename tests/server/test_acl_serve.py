"""``mqcore serve --acl``: mqcore's remote clients and the admin CLI against RocketMQ's plain
ACL, on every store: who may produce, consume and administer, what a refusal says, that a
refused request changes nothing, the address white lists, and a file changed while serving."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from structlog.testing import capture_logs

from mqcore import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    Message,
    MessageQueue,
    Producer,
    PullConsumer,
    PushConsumer,
)
from mqcore.cli import main
from mqcore.client.admin import MQAdmin
from mqcore.errors import MQError, NoPermissionError
from mqcore.protocol import headers
from mqcore.protocol.codes import RequestCode, ResponseCode
from mqcore.remoting.command import RemotingCommand
from mqcore.remoting.frame import FrameDecoder
from mqcore.server import Server
from mqcore.server.acl import RELOAD_INTERVAL_S

pytestmark = pytest.mark.timeout(120)

USER = ("user-key-1", "user-secret-1")
ADMIN = ("admin-key-1", "admin-secret-1")
ACL = f"""\
accounts:
  - accessKey: {USER[0]}
    secretKey: {USER[1]}
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - Open=PUB|SUB
      - ReadOnly=SUB
      - Closed=DENY
    groupPerms:
      - banned=DENY
  - accessKey: {ADMIN[0]}
    secretKey: {ADMIN[1]}
    admin: true
"""
TOPICS = ("Open", "ReadOnly", "Closed", "Other")
# What a reload is documented to take at most (docs/security.md): a look every
# RELOAD_INTERVAL_S, then the read and parse.
RELOAD_BOUND_S = 2.0


@pytest.fixture
def acl_file(tmp_path: Path) -> Path:
    path = tmp_path / "plain_acl.yml"
    path.write_text(ACL)
    return path


@pytest.fixture
def server(tmp_path: Path, store_name: str, acl_file: Path) -> Iterator[Server]:
    with Server(tmp_path / "data", "127.0.0.1:0", store=store_name, acl=acl_file) as srv:
        for topic in TOPICS:
            srv.broker.create_topic(topic, queue_nums=2)
        yield srv


def stored(server: Server) -> dict[str, int]:
    """Messages stored per topic."""
    broker = server.broker
    return {
        t.topic_name: sum(broker.get_max_offset(t.topic_name, q) for q in range(t.write_queue_nums))
        for t in broker.list_topics()
    }


def test_account_with_pub_sub_produces_and_consumes(server: Server) -> None:
    with Producer("pg", server.address, credentials=USER) as p:
        sent = [p.send(Message(topic="Open", body=b"m%d" % i)) for i in range(6)]
    with PullConsumer("cg", server.address, credentials=USER) as pc:
        got = []
        for q in range(2):
            mq = MessageQueue("Open", server.broker.config.broker_name, q)
            result = pc.pull(mq, "*", 0, 32)
            got += [m.body for m in result.msg_found_list or []]
            pc.update_consume_offset(mq, result.next_begin_offset)
    assert sorted(got) == sorted(b"m%d" % i for i in range(6)) and len(sent) == 6

    bodies: list[bytes] = []

    def listener(msgs: list[Any], ctx: Any) -> ConsumeConcurrentlyStatus:
        bodies.extend(m.body for m in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    push = PushConsumer(
        "push-g",
        server.address,
        credentials=USER,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    )
    push.subscribe("Open", "*")
    push.register_message_listener(listener)
    push.start()
    try:
        deadline = time.monotonic() + 30
        while len(bodies) < 6:
            assert time.monotonic() < deadline, f"consumed {len(bodies)} of 6"
            time.sleep(0.05)
    finally:
        push.shutdown()
    assert sorted(bodies) == sorted(got)


@pytest.mark.parametrize(
    ("credentials", "topic", "remark"),
    [
        ((USER[0], "wrong-secret-1"), "Open", "Check signature failed for accessKey=user-key-1"),
        (("nobody-key-1", "whatever-1"), "Open", "No acl config for nobody-key-1"),
        (None, "Open", "No accessKey is configured"),
        (USER, "Closed", "No permission for topic:Closed"),
        (USER, "ReadOnly", "No permission for topic:ReadOnly: accessKey=user-key-1 needs PUB"),
        (USER, "Other", "No default permission for topic:Other"),
    ],
)
def test_refused_sends_store_nothing(
    server: Server, credentials: Any, topic: str, remark: str
) -> None:
    before = stored(server)
    producer = Producer("pg", server.address, credentials=credentials)
    with capture_logs() as logs, pytest.raises(MQError) as exc, producer as p:
        p.send(Message(topic=topic, body=b"refused"))
    assert remark in str(exc.value)
    assert any(e["event"] == "acl_refused" and remark in e["reason"] for e in logs)
    for text in (str(exc.value), repr(logs)):  # no secret, right or wrong, anywhere
        assert "wrong-secret" not in text and USER[1] not in text and ADMIN[1] not in text
    assert stored(server) == before
    producer.shutdown()


def test_consumers_need_sub_on_topic_and_group(server: Server) -> None:
    with Producer("pg", server.address, credentials=ADMIN) as p:
        p.send(Message(topic="Closed", body=b"secret data"))
    mq = MessageQueue("Closed", server.broker.config.broker_name, 0)
    with (
        PullConsumer("cg", server.address, credentials=USER) as pc,
        pytest.raises(NoPermissionError, match="No permission for topic:Closed"),
    ):
        pc.pull(mq, "*", 0, 32)
    # A group the account may not use: its first heartbeat is refused.
    with (
        pytest.raises(NoPermissionError, match="No permission for group:banned"),
        PullConsumer("banned", server.address, credentials=USER),
    ):
        pass
    # Offsets: SUB on the topic too.
    with PullConsumer("cg", server.address, credentials=USER) as pc:
        with pytest.raises(NoPermissionError, match="topic:Closed"):
            pc.broker.update_consumer_offset("cg", mq, 1)
        with pytest.raises(NoPermissionError, match="topic:Closed"):
            pc.broker.query_consumer_offset("cg", mq)
    assert server.broker.query_consumer_offset("cg", "Closed", 0) < 1


def cli(server: Server, *args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, [*args, "--server", server.address], env=env)


def test_admin_commands_need_an_admin_account(server: Server) -> None:
    user = ["--access-key", USER[0], "--secret-key", USER[1]]
    refused = cli(server, "topic", "create", "NewTopic", "--queues", "2", *user)
    assert refused.exit_code == 1
    assert "Need admin permission for request code=" in refused.stderr
    assert "but accessKey=user-key-1 is not" in refused.stderr
    assert USER[1] not in refused.output
    assert "NewTopic" not in {t.topic_name for t in server.broker.list_topics()}
    server.broker.update_consumer_offset("cg", "Open", 0, 0, "")  # a group the server knows
    for args in (["topic", "delete", "Open"], ["offset", "reset", "--group", "cg", "--topic",
                                                "Open", "--timestamp", "now"]):  # fmt: skip
        result = cli(server, *args, *user)
        assert result.exit_code == 1 and "Need admin permission" in result.stderr, result.output
    assert "Open" in {t.topic_name for t in server.broker.list_topics()}
    unsigned = cli(server, "topic", "list")
    assert unsigned.exit_code == 1 and "No accessKey is configured" in unsigned.stderr

    # The admin account, from the environment this time.
    env = {"MQCORE_ACCESS_KEY": ADMIN[0], "MQCORE_SECRET_KEY": ADMIN[1]}
    created = cli(server, "topic", "create", "NewTopic", "--queues", "2", "--json", env=env)
    assert created.exit_code == 0, created.output
    assert json.loads(created.stdout)["topic"] == "NewTopic"
    listed = cli(server, "topic", "list", "--json", env=env)
    assert "NewTopic" in {t["topic"] for t in json.loads(listed.stdout)}
    deleted = cli(server, "topic", "delete", "NewTopic", "--json", env=env)
    assert deleted.exit_code == 0, deleted.output
    assert ADMIN[1] not in created.output + listed.output + deleted.output

    half = cli(server, "topic", "list", "--access-key", ADMIN[0])
    assert half.exit_code == 2 and "--secret-key (or MQCORE_SECRET_KEY) is missing" in half.output


def test_console_send_and_consume_sign(server: Server) -> None:
    user = ["--access-key", USER[0], "--secret-key", USER[1]]
    sent = CliRunner().invoke(
        main, ["send", "--topic", "Open", "--server", server.address, *user], input="a\nb\n"
    )
    assert sent.exit_code == 0, sent.output
    assert stored(server)["Open"] == 2
    refused = CliRunner().invoke(
        main, ["send", "--topic", "ReadOnly", "--server", server.address, *user], input="a\n"
    )
    assert refused.exit_code != 0 and "topic:ReadOnly" in refused.output
    assert stored(server)["ReadOnly"] == 0
    for group in ([], ["--group", "console-g"]):  # a reader without a group, and a member
        read = CliRunner().invoke(
            main,
            ["consume", "--topic", "Open", "--from", "first", "--max", "2", "--json",
             "--server", server.address, *group, *user],
        )  # fmt: skip
        assert read.exit_code == 0, read.output
        bodies = sorted(json.loads(line)["body"] for line in read.stdout.splitlines())
        assert bodies == ["YQ==", "Yg=="]  # a and b, base64
    denied = CliRunner().invoke(
        main,
        ["consume", "--topic", "Closed", "--max", "1", "--server", server.address, *user],
    )
    assert denied.exit_code != 0 and "topic:Closed" in denied.output


def _raw_request(server: Server, source: str, cmd: RemotingCommand) -> RemotingCommand:
    """``cmd`` sent from a socket bound to ``source``, and its answer."""
    host, _, port = server.address.rpartition(":")
    with socket.socket() as sock:
        sock.bind((source, 0))
        sock.settimeout(10)
        sock.connect((host, int(port)))
        head, body = cmd.encode_parts()
        sock.sendall(bytes(head) + bytes(body))
        decoder = FrameDecoder()
        while True:
            data = sock.recv(65536)
            assert data, "the server closed the connection"
            frames = decoder.feed(data)
            if frames:
                return RemotingCommand.decode(frames[0])


def _unsigned_send(topic: str) -> RemotingCommand:
    header = headers.SendMessageRequestHeaderV2.from_v1(
        headers.SendMessageRequestHeader(
            producer_group="pg", topic=topic, default_topic="TBW102",
            default_topic_queue_nums=4, queue_id=0, sys_flag=0,
            born_timestamp=int(time.time() * 1000), flag=0, properties="",
        )
    )  # fmt: skip
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, header, b"white-listed")


def test_global_white_list_lets_in_only_its_addresses(tmp_path: Path, store_name: str) -> None:
    """A server that lets only 127.0.0.1 in without an account refuses 127.0.0.2."""
    path = tmp_path / "plain_acl.yml"
    path.write_text("globalWhiteRemoteAddresses:\n  - 127.0.0.1\n" + ACL)
    with Server(tmp_path / "data", "127.0.0.1:0", store=store_name, acl=path) as srv:
        srv.broker.create_topic("Closed", queue_nums=1)
        inside = _raw_request(srv, "127.0.0.1", _unsigned_send("Closed"))
        assert inside.code == ResponseCode.SUCCESS, inside.remark
        outside = _raw_request(srv, "127.0.0.2", _unsigned_send("Closed"))
        assert outside.code == ResponseCode.NO_PERMISSION
        assert "No accessKey is configured" in (outside.remark or "")
        assert stored(srv)["Closed"] == 1
        # mqcore's own client, from 127.0.0.1: no account needed.
        with Producer("pg", srv.address) as p:
            p.send(Message(topic="Closed", body=b"from loopback"))
        assert stored(srv)["Closed"] == 2


def test_account_white_address_needs_no_signature(tmp_path: Path, store_name: str) -> None:
    """RocketMQ's whiteRemoteAddress: from there the access key alone is enough."""
    path = tmp_path / "plain_acl.yml"
    path.write_text(ACL.replace("    defaultTopicPerm: DENY\n",
                                "    whiteRemoteAddress: 127.0.0.1\n    defaultTopicPerm: DENY\n",
                                1))  # fmt: skip
    with Server(tmp_path / "data", "127.0.0.1:0", store=store_name, acl=path) as srv:
        srv.broker.create_topic("Closed", queue_nums=1)
        for source, code in (("127.0.0.1", ResponseCode.SUCCESS),
                             ("127.0.0.2", ResponseCode.NO_PERMISSION)):  # fmt: skip
            cmd = _unsigned_send("Closed")
            assert cmd.ext_fields is not None
            cmd.ext_fields["AccessKey"] = USER[0]
            answer = _raw_request(srv, source, cmd)
            assert answer.code == code, (source, answer.remark)
        assert stored(srv)["Closed"] == 1


def test_changed_file_takes_effect_without_restart(server: Server, acl_file: Path) -> None:
    newcomer = ("new-key-01", "new-secret-01")
    with (
        pytest.raises(NoPermissionError, match="No acl config for new-key-01"),
        MQAdmin(server.address, credentials=newcomer) as admin,
    ):
        admin.topics()
    acl_file.write_text(
        ACL + f"  - {{accessKey: {newcomer[0]}, secretKey: {newcomer[1]}, admin: true}}\n"
    )
    changed = time.monotonic()
    with MQAdmin(server.address, credentials=newcomer) as admin:
        while True:
            try:
                topics = {t.topic for t in admin.topics()}
                break
            except NoPermissionError:
                assert time.monotonic() - changed < RELOAD_BOUND_S, "not reloaded in time"
                time.sleep(RELOAD_INTERVAL_S / 10)
    assert set(TOPICS) <= set(topics)
    # A broken new version leaves the last good one in force.
    acl_file.write_text("accounts: [")
    assert server.acl is not None
    reloads = server.acl.reloads
    time.sleep(RELOAD_INTERVAL_S * 3)
    assert server.acl.reloads == reloads
    with MQAdmin(server.address, credentials=newcomer) as admin:
        assert set(TOPICS) <= {t.topic for t in admin.topics()}


def test_serve_refuses_a_malformed_acl_file_at_start(tmp_path: Path) -> None:
    bad = tmp_path / "plain_acl.yml"
    bad.write_text("accounts:\n  - {accessKey: short, secretKey: hidden-secret-1}\n")
    result = CliRunner().invoke(
        main, ["serve", "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "d"),
               "--acl", str(bad)],
    )  # fmt: skip
    assert result.exit_code == 1
    assert "account 'short': accessKey and secretKey must be longer than 6" in result.output
    assert "hidden-secret" not in result.output


def test_simple_consumer_pops_with_an_account(server: Server) -> None:
    from mqcore.client.simple_consumer import SimpleConsumer

    with Producer("pg", server.address, credentials=USER) as p:
        p.send(Message(topic="Open", body=b"popped"))
    with SimpleConsumer(
        "pop-g", server.address, credentials=USER, subscriptions={"Open": "*"}, await_duration=5
    ) as consumer:
        got = []
        deadline = time.monotonic() + 30
        while not got:
            assert time.monotonic() < deadline, "nothing popped"
            got = consumer.receive(4, 30)
        assert [m.body for m in got] == [b"popped"]
        for m in got:
            consumer.ack(m)
    with (
        pytest.raises(MQError, match="topic:Closed"),
        SimpleConsumer(
            "pop-g", server.address, credentials=USER, subscriptions={"Closed": "*"},
            await_duration=1,
        ) as denied,
    ):  # fmt: skip
        denied.receive(4, 30)

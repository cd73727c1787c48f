"""``mqcore serve``: settings, the process's life (listening line, SIGTERM), and requests."""

from __future__ import annotations

import json
import socket
import struct
from pathlib import Path

import pytest
from click.testing import CliRunner
from mqserve import ServeProcess

from mqcore import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    Message,
    Producer,
    PullConsumer,
    PushConsumer,
)
from mqcore.cli import main
from mqcore.commands.serve import parse_settings
from mqcore.errors import InvalidArgumentError
from mqcore.protocol.codes import RequestCode, ResponseCode
from mqcore.remoting.client import RemotingClient
from mqcore.remoting.command import RemotingCommand
from mqcore.server import Server

pytestmark = pytest.mark.timeout(120)


def test_settings_from_file_and_set_pairs(tmp_path: Path) -> None:
    cfg = tmp_path / "broker.toml"
    cfg.write_text('[broker]\nbroker_name = "b-x"\ndefault_topic_queue_nums = 2\n')
    got = parse_settings(cfg, ("default_topic_queue_nums=6", "auto_create_topic_enable=true"))
    assert got == {"broker_name": "b-x", "default_topic_queue_nums": 6,
                   "auto_create_topic_enable": True}  # fmt: skip


@pytest.mark.parametrize(
    ("pair", "message"),
    [
        ("no_such_setting=1", "unknown broker setting 'no_such_setting'"),
        ("auto_create_topic_enbale=1", "did you mean auto_create_topic_enable"),
        ("default_topic_queue_nums=many", "not a valid int"),
        ("auto_create_topic_enable=perhaps", "not a valid bool"),
        ("justaname", "NAME=VALUE"),
    ],
)
def test_bad_settings_are_refused(pair: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        parse_settings(None, (pair,))


def test_cli_bad_setting_is_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["serve", "--data-dir", str(tmp_path), "--set", "nope=1", "--listen", "127.0.0.1:0"]
    )
    assert result.exit_code != 0
    assert "unknown broker setting 'nope'" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--store", "nope"], "unknown store 'nope'"),
        (["--set", "broker_role=SLAVE"], "a SLAVE needs ha_master_address"),
        (["--set", "delay_scheduler=nope"], "unknown delay_scheduler 'nope'"),
    ],
)
def test_a_refused_serve_leaves_no_directory_behind(
    tmp_path: Path, args: list[str], message: str
) -> None:
    """Refused settings, some found only once the store is open: nothing made is left, and a
    directory that was there before is kept as it was."""
    fresh, kept = tmp_path / "new" / "data", tmp_path / "kept"
    kept.mkdir()
    (kept / "notes.txt").write_text("mine")
    for data_dir in (fresh, kept):
        result = CliRunner().invoke(
            main, ["serve", "--data-dir", str(data_dir), "--listen", "127.0.0.1:0", *args]
        )
        assert result.exit_code == 1 and message in result.output, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept"]
    assert [p.name for p in kept.iterdir()] == ["notes.txt"]


def test_remote_clients_through_an_in_process_server(tmp_path: Path) -> None:
    with Server(tmp_path, "127.0.0.1:0") as server:
        server.broker.create_topic("T", queue_nums=2)
        with Producer("pg", namesrv_addr=server.address) as p:
            sent = [p.send(Message(topic="T", body=b"m%d" % i, keys=f"k{i}")) for i in range(6)]
            big = p.send(Message(topic="T", body=bytes(range(256)) * 40))  # compressed on the wire
        with PullConsumer("pc", broker=server.address) as c:
            assert [m.body for m in c.query_message("T", "k3")] == [b"m3"]
            assert c.view_message(sent[2].offset_msg_id or sent[2].msg_id).body == b"m2"
            seen = 0
            for mq in c.fetch_subscribe_message_queues("T"):
                res = c.pull(mq, "*", 0, 32)
                seen += len(res.msg_found_list)
                for m in res.msg_found_list:
                    if m.queue_offset == big.queue_offset and mq == big.message_queue:
                        assert m.body == bytes(range(256)) * 40
        assert seen == 7
        assert len({r.msg_id for r in sent}) == 6


def test_serve_process_lifecycle_and_sigterm(tmp_path: Path) -> None:
    srv = ServeProcess(tmp_path / "data")
    addr = srv.start()
    try:
        with Producer("pg", namesrv_addr=addr) as p:
            for i in range(10):
                p.send(Message(topic="Life", body=b"%d" % i))
        got: list[bytes] = []
        c = PushConsumer(
            "lg", namesrv_addr=addr, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
        )
        c.subscribe("Life", "*")

        def listener(msgs, ctx):  # type: ignore[no-untyped-def]
            got.extend(m.body for m in msgs)
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

        c.register_message_listener(listener)
        c.start()
        from mqtest import wait_until

        assert wait_until(lambda: len(got) == 10, 30)
        c.shutdown()  # commits the offsets to the broker
    finally:
        code = srv.stop()
    assert code == 0
    # SIGTERM persisted the group's offsets before the process ended.
    offsets = json.loads((tmp_path / "data" / "config" / "consumerOffset.json").read_text())
    assert "Life@lg" in json.dumps(offsets)


def _frame(code: int, ext: dict[str, str] | None = None) -> bytes:
    header = json.dumps({"code": code, "language": "JAVA", "version": 1, "opaque": 7, "flag": 0,
                         "extFields": ext or {}}).encode()  # fmt: skip
    return struct.pack(">ii", 4 + len(header), len(header)) + header


def test_unknown_code_answers_3_and_keeps_the_connection(tmp_path: Path) -> None:
    with Server(tmp_path, "127.0.0.1:0") as server:
        host, port = server.address.split(":")
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            for _ in range(2):  # the second answer proves the connection stayed open
                sock.sendall(_frame(9999))
                head = sock.recv(8)
                total, hlen = struct.unpack(">ii", head)
                body = b""
                while len(body) < total - 4:
                    body += sock.recv(total - 4 - len(body))
                answer = json.loads(body[: hlen & 0xFFFFFF])
                assert answer["code"] == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
                assert answer["opaque"] == 7


def test_route_of_an_unknown_topic_is_17(tmp_path: Path) -> None:
    """With auto-creation off (it is on by default, as in RocketMQ)."""
    with Server(tmp_path, "127.0.0.1:0", settings={"auto_create_topic_enable": False}) as server:
        client = RemotingClient()
        try:
            cmd = RemotingCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC, ext_fields={"topic": "Nope"})
            resp = client.invoke(server.address, cmd, 5)
            assert resp.code == ResponseCode.TOPIC_NOT_EXIST
            # A required header field missing is a clear refusal, not a dropped connection.
            resp = client.invoke(
                server.address, RemotingCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC), 5
            )
            assert resp.code != ResponseCode.SUCCESS and "topic" in (resp.remark or "")
        finally:
            client.close()


@pytest.mark.parametrize(
    ("subscription", "code", "remark"),
    [
        ({"topic": "T", "subString": "a > 5 AND b = 'x'", "expressionType": "SQL92"}, 0, None),
        ({"topic": "T", "subString": "TagA || TagB", "expressionType": "TAG"}, 0, None),
        ({"topic": "T", "subString": "a >", "expressionType": "SQL92"}, 23, "a >"),
        ({"topic": "T", "subString": "a = 1", "expressionType": "NO_SUCH_TYPE"}, 23, "NO_SUCH"),
    ],
)
def test_check_client_config_compiles_the_subscription(
    tmp_path: Path, subscription: dict[str, str], code: int, remark: str | None
) -> None:
    """CHECK_CLIENT_CONFIG (46), which the Java push consumer sends before a SQL92 start."""
    body = json.dumps({"clientId": "c@1", "group": "g", "subscriptionData": subscription})
    with Server(tmp_path, "127.0.0.1:0") as server, RemotingClient() as client:
        cmd = RemotingCommand.request(RequestCode.CHECK_CLIENT_CONFIG, None, body.encode())
        answer = client.invoke(server.address, cmd, 10)
    assert answer.code == code
    if remark is not None:
        assert remark in (answer.remark or "")


def test_cluster_info_names_the_server_as_its_own_name_server(tmp_path: Path) -> None:
    """GET_BROKER_CLUSTER_INFO (106), which RocketMQ's admin tools ask a name server first."""
    with Server(tmp_path, "127.0.0.1:0") as server, RemotingClient() as client:
        cmd = RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO)
        answer = client.invoke(server.address, cmd, 10)
        name = server.broker.config.broker_name
    assert answer.code == ResponseCode.SUCCESS
    info = json.loads(bytes(answer.body or b""))
    assert info["clusterAddrTable"] == {"DefaultCluster": [name]}
    assert info["brokerAddrTable"] == {
        name: {
            "cluster": "DefaultCluster",
            "brokerName": name,
            "brokerAddrs": {"0": server.address},
        }
    }


def test_the_docs_show_what_serve_prints(tmp_path: Path) -> None:
    """docs/remote.md's sample of `mqcore serve`'s first lines is what it prints."""
    import re
    import signal
    import subprocess
    import sys

    docs = Path(__file__).resolve().parents[2] / "docs" / "remote.md"
    # The first sample: what a default `mqcore serve` prints (later ones show other options).
    lines = docs.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("# mqcore serve:"))
    sample = []
    for line in lines[start:]:
        if not line.startswith("# mqcore serve:"):
            break
        sample.append(line[2:])
    assert sample
    cmd = [sys.executable, "-c", "from mqcore.cli import main; main()", "serve"]
    proc = subprocess.Popen(
        [*cmd, "--listen", "127.0.0.1:0", "--data-dir", "mq-data"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    assert proc.stdout is not None
    try:
        first = proc.stdout.readline()  # listening: the lines before "stopped" are printed
    finally:
        proc.send_signal(signal.SIGTERM)
        # Read through the same buffered reader: readline() may have buffered the next lines
        # already, which communicate(timeout=...) would skip (it reads the raw descriptor).
        rest = proc.stdout.read()
        proc.stdout.close()
        proc.wait(timeout=30)
    printed = (first + rest).splitlines()
    assert printed[-1] == "mqcore serve: stopped"
    printed = printed[:-1]

    def shape(line: str) -> str:
        return re.sub(r"\d+\.\d+\.\d+\.\d+:\d+", "HOST:PORT", line)

    assert [shape(line) for line in printed] == [shape(line) for line in sample]

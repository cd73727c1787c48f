"""``mqcore send`` and ``mqcore consume`` against a single ``mqcore serve`` and a name server
of two broker groups: tags, keys, properties and binary bodies round-trip; Ctrl-C stops."""

from __future__ import annotations

import base64
import json
import signal
import subprocess
import sys
from typing import Any

import pytest
from click.testing import CliRunner, Result
from mqtest import as_foreground

from mqcore.cli import main
from mqcore.client.admin import MQAdmin
from mqcore.server import Server

pytestmark = pytest.mark.timeout(180)

Cluster = Any  # the `cluster` fixture's (tests/commands/conftest.py)
BINARY = bytes(range(256)) + b"\n\r\x00 trailing"


def run(cluster: Cluster, *args: str, stdin: str | bytes | None = None) -> Result:
    return CliRunner().invoke(main, [*args, "--server", cluster.address], input=stdin)


def ok(cluster: Cluster, *args: str, stdin: str | bytes | None = None) -> Result:
    result = run(cluster, *args, stdin=stdin)
    assert result.exit_code == 0, result.output
    return result


def json_lines(result: Result) -> list[dict[str, Any]]:
    return [json.loads(line) for line in result.stdout.splitlines()]


def make_topic(cluster: Cluster, topic: str) -> None:
    with MQAdmin(cluster.address) as admin:
        admin.create_topic(topic, 2)
    cluster.wait_routed(topic)


def seen(line: dict[str, Any]) -> tuple[bytes, str | None, str | None, dict[str, str]]:
    assert line["body_encoding"] == "base64"
    return base64.b64decode(line["body"]), line["tags"], line["keys"], line["properties"]


def test_send_and_consume_round_trip(cluster: Cluster) -> None:
    make_topic(cluster, "T")
    one = json_lines(
        ok(cluster, "send", "--topic", "T", "--tag", "A", "--key", "k1", "--key", "k2",
           "--property", "x=1", "--property", "y=a=b", "--body", "hello", "--json")
    )  # fmt: skip
    assert [r["status"] for r in one] == ["SEND_OK"]
    lines = ok(cluster, "send", "--topic", "T", "--tag", "L", stdin="l1\n\nl2\n")
    assert [line.split()[0] for line in lines.stdout.splitlines()] == ["SEND_OK", "SEND_OK"]
    as_json = "\n".join(
        [
            json.dumps({"body": base64.b64encode(BINARY).decode(), "tags": "B",
                        "keys": ["kb"], "properties": {"z": "3"}}),
            json.dumps({"body": "text é", "body_encoding": "utf-8"}),
        ]
    )  # fmt: skip
    sent = json_lines(ok(cluster, "send", "--topic", "T", "--property", "d=1", "--json",
                         stdin=as_json))  # fmt: skip
    assert len(sent) == 2
    raw = ok(cluster, "send", "--topic", "T", "--body-base64", base64.b64encode(b"\xff\xfe\x00"))
    assert raw.stdout.startswith("SEND_OK ")
    brokers = {r["broker_name"] for r in one + sent}
    assert brokers <= set(cluster.brokers)

    expected = sorted(
        [
            (b"hello", "A", "k1 k2", {"x": "1", "y": "a=b"}),
            (b"l1", "L", None, {}),
            (b"l2", "L", None, {}),
            (BINARY, "B", "kb", {"z": "3", "d": "1"}),
            ("text é".encode(), None, None, {"d": "1"}),
            (b"\xff\xfe\x00", None, None, {}),
        ],
        key=repr,
    )
    got = json_lines(ok(cluster, "consume", "--topic", "T", "--from", "first", "--max", "6",
                        "--json"))  # fmt: skip
    assert sorted(map(seen, got), key=repr) == expected
    assert {line["msg_id"] for line in got} >= {one[0]["msg_id"]} | {s["msg_id"] for s in sent}
    # A reader without a group leaves no group behind.
    groups = [g["group"] for g in json.loads(ok(cluster, "group", "list", "--json").stdout)]
    assert groups == []

    # A TAG filter; the plain output is each body as it is.
    tagged = ok(cluster, "consume", "--topic", "T", "--from", "first", "--filter", "B || L",
                "--timeout", "1")  # fmt: skip
    printed = tagged.stdout_bytes.split(b"\n")[:-1]
    assert sorted(printed) == sorted([b"l1", b"l2", *BINARY.split(b"\n")])
    assert "consumed 3 messages" in tagged.stderr

    # What consume --json prints, send --json sends again: bodies and fields round-trip.
    make_topic(cluster, "U")
    piped = "\n".join(json.dumps(line) for line in got)
    copied = json_lines(ok(cluster, "send", "--topic", "U", "--json", stdin=piped))
    assert len(copied) == 6
    again = json_lines(ok(cluster, "consume", "--topic", "U", "--from", "first", "--max", "6",
                          "--json"))  # fmt: skip
    assert sorted(map(seen, again), key=repr) == expected

    # As a member of a group: it commits what it printed, and a second run goes on from there.
    first = ok(cluster, "consume", "--topic", "T", "--group", "cg", "--from", "first",
               "--max", "6", "--json")  # fmt: skip
    assert sorted(map(seen, json_lines(first)), key=repr) == expected
    with MQAdmin(cluster.address) as admin:
        assert sum(r.lag for r in admin.lag("cg", "T")) == 0
        assert admin.connections("cg") is None  # the member left when it stopped
    ok(cluster, "send", "--topic", "T", "--body", "seventh")
    second = ok(cluster, "consume", "--topic", "T", "--group", "cg", "--from", "first",
                "--max", "1")  # fmt: skip
    assert second.stdout == "seventh\n"

    # A new group starts at --from: "last" skips what is stored (a broker would otherwise
    # start a group without offsets at a queue's first message).
    late = ok(cluster, "consume", "--topic", "T", "--group", "lg", "--timeout", "1")
    assert late.stdout == ""
    ok(cluster, "send", "--topic", "T", "--body", "eighth")
    after = ok(cluster, "consume", "--topic", "T", "--group", "lg", "--from", "first",
               "--max", "1")  # fmt: skip
    assert after.stdout == "eighth\n"


def test_bad_input_is_one_line(cluster: Cluster) -> None:
    make_topic(cluster, "T")
    for args, stdin, says in [
        (["--json"], "not json\n", "stdin line 1 is not JSON"),
        (["--json"], '{"body": "***"}\n', "stdin line 1: body is not base64"),
        (["--property", "novalue", "--body", "x"], None, "'novalue' is not NAME=VALUE"),
        (["--body", "x", "--body-base64", "eA=="], None, "not both"),
    ]:
        result = run(cluster, "send", "--topic", "T", *args, stdin=stdin)
        assert result.exit_code in (1, 2), result.output
        assert says in result.stderr and "Traceback" not in result.stderr
    missing = run(cluster, "consume", "--topic", "Nope", "--from", "first", "--max", "1")
    assert missing.exit_code == 1 and "Traceback" not in missing.stderr
    assert "Nope" in missing.stderr


def _spawn(server: Server, *args: str) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-c", "from mqcore.cli import main; main()", *args]
    return subprocess.Popen(
        [*cmd, "--server", server.address],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=as_foreground,
    )


def _interrupt(proc: subprocess.Popen[bytes]) -> tuple[int, str]:
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err.decode()


@pytest.mark.parametrize("group", [None, "cg"])
def test_ctrl_c_stops_consume_cleanly(tmp_path: Any, group: str | None) -> None:
    """Ctrl-C: exit code 130, no traceback, the consumer shut down (it left its group)."""
    with Server(tmp_path / "data", "127.0.0.1:0") as server:
        server.broker.create_topic("T", queue_nums=2)
        proc = _spawn(server, "consume", "--topic", "T", "--from", "first",
                      *(["--group", group] if group else []))  # fmt: skip
        try:
            CliRunner().invoke(main, ["send", "--topic", "T", "--body", "one", "--server",
                                      server.address])  # fmt: skip
            assert proc.stdout is not None
            assert proc.stdout.readline() == b"one\n"  # it is consuming now
            code, err = _interrupt(proc)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
        assert code == 130
        assert "Traceback" not in err and "consumed 1 messages" in err
        if group:
            with MQAdmin(server.address) as admin:
                assert admin.connections(group) is None
                assert sum(r.lag for r in admin.lag(group, "T")) == 0


def test_ctrl_c_stops_send_cleanly(tmp_path: Any) -> None:
    with Server(tmp_path / "data", "127.0.0.1:0") as server:
        server.broker.create_topic("T", queue_nums=2)
        proc = _spawn(server, "send", "--topic", "T")
        try:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(b"typed\n")
            proc.stdin.flush()
            assert proc.stdout.readline().startswith(b"SEND_OK ")
            code, err = _interrupt(proc)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
        assert code == 130 and "Traceback" not in err


@pytest.mark.parametrize("group", [None, "cg"])
def test_a_reader_gone_ends_consume_quietly(tmp_path: Any, group: str | None) -> None:
    """`mqcore consume | head -1`: the next message it prints finds the pipe closed; it
    stops with status 141 (128 + SIGPIPE) and no traceback, its consumer shut down."""
    with Server(tmp_path / "data", "127.0.0.1:0") as server:
        server.broker.create_topic("T", queue_nums=1)
        proc = _spawn(server, "consume", "--topic", "T", "--from", "first",
                      *(["--group", group] if group else []))  # fmt: skip
        try:
            send = ["send", "--topic", "T", "--server", server.address]
            CliRunner().invoke(main, [*send, "--body", "one"])
            assert proc.stdout is not None
            assert proc.stdout.readline() == b"one\n"
            proc.stdout.close()  # as head does after its line
            CliRunner().invoke(main, [*send, "--body", "two"])
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
        assert proc.returncode == 141
        assert "Traceback" not in err.decode()
        if group:
            with MQAdmin(server.address) as admin:
                assert admin.connections(group) is None

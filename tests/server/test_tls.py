"""TLS on ``mqcore serve`` with certificates from a throwaway CA: enforcing refuses plain
clients, permissive serves both on one port, mutual TLS refuses a client without a
certificate; mqcore's clients, the admin CLI and a slave's replication work over TLS."""

from __future__ import annotations

import json
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from certs import Certs, make_certs
from click.testing import CliRunner

from mqcore import Message, Producer, PullConsumer
from mqcore.cli import main
from mqcore.client.admin import MQAdmin
from mqcore.errors import InvalidArgumentError, MQError
from mqcore.remoting.tls import client_context, server_context
from mqcore.server import Server

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("ca"))


@pytest.fixture
def serve(tmp_path: Path, store_name: str) -> Iterator[Callable[..., Server]]:
    """Start servers (closed at the end) on the store under test."""
    servers: list[Server] = []

    def start(name: str = "data", **options: Any) -> Server:
        srv = Server(tmp_path / name, "127.0.0.1:0", store=store_name, **options)
        servers.append(srv)
        return srv

    yield start
    for srv in reversed(servers):
        srv.close()


def trusting(certs: Certs, with_cert: bool = False) -> ssl.SSLContext:
    ctx = client_context(
        True,
        ca=certs.ca,
        cert=certs.client_cert if with_cert else None,
        key=certs.client_key if with_cert else None,
    )
    assert ctx is not None
    return ctx


def round_trip(address: str, tls: Any, topic: str = "T", n: int = 3) -> list[bytes]:
    """Send ``n`` messages and pull them back; the bodies read."""
    with Producer("pg", address, tls=tls) as p:
        sent = [p.send(Message(topic=topic, body=b"tls-%d" % i)) for i in range(n)]
    got: list[bytes] = []
    with PullConsumer("cg", address, tls=tls) as pc:
        for mq in {s.message_queue for s in sent}:
            got += [m.body for m in pc.pull(mq, "*", 0, 32).msg_found_list]
    return sorted(got)


def test_enforcing_serves_tls_and_refuses_plain_clients(
    serve: Callable[..., Server], certs: Certs, tmp_path: Path
) -> None:
    srv = serve(ssl_context=server_context(certs.server_cert, certs.server_key))
    assert srv.remoting.tls_mode.value == "enforcing"
    srv.broker.create_topic("T", queue_nums=2)
    assert round_trip(srv.address, trusting(certs)) == [b"tls-0", b"tls-1", b"tls-2"]
    with pytest.raises(MQError), Producer("plain", srv.address) as p:
        p.send(Message(topic="T", body=b"in clear"))
    # A client that does not trust the server's CA is refused by its own check.
    other = make_certs(tmp_path / "other-ca", "another CA")
    with pytest.raises(MQError, match="CERTIFICATE_VERIFY_FAILED"):
        Producer("pg2", srv.address, tls=trusting(other)).start()
    assert sum(srv.broker.get_max_offset("T", q) for q in range(2)) == 3


def test_permissive_serves_tls_and_plain_on_one_port(
    serve: Callable[..., Server], certs: Certs
) -> None:
    ctx = server_context(certs.server_cert, certs.server_key)
    srv = serve(ssl_context=ctx, tls_mode="permissive")
    srv.broker.create_topic("T", queue_nums=2)
    assert round_trip(srv.address, trusting(certs)) == [b"tls-0", b"tls-1", b"tls-2"]
    assert len(round_trip(srv.address, None)) == 6  # plain TCP, same port, all six back
    # A client that connects and says nothing is not served, and does not hold up others.
    host, _, port = srv.address.rpartition(":")
    with socket.create_connection((host, int(port))):
        assert len(round_trip(srv.address, trusting(certs))) == 9


def test_mutual_tls_refuses_a_client_without_a_certificate(
    serve: Callable[..., Server], certs: Certs
) -> None:
    srv = serve(ssl_context=server_context(certs.server_cert, certs.server_key, certs.ca))
    srv.broker.create_topic("T", queue_nums=2)
    with pytest.raises(MQError):
        Producer("pg", srv.address, tls=trusting(certs)).start()
    assert round_trip(srv.address, trusting(certs, with_cert=True)) == [
        b"tls-0",
        b"tls-1",
        b"tls-2",
    ]


def test_admin_cli_over_tls(serve: Callable[..., Server], certs: Certs) -> None:
    srv = serve(ssl_context=server_context(certs.server_cert, certs.server_key))
    args = ["topic", "create", "Secure", "--queues", "2", "--server", srv.address, "--json"]
    created = CliRunner().invoke(main, [*args, "--tls-ca", str(certs.ca)])
    assert created.exit_code == 0, created.output
    assert json.loads(created.stdout)["topic"] == "Secure"
    listed = CliRunner().invoke(
        main,
        ["topic", "list", "--server", srv.address, "--json"],
        env={"MQCORE_TLS_CA": str(certs.ca)},
    )
    assert "Secure" in {t["topic"] for t in json.loads(listed.stdout)}
    plain = CliRunner().invoke(main, ["topic", "list", "--server", srv.address])
    assert plain.exit_code == 1 and "Traceback" not in plain.output
    untrusted = CliRunner().invoke(main, ["topic", "list", "--server", srv.address, "--tls"])
    assert untrusted.exit_code == 1 and "CERTIFICATE_VERIFY_FAILED" in untrusted.stderr


def test_tls_with_acl(serve: Callable[..., Server], certs: Certs, tmp_path: Path) -> None:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text("accounts:\n  - {accessKey: tls-user-1, secretKey: tls-secret-1, admin: true}\n")
    srv = serve(ssl_context=server_context(certs.server_cert, certs.server_key), acl=acl)
    with MQAdmin(srv.address, credentials=("tls-user-1", "tls-secret-1"), tls=trusting(certs)) as a:
        a.create_topic("T", queue_nums=1)
        assert "T" in {t.topic for t in a.topics()}


def test_server_refuses_bad_tls_settings(certs: Certs, tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="TLS mode permissive needs a certificate"):
        Server(tmp_path / "d", "127.0.0.1:0", tls_mode="permissive")
    with pytest.raises(InvalidArgumentError, match="not one of disabled, permissive"):
        Server(tmp_path / "d", "127.0.0.1:0", tls_mode="strict")
    with pytest.raises(InvalidArgumentError, match="cannot load TLS certificate"):
        server_context(certs.ca, certs.server_key)  # the key is not the CA's


def test_slave_replicates_over_tls(tmp_path: Path, certs: Certs) -> None:
    """Replication over TLS (mmap: the store that replicates); a plain slave gets nothing."""
    tls = {"ha_tls": True, "ha_tls_cert": str(certs.server_cert),
           "ha_tls_key": str(certs.server_key)}  # fmt: skip
    fast = {"slave_synchronize_interval_ms": 200, "ha_send_heartbeat_interval_ms": 200}
    with Server(
        tmp_path / "m",
        "127.0.0.1:0",
        settings={**tls, **fast, "ha_listen_port": 0},
        ssl_context=server_context(certs.server_cert, certs.server_key),
    ) as master:
        assert master.ha_address is not None
        master.broker.create_topic("T", queue_nums=2)
        with Producer("pg", master.address, tls=trusting(certs)) as p:
            for i in range(20):
                p.send(Message(topic="T", body=b"replicated-%d" % i))
        slave_settings = {
            **fast,
            "broker_role": "SLAVE",
            "broker_id": 1,
            "ha_master_address": master.ha_address,
        }
        with Server(
            tmp_path / "plain-slave", "127.0.0.1:0", settings=slave_settings
        ) as plain_slave:
            with Server(
                tmp_path / "s",
                "127.0.0.1:0",
                settings={**slave_settings, "ha_tls": True, "ha_tls_ca": str(certs.ca)},
            ) as slave:
                topics = slave.broker.topics

                def replicated() -> int:
                    if topics.get("T") is None:  # the metadata: its own connection
                        return 0
                    return sum(slave.broker.get_max_offset("T", q) for q in range(2))

                deadline = time.monotonic() + 60
                while replicated() < 20:
                    assert time.monotonic() < deadline, "the slave did not catch up over TLS"
                    time.sleep(0.05)
                assert slave.broker.store.commitlog_max_offset() == (
                    master.broker.store.commitlog_max_offset()
                )
                pulled = slave.broker.pull_message("cg", "T", 0, 0, 100)
                assert pulled.records
            assert plain_slave.broker.store.commitlog_max_offset() == 0
            ha = plain_slave.broker.ha
            assert ha is not None and not ha.connected.is_set()


def test_replication_port_bound_to_a_chosen_interface(tmp_path: Path) -> None:
    """``ha_listen_host`` (``--ha-listen HOST:PORT``): slaves reach it there and nowhere else."""
    with Server(
        tmp_path / "m", "127.0.0.1:0", settings={"ha_listen_host": "127.0.0.2", "ha_listen_port": 0}
    ) as master:
        assert master.ha_address is not None
        host, _, port = master.ha_address.rpartition(":")
        assert host == "127.0.0.2"
        socket.create_connection((host, int(port)), timeout=5).close()
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", int(port)), timeout=5).close()


def test_remoting_server_started_alone_sniffs_in_permissive_mode(certs: Certs) -> None:
    """A RemotingServer started without bind() (no Server around it) listens permissively."""
    from mqcore.protocol.codes import ResponseCode
    from mqcore.remoting.client import RemotingClient
    from mqcore.remoting.command import RemotingCommand
    from mqcore.remoting.server import RemotingServer

    ctx = server_context(certs.server_cert, certs.server_key)
    with RemotingServer(None, "127.0.0.1", 0, ssl_context=ctx, tls_mode="permissive") as server:
        assert server.address is not None
        addr = f"{server.address[0]}:{server.address[1]}"
        for client in (RemotingClient(), RemotingClient(ssl_context=trusting(certs))):
            with client:
                answer = client.invoke(addr, RemotingCommand.request(9999), 10)
                assert answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED

"""The gRPC port under ``mqcore serve --acl`` and TLS: the official RocketMQ 5 Python client
with SessionCredentials produces and consumes with a PUB|SUB account; a wrong secret, an
unknown key or a DENY topic is refused (UNAUTHORIZED / FORBIDDEN, no secret in the remark)
and nothing is stored; with ``--tls-cert/--tls-key`` the port takes TLS only, and with
``--tls-ca`` a client without a certificate is refused."""

from __future__ import annotations

import datetime
import json
import os
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from certs import Certs, make_certs
from grpcserve import GrpcServe, run_script

from mqcore.grpc.pb import definition, service, service_grpc
from mqcore.server import Server
from mqcore.server.grpc_access import sign

pytestmark = pytest.mark.timeout(300)

Code = definition.Code
USER = ("user-key-1", "user-secret-1")
ACL = f"""\
accounts:
  - accessKey: {USER[0]}
    secretKey: {USER[1]}
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - Open=PUB|SUB
      - Closed=DENY
"""
TOPICS = ("Open", "Closed")

PRODUCE_CONSUME = r"""
import json, sys, time
from rocketmq import ClientConfiguration, Credentials, Message, Producer, SimpleConsumer
from rocketmq import FilterExpression
addr, ak, sk, topic = sys.argv[1:5]
tls = sys.argv[5:] == ["tls"]
config = ClientConfiguration(addr, Credentials(ak, sk))
out = {}
producer = Producer(config, (topic,), tls_enable=tls)
try:
    producer.startup()
    sent = []
    for i in range(3):
        m = Message()
        m.topic, m.body = topic, ("m%d" % i).encode()
        sent.append(producer.send(m).message_id)
    out["sent"] = len(sent)
except Exception as exc:
    out["send_error"] = str(exc)
finally:
    producer.shutdown()
if "sent" in out:
    consumer = SimpleConsumer(config, "G5", {topic: FilterExpression("*")}, await_duration=2,
                          tls_enable=tls)
    consumer.startup()
    try:
        got = []
        deadline = time.time() + 30
        while len(got) < 3 and time.time() < deadline:
            for m in consumer.receive(16, 10):
                got.append(m.body.decode())
                consumer.ack(m)
        out["got"] = sorted(got)
    finally:
        consumer.shutdown()
print(json.dumps(out))
"""


def _stored(server: Server, topic: str) -> int:
    broker = server.broker
    return sum(broker.get_max_offset(topic, q) for q in range(4))


@pytest.fixture
def acl_server(tmp_path: Path) -> Iterator[Server]:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL)
    with Server(tmp_path / "data", "127.0.0.1:0", grpc_listen="127.0.0.1:0", acl=acl) as srv:
        for topic in TOPICS:
            srv.broker.create_topic(topic, queue_nums=4)
        yield srv


def test_official_client_with_credentials_produces_and_consumes(
    acl_server: Server, tmp_path: Path
) -> None:
    assert acl_server.grpc is not None
    out = json.loads(
        run_script(PRODUCE_CONSUME, acl_server.grpc.address, *USER, "Open", home=tmp_path)
    )
    assert out.get("sent") == 3, out
    assert out["got"] == ["m0", "m1", "m2"]
    assert _stored(acl_server, "Open") == 3


@pytest.mark.parametrize(
    ("ak", "sk", "topic", "code"),
    [
        (USER[0], "wrong-secret-1", "Open", "UNAUTHORIZED"),
        ("unknown-key-1", USER[1], "Open", "UNAUTHORIZED"),
        (USER[0], USER[1], "Closed", "FORBIDDEN"),
    ],
)
def test_official_client_refused(
    acl_server: Server, tmp_path: Path, ak: str, sk: str, topic: str, code: str
) -> None:
    assert acl_server.grpc is not None
    out = json.loads(run_script(PRODUCE_CONSUME, acl_server.grpc.address, ak, sk, topic,
                                home=tmp_path))  # fmt: skip
    assert "sent" not in out, out
    # The client reports "failed to fetch topic route"; its log holds the server's answer.
    logged = (tmp_path / "logs" / "rocketmq_python" / "rocketmq_client.log").read_text()
    assert f"{getattr(Code, code)}, [ACL]" in logged
    assert sk not in logged and USER[1] not in logged
    assert _stored(acl_server, topic) == 0


def _metadata(ak: str, sk: str) -> list[tuple[str, str]]:
    now = datetime.datetime.now().strftime("%Y%m%dT%H%M%SZ")
    auth = (
        f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, Signature={sign(sk, now)}"
    )
    return [("x-mq-date-time", now), ("authorization", auth), ("x-mq-client-id", "c1")]


def _send(stub: object, topic: str, metadata: list[tuple[str, str]] | None) -> object:
    message = definition.Message(
        topic=definition.Resource(name=topic),
        body=b"raw",
        system_properties=definition.SystemProperties(
            message_id="01" + "0" * 30, body_encoding=definition.Encoding.IDENTITY,
            message_type=definition.MessageType.NORMAL,
        ),
    )  # fmt: skip
    request = service.SendMessageRequest(messages=[message])
    return stub.SendMessage(request, metadata=metadata, timeout=10)  # type: ignore[attr-defined]


def test_refusals_are_statuses_that_name_no_secret(acl_server: Server) -> None:
    """Raw calls: unsigned, badly signed, unknown key, DENY topic: each its Code, nothing
    stored; the same signed call to an allowed topic is served."""
    assert acl_server.grpc is not None
    with grpc.insecure_channel(acl_server.grpc.address) as channel:
        stub = service_grpc.MessagingServiceStub(channel)
        cases = [
            (None, "Open", Code.UNAUTHORIZED, "no MQv2-HMAC-SHA1 authorization"),
            (_metadata(USER[0], "wrong"), "Open", Code.UNAUTHORIZED, "Check signature failed"),
            (_metadata("nobody", USER[1]), "Open", Code.UNAUTHORIZED, "No acl config for nobody"),
            (_metadata(*USER), "Closed", Code.FORBIDDEN, "No permission for topic:Closed"),
        ]
        for metadata, topic, code, remark in cases:
            answer = _send(stub, topic, metadata)
            assert answer.status.code == code, (metadata, answer)  # type: ignore[attr-defined]
            assert remark in answer.status.message  # type: ignore[attr-defined]
            assert USER[1] not in answer.status.message  # type: ignore[attr-defined]
        assert _stored(acl_server, "Open") == 0 and _stored(acl_server, "Closed") == 0
        answer = _send(stub, "Open", _metadata(*USER))
        assert answer.status.code == Code.OK, answer  # type: ignore[attr-defined]
    assert _stored(acl_server, "Open") == 1


def test_global_white_list_needs_no_signature(tmp_path: Path) -> None:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text("globalWhiteRemoteAddresses:\n  - 127.0.0.1\n" + ACL)
    with Server(tmp_path / "data", "127.0.0.1:0", grpc_listen="127.0.0.1:0", acl=acl) as srv:
        srv.broker.create_topic("Closed", queue_nums=4)
        assert srv.grpc is not None
        with grpc.insecure_channel(srv.grpc.address) as channel:
            answer = _send(service_grpc.MessagingServiceStub(channel), "Closed", None)
        assert answer.status.code == Code.OK, answer  # type: ignore[attr-defined]
        assert _stored(srv, "Closed") == 1


def test_account_white_address_needs_no_signature_but_its_permissions(tmp_path: Path) -> None:
    """From the account's white address a wrong signature passes; its DENY topic does not."""
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL.replace("    defaultTopicPerm", "    whiteRemoteAddress: 127.0.0.1\n"
                               "    defaultTopicPerm"))  # fmt: skip
    with Server(tmp_path / "data", "127.0.0.1:0", grpc_listen="127.0.0.1:0", acl=acl) as srv:
        for topic in TOPICS:
            srv.broker.create_topic(topic, queue_nums=4)
        assert srv.grpc is not None
        with grpc.insecure_channel(srv.grpc.address) as channel:
            stub = service_grpc.MessagingServiceStub(channel)
            served = _send(stub, "Open", _metadata(USER[0], "wrong"))
            refused = _send(stub, "Closed", _metadata(USER[0], "wrong"))
        assert served.status.code == Code.OK, served  # type: ignore[attr-defined]
        assert refused.status.code == Code.FORBIDDEN, refused  # type: ignore[attr-defined]
        assert _stored(srv, "Open") == 1 and _stored(srv, "Closed") == 0


# -- TLS -------------------------------------------------------------------------------------


@pytest.fixture
def certs(tmp_path: Path) -> Certs:
    return make_certs(tmp_path / "certs")


def _tls_server(tmp_path: Path, certs: Certs, mutual: bool) -> Server:
    ca = certs.ca if mutual else None
    srv = Server(
        tmp_path / "data", "127.0.0.1:0", grpc_listen="127.0.0.1:0",
        grpc_tls=(certs.server_cert, certs.server_key, ca),
    )  # fmt: skip
    srv.broker.create_topic("Open", queue_nums=4)
    return srv


def _route(channel: grpc.Channel) -> object:
    stub = service_grpc.MessagingServiceStub(channel)
    request = service.QueryRouteRequest(topic=definition.Resource(name="Open"))
    return stub.QueryRoute(request, timeout=10)


def test_tls_only_when_certificates_are_given(tmp_path: Path, certs: Certs) -> None:
    with _tls_server(tmp_path, certs, mutual=False) as srv:
        assert srv.grpc is not None
        creds = grpc.ssl_channel_credentials(root_certificates=certs.ca.read_bytes())
        with grpc.secure_channel(srv.grpc.address, creds) as channel:
            assert _route(channel).status.code == Code.OK  # type: ignore[attr-defined]
        with (
            grpc.insecure_channel(srv.grpc.address) as channel,
            pytest.raises(grpc.RpcError) as plain,
        ):
            _route(channel)
        assert plain.value.code() == grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]


def test_official_client_over_tls(tmp_path: Path, certs: Certs) -> None:
    """The 5.x client's TLS (``tls_enable``) trusting the test CA through gRPC's
    GRPC_DEFAULT_SSL_ROOTS_FILE_PATH: it produces and consumes."""
    with _tls_server(tmp_path, certs, mutual=False) as srv:
        assert srv.grpc is not None
        os.environ["GRPC_DEFAULT_SSL_ROOTS_FILE_PATH"] = str(certs.ca)
        try:
            out = json.loads(run_script(PRODUCE_CONSUME, srv.grpc.address, "", "", "Open", "tls",
                                        home=tmp_path))  # fmt: skip
        finally:
            del os.environ["GRPC_DEFAULT_SSL_ROOTS_FILE_PATH"]
        assert out.get("got") == ["m0", "m1", "m2"], out


def test_mutual_tls_refuses_a_client_without_a_certificate(tmp_path: Path, certs: Certs) -> None:
    with _tls_server(tmp_path, certs, mutual=True) as srv:
        assert srv.grpc is not None
        ca = certs.ca.read_bytes()
        bare = grpc.ssl_channel_credentials(root_certificates=ca)
        with (
            grpc.secure_channel(srv.grpc.address, bare) as channel,
            pytest.raises(grpc.RpcError) as refused,
        ):
            _route(channel)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]
        assert _stored(srv, "Open") == 0
        full = grpc.ssl_channel_credentials(
            root_certificates=ca,
            private_key=certs.client_key.read_bytes(),
            certificate_chain=certs.client_cert.read_bytes(),
        )
        with grpc.secure_channel(srv.grpc.address, full) as channel:
            assert _route(channel).status.code == Code.OK  # type: ignore[attr-defined]


def test_serve_command_secures_the_grpc_port(tmp_path: Path, certs: Certs) -> None:
    """``mqcore serve --acl --tls-... --tls-mode permissive --grpc-listen``: the gRPC port
    takes TLS only (no sniffing on one gRPC port) and checks the ACL."""
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL)
    options = (
        "--acl", str(acl), "--tls-cert", str(certs.server_cert),
        "--tls-key", str(certs.server_key), "--tls-mode", "permissive",
    )  # fmt: skip
    srv = GrpcServe(tmp_path / "data", options=options)
    srv.start_grpc()
    try:
        with (
            grpc.insecure_channel(srv.grpc_address) as channel,
            pytest.raises(grpc.RpcError) as plain,
        ):
            _route(channel)
        assert plain.value.code() == grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]
        creds = grpc.ssl_channel_credentials(root_certificates=certs.ca.read_bytes())
        with grpc.secure_channel(srv.grpc_address, creds) as channel:
            stub = service_grpc.MessagingServiceStub(channel)
            request = service.QueryRouteRequest(topic=definition.Resource(name="Open"))
            unsigned = stub.QueryRoute(request, timeout=10)
            assert unsigned.status.code == Code.UNAUTHORIZED, unsigned
            signed = stub.QueryRoute(request, metadata=_metadata(*USER), timeout=10)
            # Past the ACL: the topic is not there yet.
            assert signed.status.code == Code.TOPIC_NOT_FOUND, signed
    finally:
        srv.stop()

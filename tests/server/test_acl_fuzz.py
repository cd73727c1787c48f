"""Fuzzed signed requests against ``mqcore serve --acl``: random and truncated signatures,
missing, random and huge AccessKey fields, and replayed frames with a changed body or field
are all refused and store nothing, while the server goes on serving a well-signed request."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqcore.protocol import headers
from mqcore.protocol.codes import RequestCode, ResponseCode
from mqcore.remoting.client import RemotingClient
from mqcore.remoting.command import RemotingCommand
from mqcore.remoting.signing import Credentials, sign
from mqcore.server import Server

pytestmark = pytest.mark.timeout(300)

USER = Credentials("fuzz-user-1", "fuzz-secret-1")
ACL = f"""\
accounts:
  - accessKey: {USER.access_key}
    secretKey: {USER.secret_key}
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
"""
FUZZ = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture
def served(tmp_path: Path, store_name: str) -> Iterator[tuple[Server, RemotingClient]]:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL)
    with (
        Server(tmp_path / "data", "127.0.0.1:0", store=store_name, acl=acl) as srv,
        RemotingClient() as client,
    ):
        srv.broker.create_topic("Fuzz", queue_nums=1)
        yield srv, client


def _send(body: bytes = b"payload") -> RemotingCommand:
    header = headers.SendMessageRequestHeaderV2.from_v1(
        headers.SendMessageRequestHeader(
            producer_group="pg", topic="Fuzz", default_topic="TBW102",
            default_topic_queue_nums=4, queue_id=0, sys_flag=0,
            born_timestamp=int(time.time() * 1000), flag=0, properties="",
        )
    )  # fmt: skip
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, header, body)


def _signed(body: bytes = b"payload") -> RemotingCommand:
    cmd = _send(body)
    sign(cmd, USER)
    return cmd


def _refused_and_still_serving(served: tuple[Server, RemotingClient], cmd: RemotingCommand) -> None:
    server, client = served
    before = server.broker.get_max_offset("Fuzz", 0)
    answer = client.invoke(server.address, cmd, 10)
    assert answer.code == ResponseCode.NO_PERMISSION, answer.remark
    assert USER.secret_key not in (answer.remark or "")
    assert server.broker.get_max_offset("Fuzz", 0) == before
    good = client.invoke(server.address, _signed(), 10)
    assert good.code == ResponseCode.SUCCESS, good.remark
    assert server.broker.get_max_offset("Fuzz", 0) == before + 1


def _with(cmd: RemotingCommand, **fields: str | None) -> RemotingCommand:
    ext = dict(cmd.ext_fields or {})
    for name, value in fields.items():
        if value is None:
            ext.pop(name, None)
        else:
            ext[name] = value
    cmd.ext_fields = ext
    return cmd


@FUZZ
@given(st.text(max_size=64))
def test_random_signatures_are_refused(
    served: tuple[Server, RemotingClient], signature: str
) -> None:
    cmd = _signed()
    assert cmd.ext_fields is not None
    if signature == cmd.ext_fields["Signature"]:
        return  # drew the right one: nothing to refuse
    _refused_and_still_serving(served, _with(cmd, Signature=signature))


@FUZZ
@given(st.integers(min_value=0, max_value=27))
def test_truncated_signatures_are_refused(served: tuple[Server, RemotingClient], keep: int) -> None:
    cmd = _signed()
    assert cmd.ext_fields is not None
    _refused_and_still_serving(served, _with(cmd, Signature=cmd.ext_fields["Signature"][:keep]))


@FUZZ
@given(
    st.one_of(
        st.none(),
        st.text(min_size=1, max_size=200),
        st.integers(min_value=1 << 10, max_value=1 << 20).map(lambda n: "K" * n),
    )
)
def test_missing_random_and_huge_access_keys_are_refused(
    served: tuple[Server, RemotingClient], key: str | None
) -> None:
    if key == USER.access_key:
        return
    cmd = _with(_signed(), AccessKey=key)
    server, client = served
    _refused_and_still_serving(served, cmd)
    if key is not None and len(key) > 100:
        answer = client.invoke(server.address, _with(_signed(), AccessKey=key), 10)
        assert len(answer.remark or "") < 200  # a huge key is not echoed back whole


@FUZZ
@given(st.binary(max_size=512), st.sampled_from(["queueId", "topic", "bornTimestamp", "b"]))
def test_replayed_frames_with_a_change_are_refused(
    served: tuple[Server, RemotingClient], body: bytes, field: str
) -> None:
    cmd = _signed(b"the signed body")
    if body != b"the signed body":
        replay = _signed(b"the signed body")
        replay.body = body
        _refused_and_still_serving(served, replay)
    assert cmd.ext_fields is not None
    # A signed field changed on the way (the topic in V2 is "b").
    changed = _with(cmd, **{field: str(cmd.ext_fields.get(field, "")) + "1"})
    _refused_and_still_serving(served, changed)


def test_the_same_signed_frame_sent_again_is_served(
    served: tuple[Server, RemotingClient],
) -> None:
    """As in RocketMQ, a signature covers the content, not the moment: an unchanged frame
    sent again is a valid request (TLS is what keeps frames from being captured)."""
    server, client = served
    cmd = _signed()
    for _ in range(2):
        cmd.opaque += 1
        assert client.invoke(server.address, cmd, 10).code == ResponseCode.SUCCESS
    assert server.broker.get_max_offset("Fuzz", 0) == 2

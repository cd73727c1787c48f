"""RocketMQ's plain_acl.yml: parsing, address patterns, permissions, and reloading."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from mqcore.errors import AclConfigError
from mqcore.server.access import check_perm
from mqcore.server.acl import (
    DENY,
    PUB,
    SUB,
    AclFile,
    AddressPattern,
    load_acl,
    parse_acl,
    parse_perm,
)

pytestmark = pytest.mark.timeout(60)

# RocketMQ's distribution/conf/plain_acl.yml, as an operator has it.
ROCKETMQ_SAMPLE = """\
globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.*

accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
    groupPerms:
      # the group should convert to retry topic
      - groupA=DENY
      - groupB=PUB|SUB
      - groupC=SUB

  - accessKey: rocketmq2
    secretKey: 12345678
    whiteRemoteAddress: 192.168.1.*
    # if it is admin, it could access all resources
    admin: true
"""


def test_rocketmq_sample_file_parses() -> None:
    config = parse_acl(ROCKETMQ_SAMPLE)
    assert [p.text for p in config.global_white] == ["10.10.103.*", "192.168.0.*"]
    plain, admin = config.accounts["RocketMQ"], config.accounts["rocketmq2"]
    assert plain.secret_key == "12345678"  # a number in YAML, a string to sign with
    assert not plain.admin and admin.admin
    assert plain.white_remote_address is None
    assert plain.default_topic_perm == DENY and plain.default_group_perm == SUB
    assert plain.perms == {
        "topicA": DENY,
        "topicB": PUB | SUB,
        "topicC": SUB,
        "%RETRY%groupA": DENY,
        "%RETRY%groupB": PUB | SUB,
        "%RETRY%groupC": SUB,
    }
    assert admin.white_remote_address is not None
    assert admin.white_remote_address.matches("192.168.1.77")
    assert not admin.white_remote_address.matches("192.168.2.77")
    assert "12345678" not in repr(plain)


@pytest.mark.parametrize(
    ("pattern", "inside", "outside"),
    [
        ("127.0.0.1", ["127.0.0.1"], ["127.0.0.2", "::1"]),
        ("*", ["1.2.3.4", "::1"], []),
        ("192.168.*.*", ["192.168.0.1", "192.168.255.255"], ["192.169.0.1"]),
        ("10.1.1.1-100", ["10.1.1.1", "10.1.1.100"], ["10.1.1.101", "10.1.1.0"]),
        ("10.1.1.{1,2,3}", ["10.1.1.2"], ["10.1.1.4"]),
        ("10.0.0.1,10.0.0.9", ["10.0.0.9"], ["10.0.0.2"]),
        ("::1", ["::1", "0:0:0:0:0:0:0:1"], ["127.0.0.1"]),
    ],
)
def test_address_patterns(pattern: str, inside: list[str], outside: list[str]) -> None:
    parsed = AddressPattern.parse(pattern)
    assert parsed is not None
    assert all(parsed.matches(h) for h in inside)
    assert not any(parsed.matches(h) for h in outside)


@pytest.mark.parametrize("bad", ["300.1.1.1", "10.1.1.5-2", "host.example", "1:2::*", "10.1.*"])
def test_bad_address_patterns_are_refused(bad: str) -> None:
    with pytest.raises(AclConfigError, match="address"):
        AddressPattern.parse(bad)


def test_permission_rules_are_rocketmqs() -> None:
    assert parse_perm("PUB|SUB") == parse_perm("SUB|PUB") == PUB | SUB
    assert parse_perm(None) == parse_perm("ALL") == DENY
    assert check_perm(PUB, PUB | SUB) and check_perm(SUB, SUB)
    assert not check_perm(PUB, SUB)
    assert not check_perm(SUB, DENY | SUB)  # DENY wins


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("accounts: [", "not valid YAML at line"),
        ("- a\n- b\n", "must be a mapping"),
        ("accounts:\n  - accessKey: longenough\n", "needs both accessKey and secretKey"),
        ("accounts:\n  - {accessKey: short, secretKey: secret-long-1}\n", "longer than 6"),
        (
            "accounts:\n  - {accessKey: longenough, secretKey: secret-long-1, "
            "topicPerms: [topicA]}\n",
            "is not NAME=PERM",
        ),
        (
            "accounts:\n  - {accessKey: longenough, secretKey: secret-long-1, "
            "groupPerms: [g=ALL]}\n",
            "DENY, PUB, SUB",
        ),
        (
            "accounts:\n  - {accessKey: longenough, secretKey: secret-long-1}\n"
            "  - {accessKey: longenough, secretKey: secret-long-2}\n",
            "appears twice",
        ),
    ],
)
def test_malformed_files_are_clear_errors_without_secrets(text: str, match: str) -> None:
    with pytest.raises(AclConfigError, match=match) as exc:
        parse_acl(text)
    assert "secret-long" not in str(exc.value)


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(AclConfigError, match="cannot read the ACL file .*nothing.yml"):
        load_acl(tmp_path / "nothing.yml")


def test_reload_keeps_last_good_version(tmp_path: Path) -> None:
    path = tmp_path / "plain_acl.yml"
    path.write_text(ROCKETMQ_SAMPLE)
    acl = AclFile(path, interval=None, settle=0)
    try:
        path.write_text(ROCKETMQ_SAMPLE.replace("rocketmq2", "rocketmq3"))
        assert acl.check_now()
        assert set(acl.config.accounts) == {"RocketMQ", "rocketmq3"}
        with capture_logs() as logs:
            path.write_text("accounts: [ {accessKey: x")
            assert not acl.check_now()
            assert not acl.check_now()  # the same bad bytes: logged once
        assert set(acl.config.accounts) == {"RocketMQ", "rocketmq3"}
        failed = [e for e in logs if e["event"] == "acl_reload_failed"]
        assert len(failed) == 1 and "not valid YAML" in failed[0]["error"]
        path.unlink()
        with capture_logs() as logs:
            assert not acl.check_now()
        assert [e["event"] for e in logs] == ["acl_reload_failed"]
        assert set(acl.config.accounts) == {"RocketMQ", "rocketmq3"}
        with capture_logs() as logs:
            path.write_text("")  # what a writer leaves for a moment
            assert not acl.check_now()
        assert "empty" in logs[0]["error"]
        assert set(acl.config.accounts) == {"RocketMQ", "rocketmq3"}
        path.write_text(ROCKETMQ_SAMPLE)
        assert acl.check_now()
        assert set(acl.config.accounts) == {"RocketMQ", "rocketmq2"}
    finally:
        acl.close()


def test_a_file_still_changing_is_not_taken(tmp_path: Path) -> None:
    path = tmp_path / "plain_acl.yml"
    path.write_text(ROCKETMQ_SAMPLE)
    acl = AclFile(path, interval=None, settle=0.2)
    try:
        path.write_text(ROCKETMQ_SAMPLE[:120])  # half written: valid YAML, one account cut
        writer = threading.Timer(0.05, path.write_text, (ROCKETMQ_SAMPLE + "\n",))
        writer.start()
        assert not acl.check_now()
        writer.join()
        assert set(acl.config.accounts) == {"RocketMQ", "rocketmq2"}
        assert acl.config.accounts["RocketMQ"].perms  # never the cut version
        assert acl.check_now()  # complete now, and unchanged while it settled
    finally:
        acl.close()


def test_watcher_puts_a_change_in_force(tmp_path: Path) -> None:
    path = tmp_path / "plain_acl.yml"
    path.write_text(ROCKETMQ_SAMPLE)
    acl = AclFile(path, interval=0.05)
    try:
        path.write_text(ROCKETMQ_SAMPLE.replace("rocketmq2", "rocketmq3"))
        deadline = time.monotonic() + 10
        while "rocketmq3" not in acl.config.accounts:
            assert time.monotonic() < deadline, "the change was never put in force"
            time.sleep(0.01)
        assert acl.reloads == 1
    finally:
        acl.close()

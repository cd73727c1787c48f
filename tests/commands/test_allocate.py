"""``mqcore allocate``: the plan table and JSON, for each bundled strategy, and its errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from mqcore.cli import main
from mqcore.commands.allocate import broker_names, build_group, compact_queues
from mqcore.message import MessageQueue

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "mqcore-allocate-sticky"


def run(*args: str) -> tuple[int, str]:
    """Run ``mqcore allocate ARGS``; exit code and output."""
    result = CliRunner().invoke(main, ["allocate", *args])
    return result.exit_code, result.output


def plan(*args: str) -> dict[str, list[str]]:
    """The plan of ``mqcore allocate --json ARGS`` as ``{cid: ["broker:id", ...]}``."""
    code, out = run("--json", *args)
    assert code == 0, out
    data = json.loads(out)
    return {
        cid: [f"{broker}:{qid}" for _topic, broker, qid in share]
        for cid, share in data["plan"].items()
    }


def test_seed_example_avg_table() -> None:
    code, out = run("--strategy", "avg", "--queues", "8", "--brokers", "2", "--consumers", "3")
    assert code == 0, out
    assert "AVG: 8 queues of TopicTest on 2 brokers, 3 consumers" in out
    lines = [line for line in out.splitlines() if line.startswith("│")]
    assert [line.split("│")[1:4] for line in lines] == [
        [" c1       ", "     3 ", " broker-a:0-2             "],
        [" c2       ", "     3 ", " broker-a:3, broker-b:0-1 "],
        [" c3       ", "     2 ", " broker-b:2-3             "],
    ]


def test_seed_example_avg_by_circle_json() -> None:
    assert plan("-s", "AVG_BY_CIRCLE", "-q", "8", "-b", "2", "-c", "3") == {
        "c1": ["broker-a:0", "broker-a:3", "broker-b:2"],
        "c2": ["broker-a:1", "broker-b:0", "broker-b:3"],
        "c3": ["broker-a:2", "broker-b:1"],
    }


def test_json_fields() -> None:
    code, out = run("--json", "-s", "consistent_hash", "-q", "4", "-b", "1", "-c", "2")
    assert code == 0, out
    data = json.loads(out)
    assert data["strategy"] == "consistent_hash"
    assert data["rocketmq_name"] == "CONSISTENT_HASH"
    assert data["consumers"] == ["c1", "c2"]
    assert data["queues"][0] == "MessageQueue [topic=TopicTest, brokerName=broker-a, queueId=0]"
    assert data["unassigned"] == [] and data["assigned_more_than_once"] == []
    assert sum(len(share) for share in data["plan"].values()) == 4


def test_queues_per_broker() -> None:
    shares = plan("--queues-per-broker", "8", "-b", "2", "-c", "2")
    assert shares["c1"] == [f"broker-a:{i}" for i in range(8)]
    assert shares["c2"] == [f"broker-b:{i}" for i in range(8)]


def test_uneven_queues_go_to_the_first_brokers() -> None:
    shares = plan("-q", "5", "-b", "2", "-c", "1")
    assert shares["c1"] == ["broker-a:0", "broker-a:1", "broker-a:2", "broker-b:0", "broker-b:1"]


def test_consumers_sort_numerically_thanks_to_padding() -> None:
    assert list(plan("-c", "12", "-q", "12", "-b", "1")) == [f"c{i:02d}" for i in range(1, 13)]


def test_machine_room_reproduces_rocketmq_example() -> None:
    """RocketMQ: room1's 5 queues over 2 consumers give [0, 1, 4] and [2, 3]."""
    args = ("-s", "machine_room", "--rooms", "room1,room2", "-q", "10", "-c", "2")
    assert plan(*args, "--consumer-idcs", "room1") == {
        "c1": ["room1@broker-a:0", "room1@broker-a:1", "room1@broker-a:4"],
        "c2": ["room1@broker-a:2", "room1@broker-a:3"],
    }
    code, out = run(*args, "--consumer-idcs", "room1")
    assert code == 0
    assert "owned by no consumer: room2@broker-b:0-4" in out


def test_machine_room_nearby_shares_rooms_without_consumers() -> None:
    shares = plan(
        "-s", "machine_room_nearby", "--rooms", "hz,sh,bj", "--consumer-rooms", "hz,sh",
        "-q", "9", "-b", "3", "-c", "4",
    )  # fmt: skip
    assert shares == {
        "hz@c1": ["hz@broker-a:0", "hz@broker-a:1", "bj@broker-c:0"],
        "hz@c3": ["hz@broker-a:2", "bj@broker-c:1"],
        "sh@c2": ["sh@broker-b:0", "sh@broker-b:1", "bj@broker-c:2"],
        "sh@c4": ["sh@broker-b:2"],
    }


def test_machine_room_nearby_inner_consistent_hash_with_virtual_nodes() -> None:
    code, out = run(
        "--json", "-s", "machine_room_nearby", "--rooms", "hz", "--inner-strategy",
        "consistent_hash", "--virtual-nodes", "3", "-c", "2",
    )  # fmt: skip
    assert code == 0, out
    assert json.loads(out)["rocketmq_name"] == "MACHINE_ROOM_NEARBY-CONSISTENT_HASH"


def test_config_shows_queues_owned_twice_and_not_at_all() -> None:
    code, out = run("-s", "config", "--queue", "broker-a:0", "--queue", "broker-b:1", "-c", "2")
    assert code == 0, out
    assert "owned by several consumers: broker-a:0, broker-b:1" in out
    assert "owned by no consumer: broker-a:1-3, broker-b:0, broker-b:2-3" in out


def test_extra_options_are_passed_as_json() -> None:
    with_option = plan("-s", "consistent_hash", "-o", "virtual_nodes=0", "-c", "2")
    assert with_option == {"c1": [], "c2": []}


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("-s", "nope"), 1, "registered allocators: avg, avg_by_circle, config"),
        (("-s", "machine_room"), 2, "give --rooms"),
        (("-q", "4", "--queues-per-broker", "2"), 2, "not both"),
        (("-s", "consistent_hash", "--virtual-nodes", "-1"), 1, "virtual_nodes must be >= 0"),
        (("-s", "avg", "-o", "colour=red"), 1, "unknown option(s) colour"),
        (("-o", "novalue"), 2, "is not KEY=VALUE"),
        (("-s", "config", "--queue", "broker-a"), 2, "is not BROKER:QUEUE_ID"),
        (("-c", "0"), 2, "not in the range"),
        (("-s", "machine_room_nearby", "--rooms", "a", "--inner-strategy", "x"), 1, "'x'"),
    ],
)
def test_errors(args: tuple[str, ...], code: int, message: str) -> None:
    got, out = run(*args)
    assert got == code, out
    assert message in out
    assert "Traceback" not in out


def test_broker_names() -> None:
    names = broker_names(28)
    assert names[:3] == ["broker-a", "broker-b", "broker-c"]
    assert names[25:] == ["broker-z", "broker-aa", "broker-ab"]


def test_build_group_rooms() -> None:
    mq_all, cid_all = build_group(
        topic="T",
        queues=None,
        queues_per_broker=1,
        brokers=3,
        consumers=2,
        rooms=["r1", "r2"],
        consumer_rooms=["r2"],
    )
    assert [mq.broker_name for mq in mq_all] == ["r1@broker-a", "r2@broker-b", "r1@broker-c"]
    assert cid_all == ["r2@c1", "r2@c2"]


def test_compact_queues_keeps_order_and_joins_runs() -> None:
    share = [MessageQueue("T", "a", i) for i in (0, 1, 2, 5)] + [
        MessageQueue("T", "b", 0),
        MessageQueue("U", "b", 1),
        MessageQueue("T", "a", 3),
    ]
    assert compact_queues(share, "T") == "a:0-2, a:5, b:0, U/b:1, a:3"
    assert compact_queues([]) == ""


@pytest.fixture
def sticky_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The documented example distribution, laid out on sys.path as pip installs it."""
    shutil.copy(EXAMPLE / "mqcore_allocate_sticky.py", tmp_path)
    info = tmp_path / "mqcore_allocate_sticky-1.0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: mqcore-allocate-sticky\nVersion: 1.0.0\n"
    )
    (info / "entry_points.txt").write_text("[mqcore]\nsticky = mqcore_allocate_sticky\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_plugin_strategy_by_name(sticky_installed: Path) -> None:
    """A third-party strategy found through the mqcore entry-point group, used by name."""
    code, out = run("--json", "-s", "STICKY", "-q", "8", "-b", "2", "-c", "3")
    assert code == 0, out
    data = json.loads(out)
    assert data["strategy"] == "STICKY"
    assert data["unassigned"] == [] and data["assigned_more_than_once"] == []


def test_plugin_strategy_wrapped_by_machine_room_nearby(sticky_installed: Path) -> None:
    code, out = run(
        "--json", "-s", "machine_room_nearby", "--rooms", "hz,sh", "--inner-strategy", "sticky",
        "-q", "8", "-c", "4",
    )  # fmt: skip
    assert code == 0, out
    data = json.loads(out)
    assert data["rocketmq_name"] == "MACHINE_ROOM_NEARBY-STICKY"
    assert data["unassigned"] == [] and data["assigned_more_than_once"] == []
    for cid, share in data["plan"].items():
        assert all(broker.split("@")[0] == cid.split("@")[0] for _t, broker, _q in share)

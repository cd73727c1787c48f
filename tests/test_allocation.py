"""RocketMQ's rebalance sort and the string helpers the allocation strategies share."""

from __future__ import annotations

import pytest

from mqcore import allocation
from mqcore.allocation import java_split, java_string_key, sorted_cids, sorted_queues
from mqcore.message import MessageQueue
from mqcore.plugins import allocate


def test_sorted_queues_orders_topic_broker_then_queue_id() -> None:
    mqs = [
        MessageQueue("B", "a", 0),
        MessageQueue("A", "b", 1),
        MessageQueue("A", "b", 0),
        MessageQueue("A", "a", 10),
        MessageQueue("A", "a", 9),
    ]
    assert sorted_queues(mqs) == [mqs[4], mqs[3], mqs[2], mqs[1], mqs[0]]


def test_java_string_order_differs_from_python_above_the_bmp() -> None:
    """Java compares UTF-16 units: U+1F600 (a surrogate pair) sorts before U+E000."""
    emoji, private = "\U0001f600", "\ue000"
    assert sorted([emoji, private]) == [private, emoji]  # Python: code points
    assert sorted_cids([emoji, private]) == [emoji, private]  # Java
    assert java_string_key("a") < java_string_key("ab") < java_string_key("b")
    assert sorted_cids(["c10", "c2", "c1"]) == ["c1", "c10", "c2"]


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("a@b", ["a", "b"]),
        ("a@", ["a"]),
        ("a@b@", ["a", "b"]),
        ("@b", ["", "b"]),
        ("@", []),
        ("", [""]),
        ("ab", ["ab"]),
    ],
)
def test_java_split(text: str, parts: list[str]) -> None:
    assert java_split(text, "@") == parts


def test_the_plugin_module_reexports_the_kernel_helpers() -> None:
    """Strategies written against ``mqcore.plugins.allocate`` keep finding the helpers."""
    for name in allocation.__all__:
        assert getattr(allocate, name) is getattr(allocation, name)

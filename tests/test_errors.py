"""Errors raised on purpose are MQErrors; options that are not understood are refused."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import mqcore
from mqcore import Broker, MessageQueue, PullConsumer
from mqcore.config import BrokerConfig
from mqcore.errors import InvalidArgumentError, MQError

ROOT = Path(mqcore.__file__).resolve().parents[1]
# Built-in exceptions that must not be raised on purpose by the library (an MQError subclass
# that is also one of them is fine: InvalidArgumentError is a ValueError).
_BUILTINS = {"ValueError", "TypeError", "RuntimeError", "KeyError", "LookupError", "Exception"}
# Raised and caught on purpose: the demo's failing listener (in a user's place), and a
# value parser that turns its own ValueError into an InvalidArgumentError.
_ALLOWED = {("mqcore/commands/demo.py", "ValueError"), ("mqcore/commands/serve.py", "ValueError")}


def _raised_builtins() -> list[tuple[str, int, str]]:
    found = []
    for folder in ("mqcore", "plugins", "contrib"):
        for path in (ROOT / folder).rglob("*.py"):
            rel = str(path.relative_to(ROOT))
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.Raise) or node.exc is None:
                    continue
                exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                name = exc.id if isinstance(exc, ast.Name) else None
                if name in _BUILTINS and (rel, name) not in _ALLOWED:
                    found.append((rel, node.lineno, name))
    return found


def test_no_builtin_exception_is_raised_on_purpose() -> None:
    """``raise ValueError(...)`` and the like are MQError subclasses instead."""
    assert _raised_builtins() == []


def test_broker_refuses_options_it_does_not_know(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="unknown broker setting.*flush_mod\\b"):
        Broker(tmp_path, flush_mod="SYNC_FLUSH")
    with pytest.raises(InvalidArgumentError, match="either a BrokerConfig or keywords"):
        Broker(tmp_path, config=BrokerConfig(), broker_name="b")
    with Broker(tmp_path, broker_name="b2") as b:  # known settings still work
        assert b.config.broker_name == "b2"


def test_pull_consumer_arguments_are_invalid_argument_errors(tmp_path: Path) -> None:
    with Broker(tmp_path) as b:
        b.create_topic("T", queue_nums=1)
        with PullConsumer("g", broker=b) as c:
            mq = MessageQueue("T", b.config.broker_name, 0)
            with pytest.raises(InvalidArgumentError, match="offset must be >= 0"):
                c.pull(mq, "*", -1, 32)
            with pytest.raises(MQError, match="max_nums"):
                c.pull(mq, "*", 0, 0)

"""The loader of the optional C extensions (mqcore.speedups)."""

from __future__ import annotations

import importlib.util

import pytest

from mqcore import speedups
from mqcore.errors import InvalidArgumentError


def test_unknown_name_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(InvalidArgumentError, match="'nope'; known: codec, keyindex"):
        speedups.load("nope")


@pytest.mark.parametrize("name", sorted(speedups.EXTENSIONS))
def test_no_speedups_turns_each_off(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """MQCORE_NO_SPEEDUPS=1: every owner runs its Python reference; unset, each gets its
    extension when it was built."""
    if name == "spark":  # its package, mqcore.contrib.spark, imports only with the extra
        pytest.importorskip("pyspark")
        pytest.importorskip("pyarrow")
    monkeypatch.setenv("MQCORE_NO_SPEEDUPS", "1")
    assert speedups.disabled() and speedups.load(name) is None
    monkeypatch.delenv("MQCORE_NO_SPEEDUPS")
    built = importlib.util.find_spec(speedups.EXTENSIONS[name]) is not None
    module = speedups.load(name)
    assert (module is not None) == built
    if module is not None:
        assert module.__name__ == speedups.EXTENSIONS[name]

"""Fixtures for the SQL92 filter tests."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pytest

from mqcore import Kernel
from mqcore.errors import FilterEvaluationError


@pytest.fixture(scope="session")
def kernel() -> Kernel:
    """One kernel with the bundled plugins (filters are stateless)."""
    return Kernel(autoload=False)


@pytest.fixture
def sql(kernel: Kernel) -> Callable[[str], object]:
    """Compile an SQL92 expression through the kernel."""
    return lambda expression: kernel.filter("SQL92", expression)


@pytest.fixture
def outcome(sql: Callable[[str], object]) -> Callable[[str, Mapping[str, str]], object]:
    """``outcome(expr, props)``: True, False, None (unknown) or "error" (evaluation failed)."""

    def run(expression: str, properties: Mapping[str, str]) -> object:
        compiled = sql(expression)
        try:
            result = compiled.evaluate(properties)  # type: ignore[attr-defined]
        except FilterEvaluationError:
            result = "error"
        # matches_properties must agree: only TRUE matches, errors never escape.
        assert compiled.matches_properties(properties) is (result is True)  # type: ignore[attr-defined]
        return result

    return run

"""SQL92 expressions from a hostile subscriber: size cap, integers too long for a long."""

from __future__ import annotations

import pytest

from mqcore import FilterExpressionError, Kernel
from mqcore.errors import FilterEvaluationError
from mqcore.plugins.filter_sql92 import MAX_EXPRESSION_BYTES, Sql92Filter


@pytest.fixture(scope="module")
def kernel() -> Kernel:
    return Kernel(autoload=False)


def test_an_expression_over_64_kib_is_refused(kernel: Kernel) -> None:
    assert MAX_EXPRESSION_BYTES == 64 * 1024
    body = "a = '" + "x" * (MAX_EXPRESSION_BYTES - 6) + "'"
    assert len(body.encode()) == MAX_EXPRESSION_BYTES
    assert kernel.filter("SQL92", body).matches_properties({"a": "x" * (MAX_EXPRESSION_BYTES - 6)})
    with pytest.raises(
        FilterExpressionError, match=r"65537 bytes long; the limit is 65536"
    ) as info:
        kernel.filter("SQL92", body + " ")
    assert info.value.column == MAX_EXPRESSION_BYTES + 1  # the first character over


def test_the_cap_counts_utf8_bytes() -> None:
    text = "a = '" + "é" * 40 + "'"  # 86 bytes, 46 characters
    assert Sql92Filter(text, max_bytes=86).expression == text
    with pytest.raises(FilterExpressionError, match="86 bytes long; the limit is 85"):
        Sql92Filter(text, max_bytes=85)


def test_the_cap_is_configurable(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(FilterExpressionError, match="limit is 10"):
        Sql92Filter("a > 5 AND b < 6", max_bytes=10)
    monkeypatch.setattr(Sql92Filter, "max_expression_bytes", 8)
    with pytest.raises(FilterExpressionError, match="limit is 8"):
        Sql92Filter("a > 5 AND b < 6")
    assert Sql92Filter("a > 5").matches_properties({"a": "6"})


@pytest.mark.parametrize("digits", [20, 40, 4300, 4301, 60_000], ids=lambda n: f"{n}-digits")
def test_an_integer_literal_too_long_for_a_long_is_an_expression_error(
    digits: int, kernel: Kernel
) -> None:
    literal = "9" * digits
    with pytest.raises(FilterExpressionError, match="does not fit in a 64-bit long") as info:
        kernel.filter("SQL92", f"a > {literal}")
    assert info.value.column == 5


def test_the_largest_long_literal_still_compiles(kernel: Kernel) -> None:
    f = kernel.filter("SQL92", "a < 9223372036854775807")
    assert f.matches_properties({"a": "9223372036854775806"})
    with pytest.raises(FilterExpressionError, match="64-bit long"):
        kernel.filter("SQL92", "a < 9223372036854775808")


@pytest.mark.parametrize("value", ["9" * 5000, "0" * 5000 + "1", "-" + "9" * 100_000])
def test_a_huge_property_value_is_an_evaluation_error_not_a_value_error(
    value: str, kernel: Kernel
) -> None:
    f = kernel.filter("SQL92", "a > 9223372036854775000")
    if value.startswith("0"):
        assert f.evaluate({"a": value}) is False  # leading zeros: the value is 1
    else:
        with pytest.raises(FilterEvaluationError, match="is not a Java long"):
            f.evaluate({"a": value})
    assert f.matches_properties({"a": value}) is False

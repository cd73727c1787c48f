"""Deep nesting and very long expressions compile, or fail with a FilterExpressionError."""

from __future__ import annotations

import sys

import pytest

from mqcore import FilterExpressionError
from mqcore.plugins.filter_sql92 import Sql92Filter
from mqcore.plugins.filter_sql92.source import MAX_DEPTH


def alternating(levels: int, innermost: str = "a = 1") -> str:
    """``(a = 2 OR (a = 2 AND (a = 2 OR ... innermost)))``: nesting that cannot flatten."""
    head = "".join(f"(a = 2 {'AND' if i % 2 else 'OR'} " for i in range(levels))
    return head + innermost + ")" * levels


def test_a_thousand_parentheses():
    f = Sql92Filter("(" * 1000 + "a = 1" + ")" * 1000)
    assert f.evaluate({"a": "1"}) is True


def test_a_hundred_thousand_parentheses():
    f = Sql92Filter("(" * 100_000 + "a = 1" + ")" * 100_000)
    assert f.evaluate({"a": "2"}) is False


def test_a_thousand_unclosed_parentheses_fail_cleanly():
    with pytest.raises(FilterExpressionError, match="never closed") as info:
        Sql92Filter("(" * 1000 + "a = 1" + ")" * 999)
    assert info.value.column == 1


def test_a_thousand_nested_chains_of_one_operator_flatten():
    f = Sql92Filter("(a = 2 AND " * 1000 + "a = 1" + ")" * 1000)
    assert f.evaluate({"a": "2"}) is False
    f = Sql92Filter("(a = 2 OR " * 1000 + "a = 1" + ")" * 1000)
    assert f.evaluate({"a": "1"}) is True
    assert f.evaluate({}) is None


def test_a_thousand_NOTs_and_minus_signs():
    assert Sql92Filter("NOT " * 1001 + "(a = 1)").evaluate({"a": "1"}) is False
    assert Sql92Filter("NOT " * 1000 + "(a = 1)").evaluate({"a": "1"}) is True
    assert Sql92Filter("a = " + "- " * 1001 + "5").evaluate({"a": "-5"}) is True


def test_nesting_up_to_the_limit_compiles_and_runs_deep_in_a_stack():
    f = Sql92Filter(alternating(MAX_DEPTH - 2))
    assert f.evaluate({"a": "1"}) is False  # the innermost level is an AND

    def nested(n: int) -> bool:  # evaluate with most of the recursion limit already used
        return f.matches_properties({"a": "2"}) if n == 0 else nested(n - 1)

    depth = sys.getrecursionlimit() - MAX_DEPTH * 2 - 100
    assert nested(depth) is True


def test_nesting_beyond_the_limit_is_refused_with_a_position():
    text = alternating(1000)
    with pytest.raises(FilterExpressionError, match=f"nests more than {MAX_DEPTH} levels") as info:
        Sql92Filter(text)
    assert 1 <= info.value.column <= len(text)


def test_long_left_nested_comparisons_are_refused():
    with pytest.raises(FilterExpressionError, match="nests more than"):
        Sql92Filter("a = 1" + " = TRUE" * 200)
    with pytest.raises(FilterExpressionError, match="nests more than"):
        Sql92Filter("a IS NULL" + " IS NULL" * 200)


def test_ten_thousand_terms():
    f = Sql92Filter(" OR ".join(f"a = '{i}'" for i in range(10_000)))
    assert f.evaluate({"a": "9999"}) is True
    assert f.evaluate({"a": "0"}) is True
    assert f.evaluate({"a": "x"}) is False
    assert f.evaluate({}) is None


def test_a_hundred_thousand_values_in_IN():
    f = Sql92Filter("a IN (" + ", ".join(f"'{i}'" for i in range(100_000)) + ")")
    assert f.evaluate({"a": "99999"}) is True
    assert f.evaluate({"a": "100000"}) is False


def test_a_megabyte_string_and_comment():
    big = "x" * 1_000_000
    assert Sql92Filter(f"a = '{big}' /* {big} */").evaluate({"a": big}) is True
    with pytest.raises(FilterExpressionError, match="unterminated string"):
        Sql92Filter(f"a = '{big}")


def test_many_dashes_stay_linear():
    """Without a line break "--" is two minus signs; lexing them must not be quadratic."""
    assert Sql92Filter("a > " + "-" * 200_000 + " 5").evaluate({"a": "6"}) is True
    assert Sql92Filter("a > 1" + " -- note\n" * 10_000).evaluate({"a": "2"}) is True


def test_compiling_deep_in_the_call_stack_fails_cleanly():
    """Even with the stack nearly used up, only FilterExpressionError escapes."""
    text = alternating(MAX_DEPTH - 2)
    outcomes = set()

    def nested(n: int) -> None:
        if n:
            nested(n - 1)
            return
        try:
            Sql92Filter(text)
            outcomes.add("compiled")
        except FilterExpressionError:
            outcomes.add("refused")

    limit = sys.getrecursionlimit()
    for depth in (limit - 400, limit - 200, limit - 120):
        nested(depth)
    assert outcomes == {"compiled", "refused"}  # with room it compiles; without, a clean error

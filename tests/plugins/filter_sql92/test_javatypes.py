"""Java's conversions, checked against what the JDK documents and returns."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqcore.errors import FilterEvaluationError
from mqcore.plugins.filter_sql92 import javatypes as jt


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0", 0),
        ("-0", 0),
        ("+42", 42),
        ("-2147483648", -(2**31)),
        ("2147483647", 2**31 - 1),
        ("007", 7),
        ("\u0661\u0662", 12),  # Arabic-Indic digits
        ("\uff13", 3),  # a fullwidth digit is a decimal digit too
    ],
)
def test_java_int_accepts(text, value):
    assert jt.java_int(text) == value


@pytest.mark.parametrize(
    "text",
    [
        "",
        "+",
        "-",
        "2147483648",
        "-2147483649",
        " 1",
        "1 ",
        "1_0",
        "1.0",
        "1e3",
        "0x10",
        "\u00b2",
        "\U0001d7ce",
    ],  # superscript two and a mathematical digit outside the BMP are no digits
)
def test_java_int_rejects(text):
    with pytest.raises(FilterEvaluationError, match="is not a Java int"):
        jt.java_int(text)


def test_java_long_range():
    assert jt.java_long("9223372036854775807") == 2**63 - 1
    assert jt.java_long("-9223372036854775808") == -(2**63)
    with pytest.raises(FilterEvaluationError):
        jt.java_long("9223372036854775808")


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", 1.0),
        ("1.", 1.0),
        (".5", 0.5),
        ("-.5e1", -5.0),
        ("1e3", 1000.0),
        ("1E+3", 1000.0),
        ("2.5f", 2.5),
        ("2.5D", 2.5),
        ("  7\t", 7.0),
        ("\x007\x1f", 7.0),  # String.trim drops every control character
        ("0x10p0", 16.0),
        ("0X.8P1", 1.0),
        ("-0x1p-1", -0.5),
        ("0x1p99999", math.inf),
        ("1e999", math.inf),
        ("-Infinity", -math.inf),
        ("+Infinity", math.inf),
        ("1e-999", 0.0),
    ],
)
def test_java_double_accepts(text, value):
    assert jt.java_double(text) == value


def test_java_double_nan():
    assert math.isnan(jt.java_double("NaN"))
    assert math.isnan(jt.java_double("-NaN"))


@pytest.mark.parametrize(
    "text",
    [
        "",
        ".",
        "e5",
        "1e",
        "1e+",
        "inf",
        "nan",
        "NAN",
        "infinity",
        "1_000",
        "1.5ff",
        "0x10",
        "0x1.8",
        "1,5",
        "\u00a07",
        "\u0667",
        "--1",
        "1d5",
    ],
)
def test_java_double_rejects(text):
    with pytest.raises(FilterEvaluationError, match="is not a Java double"):
        jt.java_double(text)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("true", True),
        ("TRUE", True),
        ("tRUe", True),
        ("yes", False),
        ("t", False),
        ("truex", False),
        (" true", False),
        ("1", False),
        ("", False),
    ],
)
def test_java_boolean(text, value):
    assert jt.java_boolean(text) is value


def test_double_compare_orders_like_java():
    ordered = [-math.inf, -1.0, -0.0, 0.0, 1e-300, 1.0, math.inf, math.nan]
    for i, a in enumerate(ordered):
        for j, b in enumerate(ordered):
            assert jt.double_compare(a, b) == (i > j) - (i < j), (a, b)


@given(st.floats(allow_nan=True), st.floats(allow_nan=True))
def test_double_compare_is_antisymmetric(a, b):
    assert jt.double_compare(a, b) == -jt.double_compare(b, a)


@pytest.mark.parametrize(
    ("lv", "lt", "rv", "rt", "sign"),
    [
        (5, "I", 3_000_000_000, "L", -1),
        (3_000_000_000, "L", 5, "I", 1),
        (1, "I", 1.0, "D", 0),
        (1.5, "D", 1, "I", 1),
        ("7", "S", 5, "I", 1),
        (5, "I", "7", "S", -1),
        ("true", "S", True, "B", 0),
        (True, "B", 5, "I", -1),  # RocketMQ gives up on these pairs with -1
        (5, "I", True, "B", -1),
        (1.5, "D", False, "B", -1),
        ("a", "S", "a", "S", 0),
        (False, "B", True, "B", -1),
    ],
)
def test_compare(lv, lt, rv, rt, sign):
    assert jt.compare(lv, lt, rv, rt) == sign


def test_compare_boolean_with_string_throws_like_java():
    with pytest.raises(FilterEvaluationError):
        jt.compare(True, "B", "true", "S")


def test_equality_null_rules():
    assert jt.equality(None, "S", None, "S") is True
    assert jt.equality(None, "S", "x", "S") is None
    assert jt.equality("x", "S", None, "S") is False
    assert jt.equality(math.nan, "D", math.nan, "D") is True  # Double.equals
    assert jt.equality(0.0, "D", -0.0, "D") is False

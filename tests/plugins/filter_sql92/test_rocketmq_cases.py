"""RocketMQ's own filter tests (ExpressionTest, ParserTest, FilterSpiTest), restated.

Each case is (expression, properties, expected), where expected is True, False, None
(RocketMQ evaluates to NULL: no match) or "error" (RocketMQ's evaluation throws: no match).
RocketMQ's tests sometimes put numbers or booleans in the evaluation context; a message's
properties are always strings, so those cases use the string form, or a literal operand
where the point was "a value that is not a string".
"""

from __future__ import annotations

import pytest

from mqcore.errors import FilterExpressionError

AND_EXPR = "a=3 and b<>4 And c>5 AND d<=4"
OR_EXPR = "a=3 or b<>4 Or c>5 OR d<=4"
IN_EXPR = "a in ('3', '4', '5')"
NOT_IN_EXPR = "a not in ('3', '4', '5')"
BETWEEN_EXPR = "a between 2 and 10"
NOT_BETWEEN_EXPR = "a not between 2 and 10"

STRING_OPS = ["contains", "startswith", "endswith"]


def _each_op(template: str, props: dict[str, str], expected: object) -> list[tuple]:
    return [(template.format(op=op), props, expected) for op in STRING_OPS]


CASES = [
    # contains / startswith / endswith on a property
    ("value contains 'x'", {"value": "axb"}, True),
    ("value startswith 'ax'", {"value": "axb"}, True),
    ("value endswith 'xb'", {"value": "axb"}, True),
    ("value not contains 'x'", {"value": "axb"}, False),
    ("value not startswith 'ax'", {"value": "axb"}, False),
    ("value not endswith 'xb'", {"value": "axb"}, False),
    *_each_op("value {op} 'x'", {"value": "abb"}, False),
    *_each_op("value not {op} 'x'", {"value": "abb"}, True),
    # an empty search string never matches, negated or not
    *_each_op("value {op} ''", {"value": "axb"}, False),
    *_each_op("value not {op} ''", {"value": "axb"}, False),
    # a missing property is FALSE for both forms (not NULL)
    *_each_op("value {op} 'x'", {}, False),
    *_each_op("value not {op} 'x'", {}, False),
    # values that are not strings (RocketMQ used 1.23, TRUE and an Object) are FALSE
    *_each_op("1.23 {op} 'x'", {}, False),
    *_each_op("1.23 not {op} 'x'", {}, False),
    *_each_op("TRUE {op} 'x'", {}, False),
    *_each_op("TRUE not {op} 'x'", {}, False),
    *_each_op("(value = 'axb') not {op} 'x'", {"value": "axb"}, False),
    # string literals on the left
    ("'axb' contains 'x'", {"whatever": "whatever"}, True),
    ("'axb' startswith 'ax'", {"whatever": "whatever"}, True),
    ("'axb' endswith 'xb'", {"whatever": "whatever"}, True),
    ("'axb' not contains 'x'", {}, False),
    ("'axb' not startswith 'ax'", {}, False),
    ("'axb' not endswith 'xb'", {}, False),
    *_each_op("'axb' {op} 'u'", {}, False),
    *_each_op("'axb' not {op} 'u'", {}, True),
    *_each_op("'axb' {op} ''", {}, False),
    *_each_op("'axb' not {op} ''", {}, False),
    *_each_op("' ' {op} ' '", {}, True),
    *_each_op("' ' not {op} ' '", {}, False),
    *_each_op("'axb' {op} '.'", {}, False),
    *_each_op("'axb' not {op} '.'", {}, True),
    *_each_op("'s' {op} '\\'", {}, False),
    # all in one (RocketMQ put the number 3 in b; the string "3" behaves the same)
    *[
        (
            f"a not in ('4', '4', '5') and b between 3 and 10 and c not {op} 'axbc'",
            {"a": "3", "b": "3", "c": "axbdc"},
            True,
        )
        for op in STRING_OPS
    ],
    # '' inside a string is one quote
    ("TAGS is not null and TAGS='''''tag'''''", {"TAGS": "''tag''"}, True),
    # "now" is just a property name in the grammar
    ("a <= now", {"a": "1", "now": "2"}, True),
    # comparing two strings with BETWEEN converts both to doubles
    ("a between up and low", {"a": "3.14"}, None),
    ("a between up and low", {"a": "3.14", "up": "up", "low": "low"}, "error"),
    ("key is not null and key between 0 and 100", {"key": "con"}, "error"),
    ("a between 0 and 100", {"a": "abc"}, "error"),
    ("a=b", {"a": "3.14", "b": "3.14"}, True),
    ("a<>b", {"a": "3.14", "b": "3.14"}, False),
    ("a<>b", {"a": "3.14", "b": "3.141"}, True),
    # numbers in properties
    ("a > 3.1E10", {"a": "3.1415E10"}, True),  # Java's Double.toString(3.1415 * 10^10)
    ("a > 3.14", {"a": "3.1415"}, True),
    ("a > b", {"a": "10", "b": "20"}, False),
    ("a > b", {"a": "20", "b": "10"}, True),
    # NULL and OR
    ("a is null OR a='hello'", {}, True),
    ("a is null OR a='hello'", {"a": "hello"}, True),
    ("a is null OR a='hello'", {"a": "abc"}, False),
    # booleans
    ("a=TRUE OR b=FALSE", {"a": "true", "b": "false"}, True),
    ("a=TRUE OR b=FALSE", {"a": "false", "b": "true"}, False),
    # IS NOT NULL and =
    ("a is not null and a='hello'", {"a": "hello"}, True),
    ("a is not null and a='hello'", {}, False),
    # AND / OR chains
    (AND_EXPR, {"a": "3", "b": "5", "c": "6", "d": "1"}, True),
    (AND_EXPR, {"a": "4", "b": "5", "c": "6", "d": "1"}, False),
    (OR_EXPR, {"a": "3"}, True),
    (OR_EXPR, {"a": "4", "b": "5"}, True),
    (OR_EXPR, {"a": "4", "b": "4", "c": "6"}, True),
    (OR_EXPR, {"a": "4", "b": "4", "c": "3", "d": "2"}, True),
    (OR_EXPR, {"a": "4", "b": "4", "c": "3", "d": "10"}, False),
    # IN / NOT IN
    *[(IN_EXPR, {"a": v}, True) for v in ("3", "4", "5")],
    (IN_EXPR, {"a": "8"}, False),
    (NOT_IN_EXPR, {"a": "8"}, True),
    *[(NOT_IN_EXPR, {"a": v}, False) for v in ("3", "4", "5")],
    # BETWEEN / NOT BETWEEN
    *[(BETWEEN_EXPR, {"a": v}, True) for v in ("2", "10", "3")],
    *[(BETWEEN_EXPR, {"a": v}, False) for v in ("1", "11")],
    *[(NOT_BETWEEN_EXPR, {"a": v}, True) for v in ("1", "11")],
    *[(NOT_BETWEEN_EXPR, {"a": v}, False) for v in ("2", "10", "3")],
    # IS NULL / IS NOT NULL
    ("a is null", {"abc": "2"}, True),
    ("a is null", {"a": "2"}, False),
    ("a is not null", {"a": "2"}, True),
    ("a is not null", {"abc": "2"}, False),
    # FilterSpiTest: an empty context
    ("a is not null and a > 0", {}, False),
    # SqlFilterIT and LagCalculationIT
    ("(TAGS is not null and TAGS in ('TagA', 'TagB'))", {"TAGS": "TagA"}, True),
    ("(TAGS is not null and TAGS in ('TagA', 'TagB'))", {"TAGS": "TagC"}, False),
    ("(TAGS is not null and TAGS in ('TagA', 'TagB'))", {}, False),
    ("TAGS = 'TAG_FOR_TEST_ESTIMATE' And value < 1", {"value": "0"}, None),
    (
        "TAGS = 'TAG_FOR_TEST_ESTIMATE' And value < 1",
        {"TAGS": "TAG_FOR_TEST_ESTIMATE", "value": "0"},
        True,
    ),
    (
        "TAGS = 'TAG_FOR_TEST_ESTIMATE' And value < 1",
        {"TAGS": "TAG_FOR_TEST_ESTIMATE", "value": "1"},
        False,
    ),
]


@pytest.mark.parametrize(("expression", "properties", "expected"), CASES)
def test_rocketmq_expression_case(outcome, expression, properties, expected):
    assert outcome(expression, properties) == expected


VALID = [
    "a=3 and b<>4 And c>5 AND d<=4",
    "a=3  and    b<>4 And c>5 AND d<=4",
    "a=3 or b<>4 Or c>5 OR d<=4",
    "a in ('3', '4', '5')",
    "(a not in ('6', '4', '5')) or (b in ('3', '4', '5'))",
    "(a between 2 and 10) AND (b not between 6 and 9)",
    "a is null",
    "a is not null",
    "a <= now",
    "a=3 and b contains 'xxx' and c not contains 'xxx'",
]


@pytest.mark.parametrize("expression", VALID)
def test_rocketmq_valid_expressions_compile(sql, expression):
    compiled = sql(expression)
    assert compiled.expression == expression
    assert compiled.expression_type == "SQL92"


def test_blanks_do_not_change_the_compiled_expression(sql):
    """RocketMQ's testEquals: extra blanks give an equal expression, OR a different one."""
    first = sql("a=3 and b<>4 And c>5 AND d<=4")
    blanks = sql("a=3  and    b<>4 And c>5 AND d<=4")
    other = sql("a=3 or b<>4 Or c>5 OR d<=4")
    assert first.source == blanks.source
    assert first.source != other.source


REJECTED = [
    "a and between 2 and 10",  # testParse_invalid
    "a > 100000000000000000000000",  # testParse_decimalOverFlow
    "a > 1" + "1" * 2048 * 51 + "." + "1" * 2048 * 51,  # testParse_floatOverFlow
    " a between 10 and 0",  # testParse_illegalBetween
    "value contains x",  # the search must be a string literal
    "value not contains x",
    "value contains 123",
    "value not contains 123",
    "'axb' contains ",
    "'axb' not contains ",
]


@pytest.mark.parametrize("expression", REJECTED, ids=lambda e: e[:40])
def test_rocketmq_rejected_expressions(sql, expression):
    with pytest.raises(FilterExpressionError) as info:
        sql(expression)
    assert info.value.expression == expression
    assert info.value.column is not None and 1 <= info.value.column <= len(expression) + 1

"""SQL92 evaluation semantics, each case worked out from RocketMQ's Java source.

Outcomes: True, False, None (NULL, unknown) or "error" (RocketMQ's evaluation throws; the
broker then treats the message as not matching).
"""

from __future__ import annotations

import pytest

from mqcore import Message
from mqcore.codec import decode, encode, record_properties

NUMBERS = [
    # Integer literal: the property goes through Integer.valueOf (32 bits, no blanks)
    ("a > 5", {"a": "7"}, True),
    ("a > 5", {"a": "+7"}, True),
    ("a > 5", {"a": "-7"}, False),
    ("a > 5", {"a": "0007"}, True),
    ("a > 5", {"a": "\u0667"}, True),  # an Arabic-Indic 7 is a Java digit
    ("a > 5", {"a": "5.5"}, "error"),
    ("a > 5", {"a": "3000000000"}, "error"),  # beyond Integer
    ("a > 5", {"a": " 7"}, "error"),
    ("a > 5", {"a": "1_0"}, "error"),
    ("a > 5", {"a": ""}, "error"),
    ("a > 5", {"a": "+"}, "error"),
    ("a > 5", {"a": "abc"}, "error"),
    ("a > 5", {}, None),
    # Long literal (beyond 32 bits): Long.valueOf
    ("a > 3000000000", {"a": "3000000001"}, True),
    ("a > 3000000000", {"a": "5"}, False),
    ("a > 3000000000", {"a": "9223372036854775808"}, "error"),
    ("a = 2147483648", {"a": "2147483648"}, True),
    ("a = 2147483647", {"a": "2147483648"}, "error"),
    ("a = -2147483648", {"a": "2147483648"}, False),  # negating a Long keeps a Long
    ("a = -5", {"a": "-5"}, True),
    ("a = 5L", {"a": "5"}, True),
    ("a = 5l", {"a": "5.0"}, "error"),  # 5L is still an Integer
    # Double literal: Double.valueOf, Java's syntax (trimmed, suffixes, hex, NaN, Infinity)
    ("a > 5.0", {"a": "7"}, True),
    ("a > 5.0", {"a": "5.5"}, True),
    ("a > 5.0", {"a": " 7 "}, True),
    ("a > 5.0", {"a": "7d"}, True),
    ("a > 5.0", {"a": "7F"}, True),
    ("a > 5.0", {"a": "0x1.8p3"}, True),  # 12.0
    ("a > 5.0", {"a": "-Infinity"}, False),
    ("a > 5.0", {"a": "Infinity"}, True),
    ("a > 5.0", {"a": "inf"}, "error"),
    ("a > 5.0", {"a": "infinity"}, "error"),
    ("a > 5.0", {"a": "1_0"}, "error"),
    ("a > 5.0", {"a": "\u0667"}, "error"),  # Double.valueOf takes ASCII digits only
    ("a > 5.0", {"a": "."}, "error"),
    ("a > 5.0", {"a": "1e"}, "error"),
    # Double.compareTo puts NaN above everything
    ("a > 5.0", {"a": "NaN"}, True),
    ("a >= 5.0", {"a": "NaN"}, True),
    ("a < 5.0", {"a": "NaN"}, False),
    ("a <= 5.0", {"a": "NaN"}, False),
    ("a = 5.0", {"a": "NaN"}, False),
    ("5.0 < a", {"a": "NaN"}, True),
    ("5.0 > a", {"a": "NaN"}, False),
    ("a = 5.0", {"a": "5"}, True),
    ("a = 5.0", {"a": "5.00"}, True),
    ("a = 5E2", {"a": "500"}, True),
    ("a > .5", {"a": "0.6"}, True),
    ("a > 5.", {"a": "5.1"}, True),
    ("a < 1.5E-3", {"a": "0.001"}, True),
    ("a > 5e+2", {"a": "501"}, True),
    # two properties compared with < > convert both to doubles, with Java's -0.0 < 0.0
    ("a > b", {"a": "0.0", "b": "-0.0"}, True),
    ("a < b", {"a": "1", "b": "1e1"}, True),
    ("a < b", {"a": "1", "b": "x"}, "error"),
    ("a < b", {"a": "1"}, None),
    # literals on the left convert the same way
    ("5 < a", {"a": "7"}, True),
    ("5 < a", {"a": "7.5"}, "error"),
    ("5 = a", {"a": "5"}, True),
    # BETWEEN
    ("a BETWEEN -5 AND -1", {"a": "-3"}, True),
    ("a BETWEEN -1 AND -5", {"a": "-3"}, False),  # negated bounds are not checked
    ("a NOT BETWEEN 10 AND 0", {"a": "5"}, True),  # NOT BETWEEN is not checked
    ("a BETWEEN 1 AND 2.5", {"a": "2.5"}, "error"),  # a >= 1 needs an Integer: "2.5" fails
    ("a BETWEEN 1.0 AND 2.5", {"a": "2.5"}, True),
    # literals only
    ("5 > 3", {}, True),
    ("1 = 1.0", {}, True),
    ("3000000000 > 5", {}, True),
    ("'5' = 5", {}, True),
    ("'x' = 5", {}, "error"),
    ("5 = 'x'", {}, "error"),
    ("5 = TRUE", {}, False),  # RocketMQ gives up on Integer against Boolean: -1
]

NULLS_AND_STRINGS = [
    ("a = 'x'", {}, None),
    ("'x' = a", {}, False),  # a NULL on the right only is FALSE
    ("'x' <> a", {}, True),
    ("a <> 'x'", {}, None),
    ("5 <> a", {}, True),
    ("a = b", {}, True),  # two NULLs are equal
    ("a = b", {"b": "1"}, None),
    ("a = b", {"a": "1"}, False),
    ("a <> b", {}, False),
    ("a <> b", {"a": "1"}, True),
    ("a = b", {"a": "1", "b": "1.0"}, False),  # strings compare as strings with =
    ("a = -'x'", {}, True),  # minus on a string is NULL
    ("a = -'x'", {"a": "x"}, False),
    ("-a IS NULL", {"a": "5"}, True),
    # a condition under a minus sign is still evaluated, and its failure counts
    ("- (a = 0) CONTAINS 'x'", {"a": "2147483648"}, "error"),
    ("- (a = 0) IS NULL", {"a": "0"}, True),
    ("b > -(a = 0)", {"a": "x", "b": "1"}, "error"),
    ("b > -(a = 0)", {"a": "x"}, None),  # b is NULL: the right side is not evaluated
    ("NULL IS NULL", {}, True),
    ("5 IS NULL", {}, False),
    ("'x' IS NOT NULL", {}, True),
    ("a = 'it''s'", {"a": "it's"}, True),
    ("a = ''''", {"a": "'"}, True),
    ("a = 'line\nbreak'", {"a": "line\nbreak"}, True),
    ("a = 'h\u00e9llo \u2713'", {"a": "h\u00e9llo \u2713"}, True),
    ("a = 'X'", {"a": "x"}, False),  # case-sensitive
    ("A = 'x'", {"a": "x"}, None),  # property names are case-sensitive
    ("a IN ('x')", {}, None),
    ("a NOT IN ('x')", {}, None),
    ("a NOT IN ('x')", {"a": "y"}, True),
    ("a IN ('x', 'y', 'z', 'w', 'v', 'u')", {"a": "u"}, True),
]

BOOLEANS = [
    ("a = TRUE", {"a": "true"}, True),
    ("a = TRUE", {"a": "TRUE"}, True),
    ("a = TRUE", {"a": "tRuE"}, True),
    ("a = TRUE", {"a": "1"}, False),
    ("a = FALSE", {"a": "yes"}, True),  # Boolean.valueOf("yes") is false
    ("a = FALSE", {"a": "true"}, False),
    ("a <> TRUE", {}, None),
    ("TRUE = a", {"a": "true"}, "error"),  # Java casts the Boolean to String and throws
    ("TRUE = a", {}, False),
    ("(a > 1) = TRUE", {"a": "5"}, True),
    ("(a > 1) = TRUE", {"a": "0"}, False),
    ("(a > 1) = TRUE", {}, None),
    ("(a > 1) = 5", {"a": "5"}, False),
    ("(a > 1) = 'true'", {"a": "5"}, "error"),
    ("'true' = (a > 1)", {"a": "5"}, True),
    ("(a > 1) = (b > 1)", {"a": "5", "b": "7"}, True),
    ("TRUE = TRUE", {}, True),
    ("'true' = TRUE", {}, True),
    ("a", {"a": "true"}, False),  # a property as a condition is never TRUE
    ("a", {}, None),
    ("NOT a", {"a": "true"}, True),
    ("NOT a", {}, None),
    ("TRUE", {}, True),
    ("FALSE", {}, False),
    ("NULL", {}, None),
    ("NOT NULL", {}, None),
    ("NOT NOT NOT TRUE", {}, False),
]

LOGIC = [
    ("a = 1 AND b = 1", {"a": "1"}, None),
    ("a = 1 AND b = 1", {"a": "2"}, False),
    ("b = 1 AND a = 1", {"a": "2"}, False),
    ("a = 1 OR b = 1", {"a": "1"}, True),
    ("a = 1 OR b = 1", {"a": "2"}, None),
    ("NOT (a = 1)", {}, None),
    ("NOT (a = 1)", {"a": "1"}, False),
    ("NOT (a = 1)", {"a": "2"}, True),
    ("NULL OR TRUE", {}, True),
    ("NULL AND FALSE", {}, False),
    ("NULL AND TRUE", {}, None),
    # errors stop the evaluation where they happen; short-circuit can avoid them
    ("b = 'x' OR a > 5", {"a": "abc", "b": "x"}, True),
    ("a > 5 OR b = 'x'", {"a": "abc", "b": "x"}, "error"),
    ("b = 'x' AND a > 5", {"a": "abc", "b": "y"}, False),
    ("a > 5 AND b = 'x'", {"a": "abc", "b": "y"}, "error"),
    ("c = 1 AND a > 5", {"a": "abc"}, "error"),  # unknown does not short-circuit
    # CONTAINS & co. are FALSE, not NULL, for a missing property: NOT makes them TRUE
    ("NOT (a CONTAINS 'x')", {}, True),
    ("NOT (a NOT CONTAINS 'x')", {}, True),
]

PRECEDENCE = [
    # NOT binds tighter than comparisons: (NOT a) = 'x' compares a Boolean with a String
    ("NOT a = 'x'", {"a": "y"}, "error"),
    ("NOT a = 'x'", {}, None),
    # AND binds tighter than OR
    ("a = 1 OR b = 1 AND c = 1", {"a": "1", "b": "2", "c": "2"}, True),
    ("(a = 1 OR b = 1) AND c = 1", {"a": "1", "b": "2", "c": "2"}, False),
    # = and IS NULL share a level, left to right
    ("a = 'x' IS NULL", {}, True),
    ("a = 'x' IS NULL", {"a": "x"}, False),
    ("NOT a IS NULL", {}, True),  # (NOT a) IS NULL
    ("a IS NULL = TRUE", {}, True),
    ("a > 1 = TRUE", {"a": "5"}, True),
    ("a = b > 1", {"a": "true", "b": "5"}, True),  # a = (b > 1)
    ("a > - -5", {"a": "6"}, True),
    ("a > +5", {"a": "6"}, True),
    ("a BETWEEN 1 AND 3 AND b = 1", {"a": "2", "b": "1"}, True),
    ("a BETWEEN 1 AND 3 AND b = 1", {"a": "2", "b": "2"}, False),
    ("a > 1 CONTAINS 'x'", {"a": "5"}, False),  # (a > 1) CONTAINS 'x': not a string
]

SYNTAX = [
    ("a Is NoT nUlL aNd b iN ('x') oR c nOt BeTwEeN 1 aNd 2", {"a": "1", "b": "x"}, True),
    ("a = true or b = false", {"a": "TRUE"}, True),
    ("a = 1 /* note */ AND b = 2", {"a": "1", "b": "2"}, True),
    ("a = 1 -- note\nAND b = 2", {"a": "1", "b": "2"}, True),
    ("a = 1 -- note\r\nAND b = 2", {"a": "1", "b": "3"}, False),
    ("a\t=\n1\fAND\rb = 2", {"a": "1", "b": "2"}, True),
    ("(((((a = 1)))))", {"a": "1"}, True),
    ("$x_1 = 'y'", {"$x_1": "y"}, True),
    ("_a = 'y'", {"_a": "y"}, True),
    ("notx = 1", {"notx": "1"}, True),  # a keyword prefix makes an identifier
]


@pytest.mark.parametrize(
    ("expression", "properties", "expected"),
    NUMBERS + NULLS_AND_STRINGS + BOOLEANS + LOGIC + PRECEDENCE + SYNTAX,
)
def test_outcome(outcome, expression, properties, expected):
    assert outcome(expression, properties) == expected


def test_the_tag_is_the_property_TAGS(sql):
    """The SQL92 filter sees the tag (and keys) beside user properties."""
    f = sql("TAGS = 'A' AND KEYS = 'k1' AND x = '1'")
    assert f.matches(Message(topic="T", tags="A", keys="k1", properties={"x": "1"}))
    assert not f.matches(Message(topic="T", tags="B", keys="k1", properties={"x": "1"}))
    assert not f.matches(Message(topic="T", keys="k1", properties={"x": "1"}))


def test_matches_never_raises(sql):
    """Evaluation errors and odd objects give False."""
    f = sql("a > 5")
    assert f.matches(Message(topic="T", properties={"a": "abc"})) is False
    assert f.matches(object()) is False
    assert f.matches_properties({"a": "abc"}) is False
    assert f.matches_properties({"a": 7}) is False  # not a string: an evaluation error


def test_stages_of_the_sql92_filter(sql):
    """SQL92 never filters on the tags code and always needs the properties."""
    f = sql("a > 5")
    assert f.uses_properties is True
    assert f.matches_tags_code(0) is True
    assert f.matches_tags_code(-123456) is True
    assert f.matches_properties({"a": "6"}) is True


def test_compiled_filters_are_cached_per_expression(kernel):
    assert kernel.filter("SQL92", "a > 5") is kernel.filter("sql92", "a > 5")


def test_broker_stage_reads_stored_properties_without_the_body(sql):
    """The commit-log stage sees TAGS and user properties of a record; the body is never read."""
    record = bytearray(
        encode(Message(topic="T", body=b"B" * 64, tags="TagA", properties={"a": "7"}))
    )
    body_at = record.find(b"B" * 64)
    record[body_at : body_at + 64] = b"\xff" * 64  # garbage body: nothing may look at it
    f = sql("TAGS = 'TagA' AND a > 5")
    assert f.matches_properties(record_properties(record, 0))
    assert f.matches(decode(record))
    assert not sql("TAGS = 'TagB'").matches_properties(record_properties(record, 0))

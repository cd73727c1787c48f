"""Compile-time errors: what RocketMQ rejects, with the column and a readable message."""

from __future__ import annotations

import pytest

from mqcore import FilterExpressionError, Kernel

# (expression, column, words the message must contain)
REJECTED = [
    # NULL with = or <>
    ("a = NULL", 5, "NULL cannot be compared with '='"),
    ("NULL = a", 1, "use IS NULL"),
    ("a <> NULL", 6, "use IS NOT NULL"),
    ("a = (NULL)", 6, "NULL cannot be compared"),
    # strings, booleans and NULL cannot be ordered
    ("a > 'x'", 5, "'>' compares numbers, but its right operand is the string 'x'"),
    ("'x' < a", 1, "left operand is the string 'x'"),
    ("a > TRUE", 5, "right operand is TRUE"),
    ("a >= FALSE", 6, "FALSE"),
    ("a <= NULL", 6, "NULL"),
    ("(a > 1) > 0", 4, "left operand is a condition"),
    ("a > (b = 1)", 8, "right operand is a condition"),
    ("a < +'x'", 6, "the string 'x'"),
    # BETWEEN
    ("a BETWEEN 'a' AND 'z'", 11, "lower bound is the string 'a'"),
    ("a BETWEEN TRUE AND FALSE", 11, "TRUE"),
    ("a BETWEEN NULL AND 5", 11, "NULL"),
    ("a BETWEEN 1 AND NULL", 17, "upper bound is NULL"),
    ("a BETWEEN 10 AND 0", 11, "wrong order: 10 is greater than 0"),
    ("a BETWEEN 1.5 AND 1", 11, "wrong order"),
    ("a BETWEEN 3000000000 AND 5", 11, "wrong order"),
    ("'x' BETWEEN 1 AND 2", 1, "left operand is the string 'x'"),
    ("a NOT BETWEEN 'a' AND 'b'", 15, "'NOT BETWEEN' compares numbers"),
    # IN needs a property
    ("5 IN ('5')", 1, "IN needs a property on its left, found the number 5"),
    ("'a' NOT IN ('a')", 1, "NOT IN needs a property"),
    ("(a = 1) IN ('x')", 4, "found a condition"),
    ("-a IN ('1')", 1, "found a negated value"),
    ("NOT a IN ('1')", 1, "found a condition"),
    # TRUE/FALSE literal against another kind of literal
    ("TRUE = 5", 6, "TRUE cannot be compared with the number 5"),
    ("FALSE = 'x'", 7, "FALSE cannot be compared with the string 'x'"),
    ("TRUE <> 1.5", 6, "TRUE cannot be compared"),
    # not a condition
    ("5", 1, "the expression needs a condition, found the number 5"),
    ("'x'", 1, "found the string 'x'"),
    ("-a", 1, "found a negated value"),
    ("(((5)))", 4, "found the number 5"),
    ("NOT 5", 5, "NOT needs a condition"),
    ("a AND 5", 7, "AND needs a condition, found the number 5"),
    ("'x' OR a", 1, "OR needs a condition, found the string 'x'"),
    # literals
    ("a = 9223372036854775808", 5, "does not fit in a 64-bit long"),
    ("a = 9223372036854775807", None, None),  # the largest long is fine
    ("a = 1e400", 5, "too large for a double"),
    ("a = 0.0", 5, "below Double.MIN_VALUE"),
    ("a = .0e5", 5, "below Double.MIN_VALUE"),
    ("a = 1e-400", 5, "below Double.MIN_VALUE"),
    ("a = 0x10", 6, "unexpected 'x10'"),  # no hexadecimal literals
    ("a = 010", 6, "unexpected '10'"),  # nor octal ones
    ("a = 0L", 6, "unexpected 'L'"),  # only 1-9... may carry L
    # syntax
    ("", 1, "needs an expression"),
    ("   ", 1, "needs an expression"),
    ("a >", 4, "expected a value after '>'"),
    ("a > AND b = 1", 5, "expected a value after '>' at column 5 (found 'AND')"),
    ("= 1", 1, "expected a condition"),
    ("a == 1", 4, "expected a value after '='"),
    ("a != 1", 3, "use <> for 'not equal'"),
    ('a = "x"', 5, "single quotes"),
    ("a = 'unterminated", 5, "unterminated string"),
    ("a = 1 /* open", 7, "unterminated comment"),
    ("a = 1 b = 2", 7, "unexpected 'b'"),
    ("a = 1 -- note", 7, "a -- comment ends only at a line break"),
    ("a.b = 1", 2, "unexpected character '.'"),
    ("a = 1 & b = 2", 7, "use AND"),
    ("a + 1 = 2", 3, "unexpected '+'"),
    ("(a = 1", 1, "'(' is never closed"),
    ("a = 1)", 6, "unmatched ')'"),
    ("((a = 1) AND (b = 1)", 1, "never closed"),
    ("a BETWEEN 1", 12, "expected AND after the lower bound of BETWEEN"),
    ("a BETWEEN 1 OR 2", 13, "expected AND"),
    ("a BETWEEN 1 > 0 AND 2", 13, "expected AND"),
    ("(a BETWEEN 1) AND 2", 13, "expected AND"),
    ("a BETWEEN AND 2", 11, "expected a value after 'BETWEEN'"),
    ("a IS 5", 6, "expected NULL or NOT NULL after IS"),
    ("a IS NOT 5", 10, "expected NULL or NOT NULL"),
    ("a NOT LIKE 'x'", 7, "expected CONTAINS, STARTSWITH, ENDSWITH, BETWEEN or IN after NOT"),
    ("a LIKE 'x'", 3, "unexpected 'LIKE'"),
    ("a IN ()", 7, "expected a string in single quotes"),
    ("a IN (1, 2)", 7, "expected a string in single quotes after '('"),
    ("a IN ('1' '2')", 11, "expected ',' or ')' in the IN list"),
    ("a IN ('1',)", 11, "expected a string"),
    ("a IN '1'", 6, "expected '(' after 'IN'"),
    ("a NOT IN '1'", 10, "expected '(' after 'IN'"),
    ("a CONTAINS b", 12, "expected a string in single quotes after 'CONTAINS'"),
    ("a STARTSWITH 5", 14, "expected a string"),
    ("a NOT ENDSWITH", 15, "found the end of the expression"),
    ("NOT", 4, "expected a value after 'NOT'"),
    ("a = 1 AND", 10, "expected a value after 'AND'"),
    ("()", 2, "expected a value after '('"),
]


@pytest.mark.parametrize(("expression", "column", "words"), REJECTED)
def test_rejected_with_position(kernel, expression, column, words):
    if column is None:
        kernel.filter("SQL92", expression)  # a control case that compiles
        return
    with pytest.raises(FilterExpressionError) as info:
        kernel.filter("SQL92", expression)
    error = info.value
    assert words in str(error)
    assert error.column == column
    assert error.expression == expression
    if expression.strip():
        assert f"at column {column}" in str(error)


def test_message_points_at_the_column():
    """The message ends with an excerpt and a caret under the offending token."""
    with pytest.raises(FilterExpressionError) as info:
        Kernel(autoload=False).filter("SQL92", "price > AND b = 1")
    lines = str(info.value).splitlines()
    assert lines[0] == "expected a value after '>' at column 9 (found 'AND')"
    assert lines[1] == "  price > AND b = 1"
    assert lines[2] == "  " + " " * 8 + "^"


def test_long_expressions_are_shortened_in_messages(kernel):
    expression = "a = 1 AND " * 50 + "b >"
    with pytest.raises(FilterExpressionError) as info:
        kernel.filter("SQL92", expression)
    excerpt, caret = str(info.value).splitlines()[1:]
    assert excerpt.startswith("  ...") and len(excerpt) < 80
    assert caret.index("^") == len(excerpt)  # the end of the expression


def test_not_a_string(kernel):
    with pytest.raises(FilterExpressionError, match="got a int"):
        kernel.filter("SQL92", 5)
    with pytest.raises(FilterExpressionError, match="got None"):
        kernel.filter("SQL92", None)


def test_the_error_is_a_value_error(kernel):
    with pytest.raises(ValueError):
        kernel.filter("SQL92", "a >")

"""Java's value conversions and comparisons, as RocketMQ's SQL92 filter performs them.

RocketMQ evaluates filters on Java objects: properties are ``String``, literals are
``Integer``, ``Long``, ``Double``, ``Boolean`` or ``String``. When the two sides of a
comparison differ in type, ``ComparisonExpression.__compare`` converts one to the other's
type with ``Integer.valueOf``, ``Long.valueOf``, ``Double.valueOf`` or ``Boolean.valueOf``,
and a string that does not parse makes the whole evaluation fail. This module reproduces
those conversions exactly (including what Java accepts that Python's ``int``/``float`` do not,
and the reverse) so that a property compares the same way here as on a RocketMQ broker.

Java types are tracked statically with one-letter tags: ``S`` String, ``I`` Integer,
``L`` Long, ``D`` Double, ``B`` Boolean and ``N`` for the NULL literal.
"""

from __future__ import annotations

import math
import re
import unicodedata
from typing import Any

from mqcore.errors import FilterEvaluationError

__all__ = [
    "INT_MAX",
    "INT_MIN",
    "LONG_MAX",
    "LONG_MIN",
    "compare",
    "double_compare",
    "equality",
    "java_boolean",
    "java_double",
    "java_int",
    "java_long",
    "literal_text",
]

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1

# Double.valueOf's grammar after String.trim(): decimal with an optional f/F/d/D suffix,
# hexadecimal with a binary exponent, or the words NaN and Infinity (case-sensitive).
_DOUBLE = re.compile(
    r"([+-]?)(?:(NaN)|(Infinity)"
    r"|((?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)[fFdD]?"
    r"|(0[xX](?:[0-9a-fA-F]+\.?|[0-9a-fA-F]*\.[0-9a-fA-F]+)[pP][+-]?[0-9]+)[fFdD]?)",
    re.ASCII,
)
# String.trim() removes every char up to and including the space, not Unicode whitespace.
_JAVA_TRIM = "".join(chr(c) for c in range(0x21))


def _bad_number(text: str, kind: str) -> FilterEvaluationError:
    shown = text if len(text) <= 40 else text[:37] + "..."
    return FilterEvaluationError(f"property value {shown!r} is not a Java {kind}")


def _java_integer(text: str, lo: int, hi: int, kind: str) -> int:
    """``Integer.parseInt``/``Long.parseLong``: sign, then BMP decimal digits, no spaces."""
    if text.isascii():
        # Python's int() also takes spaces and underscores, so check the shape first.
        digits = text[1:] if text[:1] in ("-", "+") else text
        if not digits.isdigit():
            raise _bad_number(text, kind)
    else:
        digits = text[1:] if text[:1] in ("-", "+") else text
        # Java's Character.digit accepts any Unicode decimal digit in the BMP (a char).
        if not digits or not all(c.isdecimal() and c <= "\uffff" for c in digits):
            raise _bad_number(text, kind)
    # A long has at most 19 digits; int() refuses over 4300 digits with a ValueError.
    if len(digits) > 19:
        significant = "".join(str(unicodedata.decimal(c)) for c in digits).lstrip("0")
        if len(significant) > 19:
            raise _bad_number(text, kind)
        text = ("-" if text[:1] == "-" else "") + (significant or "0")
    value = int(text)
    if value < lo or value > hi:
        raise _bad_number(text, kind)
    return value


def java_int(text: str) -> int:
    """``Integer.valueOf(text)``; raises :class:`FilterEvaluationError` like Java's NFE."""
    if text.isdigit() and len(text) < 10 and text.isascii():
        return int(text)
    return _java_integer(text, INT_MIN, INT_MAX, "int")


def java_long(text: str) -> int:
    """``Long.valueOf(text)``."""
    if text.isdigit() and len(text) < 19 and text.isascii():
        return int(text)
    return _java_integer(text, LONG_MIN, LONG_MAX, "long")


def java_double(text: str) -> float:
    """``Double.valueOf(text)``: Java's syntax, not Python's (no ``inf``, no ``1_0``)."""
    plain = text.replace(".", "", 1)
    if plain.isdigit() and plain.isascii():
        return float(text)
    match = _DOUBLE.fullmatch(text.strip(_JAVA_TRIM))
    if match is None:
        raise _bad_number(text, "double")
    sign, nan, inf, decimal, hexa = match.groups()
    if nan:
        return math.nan
    negative = sign == "-"
    if inf:
        return -math.inf if negative else math.inf
    if decimal is not None:
        value = float(decimal)
    else:
        try:
            value = float.fromhex(hexa)
        except OverflowError:
            value = math.inf
    return -value if negative else value


def java_boolean(text: str) -> bool:
    """``Boolean.valueOf(text)``: true exactly when ``text`` is "true" ignoring case."""
    return len(text) == 4 and text.isascii() and text.lower() == "true"


def double_compare(a: float, b: float) -> int:
    """``Double.compare``: NaN is above everything (and equal to itself), -0.0 < 0.0."""
    if a < b:
        return -1
    if a > b:
        return 1
    if a == b:
        if a == 0.0:
            sa, sb = math.copysign(1.0, a), math.copysign(1.0, b)
            return 0 if sa == sb else (-1 if sa < sb else 1)
        return 0
    a_nan, b_nan = a != a, b != b
    if a_nan and b_nan:
        return 0
    return 1 if a_nan else -1


def _sign(a: Any, b: Any) -> int:
    sign: int = (a > b) - (a < b)
    return sign


def _convert(text: str, target: str) -> Any:
    if target == "I":
        return java_int(text)
    if target == "L":
        return java_long(text)
    if target == "D":
        return java_double(text)
    return java_boolean(text)


def compare(lv: Any, lt: str, rv: Any, rt: str) -> int:
    """``ComparisonExpression.__compare`` with string conversion on, for non-null values.

    Returns the sign of ``lv.compareTo(rv)`` after RocketMQ's type conversions, or -1 where
    RocketMQ gives up on incompatible types. Raises :class:`FilterEvaluationError` where
    Java throws (a string that does not parse, a Boolean compared with a String).
    """
    if lt != rt:
        if lt == "B":
            if rt == "S":
                # Java casts the Boolean to String here and throws ClassCastException.
                raise FilterEvaluationError("a boolean cannot be compared with a string")
            return -1
        if lt == "S":
            lv, lt = _convert(lv, rt), rt
        elif rt == "S":
            rv, rt = _convert(rv, lt), lt
        elif rt == "B":
            return -1
        elif lt == "D" or rt == "D":
            return double_compare(float(lv), float(rv))
        else:  # Integer against Long: both widen to long
            return _sign(lv, rv)
    if lt == "D":
        return double_compare(lv, rv)
    if lt == "S":
        # Only == 0 matters for strings (ordering operators never get here with two).
        return 0 if lv == rv else 1
    return _sign(lv, rv)


def equality(lv: Any, lt: str, rv: Any, rt: str) -> bool | None:
    """RocketMQ's ``=``: one null side gives unknown when it is the left one, else false."""
    if lv is None:
        return True if rv is None else None
    if rv is None:
        return False
    if lt == rt and lt != "D":
        same: bool = lv == rv
        return same
    return compare(lv, lt, rv, rt) == 0


def literal_text(value: Any, jtype: str) -> str:
    """A value as RocketMQ prints it in messages (strings quoted, NULL, TRUE, FALSE)."""
    if jtype == "N" or value is None:
        return "NULL"
    if jtype == "B":
        return "TRUE" if value else "FALSE"
    if jtype == "S":
        return "'" + str(value).replace("'", "''") + "'"
    if jtype == "D":
        return repr(float(value))
    return str(value)

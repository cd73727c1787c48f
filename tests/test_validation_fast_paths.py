"""The fast paths of the message checks refuse exactly what the plain rules refuse."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from mqcore import validation
from mqcore.errors import InvalidArgumentError
from mqcore.message import Message
from mqcore.validation import (
    BROKER_PROPERTIES,
    FIELD_PROPERTIES,
    HOLD_PROPERTIES,
    RETRY_PROPERTIES,
    SYSTEM_PROPERTY_NAMES,
    check_sent_message,
    check_text,
)

_TIMER_REQUESTS = {"TIMER_DELIVER_MS", "TIMER_DELAY_MS", "TIMER_DELAY_SEC"}

# Text with and without the separators and lone surrogates the checks refuse.
_TEXT = st.text(st.sampled_from(["a", "Z", "é", "\x01", "\x02", "\ud800", "\udfff", "0"]))
_NAMES = st.one_of(st.sampled_from(sorted(SYSTEM_PROPERTY_NAMES)), _TEXT)
_VALUES = st.one_of(_TEXT, st.integers(), st.none(), st.binary(max_size=3))


def _reference_properties_check(props: dict[Any, Any], delay_level: int, topic: str) -> None:
    """The property rules of check_sent_message as written before its fast paths: each
    name and value on its own, then every system name through the refusal rules."""
    for name, value in props.items():
        check_text("property name", name)
        check_text(f"property {name!r} value", value)
        if not name:
            raise InvalidArgumentError("message property name must not be empty")
    if delay_level > 0 and not props.keys().isdisjoint(_TIMER_REQUESTS):
        raise InvalidArgumentError("both delay level and a timer")
    for name in props.keys() & SYSTEM_PROPERTY_NAMES:
        if name in FIELD_PROPERTIES or name in BROKER_PROPERTIES:
            raise InvalidArgumentError(name)
        if name in HOLD_PROPERTIES:
            if delay_level > 0 or not props.keys().isdisjoint(_TIMER_REQUESTS):
                continue
            raise InvalidArgumentError(name)
        if name in RETRY_PROPERTIES and not topic.startswith("%RETRY%"):
            raise InvalidArgumentError(name)


def _outcome(check: Any, *args: Any) -> bool:
    try:
        check(*args)
    except InvalidArgumentError:
        return False
    return True


@settings(max_examples=400, deadline=None)
@given(
    st.dictionaries(_NAMES, _VALUES, max_size=5),
    st.integers(0, 3),
    st.sampled_from(["T", "%RETRY%g"]),
)
def test_sent_message_checks_accept_what_the_plain_rules_accept(
    props: dict[Any, Any], delay_level: int, topic: str
) -> None:
    msg = Message(topic=topic, body=b"x")
    object.__setattr__(msg, "properties", props)  # past Message's own checks, as a remote sender
    object.__setattr__(msg, "delay_level", delay_level)
    assert _outcome(check_sent_message, msg, topic) == _outcome(
        _reference_properties_check, props, delay_level, topic
    )


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.one_of(_TEXT, st.integers()), _VALUES, max_size=5))
def test_one_scan_of_names_and_values_is_two_scans(props: dict[Any, Any]) -> None:
    assert validation._clean_mapping(props) == (
        validation._clean(props) and validation._clean(props.values())
    )


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        _VALUES,
        st.text(st.sampled_from(["0", "9", "A", "F", "z", "\u0663", "\x01", "-"])),
    ),
    st.integers(0, 3),
)
def test_a_unique_id_alone_is_checked_as_the_plain_rules_say(value: Any, delay_level: int) -> None:
    """The fast path for a message whose one property is UNIQ_KEY (every producer's)."""
    msg = Message(topic="T", body=b"x")
    object.__setattr__(msg, "properties", {"UNIQ_KEY": value})
    object.__setattr__(msg, "delay_level", delay_level)
    assert _outcome(check_sent_message, msg, "T") == _outcome(
        _reference_properties_check, {"UNIQ_KEY": value}, delay_level, "T"
    )

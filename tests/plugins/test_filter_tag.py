"""The TAG filter: RocketMQ's subscription by tags, on the broker (hash codes) and client."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from mqcore import FilterExpressionError, Kernel, Message
from mqcore.codec import decode, encode, string_hash_code, tags_hash_code
from mqcore.interfaces import MessageFilter
from mqcore.plugins.filter_tag import TagFilter


@pytest.fixture(scope="module")
def kernel() -> Kernel:
    return Kernel(autoload=False)


def msg(tags: str | None) -> Message:
    return Message(topic="T", body=b"x", tags=tags)


@pytest.mark.parametrize("expression", [None, "", "*"])
def test_everything_matches_all_messages(kernel, expression):
    f = kernel.filter("TAG", expression)
    assert f.expression == "*"
    assert f.matches(msg("TagA")) and f.matches(msg(None)) and f.matches(msg(""))
    assert f.matches_tags_code(0) and f.matches_tags_code(string_hash_code("x"))


def test_tags_split_on_double_bar_and_trimmed(kernel):
    f = kernel.filter("TAG", " TagA ||TagB||  || TagC")
    assert f.tags == {"TagA", "TagB", "TagC"}
    assert f.codes == {string_hash_code(t) for t in ("TagA", "TagB", "TagC")}
    assert f.matches(msg("TagB"))
    assert not f.matches(msg("TagD"))
    assert f.expression == " TagA ||TagB||  || TagC"


def test_message_without_a_tag_never_matches_a_tag_list(kernel):
    f = kernel.filter("TAG", "TagA")
    assert not f.matches(msg(None))
    assert not f.matches(msg(""))


def test_tags_are_case_sensitive(kernel):
    f = kernel.filter("TAG", "TagA")
    assert not f.matches(msg("taga"))
    assert not f.matches_tags_code(string_hash_code("taga"))


def test_single_bar_is_part_of_a_tag(kernel):
    f = kernel.filter("TAG", "A|B")
    assert f.tags == {"A|B"}
    assert f.matches(msg("A|B")) and not f.matches(msg("A"))


def test_star_inside_a_list_is_a_tag_named_star(kernel):
    """Only the whole expression "*" means everything, as in RocketMQ's FilterAPI."""
    f = kernel.filter("TAG", "TagA || *")
    assert not f.matches(msg("TagB"))
    assert f.matches(msg("*"))
    assert not kernel.filter("TAG", " * ").matches(msg("TagB"))


@pytest.mark.parametrize("expression", ["||", " ", " || || "])
def test_no_tag_at_all_matches_nothing(kernel, expression):
    f = kernel.filter("TAG", expression)
    assert f.tags == frozenset()
    assert not f.matches(msg("TagA")) and not f.matches(msg(None))
    assert not f.matches_tags_code(0)


def test_consume_queue_stage_uses_java_hash_codes(kernel):
    f = kernel.filter("TAG", "TagA || \u6807\u7b7e")  # a CJK tag hashes over UTF-16 units
    assert f.matches_tags_code(tags_hash_code("TagA"))
    assert f.matches_tags_code(tags_hash_code("\u6807\u7b7e"))
    assert not f.matches_tags_code(tags_hash_code("TagB"))
    # Java's "TagA".hashCode()
    assert f.matches_tags_code(2598919)


def test_tags_code_compares_as_a_java_int(kernel):
    """The consume queue keeps 8 bytes; RocketMQ compares ``tagsCode.intValue()``."""
    code = string_hash_code("TagA")
    f = kernel.filter("TAG", "TagA")
    assert f.matches_tags_code(code + (1 << 32))
    assert f.matches_tags_code(code & 0xFFFFFFFF)


def test_hash_collision_passes_the_broker_but_not_the_client(kernel):
    """ "Aa" and "BB" share a Java hash code: the client's string check tells them apart."""
    assert string_hash_code("Aa") == string_hash_code("BB")
    f = kernel.filter("TAG", "Aa")
    assert f.matches_tags_code(tags_hash_code("BB"))
    assert not f.matches(msg("BB"))


def test_commit_log_stage_does_not_recheck_tags(kernel):
    f = kernel.filter("TAG", "TagA")
    assert f.uses_properties is False
    assert f.matches_properties({"TAGS": "TagB"}) is True


def test_stored_messages_are_matched_by_their_tag(kernel):
    with_tag = decode(encode(Message(topic="T", body=b"b", tags="TagA")))
    without = decode(encode(Message(topic="T", body=b"c")))
    f = kernel.filter("TAG", "TagA")
    assert f.matches(with_tag) and not f.matches(without)


def test_matches_never_raises(kernel):
    assert kernel.filter("TAG", "TagA").matches(object()) is False


def test_follows_the_filter_protocol(kernel):
    f = kernel.filter("TAG", "TagA")
    assert isinstance(f, MessageFilter)
    assert f.expression_type == "TAG"
    assert kernel.filter("tag", "TagA") is f


def test_not_a_string():
    with pytest.raises(FilterExpressionError, match="TAG filter needs a string"):
        TagFilter(5)  # type: ignore[arg-type]


# What a tag may hold: no property separator, no lone surrogate (a Message refuses both).
_TAG_CHARS = st.characters(exclude_categories=("Cs",), exclude_characters="\x01\x02")


@given(
    st.lists(
        st.text(_TAG_CHARS, min_size=1).filter(lambda t: "||" not in t and t.strip()),
        max_size=5,
    ),
    st.text(_TAG_CHARS),
)
def test_matches_exactly_the_listed_tags(tags, other):
    expression = " || ".join(tags)
    assume(tags and expression != "*")  # "*" alone means every message
    f = TagFilter(expression)
    listed = {t.strip() for t in tags}
    for tag in listed:
        assert f.matches(msg(tag)) and f.matches_tags_code(string_hash_code(tag))
    assert f.matches(msg(other)) == (other in listed)


def test_both_filters_are_bundled_and_can_be_blocked():
    assert {"SQL92", "TAG"} <= set(Kernel(autoload=False).names("filter"))
    names = Kernel(autoload=False, disabled_plugins=["filter_sql92"]).names("filter")
    assert "TAG" in names and "SQL92" not in names

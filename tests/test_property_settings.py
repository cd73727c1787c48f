"""The settings every Hypothesis property test of the suite runs with (tests/conftest.py)."""

from __future__ import annotations

from hypothesis import settings


def test_property_tests_have_no_deadline() -> None:
    """A deadline measures the machine, not the code: a correct test failed on a loaded CI
    machine when one example took longer than 200 ms. Speed goals live in bench/."""
    assert settings.default.deadline is None
    # A test's own @settings inherit it unless they name a deadline.
    assert settings(max_examples=300).deadline is None

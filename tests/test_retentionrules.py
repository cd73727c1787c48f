"""The retention rules both stores share, and the ways their options reach a store."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from mqcore import Kernel
from mqcore.commands.serve import parse_settings
from mqcore.errors import InvalidArgumentError
from mqcore.retentionrules import delete_hours, normalize_delete_when, plan


def _at_hour(hour: int) -> float:
    t = time.localtime()
    return time.mktime((t.tm_year, t.tm_mon, t.tm_mday, hour, 30, 0, 0, 0, -1))


def _plan(percent: float, hour: int, manual: bool = False):  # type: ignore[no-untyped-def]
    return plan(
        used=percent * 10,
        capacity=1000,
        now=_at_hour(hour),
        manual=manual,
        max_used_ratio=75,
        clean_forcibly_ratio=85,
        delete_when="04;16",
    )


def test_delete_when_takes_rocketmqs_forms():
    """ "HH", "HH;HH" (spaces and one digit allowed) and an int; written back as "HH;HH"."""
    assert delete_hours("04") == {4}
    assert delete_hours(" 16;4 ;04") == {4, 16}
    assert delete_hours(0) == {0}
    assert normalize_delete_when("16;4") == "04;16"
    for bad in ("24", "-1", "", "4;", "four", 4.0, True, None, [4]):
        with pytest.raises(InvalidArgumentError, match="delete_when"):
            delete_hours(bad)


def test_expired_data_goes_in_the_delete_hours_above_the_ratio_or_by_hand():
    """The cleaner deletes expired data in a delete hour or above 75 %; a manual pass always."""
    assert not _plan(50, 10).expired
    assert _plan(50, 4).reason == "delete_when" and _plan(50, 16).expired
    assert _plan(75.5, 10).reason == "disk_ratio"
    assert _plan(50, 10, manual=True).reason == "manual"


def test_data_of_any_age_goes_only_above_the_forcible_ratio():
    """At 78 % nothing is to be freed whatever its age; at 86 %, the excess over 85 %."""
    assert _plan(78, 4).force_over <= 0
    assert _plan(85, 4).force_over <= 0
    assert _plan(86, 10).force_over == pytest.approx(10)
    assert _plan(86, 10, manual=True).force_over == pytest.approx(10)


@pytest.mark.parametrize("store", ["mmap", "lmdb"])
def test_options_reach_the_store_from_the_config_file_and_set(tmp_path: Path, store: str):
    """[broker.store_options] in the config file and --set store_options=JSON both reach the
    store, checked at open."""
    config = tmp_path / "broker.toml"
    config.write_text(
        "[broker.store_options]\n"
        "delete_when = 16\n"
        "disk_max_used_space_ratio = 80\n"
        "disk_space_clean_forcibly_ratio = 90\n",
        encoding="utf-8",
    )
    sizes = {"segment_size": 4096} if store == "mmap" else {}
    from_file = parse_settings(config, ())["store_options"]
    from_set = parse_settings(
        None, ('store_options={"delete_when": "4;16", "disk_space_clean_forcibly_ratio": 95}',)
    )["store_options"]
    opened = []
    for i, options in enumerate((from_file, from_set)):
        with Kernel().open_store(store, tmp_path / f"s{i}", **options, **sizes) as s:
            opts = s.options if store == "mmap" else s
            opened.append(
                (
                    opts.delete_when,
                    opts.disk_max_used_space_ratio,
                    opts.disk_space_clean_forcibly_ratio,
                )
            )
    assert opened == [("16", 80, 90), ("04;16", 75, 95)]
    bad = parse_settings(None, ('store_options={"delete_when": "4pm"}',))["store_options"]
    with pytest.raises(InvalidArgumentError, match="delete_when='4pm'"):
        Kernel().open_store(store, tmp_path / "bad", **bad, **sizes)

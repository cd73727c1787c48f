"""The dashboard's pieces that need no browser: the sampler's history and rates, the SVG
charts and the form fields' parsing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mqcore import Message, Producer
from mqcore.client.admin import MQAdmin
from mqcore.dashboard.charts import line_chart
from mqcore.dashboard.forms import parse_count, parse_time
from mqcore.dashboard.sampler import Sample, Sampler, is_system_topic
from mqcore.errors import InvalidArgumentError
from mqcore.server import Server


def sample(at: float, put: int, lag: int = 0) -> Sample:
    return Sample(
        at, {"T": put}, {"broker-a": put}, {"g": put - lag}, {"broker-a": put}, {"g": lag}
    )


def test_rates_are_per_second_between_samples_and_a_reset_is_no_traffic() -> None:
    s = Sampler(lambda: None, interval=10)
    for at, put in [(100.0, 0), (110.0, 50), (120.0, 250), (130.0, 100)]:
        s.add(sample(at, put))
    assert s.rate("topic_put", "T") == [(110.0, 5.0), (120.0, 20.0), (130.0, 0.0)]
    assert s.latest_rate("broker_put", "broker-a") == 0.0
    assert s.rate("topic_put", "other") == []
    assert s.latest_rate("topic_put", "other") is None


def test_lag_levels_and_the_window_drops_old_samples() -> None:
    s = Sampler(lambda: None, interval=1, window=60)
    for i in range(100):
        s.add(sample(float(i), put=10 * i, lag=i))
    kept = s.samples()
    assert kept[0].at == 39.0 and kept[-1].at == 99.0
    assert s.level("group_lag", "g")[-1] == (99.0, 99.0)


def test_the_interval_must_be_positive() -> None:
    with pytest.raises(InvalidArgumentError, match="positive, got 0"):
        Sampler(lambda: None, interval=0)


def test_system_topics_are_told_apart() -> None:
    for name in ("TBW102", "SCHEDULE_TOPIC_XXXX", "%RETRY%g", "%DLQ%g", "rmq_sys_wheel_timer"):
        assert is_system_topic(name), name
    assert not is_system_topic("Orders")


def test_the_sampler_thread_collects_a_servers_offsets_and_stops(tmp_path: Path) -> None:
    """Against a real server: the messages sent show in the sample; stop ends the thread
    and closes its admin client."""
    with Server(tmp_path / "s", "127.0.0.1:0") as srv:
        with MQAdmin(srv.address) as admin:
            admin.create_topic("SampledT", 2)
        with Producer("pg-sampled", namesrv_addr=srv.address) as producer:
            for _ in range(7):
                producer.send(Message(topic="SampledT", body=b"x"))
        admins: list[MQAdmin] = []

        def make() -> MQAdmin:
            admins.append(MQAdmin(srv.address))
            return admins[-1]

        sampler = Sampler(make, interval=0.05)
        sampler.start()
        try:
            with sampler.taken:
                assert sampler.taken.wait_for(lambda: len(sampler.samples()) >= 2, 30)
        finally:
            sampler.stop()
        last = sampler.samples()[-1]
        assert last.topic_put == {"SampledT": 7}
        assert sum(last.broker_put.values()) == 7
        assert sampler.rate("topic_put", "SampledT")[-1][1] == 0.0
        assert len(admins) == 1 and admins[0].transport.closed


def test_a_chart_draws_each_series_inside_its_box_and_escapes_names() -> None:
    svg = line_chart(
        {"<b>": [(0.0, 0.0), (30.0, 5.0), (60.0, 2.5)], "two": [(0.0, 1.0), (60.0, 1.0)]},
        title="TPS",
        unit="msg/s",
    )
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert "&lt;b&gt;: 2.5" in svg and "<b>" not in svg
    polylines = re.findall(r'points="([^"]+)"', svg)
    assert len(polylines) == 2
    for points in polylines:
        for pair in points.split():
            x, y = map(float, pair.split(","))
            assert 0 <= x <= 640 and 0 <= y <= 180
    # The largest value at the top of the plot, halfway in time; 0 at its bottom, at the left.
    assert polylines[0].split() == ["56.0,158.0", "342.0,26.0", "628.0,92.0"]
    assert ">TPS (msg/s)</text>" in svg


def test_a_chart_without_points_says_so() -> None:
    assert "no samples yet" in line_chart({"T": []}, title="TPS in", unit="msg/s")


def test_form_times() -> None:
    now = 1_700_000_000_000
    assert parse_time("now", "t", now) == now
    assert parse_time("-10m", "t", now) == now - 600_000
    assert parse_time(" 1234 ", "t", now) == 1234
    assert parse_time("2026-01-31T12:00", "t", now) > 0
    with pytest.raises(InvalidArgumentError, match="reset time 'soon' is not a time"):
        parse_time("soon", "reset time", now)


def test_form_counts() -> None:
    assert parse_count("8", "queue count") == 8
    for bad in ("0", "x", "5000"):
        with pytest.raises(InvalidArgumentError, match=f"queue count '{bad}' is not a number"):
            parse_count(bad, "queue count")

"""Line charts as inline SVG, drawn on the server: no script and nothing fetched by the
browser, so the dashboard works where its users have no internet access."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from html import escape

__all__ = ["line_chart"]

_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2")
_W, _H, _PAD_L, _PAD_R, _PAD_T, _PAD_B = 640, 180, 56, 12, 26, 22
_CHAR_W = 6.5  # about the width of one character at font-size 11, to lay the legend out


def _fmt(value: float) -> str:
    if value >= 1000:
        return f"{value / 1000:.1f}k"
    return f"{value:.0f}" if value >= 10 or value == int(value) else f"{value:.1f}"


def line_chart(
    series: Mapping[str, Sequence[tuple[float, float]]], *, title: str, unit: str
) -> str:
    """An SVG chart of each named series of ``(seconds since the epoch, value)`` points over
    their common time span, with the value axis from 0 to the largest value, a legend and
    the time span's ends in local time. No points: a chart that says so."""
    points = [p for s in series.values() for p in s]
    label = f"{escape(title)} ({escape(unit)})"
    head = (
        f'<svg class="chart" role="img" aria-label="{label}" viewBox="0 0 {_W} {_H}" '
        f'width="{_W}" height="{_H}" xmlns="http://www.w3.org/2000/svg">'
        f'<rect x="0" y="0" width="{_W}" height="{_H}" fill="#fff" stroke="#ccc"/>'
    )
    if not points:
        return (
            head + f'<text x="{_W // 2}" y="{_H // 2}" text-anchor="middle" fill="#666">{label}: '
            f"no samples yet</text></svg>"
        )
    t0 = min(t for t, _ in points)
    t1 = max(t for t, _ in points)
    top = max(v for _, v in points) or 1.0
    span = (t1 - t0) or 1.0
    inner_w = _W - _PAD_L - _PAD_R
    inner_h = _H - _PAD_T - _PAD_B

    def x(t: float) -> float:
        return _PAD_L + (t - t0) / span * inner_w

    def y(v: float) -> float:
        return _PAD_T + inner_h - v / top * inner_h

    parts = [head]
    base = _PAD_T + inner_h
    parts.append(
        f'<line x1="{_PAD_L}" y1="{base}" x2="{_W - _PAD_R}" y2="{base}" stroke="#999"/>'
        f'<line x1="{_PAD_L}" y1="{_PAD_T}" x2="{_PAD_L}" y2="{base}" stroke="#999"/>'
        f'<text x="{_PAD_L - 4}" y="{_PAD_T + 10}" text-anchor="end" font-size="11">'
        f"{_fmt(top)}</text>"
        f'<text x="{_PAD_L - 4}" y="{base}" text-anchor="end" font-size="11">0</text>'
        f'<text x="{_PAD_L}" y="{_H - 6}" font-size="11">'
        f"{time.strftime('%H:%M:%S', time.localtime(t0))}</text>"
        f'<text x="{_W - _PAD_R}" y="{_H - 6}" text-anchor="end" font-size="11">'
        f"{time.strftime('%H:%M:%S', time.localtime(t1))}</text>"
    )
    # The title, then each series' name and last value, on the line above the plot.
    parts.append(f'<text x="{_PAD_L}" y="15" font-size="12" font-weight="bold">{label}</text>')
    legend_x = _PAD_L + (len(title) + len(unit) + 5) * _CHAR_W
    for i, (name, pts) in enumerate(sorted(series.items())):
        colour = _COLOURS[i % len(_COLOURS)]
        coords = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in pts)
        if len(pts) == 1:  # a line needs two points: the first sample is a dot
            t, v = pts[0]
            parts.append(f'<circle cx="{x(t):.1f}" cy="{y(v):.1f}" r="2.5" fill="{colour}"/>')
        elif pts:
            parts.append(
                f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{coords}"/>'
            )
        entry = f"{name}: {_fmt(pts[-1][1]) if pts else '-'}"
        parts.append(
            f'<text x="{legend_x:.0f}" y="15" font-size="11" fill="{colour}">{escape(entry)}</text>'
        )
        legend_x += (len(entry) + 3) * _CHAR_W
    parts.append("</svg>")
    return "".join(parts)

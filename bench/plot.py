"""Bar chart of ``bench/peers.py`` medians: messages per second per system and phase.

    python bench/peers.py --json > results.json
    python bench/plot.py results.json docs/benchmarks.png

``peers.py --plot FILE`` calls :func:`plot_medians` directly.
"""

from __future__ import annotations

import json
import sys
from typing import Any

PHASES = [
    ("produce", "produce", "#4c72b0"),
    ("consume", "consume", "#55a868"),
    ("consume_raw", "consume (raw records)", "#c44e52"),
]


def plot_medians(report: dict[str, Any], path: str) -> None:
    """Save a horizontal grouped bar chart of the median rates in ``report`` to ``path``."""
    import matplotlib

    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    medians: dict[str, dict[str, float]] = report["medians"]
    systems = [s for s in medians if medians[s]]
    phases = [p for p in PHASES if any(p[0] in medians[s] for s in systems)]
    height = 0.8 / max(1, len(phases))
    fig, ax = plt.subplots(figsize=(10, 0.55 * len(systems) * len(phases) / 1.6 + 1.8))
    for i, (key, label, color) in enumerate(phases):
        ys = [row + i * height for row in range(len(systems))]
        values = [medians[s].get(key, 0.0) / 1000 for s in systems]
        bars = ax.barh(ys, values, height=height, label=label, color=color)
        for bar, value in zip(bars, values, strict=True):
            if value:
                ax.text(
                    bar.get_width(),
                    bar.get_y() + bar.get_height() / 2,
                    f" {value:,.0f}k",
                    va="center",
                    fontsize=7,
                )
    top = max((medians[s].get(p[0], 0.0) for s in systems for p in phases), default=1.0) / 1000
    ax.set_xlim(0, top * 1.12)  # room for the value labels
    ax.set_yticks([row + height * (len(phases) - 1) / 2 for row in range(len(systems))])
    ax.set_yticklabels(systems)
    ax.invert_yaxis()
    ax.set_xlabel("thousand messages per second (median)")
    m = report.get("machine", {})
    ax.set_title(
        f"{report['messages']:,} messages x {report['size']} B, median of {report['runs']} runs"
        f" - {m.get('cpu', '?')}, {m.get('cores', '?')} cores, Python {m.get('python', '?')}",
        fontsize=9,
    )
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str]) -> int:
    """``plot.py RESULTS.json OUT.png``."""
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        plot_medians(json.load(f), argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

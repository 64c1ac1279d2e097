"""Report plots as inline SVG (matplotlib, Agg): a bar chart per category and a trend line across runs.

Inline SVG with text drawn as paths keeps the page self-contained (no fonts, scripts or images to fetch).
Each figure gets its own hash salt so the clip-path ids of two figures on one page never collide.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any

SEVERITY_COLORS = {"critical": "#c62828", "warning": "#ef8f00", "info": "#1e88e5", "unknown": "#757575"}


def _pyplot(salt: str) -> Any:
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.fonttype": "path", "svg.hashsalt": salt, "font.size": 9,
                         "axes.spines.top": False, "axes.spines.right": False})
    return plt


def _svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": None})
    import matplotlib.pyplot as plt

    plt.close(fig)
    text = buf.getvalue()
    text = re.sub(r"<\?xml[^>]*\?>\s*", "", text)
    text = re.sub(r"<!DOCTYPE[^>]*>\s*", "", text)
    return text.strip()


def category_bars(rows: Sequence[dict[str, Any]]) -> str:
    """Horizontal bars: violations per category (only categories with rows), coloured by severity."""
    plt = _pyplot("categories")
    shown = [r for r in rows if r["rows"]]
    height = 0.45 + 0.32 * max(1, len(shown))
    fig, ax = plt.subplots(figsize=(7.0, height))
    if not shown:
        ax.text(0.5, 0.5, "no violations", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return _svg(fig)
    names = [r["category"] for r in shown][::-1]
    values = [r["rows"] for r in shown][::-1]
    colors = [SEVERITY_COLORS.get(r["severity"], SEVERITY_COLORS["unknown"]) for r in shown][::-1]
    bars = ax.barh(names, values, color=colors)
    ax.bar_label(bars, padding=3)
    ax.set_xlabel("violations (rows)")
    ax.margins(x=0.12)
    return _svg(fig)


def trend_lines(points: Sequence[dict[str, Any]]) -> str:
    """New violations per severity across runs (x: run start time, or run order when times are missing)."""
    plt = _pyplot("trend")
    fig, ax = plt.subplots(figsize=(7.0, 2.6))
    times = [p.get("started_at") for p in points]
    use_time = all(isinstance(t, datetime) for t in times) and len(set(times)) == len(times)
    xs: list[Any] = times if use_time else list(range(1, len(points) + 1))
    for severity in ("critical", "warning", "info"):
        ax.plot(xs, [p[severity] for p in points], marker="o", label=severity,
                color=SEVERITY_COLORS[severity])
    ax.set_ylabel("new violations")
    ax.set_ylim(bottom=0)
    if use_time:
        fig.autofmt_xdate()
    else:
        ax.set_xlabel("run")
        ax.set_xticks(xs)
    ax.legend(loc="upper left", frameon=False, ncols=3)
    return _svg(fig)

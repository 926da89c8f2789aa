"""Pictures: PNG bar charts of evaluation results and timelines of a channel's conversations,
also embeddable in Dagster markdown metadata."""

from __future__ import annotations

import base64
import io
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol


def bar_chart(
    series: Mapping[str, Mapping[str, float]],
    metrics: Sequence[str],
    *,
    title: str,
    highlight: str | None = None,
) -> bytes:
    """Grouped bars: one group per metric, one bar per series (e.g. per generation); PNG bytes.
    A metric a series lacks (an evaluation that did not measure it) or holds as NaN is no bar,
    labelled ``n/a``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(series)
    width = 0.8 / max(len(names), 1)
    fig, ax = plt.subplots(figsize=(1.6 + 1.4 * len(metrics), 3.2), dpi=110)
    try:
        for i, name in enumerate(names):
            xs = [m + (i - (len(names) - 1) / 2) * width for m in range(len(metrics))]
            ys = [float(series[name].get(metric, math.nan)) for metric in metrics]
            bars = ax.bar(
                xs,
                [0.0 if math.isnan(y) else y for y in ys],
                width * 0.95,
                label=_plain(name),
                edgecolor="black" if name == highlight else None,
                linewidth=1.5 if name == highlight else 0,
            )
            labels = ["n/a" if math.isnan(y) else f"{y:.3f}" for y in ys]
            ax.bar_label(bars, labels=labels, fontsize=7, padding=1)
        ax.set_xticks(range(len(metrics)), [_plain(m) for m in metrics])
        ax.set_ylim(0, 1.12)
        ax.set_title(_plain(title), fontsize=10)
        ax.legend(fontsize=7, loc="upper right", ncols=min(len(names), 4))
        return _png(fig, ax)
    finally:
        plt.close(fig)


class TimelineLane(Protocol):
    """One lane of :func:`timeline_chart`: a label, dots at places, arcs between places."""

    @property
    def label(self) -> str: ...
    @property
    def places(self) -> Sequence[int]: ...
    @property
    def edges(self) -> Sequence[tuple[float, float]]: ...
    @property
    def alone(self) -> bool: ...


def timeline_chart(
    lanes: Sequence[TimelineLane], *, ticks: Sequence[tuple[int, str]], title: str
) -> bytes:
    """One row per lane, top to bottom: a dot at each of its places on the axis and an arc
    above the row for each of its edges (from, to; from -1: the left edge); a lane marked
    ``alone`` in grey. ``ticks`` label places of the axis. PNG bytes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = max(len(lanes), 1)
    width = max((max(lane.places) for lane in lanes if lane.places), default=0) + 1
    fig, ax = plt.subplots(figsize=(9.0, 1.3 + 0.3 * n), dpi=110)
    try:
        colours = plt.get_cmap("tab10")
        for row, lane in enumerate(lanes):
            y = n - 1 - row
            colour = "0.6" if lane.alone else colours(row % 10)
            for a, b in lane.edges:
                a = max(a, -0.5)
                xs = [a + (b - a) * k / 12 for k in range(13)]
                ys = [y + 0.4 * math.sin(math.pi * k / 12) for k in range(13)]
                ax.plot(xs, ys, color=colour, linewidth=0.7, alpha=0.7)
            ax.scatter(list(lane.places), [y] * len(lane.places), s=12, color=colour, zorder=3)
        ax.set_yticks(
            range(n), [_plain(lane.label) for lane in reversed(lanes)] or [""], fontsize=7
        )
        ax.set_ylim(-0.7, n - 0.2)
        ax.set_xlim(-0.5, width - 0.5)
        ax.set_xticks([x for x, _ in ticks], [label for _, label in ticks], fontsize=7)
        ax.set_xlabel("the channel's messages in order (times in UTC)", fontsize=7)
        ax.set_title(_plain(title), fontsize=9)
        ax.grid(axis="x", linewidth=0.3)
        return _png(fig, ax)
    finally:
        plt.close(fig)


def _plain(text: str) -> str:
    """``text`` to be drawn as it is written: matplotlib reads what lies between two ``$`` as
    mathtext, so a channel named after an e-mail's subject (``Re: $5 off_$10 orders``) failed
    the picture, and ``$1,200 vs $1,450`` lost its spaces to math italics."""
    return text.replace("$", r"\$")


def _png(fig: Any, ax: Any) -> bytes:
    """The figure as PNG bytes, laid out tight, the axes' top and right frame lines off."""
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def save_png(png: bytes, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".png.tmp")
    tmp.write_bytes(png)
    tmp.replace(path)
    return path


def markdown_image(png: bytes, alt: str) -> str:
    """A markdown image with the PNG inline, which the Dagster UI renders in metadata. ``alt``
    is escaped: a bracket in it (a channel's name) ended the image's text early, and the UI
    showed the markdown, base64 and all, instead of the picture."""
    escaped = re.sub(r"([\\\[\]])", r"\\\1", alt)
    return f"![{escaped}](data:image/png;base64,{base64.b64encode(png).decode('ascii')})"

"""Pictures of evaluation results: PNG bar charts, also embeddable in Dagster markdown metadata."""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping, Sequence
from pathlib import Path


def bar_chart(
    series: Mapping[str, Mapping[str, float]],
    metrics: Sequence[str],
    *,
    title: str,
    highlight: str | None = None,
) -> bytes:
    """Grouped bars: one group per metric, one bar per series (e.g. per generation); PNG bytes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(series)
    width = 0.8 / max(len(names), 1)
    fig, ax = plt.subplots(figsize=(1.6 + 1.4 * len(metrics), 3.2), dpi=110)
    try:
        for i, name in enumerate(names):
            xs = [m + (i - (len(names) - 1) / 2) * width for m in range(len(metrics))]
            ys = [float(series[name].get(metric, 0.0)) for metric in metrics]
            bars = ax.bar(
                xs,
                ys,
                width * 0.95,
                label=name,
                edgecolor="black" if name == highlight else None,
                linewidth=1.5 if name == highlight else 0,
            )
            ax.bar_label(bars, labels=[f"{y:.3f}" for y in ys], fontsize=7, padding=1)
        ax.set_xticks(range(len(metrics)), list(metrics))
        ax.set_ylim(0, 1.12)
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=7, loc="upper right", ncols=min(len(names), 4))
        ax.spines[["top", "right"]].set_visible(False)
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        return buf.getvalue()
    finally:
        plt.close(fig)


def save_png(png: bytes, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".png.tmp")
    tmp.write_bytes(png)
    tmp.replace(path)
    return path


def markdown_image(png: bytes, alt: str) -> str:
    """A markdown image with the PNG inline, which the Dagster UI renders in metadata."""
    return f"![{alt}](data:image/png;base64,{base64.b64encode(png).decode('ascii')})"

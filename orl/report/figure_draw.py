"""What every report figure shares: a Matplotlib Figure through its object API (no pyplot state, the Agg
renderer), saved as PNG and PDF without a creation date (so the same records give the same files), and the
message a figure without data shows instead.
"""

from __future__ import annotations

import io
from pathlib import Path

from orl.io import atomic_write_bytes


def new_figure(width: float = 6.4, height: float = 4.2):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def save(fig, paths: list[Path]) -> list[Path]:
    for path in paths:
        buffer = io.BytesIO()
        fmt = path.suffix.lstrip(".")
        metadata = {"CreationDate": None} if fmt == "pdf" else {"Software": None}
        fig.savefig(buffer, format=fmt, dpi=150, metadata=metadata)
        atomic_write_bytes(path, buffer.getvalue())
    return paths


def empty(ax, message: str) -> None:
    ax.text(0.5, 0.5, message, ha="center", va="center", wrap=True, transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])

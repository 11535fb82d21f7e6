"""Shared pieces of the family tables and figures: picking fields, paper claims, figure setup."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

MODELS = ("gpt3-175b", "megatron-nlg-530b-ms")
PAPER_SPEEDUP = {"gpt3-175b": 0.120, "megatron-nlg-530b-ms": 0.234}  # reference §1, headline [P]
TWO_D = ("collective", "wang", "summa", "cannon")
ALGORITHM_ORDER = ("collective", "wang", "summa", "cannon", "meshslice", "tp1d", "fsdp")
COLOURS = {"collective": "#4c72b0", "wang": "#dd8452", "summa": "#55a868", "cannon": "#c44e52",
           "meshslice": "#8172b3", "tp1d": "#937860", "fsdp": "#da8bc3"}


def best_of(entry: dict[str, Any]) -> dict[str, Any] | None:
    """The configuration a tune point chose (None if the point failed)."""
    result = entry.get("result") or {}
    return result.get("best")


def step_of(entry: dict[str, Any]) -> dict[str, Any] | None:
    """A step point's result, or a tune point's best, whichever the entry holds."""
    if entry.get("error"):
        return None
    return best_of(entry) or entry.get("result") or None


def figure(columns: int, width: float = 6.0, height: float = 4.2) -> tuple[Any, list[Any]]:
    fig, axes = plt.subplots(1, columns, figsize=(width * columns, height), squeeze=False)
    return fig, list(axes[0])


def save(fig: Any, path: Path, title: str) -> None:
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def by_model(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = {m: [] for m in MODELS}
    for row in rows:
        grouped.setdefault(row["model"], []).append(row)
    return {m: r for m, r in grouped.items() if r}


def clip_tall_bars(ax: Any, bars: Any, totals: list[float], names: list[str]) -> None:
    """Keep the axis readable when one bar (1D TP) dwarfs the rest: cap the y axis, label the clipped bars."""
    others = [t for t, n in zip(totals, names, strict=True) if n in TWO_D or n == "meshslice"]
    if not others or max(totals) <= 3 * max(others):
        return
    limit = 1.6 * max(others)
    ax.set_ylim(0, limit)
    for bar, total in zip(bars, totals, strict=True):
        if total > limit:
            ax.annotate(f"{total:.0f} s\n(clipped)", (bar.get_x() + bar.get_width() / 2, limit * 0.97),
                        ha="center", va="top", fontsize=7, color="white")

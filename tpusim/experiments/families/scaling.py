"""Scaling families: weak scaling (MFU vs chips), strong scaling (step time vs chips), tuner accuracy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tpusim.experiments.families import Family, register
from tpusim.experiments.families.common import ALGORITHM_ORDER, COLOURS, by_model, figure, save, step_of


def _tuned_rows(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for entry in entries:
        point, best = entry["point"], step_of(entry)
        rows.append({
            "model": point["model"], "algorithm": point["algorithm"], "chips": point["chips"],
            "batch": point["batch"] or point["chips"],
            "mesh": best["mesh"] if best else "", "step_time_s": best["step_time_s"] if best else None,
            "mfu": best["mfu"] if best else None, "slices": best["slices"] if best else None,
            "feasible": best["feasible"] if best else False, "error": entry.get("error") or "",
        })
    return rows


def _lines(rows: list[dict[str, Any]], path: Path, title: str, field: str, label: str, scale: float,
           log_y: bool) -> None:
    grouped = by_model(rows)
    fig, axes = figure(len(grouped))
    for ax, (model, model_rows) in zip(axes, grouped.items(), strict=True):
        for algorithm in ALGORITHM_ORDER:
            points = sorted((r["chips"], r[field] * scale) for r in model_rows
                            if r["algorithm"] == algorithm and r[field] is not None)
            if points:
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, marker="o", label=algorithm, color=COLOURS[algorithm])
        ax.set_xscale("log", base=2)
        if log_y:
            ax.set_yscale("log")
        ax.set_xlabel("chips")
        ax.set_ylabel(label)
        ax.set_title(model)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    save(fig, path, title)


register(Family(
    "weak-scaling", "Weak scaling: MFU of each tuned algorithm (batch = chips)", _tuned_rows,
    lambda rows, path, title: _lines(rows, path, title, "mfu", "MFU (%)", 100.0, False),
))
register(Family(
    "strong-scaling", "Strong scaling: step time of each tuned algorithm (batch 64)", _tuned_rows,
    lambda rows, path, title: _lines(rows, path, title, "step_time_s", "step time (s)", 1.0, True),
))


def _accuracy_rows(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    pairs: dict[tuple[str, int], dict[bool, dict[str, Any] | None]] = {}
    for entry in entries:
        point = entry["point"]
        pairs.setdefault((point["model"], point["chips"]), {})[bool(point["exhaustive"])] = step_of(entry)
    rows = []
    for (model, chips), found in sorted(pairs.items()):
        default, exhaustive = found.get(False), found.get(True)
        gap = None
        if default and exhaustive:
            gap = 100.0 * (default["step_time_s"] / exhaustive["step_time_s"] - 1.0)
        rows.append({
            "model": model, "chips": chips,
            "default_mesh": default["mesh"] if default else "",
            "default_slices": default["slices"] if default else None,
            "default_step_s": default["step_time_s"] if default else None,
            "exhaustive_mesh": exhaustive["mesh"] if exhaustive else "",
            "exhaustive_slices": exhaustive["slices"] if exhaustive else None,
            "exhaustive_step_s": exhaustive["step_time_s"] if exhaustive else None,
            "gap_percent": gap,
            "same_mesh": bool(default and exhaustive and default["mesh"] == exhaustive["mesh"]),
        })
    return rows


def _accuracy_plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    fig, axes = figure(1, width=7.0)
    ax = axes[0]
    for model, model_rows in by_model(rows).items():
        points = sorted((r["chips"], r["gap_percent"]) for r in model_rows if r["gap_percent"] is not None)
        if points:
            xs, ys = zip(*points, strict=True)
            ax.plot(xs, ys, marker="o", label=model)
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="1% target")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("chips")
    ax.set_ylabel("default tuner slower than exhaustive (%)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    save(fig, path, title)


register(Family("tuner-accuracy", "Default tuner against exhaustive search (MeshSlice)", _accuracy_rows,
                _accuracy_plot))

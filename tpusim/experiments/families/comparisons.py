"""Comparison families at 256 chips: the headline table and the time breakdown."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from tpusim.experiments import calls
from tpusim.experiments.families import Family, register
from tpusim.experiments.families.common import (
    ALGORITHM_ORDER,
    COLOURS,
    PAPER_SPEEDUP,
    by_model,
    clip_tall_bars,
    figure,
    save,
    step_of,
)
from tpusim.experiments.families.sweeps import speedups


def _headline_rows(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    times: dict[str, dict[str, float]] = {}
    for entry in entries:
        point, best = entry["point"], step_of(entry)
        times.setdefault(point["model"], {})[point["algorithm"]] = best["step_time_s"] if best else None
        rows.append({
            "model": point["model"], "algorithm": point["algorithm"], "hardware": point["hardware"],
            "mesh": best["mesh"] if best else "", "slices": best["slices"] if best else None,
            "dataflows": best["dataflows"] if best else None,
            "step_time_s": best["step_time_s"] if best else None, "mfu": best["mfu"] if best else None,
            "error": entry.get("error") or "",
        })
    for row in rows:
        summary = speedups(times[row["model"]])
        t = row["step_time_s"]
        ms = summary["meshslice_s"]
        row["meshslice_speedup"] = (t / ms - 1.0) if (t and ms) else None
        row["meshslice_time_saved"] = (1.0 - ms / t) if (t and ms) else None
        row["best_other_2d"] = summary.get("best_other")
        row["speedup_vs_best_other_2d"] = summary.get("speedup_vs_best")
        row["paper_claim_vs_best_2d"] = PAPER_SPEEDUP.get(row["model"])
    return rows


def _headline_plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    grouped = by_model(rows)
    fig, axes = figure(len(grouped))
    for ax, (model, model_rows) in zip(axes, grouped.items(), strict=True):
        ordered = sorted((r for r in model_rows if r["step_time_s"]),
                         key=lambda r: ALGORITHM_ORDER.index(r["algorithm"]))
        names = [r["algorithm"] for r in ordered]
        bars = ax.bar(names, [r["step_time_s"] for r in ordered], color=[COLOURS[n] for n in names])
        for bar, row in zip(bars, ordered, strict=True):
            text = f"{row['mesh']}"
            if row["algorithm"] != "meshslice" and row["meshslice_speedup"] is not None:
                text += f"\nMS {100 * row['meshslice_speedup']:+.1f}%"
            ax.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom",
                        fontsize=7)
        claim = 100 * PAPER_SPEEDUP[model]
        ax.set_title(f"{model} (paper: MeshSlice +{claim:.1f}% vs best 2D)")
        ax.set_ylabel("step time (s)")
        ax.set_ylim(0, max(r["step_time_s"] for r in ordered) * 1.25)
        clip_tall_bars(ax, bars, [r["step_time_s"] for r in ordered], names)
        ax.grid(True, axis="y", alpha=0.3)
    save(fig, path, title)


register(Family("headline", "256 chips, batch 256: each algorithm at its tuned configuration", _headline_rows,
                _headline_plot))


def _breakdown_rows(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for entry in entries:
        point, best = entry["point"], step_of(entry)
        if best is None:
            continue
        step = calls.step(model=point["model"], hardware=point["hardware"], mesh=best["mesh"],
                          algorithm=point["algorithm"], slices=best["slices"] if any(best["slices"]) else None,
                          dataflows=best["dataflows"], transposes=best["transposes"], batch=point["batch"],
                          allow_infeasible=point["allow_infeasible"], prefetch=point["prefetch"])
        base = {"model": point["model"], "algorithm": point["algorithm"], "mesh": best["mesh"]}
        rows.append({**base, "part": "step", "time_s": step.step_time_s, "compute_s": step.compute_s,
                     "exposed_comm_s": step.exposed_comm_s, "idle_s": step.idle_s})
        for layer in ("qkv", "out_proj", "ff1", "ff2"):
            ops = [op for op in step.per_layer if op["op"].split(".")[0] == layer]
            rows.append({**base, "part": layer, "time_s": sum(o["time_s"] for o in ops) * step.layers,
                         "compute_s": sum(o["compute_s"] for o in ops) * step.layers,
                         "exposed_comm_s": sum(o["exposed_comm_s"] for o in ops) * step.layers,
                         "idle_s": sum(o["idle_s"] for o in ops) * step.layers})
    return rows


def _stack(ax: Any, labels: list[str], rows: list[dict[str, Any]]) -> None:
    x = np.arange(len(labels))
    bottom = np.zeros(len(labels))
    bars = None
    for field, colour, name in (("compute_s", "#4c72b0", "compute"), ("exposed_comm_s", "#dd8452", "exposed comm"),
                                ("idle_s", "#bbbbbb", "idle")):
        values = np.array([r[field] for r in rows])
        bars = ax.bar(x, values, bottom=bottom, color=colour, label=name)
        bottom += values
    ax.set_xticks(x, labels, rotation=20, ha="right", fontsize=8)
    ax.set_ylim(0, 1.3 * float(bottom.max()) if len(bottom) else 1.0)  # room for the legend above the bars
    if bars is not None and rows and "algorithm" in rows[0] and rows[0].get("part") == "step":
        clip_tall_bars(ax, bars, list(bottom), [r["algorithm"] for r in rows])
    ax.set_ylabel("time per step (s)")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)


def _breakdown_plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    grouped = by_model(rows)
    fig, axes = figure(2 * len(grouped), width=5.0)
    for index, (model, model_rows) in enumerate(grouped.items()):
        steps = sorted((r for r in model_rows if r["part"] == "step"),
                       key=lambda r: ALGORITHM_ORDER.index(r["algorithm"]))
        _stack(axes[2 * index], [f"{r['algorithm']}\n{r['mesh']}" for r in steps], steps)
        axes[2 * index].set_title(f"{model}: whole step")
        layers = [r for r in model_rows if r["algorithm"] == "meshslice" and r["part"] != "step"]
        _stack(axes[2 * index + 1], [r["part"] for r in layers], layers)
        axes[2 * index + 1].set_title(f"{model}: MeshSlice FF layers")
    save(fig, path, title)


register(Family("breakdown", "Where the step time goes at 256 chips", _breakdown_rows, _breakdown_plot))

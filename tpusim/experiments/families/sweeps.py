"""Sweep families: slice count, mesh shape at 2048 chips, and calibration sensitivity."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from tpusim.experiments.families.common import (
    PAPER_SPEEDUP,
    TWO_D,
    by_model,
    figure,
    memory_label,
    panel_figure,
    save,
    scale_label,
    shared_legend,
    step_of,
    step_times,
)
from tpusim.experiments.families.family import Family


def _step_rows(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for entry in entries:
        point, result = entry["point"], step_of(entry) or {}
        rows.append({
            "model": point["model"], "memory": memory_label(point), "mesh": point["mesh"],
            "requested_slices": point["slices"], "recompute": result.get("recompute"),
            "slices": result.get("slices"), "step_time_s": result.get("step_time_s"),
            "compute_s": result.get("compute_s"), "exposed_comm_s": result.get("exposed_comm_s"),
            "mfu": result.get("mfu"), "hfu": result.get("hfu"), "feasible": result.get("feasible", False),
            "violations": len(result.get("violations", [])), "error": entry.get("error") or "",
        })
    return rows


def _slice_plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    from matplotlib.ticker import NullLocator

    grouped = by_model(rows)
    fig, axes = figure(len(grouped), width=6.5, height=4.4)
    for ax, (model, model_rows) in zip(axes, grouped.items(), strict=True):
        data = sorted((r["requested_slices"], r["step_time_s"], r["exposed_comm_s"]) for r in model_rows
                      if r["step_time_s"] is not None)
        ks = [d[0] for d in data]
        ax.plot(ks, [d[1] for d in data], marker="o", label="step time")
        ax.plot(ks, [d[2] for d in data], marker="s", linestyle="--",
                label="exposed communication (not hidden behind compute)")
        if data:
            best = min(data, key=lambda d: d[1])
            ax.plot([best[0]], [best[1]], marker="*", markersize=14, color="#c44e52", linestyle="none",
                    label="fastest S swept")
            ax.annotate(f"S = {best[0]}: {best[1]:.3f} s", (best[0], best[1]), xytext=(0, 8),
                        textcoords="offset points", ha="center", fontsize=8)
        ax.set_xscale("log", base=2)
        ax.set_xticks(ks, [str(k) for k in ks])
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_ylim(0, 1.1 * max((d[1] for d in data), default=1.0))
        ax.set_xlabel("slice count S, the same in all four sharded layers (log scale)")
        ax.set_ylabel("time per step (s)")
        meshes = sorted({r["mesh"] for r in model_rows})
        ax.set_title(f"{model}, MeshSlice on a {' / '.join(meshes)} mesh")
        ax.grid(True, alpha=0.3)
    note = ("S = the number of slices MeshSlice cuts each sharded GeMM into (qkv, out_proj, ff1 and ff2 all use "
            "the same S here). More slices hide more communication behind compute, but each partial collective "
            "pays its fixed cost again. Mesh R x C = rows x columns of chips.")
    save(fig, path, title, note=note, legend=shared_legend(axes))


def _mesh_plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    from matplotlib.patches import Patch

    fig, axes, grouped = panel_figure(rows, width=6.5, height=4.6)
    any_infeasible = False
    for ax, (model, model_rows) in zip(axes, grouped.items(), strict=False):
        meshes = [r["mesh"] for r in model_rows]
        times = [r["step_time_s"] or 0.0 for r in model_rows]
        bars = ax.bar(meshes, times, color="#8172b3", edgecolor="#3b3360")
        for bar, row in zip(bars, model_rows, strict=True):
            if not row["feasible"]:
                any_infeasible = True
                bar.set_hatch("//")
                bar.set_facecolor("#c7c0e0")
            used = row["slices"][0] if row["slices"] else None
            text = f"S={used if used is not None else '?'}"
            if used is not None and row.get("requested_slices") not in (None, used):
                text += f"\n({row['requested_slices']} requested)"
            if row["step_time_s"] is None:
                text = "does not fit" if "HBM" in row["error"] else "failed"
            ax.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height()), xytext=(0, 2),
                        textcoords="offset points", ha="center", va="bottom", fontsize=8)
        ax.set_ylim(0, 1.18 * max(times, default=1.0) or 1.0)
        ax.set_xlabel("mesh R x C (rows x columns of chips)")
        ax.set_ylabel("step time (s)")
        ax.set_title(f"{model}, 2048 chips")
        ax.grid(True, axis="y", alpha=0.3)
        ax.set_axisbelow(True)
    handles = [Patch(facecolor="#8172b3", edgecolor="#3b3360", label="feasible")]
    if any_infeasible:
        handles.append(Patch(facecolor="#c7c0e0", edgecolor="#3b3360", hatch="//",
                             label="infeasible, timed anyway"))
    note = ("S above each bar: the MeshSlice slice count used in every sharded layer. A hatched bar is infeasible "
            "and timed anyway, for one or both of two reasons: the requested S is not a feasible slice count on "
            "that mesh, so the nearest feasible S below is used (the bar then says '8 requested'); or the C chips "
            "of the feature axis do not divide the attention heads, which are then padded.")
    if any(r.get("memory") == "feasible" for r in rows):
        note += (" Memory feasible: each step uses the least recomputation that fits in HBM; memory ignored: the "
                 "paper's accounting.")
    save(fig, path, title, note=note, legend=(handles, [str(h.get_label()) for h in handles]))


SLICE_SWEEP = Family("slice-sweep", "MeshSlice step time against the slice count S", _step_rows, _slice_plot)
MESH_SHAPES = Family("mesh-shapes", "MeshSlice on five 2048-chip mesh shapes", _step_rows, _mesh_plot)


def speedups(times: dict[str, float | None]) -> dict[str, Any]:
    """MeshSlice's speedup over each other 2D algorithm and over the best of them, both definitions."""
    ms = times.get("meshslice")
    out: dict[str, Any] = {"meshslice_s": ms}
    others = {a: t for a, t in times.items() if a in TWO_D and t is not None}
    for algorithm in TWO_D:
        t = others.get(algorithm)
        out[f"{algorithm}_s"] = t
        out[f"speedup_vs_{algorithm}"] = (t / ms - 1.0) if (t and ms) else None
    if others and ms:
        best = min(others, key=others.__getitem__)
        out["best_other"] = best
        out["best_other_s"] = others[best]
        out["speedup_vs_best"] = others[best] / ms - 1.0  # T_base / T_MS - 1
        out["time_saved_vs_best"] = 1.0 - ms / others[best]  # 1 - T_MS / T_base
    return out


def _sensitivity_rows(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    groups = step_times(entries, lambda point: (point["model"], scale_label(point["scale"])))
    rows = []
    for (model, label), times in groups.items():
        rows.append({"model": model, "scale": label, **speedups(times), "paper_claim": PAPER_SPEEDUP.get(model)})
    return rows


# what each factor of the sensitivity labels scales, and which way makes communication slower
SCALE_MEANING = MappingProxyType({
    "α": ("overhead", ("x2",)),
    "λ": ("latency", ("x2",)),
    "β": ("bandwidth", ("x0.5",)),
    "σ": ("handshake", ("x2",)),
    "op": ("op overhead", ("x4",)),
    "vector": ("vector rate", ("x0.5",)),
    "flops": ("MXU rate", ("x0.8", "x0.5")),
    "dma": ("DMA's HBM traffic", ("x2",)),
    "hbm": ("HBM bandwidth", ("x0.9",)),
})
_COMPUTE_FACTORS = ("op", "vector", "flops", "dma", "hbm")  # factors that slow compute rather than communication


def _scale_tick(label: str) -> str:
    """A sensitivity label with, for one changed factor, what it scales and whether communication gets slower."""
    for symbol, (meaning, slower) in SCALE_MEANING.items():
        if label.startswith(symbol + "x") and "," not in label:
            factor = label[len(symbol):]
            what = "compute" if symbol in _COMPUTE_FACTORS else "comm"
            return f"{symbol} {factor}\n({meaning})\n{'slower' if factor in slower else 'faster'} {what}"
    return label


TICK_WIDTH = 1.2
"""Inches of figure width per bar of the sensitivity figure: its longest tick line ("slower compute") at 8 pt."""


def _sensitivity_plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    from matplotlib.patches import Patch

    grouped = by_model(rows)
    settings = max((len(model_rows) for model_rows in grouped.values()), default=1)
    # a panel per model, one above the other, each wide enough that its three-line tick labels never overlap
    fig, axes = figure(1, width=max(7.0, TICK_WIDTH * settings), height=4.8, rows=len(grouped) or 1)
    for ax, (model, model_rows) in zip(axes, grouped.items(), strict=False):
        labels = [_scale_tick(r["scale"]) for r in model_rows]
        values = [100.0 * (r.get("speedup_vs_best") or 0.0) for r in model_rows]
        x = np.arange(len(labels))
        bars = ax.bar(x, values, color=["#8172b3" if v >= 0 else "#c44e52" for v in values])
        claim = PAPER_SPEEDUP.get(model)
        if claim is not None:
            ax.axhline(100.0 * claim, color="black", linestyle="--", linewidth=1,
                       label="the paper's claimed speedup")
        ax.axhline(0.0, color="grey", linewidth=0.8)
        high = max([*values, 100.0 * (claim or 0.0), 0.0])
        low = min([*values, 0.0])
        span = (high - low) or 1.0
        ax.set_ylim(low - (0.15 * span if low < 0 else 0.0), high + 0.15 * span)
        for bar, row, value in zip(bars, model_rows, values, strict=True):
            versus = row.get("best_other")
            text = f"{value:+.1f}%" + (f"\nvs {versus}" if versus else "")
            ax.annotate(text, (bar.get_x() + bar.get_width() / 2, value), xytext=(0, 2 if value >= 0 else -2),
                        textcoords="offset points", ha="center", va="bottom" if value >= 0 else "top",
                        fontsize=7)
        ax.set_xticks(x, labels, fontsize=8)
        ax.set_xlabel("calibration constant scaled (one at a time)")
        ax.set_ylabel("MeshSlice speedup over\nthe best other 2D algorithm (%)")
        ax.set_title(f"{model}, 256 chips")
        ax.grid(True, axis="y", alpha=0.3)
        ax.set_axisbelow(True)
    handles, labels = shared_legend(axes)
    handles += [Patch(color="#8172b3"), Patch(color="#c44e52")]
    labels += ["MeshSlice faster than the best other 2D algorithm",
               "another 2D algorithm faster than MeshSlice"]
    note = ("Each communication constant of the hardware profile is multiplied by the factor shown, one at a time "
            "(as calibrated = unchanged): α = the launch overhead paid once per collective; λ = the latency paid "
            "per ring step (per hop); β = the link bandwidth; on physical profiles also σ = the software handshake "
            "of every link transfer and op = the fixed cost of every compute op. β multiplies bandwidth, so β x0.5 "
            "means slower links (and β x2 faster ones), while α x2, λ x2, σ x2 and op x4 make things slower. "
            "Bars: MeshSlice speedup over the fastest other 2D algorithm under that calibration (named above the "
            "bar), T_best_other / T_MeshSlice - 1.")
    save(fig, path, title, note=note, legend=(handles, labels))


SENSITIVITY = Family("sensitivity", "Headline speedup under scaled calibration constants", _sensitivity_rows,
                     _sensitivity_plot)

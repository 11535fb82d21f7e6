"""Comparison families at 256 chips: the headline table and the time breakdown."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from tpusim.config.requests import StepRequest
from tpusim.experiments.families.common import (
    ALGORITHM_NOTE,
    ALGORITHM_ORDER,
    BASELINE,
    CLIPPED_NOTE,
    COLOURS,
    MEMORY_NOTE,
    NOMINAL,
    PAPER_SPEEDUP,
    by_model,
    by_setting,
    clip_tall_bars,
    empty_panel,
    figure,
    lead_range,
    memory_label,
    meshslice_leads,
    panel_figure,
    save,
    shared_legend,
    step_of,
    step_times,
)
from tpusim.experiments.families.family import Family
from tpusim.experiments.families.sweeps import speedups
from tpusim.experiments.runners import run_request


def _comparison(point: dict[str, Any]) -> tuple[str, str]:
    """The headline comparison a point belongs to: its model and memory treatment."""
    return point["model"], memory_label(point)


def _leads(times: dict[str, float | None]) -> dict[str, float | None]:
    """MeshSlice's speedup T / T_MS - 1 over each algorithm of ``times``, and over the best other 2D algorithm
    (under ``BEST_OTHER``)."""
    return {**meshslice_leads(times), BEST_OTHER: speedups(times).get("speedup_vs_best")}


BEST_OTHER = "best other 2D"


def _headline_rows(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per model, memory treatment and algorithm of the unscaled points; with points under the
    sensitivity settings too (``reproduce headline --lead-ranges``), each lead's range over them."""
    settings = by_setting(entries)
    rows = []
    times = step_times(settings[NOMINAL], _comparison)
    for entry in settings[NOMINAL]:
        point, best = entry["point"], step_of(entry)
        result = entry.get("result") or {}
        rows.append({
            "model": point["model"], "memory": memory_label(point), "algorithm": point["algorithm"],
            "hardware": point["hardware"], "mesh": best["mesh"] if best else "",
            "layout": best.get("layout", "") if best else "",
            "chosen_algorithm": result.get("algorithm") if best else None,
            "slices": best["slices"] if best else None, "dataflows": best["dataflows"] if best else None,
            "recompute": result.get("recompute") if best else None,
            "microbatches": result.get("microbatches") if best else None,
            "step_time_s": best["step_time_s"] if best else None, "mfu": best["mfu"] if best else None,
            "hfu": best.get("hfu") if best else None, "error": entry.get("error") or "",
        })
    leads = {label: {key: _leads(setting) for key, setting in step_times(group, _comparison).items()}
             for label, group in settings.items()}
    for row in rows:
        key = (row["model"], row["memory"])
        summary = speedups(times[key])
        t = row["step_time_s"]
        ms = summary["meshslice_s"]
        row["meshslice_speedup"] = (t / ms - 1.0) if (t and ms) else None
        row["meshslice_time_saved"] = (1.0 - ms / t) if (t and ms) else None
        row["best_other_2d"] = summary.get("best_other")
        row["speedup_vs_best_other_2d"] = summary.get("speedup_vs_best")
        row["paper_claim_vs_best_2d"] = PAPER_SPEEDUP.get(row["model"])
        for column, lead in (("meshslice_speedup", row["algorithm"]), ("speedup_vs_best_other_2d", BEST_OTHER)):
            row |= lead_range(column, {label: setting.get(key, {}).get(lead) for label, setting in leads.items()})
    return rows


def _headline_plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    fig, axes, grouped = panel_figure(rows, width=6.5, height=4.6)
    for ax, (panel, model_rows) in zip(axes, grouped.items(), strict=False):
        model = model_rows[0]["model"]
        ordered = sorted((r for r in model_rows if r["step_time_s"]),
                         key=lambda r: ALGORITHM_ORDER.index(r["algorithm"]))
        names = [r["algorithm"] for r in ordered]
        totals = [r["step_time_s"] for r in ordered]
        if not ordered:  # no algorithm has a configuration (e.g. the model fits in HBM on none)
            empty_panel(ax, panel)
            continue
        bars = ax.bar(names, totals, color=[COLOURS[n] for n in names])
        labels = []
        for row in ordered:
            text = (f"{row['chosen_algorithm']}\n{row['layout']}" if row["algorithm"] == BASELINE
                    else f"{row['mesh']}")
            if row["algorithm"] != "meshslice" and row["meshslice_speedup"] is not None:
                percent = 100 * row["meshslice_speedup"]
                text += f"\nMS {percent:+.1f}%" if abs(percent) < 100 else f"\nMS {percent:+.0f}%"
            labels.append(text)
        ax.set_ylim(0, max(totals) * 1.25)  # headroom for the two-line labels
        clipped = clip_tall_bars(ax, bars, totals, names, labels)
        for index, (bar, text) in enumerate(zip(bars, labels, strict=True)):
            if index not in clipped:
                ax.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height()), xytext=(0, 2),
                            textcoords="offset points", ha="center", va="bottom", fontsize=7)
        first = ordered[0] if ordered else {}
        simulated, best = first.get("speedup_vs_best_other_2d"), first.get("best_other_2d")
        claim = PAPER_SPEEDUP.get(model)
        parts = []
        if simulated is not None:
            parts.append(f"simulated {100 * simulated:+.1f}% (vs {best})")
        if claim is not None:
            parts.append(f"paper +{100 * claim:.1f}%")
        spread = ""
        if first.get("speedup_vs_best_other_2d_settings"):
            spread = (f"\n{100 * first['speedup_vs_best_other_2d_low']:+.1f}% to "
                      f"{100 * first['speedup_vs_best_other_2d_high']:+.1f}% over "
                      f"{first['speedup_vs_best_other_2d_settings']} sensitivity settings")
        ax.set_title(panel + ("\nMeshSlice vs best other 2D: " + ", ".join(parts) + spread if parts else ""),
                     fontsize=10)
        ax.set_xlabel("algorithm (each at its own tuned mesh, slices and dataflows)")
        ax.set_ylabel("step time (s)")
        ax.grid(True, axis="y", alpha=0.3)
    note = (MEMORY_NOTE + " Above each bar: the tuned mesh (R x C; for all, the algorithm and named layout "
            "chosen) and, for the other algorithms, MS +x% = "
            "MeshSlice speedup over that algorithm, T_alg / T_MeshSlice - 1 (positive: MeshSlice is faster). "
            "Titles: MeshSlice's speedup over the fastest other 2D algorithm, simulated here (with --lead-ranges also "
            "its lowest and highest over the sensitivity settings, each re-tuned) and as claimed in the paper. "
            + CLIPPED_NOTE + "\n" + ALGORITHM_NOTE)
    save(fig, path, title, note=note)


HEADLINE = Family("headline", "256 chips, batch 256: each algorithm at its tuned configuration", _headline_rows,
                  _headline_plot, leads=True)


def _breakdown_rows(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for entry in entries:
        point, best = entry["point"], step_of(entry)
        if best is None:
            continue
        step = run_request(StepRequest, {
            "model": point["model"], "hardware": point["hardware"], "mesh": best["mesh"],
            "algorithm": point["algorithm"], "slices": best["slices"] if any(best["slices"]) else None,
            "dataflows": best["dataflows"], "transposes": best["transposes"], "batch": point["batch"],
            "allow_infeasible": point["allow_infeasible"], "prefetch": point["prefetch"],
            # everything else the tuner timed with, so the step is the configuration it chose
            "scale": point["scale"], "multi_axis": point["multi_axis"], "overlap_limit": point["overlap_limit"],
            "ignore_memory": point["ignore_memory"], "recompute": entry["result"]["recompute"],
            "microbatches": entry["result"].get("microbatches", 1),
            "attention": entry["result"].get("attention", "unfused"),
            # on the slice the tuner chose: without a topology it searched every legal shape
            "topology": best.get("slice_shape") or point.get("topology"),
            "prefetch_window": point.get("prefetch_window", 1), "prefetch_budget": point.get("prefetch_budget"),
            "fidelity": point.get("fidelity", "auto"), "bytes_per_param": point.get("bytes_per_param", 16.0),
            "zero_stage": entry["result"].get("zero_stage", 1)})
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


BREAKDOWN_PARTS = (("compute_s", "#4c72b0", "compute"),
                   ("exposed_comm_s", "#dd8452", "exposed communication (not hidden behind compute)"),
                   ("idle_s", "#bbbbbb", "idle (waiting for other chips)"))


def _stack(ax: Any, labels: list[str], rows: list[dict[str, Any]]) -> None:
    x = np.arange(len(labels))
    bottom = np.zeros(len(labels))
    bars = None
    for field, colour, name in BREAKDOWN_PARTS:
        values = np.array([r[field] for r in rows])
        bars = ax.bar(x, values, bottom=bottom, color=colour, label=name)
        bottom += values
    ax.set_xticks(x, labels, fontsize=8)
    ax.set_ylim(0, 1.1 * float(bottom.max()) if len(bottom) else 1.0)
    if bars is not None and rows and "algorithm" in rows[0] and rows[0].get("part") == "step":
        clip_tall_bars(ax, bars, list(bottom), [r["algorithm"] for r in rows])
    ax.set_ylabel("time per step (s)")
    ax.grid(True, axis="y", alpha=0.3)


def _breakdown_plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    grouped = by_model(rows)
    fig, axes = figure(2, width=6.5, height=3.8, rows=len(grouped))
    for index, (model, model_rows) in enumerate(grouped.items()):
        steps = sorted((r for r in model_rows if r["part"] == "step"),
                       key=lambda r: ALGORITHM_ORDER.index(r["algorithm"]))
        _stack(axes[2 * index], [f"{r['algorithm']}\n{r['mesh']}" for r in steps], steps)
        axes[2 * index].set_title(f"{model}: whole step, each algorithm at its tuned mesh", fontsize=10)
        axes[2 * index].set_xlabel("algorithm and its tuned mesh R x C")
        layers = [r for r in model_rows if r["algorithm"] == "meshslice" and r["part"] != "step"]
        mesh = layers[0]["mesh"] if layers else ""
        _stack(axes[2 * index + 1], [r["part"] for r in layers], layers)
        axes[2 * index + 1].set_title(f"{model}: MeshSlice ({mesh}) per sharded layer", fontsize=10)
        axes[2 * index + 1].set_xlabel("layer (forward + backward, summed over all transformer layers)")
    note = ("Left: the whole training step, split into compute, exposed communication and idle time; under each "
            "bar the algorithm and its tuned mesh R x C. Right: MeshSlice's time in each of the four sharded GeMM "
            "layers: qkv = query/key/value projection, out_proj = attention output projection, ff1 / ff2 = the "
            "feed-forward up / down projections; the rest of the step (attention, norms) is not shown. "
            + CLIPPED_NOTE + "\n" + ALGORITHM_NOTE)
    save(fig, path, title, note=note, legend=shared_legend(axes))


BREAKDOWN = Family("breakdown", "Where the step time goes at 256 chips", _breakdown_rows, _breakdown_plot)

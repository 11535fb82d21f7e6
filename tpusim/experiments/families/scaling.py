"""Scaling families: weak scaling (MFU vs chips), strong scaling (step time vs chips), tuner accuracy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tpusim.experiments.families.common import (
    ALGORITHM_NOTE,
    ALGORITHM_ORDER,
    COLOURS,
    MEMORY_NOTE,
    by_model,
    empty_panel,
    figure,
    memory_label,
    panel_figure,
    plain_number,
    save,
    shared_legend,
    step_of,
)
from tpusim.experiments.families.family import Family


def _tuned_rows(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for entry in entries:
        point, best = entry["point"], step_of(entry)
        result = entry.get("result") or {}
        rows.append({
            "model": point["model"], "memory": memory_label(point), "algorithm": point["algorithm"],
            "chips": point["chips"], "batch": point["batch"] or point["chips"],
            "mesh": best["mesh"] if best else "", "layout": best.get("layout", "") if best else "",
            "chosen_algorithm": result.get("algorithm") if best else None,
            "step_time_s": best["step_time_s"] if best else None,
            "mfu": best["mfu"] if best else None, "hfu": best.get("hfu") if best else None,
            "recompute": result.get("recompute") if best else None,
            "microbatches": result.get("microbatches") if best else None,
            "slices": best["slices"] if best else None,
            "feasible": best["feasible"] if best else False, "error": entry.get("error") or "",
        })
    return rows


def _chip_axis(ax: Any, chips: list[int]) -> None:
    """Log-2 chip axis labelled with the plain chip counts."""
    from matplotlib.ticker import FixedFormatter, FixedLocator, NullLocator

    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(chips))
    ax.xaxis.set_major_formatter(FixedFormatter([str(c) for c in chips]))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("chips (log scale)")


def _lines(rows: list[dict[str, Any]], path: Path, title: str, field: str, label: str, scale: float,
           log_y: bool) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    fig, axes, grouped = panel_figure(rows, width=6.5, height=5.0)
    infeasible = gaps = False
    for ax, (model, model_rows) in zip(axes, grouped.items(), strict=False):
        if all(r[field] is None for r in model_rows):
            gaps = True
            empty_panel(ax, model)
            continue
        for algorithm in ALGORITHM_ORDER:
            mine = [r for r in model_rows if r["algorithm"] == algorithm]
            gaps = gaps or any(r[field] is None for r in mine)
            points = sorted((r["chips"], r[field] * scale, r.get("feasible", True)) for r in mine
                            if r[field] is not None)
            if not points:
                continue
            xs, ys, _ = zip(*points, strict=True)
            colour = COLOURS[algorithm]
            ax.plot(xs, ys, marker="o", label=algorithm, color=colour)
            bad = [(x, y) for x, y, fine in points if not fine]
            if bad:
                infeasible = True
                ax.plot(*zip(*bad, strict=True), linestyle="none", marker="o", markerfacecolor="white",
                        markeredgecolor=colour, markeredgewidth=1.5)
        if log_y and field == "step_time_s":
            feasible = [r for r in model_rows if r[field] is not None]
            if feasible:
                smallest = min(r["chips"] for r in feasible)
                start = min(r[field] for r in feasible if r["chips"] == smallest) * scale
                chips = sorted({r["chips"] for r in feasible})
                ax.plot(chips, [start * smallest / c for c in chips], color="grey", linestyle=":", linewidth=1.5,
                        label="ideal: time halves per doubling of chips", zorder=0)
        _chip_axis(ax, sorted({r["chips"] for r in model_rows}))
        if log_y:
            ax.set_yscale("log")
            ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            ax.yaxis.set_minor_locator(LogLocator(base=10, subs=(1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0)))
            ax.yaxis.set_major_formatter(FuncFormatter(plain_number))
            ax.yaxis.set_minor_formatter(NullFormatter())
            ax.set_ylabel(f"{label}, log scale")
        else:
            ax.set_ylim(0, 100 if scale == 100.0 else None)
            ax.set_ylabel(label)
        ax.set_title(model)
        ax.grid(True, which="major", alpha=0.3)
    handles, labels = shared_legend(axes)
    if infeasible:
        handles.append(Line2D([], [], linestyle="none", marker="o", markerfacecolor="white",
                              markeredgecolor="black", markeredgewidth=1.5))
        labels.append("infeasible, timed anyway")
    batches = {r["batch"] for r in rows}
    batch = ("batch = chips (one sequence per chip)" if all(r["batch"] == r["chips"] for r in rows)
             else f"global batch {', '.join(str(b) for b in sorted(batches))} sequences at every chip count")
    notes = [f"Each algorithm at its own tuned mesh, slices and dataflows; {batch}."]
    if log_y and field == "step_time_s":
        notes.append("Dotted grey: ideal strong scaling from the fastest time at the smallest chip count.")
    if field == "mfu":
        notes.append("MFU = model FLOPs utilisation: the model's useful FLOP/s as a percentage of the peak FLOP/s "
                     "of all chips.")
    if infeasible:
        notes.append("Hollow marker: the best configuration breaks a sharding constraint (e.g. the chip count "
                     "does not divide the attention heads, which are then padded); it is timed anyway.")
    if gaps:
        notes.append("A missing point has no configuration at all (Cannon needs a square mesh; under memory "
                     "feasible, the model does not fit at that chip count); lines join the points that exist.")
    if any(r.get("memory") == "feasible" for r in rows):
        notes.append(MEMORY_NOTE)
    save(fig, path, title, note=" ".join(notes) + "\n" + ALGORITHM_NOTE, legend=(handles, labels),
         legend_columns=min(len(labels), 4 if len(labels) > 7 else len(labels)))


WEAK_SCALING = Family(
    "weak-scaling", "Weak scaling: MFU of each tuned algorithm (batch = chips)", _tuned_rows,
    lambda rows, path, title: _lines(rows, path, title, "mfu", "MFU (%)", 100.0, False),
)
STRONG_SCALING = Family(
    "strong-scaling", "Strong scaling: step time of each tuned algorithm (batch 64)", _tuned_rows,
    lambda rows, path, title: _lines(rows, path, title, "step_time_s", "step time (s)", 1.0, True),
)


def _accuracy_rows(entries: list[dict[str, Any]], by_algorithm: bool = False) -> list[dict[str, Any]]:
    """One row per model (and algorithm, ``by_algorithm``) and chip count: the default and the exhaustive choice."""
    pairs: dict[tuple[str, str, int], dict[bool, dict[str, Any] | None]] = {}
    for entry in entries:
        point = entry["point"]
        key = (point["model"], point["algorithm"] if by_algorithm else "", point["chips"])
        pairs.setdefault(key, {})[bool(point["exhaustive"])] = step_of(entry)
    rows = []
    for (model, algorithm, chips), found in sorted(pairs.items()):
        default, exhaustive = found.get(False), found.get(True)
        gap = None
        if default and exhaustive:
            gap = 100.0 * (default["step_time_s"] / exhaustive["step_time_s"] - 1.0)
        rows.append({
            "model": model, **({"algorithm": algorithm} if by_algorithm else {}), "chips": chips,
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


# one style per line, each offset slightly off its chip count so that equal gaps (often all 0) stay visible
_TWO_STYLES = ({"marker": "o", "markersize": 9, "linestyle": "-", "offset": 0.95, "fill": "full"},
               {"marker": "s", "markersize": 6, "linestyle": "--", "offset": 1.05, "fill": "none"})
_FOUR_STYLES = ({"marker": "o", "markersize": 9, "linestyle": "-", "offset": 0.91, "fill": "full"},
                {"marker": "s", "markersize": 7, "linestyle": "--", "offset": 0.97, "fill": "none"},
                {"marker": "^", "markersize": 8, "linestyle": "-.", "offset": 1.03, "fill": "full"},
                {"marker": "D", "markersize": 6, "linestyle": ":", "offset": 1.09, "fill": "none"})


def _accuracy_plot(rows: list[dict[str, Any]], path: Path, title: str, by_algorithm: bool = False) -> None:
    from matplotlib.ticker import FuncFormatter

    fig, axes = figure(1, width=8.0, height=4.8)
    ax = axes[0]
    gaps: list[float] = []
    grouped: dict[str, list[dict[str, Any]]] = {}
    for model, model_rows in by_model(rows).items():
        for row in model_rows:
            grouped.setdefault(f"{model}, {row['algorithm']}" if by_algorithm else model, []).append(row)
    styles = _FOUR_STYLES if len(grouped) > len(_TWO_STYLES) else _TWO_STYLES
    for index, (series, series_rows) in enumerate(grouped.items()):
        points = sorted((r["chips"], r["gap_percent"]) for r in series_rows if r["gap_percent"] is not None)
        if points:
            style = styles[index % len(styles)]
            xs, ys = zip(*points, strict=True)
            gaps.extend(ys)
            ax.plot([x * style["offset"] for x in xs], ys, marker=style["marker"], markersize=style["markersize"],
                    linestyle=style["linestyle"], fillstyle=style["fill"], markeredgewidth=1.5, label=series)
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="1% target (gap should stay below)")
    top = max([1.5, *(1.2 * g for g in gaps)])
    bottom = min([-0.25, *(1.2 * g for g in gaps)])
    ax.set_ylim(bottom, top)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    _chip_axis(ax, sorted({r["chips"] for r in rows}))
    if gaps and all(g == 0 for g in gaps):
        ax.annotate(f"{' and '.join(grouped)}: gap 0.000% at every chip count", (0.5, 0.45),
                    xycoords="axes fraction", ha="center", va="center", fontsize=9,
                    bbox={"boxstyle": "round", "facecolor": "white", "edgecolor": "grey"})
    ax.set_ylabel("gap: default tuner slower than\nexhaustive search (%)")
    ax.set_title("every layout D x R x C, batch = chips" if by_algorithm else "MeshSlice, batch = chips")
    ax.grid(True, alpha=0.3)
    note = ("gap = 100 x (T_default / T_exhaustive - 1): how much slower the configuration of the default (pruned) "
            "tuner is than the best one exhaustive search finds; 0% means the default tuner found the optimum. "
            f"The {'lines' if by_algorithm else 'two models'}' markers are shifted slightly left and right of their "
            f"chip count so that {'all' if by_algorithm else 'both'} stay visible where they coincide.")
    save(fig, path, title, note=note, legend=shared_legend(axes))


TUNER_ACCURACY = Family("tuner-accuracy", "Default tuner against exhaustive search (MeshSlice)", _accuracy_rows,
                        _accuracy_plot)
TUNER_ACCURACY_POD = Family(
    "tuner-accuracy-pod", "Default tuner against exhaustive search over every layout D x R x C",
    lambda entries: _accuracy_rows(entries, by_algorithm=True),
    lambda rows, path, title: _accuracy_plot(rows, path, title, by_algorithm=True))

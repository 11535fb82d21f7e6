"""The pod family: MeshSlice with data parallelism on 256 to 4096 chips (TPUv4 unless ``--hardware`` says) and
on two 4096-chip pods over DCN, each layout D x R x C tuned, beside the practitioner's baseline (the best layout
of any kind).

One row per model, chip count and algorithm (``meshslice`` or ``all``, the baseline): the tuner's best layout and
its step split into compute, exposed tensor-parallel communication, exposed data-parallel communication (over the
replicas and across slices) and idle; the figure stacks those four parts per chip count and algorithm.
"""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType
from typing import Any

from tpusim.experiments.families.common import (
    BASELINE,
    MEMORY_NOTE,
    NOMINAL,
    by_setting,
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
from tpusim.units import GB

# the stacked parts of a step: row field, colour, legend label
POD_PARTS = (("compute_s", "#4c72b0", "compute"),
             ("exposed_tensor_comm_s", "#dd8452", "exposed tensor-parallel communication (R x C mesh)"),
             ("exposed_data_comm_s", "#c44e52", "exposed data-parallel communication (over the D replicas)"),
             ("idle_s", "#bbbbbb", "idle (launch gaps, waiting on other chips)"))
HEADROOM = 1.4  # y-axis top over the tallest bar: room for the three-line label above it
# what each ZeRO stage shards over the D replicas (Rajbhandari et al. 2020; docs/workloads.md#memory)
ZERO_SHARDS = MappingProxyType({0: "nothing sharded over the D replicas",
                                1: "optimizer state sharded over the D replicas",
                                2: "optimizer state and gradients sharded over the D replicas",
                                3: "optimizer state, gradients and weights sharded over the D replicas"})


def _sides(layout: str, data_parallel: int) -> tuple[int, int, int]:
    """D, R and C of a tuned layout, "RxC" (D = 1) or "DxRxC"."""
    sides = [int(side) for side in layout.split("x")]
    rows, columns = sides[-2:]
    return data_parallel, rows, columns


def _pod_key(point: dict[str, Any]) -> tuple[str, str, int, int]:
    """The comparison a pod point belongs to: model, memory treatment, chips and slices over DCN."""
    return point["model"], memory_label(point), point["chips"], point.get("dcn_data", 1)


def _pod_leads(entries: list[dict[str, Any]]) -> dict[tuple[str, str, int, int], dict[str, float | None]]:
    """MeshSlice's speedup T / T_MS - 1 over each algorithm of every comparison (``all``: the best layout of any
    kind; negative where it beats MeshSlice)."""
    return {key: meshslice_leads(times) for key, times in step_times(entries, _pod_key).items()}


def _pod_rows(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per unscaled point; with points under the sensitivity settings too (``reproduce pod
    --lead-ranges``), the range of MeshSlice's speedup over them."""
    settings = by_setting(entries)
    leads = {label: _pod_leads(group) for label, group in settings.items()}
    rows = []
    for entry in settings[NOMINAL]:
        point, best = entry["point"], step_of(entry)
        result = entry.get("result") or {}
        row: dict[str, Any] = {
            "model": point["model"], "memory": memory_label(point), "algorithm": point["algorithm"],
            "chosen_algorithm": None, "chips": point["chips"], "dcn_data": point.get("dcn_data", 1),
            "batch": point["batch"] or point["chips"], "layout": "", "named_layout": "", "data_parallel": None,
            "rows": None,
            "columns": None, "step_time_s": None, "mfu": None, "hfu": None, "compute_s": None,
            "exposed_tensor_comm_s": None, "exposed_data_comm_s": None, "idle_s": None, "memory_gb_per_chip": None,
            "zero_stage": point["zero_stage"], "recompute": None, "microbatches": None, "slices": None,
            "error": entry.get("error") or "",
        }
        if best is not None:
            data, tensor_rows, tensor_columns = _sides(best["mesh"], best["data_parallel"])
            exposed = best["exposed_comm_s"]
            row.update({
                "chosen_algorithm": result.get("algorithm"), "layout": best["mesh"],
                "named_layout": best.get("layout", ""), "data_parallel": data, "rows": tensor_rows,
                "columns": tensor_columns,
                "step_time_s": best["step_time_s"], "mfu": best["mfu"], "hfu": best["hfu"],
                "compute_s": best["compute_s"],
                "exposed_tensor_comm_s": exposed - best["exposed_data_comm_s"],
                "exposed_data_comm_s": best["exposed_data_comm_s"],
                # the rest of the step; clamped so that rounding never draws a negative sliver
                "idle_s": max(0.0, best["step_time_s"] - best["compute_s"] - exposed),
                "memory_gb_per_chip": best["memory_bytes_per_chip"] / GB,
                "zero_stage": result.get("zero_stage", point["zero_stage"]),
                "recompute": result.get("recompute"), "microbatches": result.get("microbatches"),
                "slices": best["slices"],
            })
        key, algorithm = _pod_key(point), point["algorithm"]
        row["meshslice_speedup"] = leads[NOMINAL][key].get(algorithm)
        row |= lead_range("meshslice_speedup", {label: setting.get(key, {}).get(algorithm)
                                                for label, setting in leads.items()})
        rows.append(row)
    return rows


def _tick(row: dict[str, Any], named: bool) -> str:
    count = row.get("dcn_data") or 1
    slices = f" = {count} x {row['chips'] // count}" if count > 1 else ""
    algorithm = ("\nall" if row.get("algorithm") == BASELINE else "\nMS") if named else ""
    return f"{row['chips']}{slices}{algorithm}"


def _batch_note(rows: list[dict[str, Any]]) -> str:
    if all(r["batch"] == r["chips"] for r in rows):
        return "Batch = chips (one sequence per chip)"
    return f"Global batch {', '.join(str(b) for b in sorted({r['batch'] for r in rows}))} sequences"


def _memory_note(rows: list[dict[str, Any]]) -> str:
    if all(r["memory"] == "feasible" for r in rows):
        return ("Memory feasible: every layout fits in HBM, the tuner choosing the least recomputation and the "
                "fewest micro-batches that fit.")
    return MEMORY_NOTE


def _pod_plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    fig, axes, panels = panel_figure(rows, width=7.0, height=4.8)
    for ax, (panel, panel_rows) in zip(axes, panels.items(), strict=False):
        # rows drawn again from an earlier run's table may predate the algorithm and dcn_data columns
        ordered = sorted(panel_rows, key=lambda r: (r["chips"], r.get("algorithm") == BASELINE))
        positions = list(range(len(ordered)))
        bottoms = [0.0] * len(ordered)
        for field, colour, label in POD_PARTS:
            values = [r[field] or 0.0 for r in ordered]
            ax.bar(positions, values, bottom=bottoms, color=colour, label=label, width=0.6)
            bottoms = [b + v for b, v in zip(bottoms, values, strict=True)]
        tallest = max(bottoms, default=0.0) or 1.0
        ax.set_ylim(0, HEADROOM * tallest)
        for position, row, total in zip(positions, ordered, bottoms, strict=True):
            if row["step_time_s"] is None:
                text, height = "no result\n(see error)", 0.0
            else:
                text, height = f"{row['layout']}\nMFU {100 * row['mfu']:.1f}%", total
                if row.get("algorithm") == BASELINE:
                    text = f"{row['chosen_algorithm']}\n" + text
                if row["data_parallel"] and row["data_parallel"] > 1:  # often too thin to see as a bar part
                    text += f"\nDP {row['exposed_data_comm_s']:.3f} s"
            ax.annotate(text, (position, height), xytext=(0, 2), textcoords="offset points", ha="center",
                        va="bottom", fontsize=8)
        named = len({r.get("algorithm") for r in ordered}) > 1  # MS / all under each count once both are drawn
        ax.set_xticks(positions, [_tick(r, named) for r in ordered], fontsize=7 if named else None)
        ax.set_xlabel("chips (MS: MeshSlice; all: the best layout of any kind)")
        ax.set_ylabel("time per step (s)")
        ax.set_title(panel, fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
    stages = sorted({r["zero_stage"] for r in rows if isinstance(r["zero_stage"], int)})
    zero = "; ".join(f"ZeRO stage {stage} ({ZERO_SHARDS.get(stage, 'unknown stage')})" for stage in stages)
    note = ("Each bar: one training step of MeshSlice (MS) or of the best layout of any kind (all: every "
            "algorithm at every ZeRO stage, its algorithm named above the bar) at the best layout the tuner found "
            "for that chip count (x S: S slices over DCN, the layout that of each slice), "
            "written above it as D x R x C (D data-parallel replicas, each an R x C tensor-parallel mesh; R x C "
            "alone when D = 1) with its MFU (model FLOPs over the peak FLOP/s of all chips) and, when D > 1, "
            "DP = its exposed data-parallel communication in seconds (often too thin to see). The step is split "
            "into compute (MXU busy on the critical chip), exposed tensor-parallel communication (the MXU waits on "
            "a collective of the R x C mesh), exposed data-parallel communication (it waits only on a collective "
            "over the replicas: gradient reduce-scatters, weight all-gathers) and idle (the rest: launch gaps and "
            f"waiting on other chips). {_batch_note(rows)}; {zero or 'the default ZeRO stage'}. "
            + _memory_note(rows))
    if any(r["step_time_s"] is None for r in rows):
        note += " No result: that point ended with an error (the error column of the table)."
    save(fig, path, title, note=note, legend=shared_legend(axes), legend_columns=2)


POD = Family("pod",
             "{generation} pods: MeshSlice with data parallelism and the best layout of any kind (batch = chips)",
             _pod_rows, _pod_plot, leads=True)

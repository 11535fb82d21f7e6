"""Sweep families: slice count, mesh shape at 2048 chips, and calibration sensitivity."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from tpusim.experiments.families import Family, register
from tpusim.experiments.families.common import PAPER_SPEEDUP, TWO_D, by_model, figure, save, step_of


def _step_rows(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for entry in entries:
        point, result = entry["point"], step_of(entry) or {}
        rows.append({
            "model": point["model"], "mesh": point["mesh"], "requested_slices": point["slices"],
            "slices": result.get("slices"), "step_time_s": result.get("step_time_s"),
            "compute_s": result.get("compute_s"), "exposed_comm_s": result.get("exposed_comm_s"),
            "mfu": result.get("mfu"), "feasible": result.get("feasible", False),
            "violations": len(result.get("violations", [])), "error": entry.get("error") or "",
        })
    return rows


def _slice_plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    grouped = by_model(rows)
    fig, axes = figure(len(grouped))
    for ax, (model, model_rows) in zip(axes, grouped.items(), strict=True):
        data = sorted((r["requested_slices"], r["step_time_s"], r["exposed_comm_s"]) for r in model_rows
                      if r["step_time_s"] is not None)
        ks = [d[0] for d in data]
        ax.plot(ks, [d[1] for d in data], marker="o", label="step time")
        ax.plot(ks, [d[2] for d in data], marker="s", linestyle="--", label="exposed communication")
        ax.set_xscale("log", base=2)
        ax.set_xticks(ks, [str(k) for k in ks])
        ax.set_xlabel("slice count K (all four FF layers)")
        ax.set_ylabel("time per step (s)")
        ax.set_title(f"{model}, 32x8")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    save(fig, path, title)


def _mesh_plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    grouped = by_model(rows)
    fig, axes = figure(len(grouped))
    for ax, (model, model_rows) in zip(axes, grouped.items(), strict=True):
        meshes = [r["mesh"] for r in model_rows]
        times = [r["step_time_s"] or 0.0 for r in model_rows]
        bars = ax.bar(meshes, times, color="#8172b3")
        for bar, row in zip(bars, model_rows, strict=True):
            if not row["feasible"]:
                bar.set_hatch("//")
                bar.set_alpha(0.6)
            ax.annotate(f"K={row['slices'][0] if row['slices'] else '?'}", (bar.get_x() + bar.get_width() / 2,
                        bar.get_height()), ha="center", va="bottom", fontsize=8)
        ax.set_xlabel("mesh R x C (hatched: infeasible, timed anyway)")
        ax.set_ylabel("step time (s)")
        ax.set_title(f"{model}, 2048 chips")
        ax.grid(True, axis="y", alpha=0.3)
    save(fig, path, title)


register(Family("slice-sweep", "MeshSlice step time against the slice count K", _step_rows, _slice_plot))
register(Family("mesh-shapes", "MeshSlice on five 2048-chip mesh shapes", _step_rows, _mesh_plot))


def _scale_label(scale: dict[str, float]) -> str:
    changed = [f"{'β' if k == 'beta' else 'α' if k == 'alpha' else 'λ' if k == 'lambda' else k}x{v:g}"
               for k, v in scale.items() if v != 1.0]
    return ", ".join(changed) or "as calibrated"


def speedups(times: dict[str, float]) -> dict[str, Any]:
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
    groups: dict[tuple[str, str], dict[str, float]] = {}
    for entry in entries:
        point, best = entry["point"], step_of(entry)
        key = (point["model"], _scale_label(point["scale"]))
        groups.setdefault(key, {})[point["algorithm"]] = best["step_time_s"] if best else None
    rows = []
    for (model, label), times in groups.items():
        rows.append({"model": model, "scale": label, **speedups(times), "paper_claim": PAPER_SPEEDUP.get(model)})
    return rows


def _sensitivity_plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    grouped = by_model(rows)
    fig, axes = figure(len(grouped), width=7.0)
    for ax, (model, model_rows) in zip(axes, grouped.items(), strict=True):
        labels = [r["scale"] for r in model_rows]
        values = [100.0 * (r.get("speedup_vs_best") or 0.0) for r in model_rows]
        x = np.arange(len(labels))
        ax.bar(x, values, color=["#8172b3" if v >= 0 else "#c44e52" for v in values])
        ax.axhline(100.0 * PAPER_SPEEDUP[model], color="black", linestyle="--", linewidth=1, label="paper claim")
        ax.axhline(0.0, color="grey", linewidth=0.8)
        ax.set_xticks(x, labels, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("MeshSlice speedup over best other 2D (%)")
        ax.set_title(f"{model}, 256 chips")
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    save(fig, path, title)


register(Family("sensitivity", "Headline speedup under scaled calibration constants", _sensitivity_rows,
                _sensitivity_plot))

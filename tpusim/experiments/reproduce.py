"""``tpusim reproduce``: run a paper-reproduction family and write its table and figure.

Family ``X`` runs the packaged experiment ``X`` (``tpusim/data/experiments/X/experiment.yaml``) into
``DIR/X/`` (results.csv, results.json, run_meta.json) and writes ``DIR/X/X.csv`` and ``DIR/X/X.png``.
``--hardware`` replaces every point's profile. ``quick`` keeps every family and every point and relies on
symmetric fidelity, layer extrapolation, caching and analytic pruning; without it, tune points search
exhaustively.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tpusim.engine.atomic import write_atomic
from tpusim.experiments.families import family_names, get_family
from tpusim.experiments.results import check_output_dir, render_csv
from tpusim.experiments.run import run_experiment
from tpusim.experiments.spec import load_experiment
from tpusim.hardware import load_hardware


@dataclass
class FamilyOutput:
    name: str
    csv: Path
    png: Path
    rows: list[dict[str, Any]]


def reproduce(name: str, out: Path | str, *, quick: bool = False, hardware: str | None = None,
              jobs: int = 1, cache: Path | str | None = None) -> list[FamilyOutput]:
    """Run family ``name`` (or ``all``) into ``out``."""
    names = family_names() if name == "all" else [get_family(name).name]
    if hardware is not None:
        load_hardware(hardware)  # fail on a bad name before anything runs
    out_dir = Path(out)
    check_output_dir(out_dir)
    outputs = []
    for family_name in names:
        family = get_family(family_name)
        experiment = load_experiment(family_name)
        point = experiment.point
        updates: dict[str, Any] = {}
        if hardware is not None:
            updates["hardware"] = hardware
        if not quick and point.kind == "tune" and "exhaustive" not in experiment.sweep.grid:
            updates["exhaustive"] = True
        if updates:
            experiment = experiment.model_copy(update={"point": point.model_copy(update=updates)})
        folder = out_dir / family_name
        run_experiment(experiment, folder, jobs=jobs, yes=True, cache=cache)
        entries = json.loads((folder / "results.json").read_text())["points"]
        rows = family.table(entries)
        csv_path = folder / f"{family_name}.csv"
        png_path = folder / f"{family_name}.png"
        write_atomic(csv_path, render_csv(rows, list(rows[0]) if rows else []))
        profile = hardware or point.hardware
        family.plot(rows, png_path, f"{family.title} [{profile}]")
        outputs.append(FamilyOutput(family_name, csv_path, png_path, rows))
    return outputs


def headline_table(rows: list[dict[str, Any]]) -> str:
    """The headline rows as a fixed-width text table."""
    lines = [f"{'model':<22} {'memory':<9} {'algorithm':<11} {'mesh':<7} {'step (s)':>9} {'MFU':>6} {'HFU':>6} "
             f"{'MS speedup':>11}"]
    for row in rows:
        speedup = row.get("meshslice_speedup")
        lines.append(
            f"{row['model']:<22} {row['memory']:<9} {row['algorithm']:<11} {row['mesh']:<7} "
            f"{(row['step_time_s'] or float('nan')):>9.3f} {100 * (row['mfu'] or 0):>5.1f}% "
            f"{100 * (row['hfu'] or 0):>5.1f}% "
            f"{'' if speedup is None or row['algorithm'] == 'meshslice' else f'{100 * speedup:+.1f}%':>11}"
        )
    for model, memory in dict.fromkeys((r["model"], r["memory"]) for r in rows):
        first = next(r for r in rows if (r["model"], r["memory"]) == (model, memory))
        if first.get("speedup_vs_best_other_2d") is not None:
            lines.append(f"{model}, memory {memory}: MeshSlice vs best other 2D ({first['best_other_2d']}) "
                         f"{100 * first['speedup_vs_best_other_2d']:+.1f}% (paper: "
                         f"+{100 * first['paper_claim_vs_best_2d']:.1f}%)")
    return "\n".join(lines)

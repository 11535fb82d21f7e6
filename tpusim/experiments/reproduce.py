"""``tpusim reproduce``: run a paper-reproduction family and write its table and figure.

Family ``X`` runs the packaged experiment ``X`` (``experiments/X/experiment.yaml``) into
``DIR/X/`` (results.csv, results.json, run_meta.json) and writes ``DIR/X/X.csv`` and ``DIR/X/X.png``.
``--hardware`` replaces every point's profile. ``quick`` keeps every family and every point and relies on
symmetric fidelity, layer extrapolation, caching and analytic pruning; without it, tune points search
exhaustively. ``redraw`` simulates nothing: it rebuilds ``X.csv`` and ``X.png`` from the ``results.json`` an
earlier run left in ``DIR/X/`` (to restyle a figure without re-running hours of tuning). ``lead_ranges`` runs
a family whose table has leads (``headline``, ``pod``) once more under each setting of the sensitivity family, so
that its table gives every lead's range over them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from tpusim.errors import OutputPathError, UserError
from tpusim.experiments.families import family_names, get_family
from tpusim.experiments.families.common import BASELINE
from tpusim.experiments.interrupts import RunInterrupted
from tpusim.experiments.results import check_output_dir, render_csv
from tpusim.experiments.rows import tidy
from tpusim.experiments.run import run_experiment
from tpusim.experiments.spec import crossed, load_experiment
from tpusim.files import FileRefused, read_bounded, write_atomic
from tpusim.hardware import load_hardware


@dataclass
class FamilyOutput:
    name: str
    csv: Path
    png: Path
    rows: list[dict[str, Any]]


def _stored_run(folder: Path, family: str, hardware: str | None) -> tuple[list[dict[str, Any]], str]:
    """The finished points of an earlier run of ``family`` in ``folder`` and the profile they ran on."""
    path = folder / "results.json"
    again = f"run 'tpusim reproduce {family} --out {folder.parent}' first"
    try:
        stored = json.loads(read_bounded(path, "results file", "results_bytes", follow=False))
        profile = _profile_name(stored["experiment"]["point"]["hardware"])
        entries, finished, total = stored["points"], stored["points_finished"], stored["points_total"]
    except FileRefused as refused:
        if not os.path.lexists(path):
            raise UserError(f"--redraw: {str(path)!r} does not exist; {again}") from None
        raise UserError(f"--redraw: {refused.message}") from None
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise UserError(f"--redraw: {str(path)!r} is not a tpusim results file ({error}); {again}") from None
    if finished != total:
        raise UserError(f"--redraw: {str(path)!r} holds {finished} of {total} points; {again}")
    if hardware is not None and hardware != profile:
        raise UserError(f"--redraw --hardware {hardware!r}: the stored {family} run is on {profile!r}; redraw "
                        "draws what was run, so leave out --hardware or give that profile")
    return entries, profile


def reproduce(name: str, out: Path | str, *, quick: bool = False, hardware: str | None = None,
              jobs: int = 1, cache: Path | str | None = None, redraw: bool = False, lead_ranges: bool = False,
              progress: Callable[[str, int, int], None] | None = None) -> list[FamilyOutput]:
    """Run family ``name`` (or ``all``) into ``out``; with ``redraw``, only draw its table and figure again from
    the results an earlier run stored there. ``lead_ranges``: every family with leads runs under each
    sensitivity setting too (about 17 times the points on a physical profile). ``progress`` hears (family, points
    done, points in all) as each point of a family finishes."""
    if isinstance(out, str) and not out.strip():  # Path("") is the current folder: never meant
        raise UserError("out '' is empty; give the folder the results go to (it is created if missing)")
    names = family_names() if name == "all" else [get_family(name).name]
    if lead_ranges and redraw:
        raise UserError("--lead-ranges runs points and --redraw runs none; a redraw shows the ranges of whatever "
                        "the stored run holds")
    if lead_ranges and not any(get_family(n).leads for n in names):
        raise UserError(f"--lead-ranges: family {name!r} has no lead to range; valid: "
                        f"{', '.join(n for n in family_names() if get_family(n).leads)} or all")
    if hardware is not None and not redraw:
        load_hardware(hardware)  # fail on a bad name before anything runs
    out_dir = Path(out)
    check_output_dir(out_dir)
    outputs = []
    for family_name in names:
        family = get_family(family_name)
        folder = out_dir / family_name
        if redraw:
            entries, profile = _stored_run(folder, family_name, hardware)
        else:
            entries, profile = _run(family_name, folder, quick=quick, hardware=hardware, jobs=jobs, cache=cache,
                                    progress=progress, settings=lead_ranges and family.leads)
        rows = family.table(entries)
        csv_path = folder / f"{family_name}.csv"
        png_path = folder / f"{family_name}.png"
        try:
            table = tidy(rows)
            write_atomic(csv_path, render_csv(table, list(table[0]) if table else []), "table")
            family.plot(rows, png_path, f"{family.title} [{profile}]")
        except OSError as error:  # a full disk, a file size limit: the run's results.json is whole
            raise OutputPathError(f"cannot write the {family_name} table and figure in {str(folder)!r}: "
                                  f"{error.strerror or error}; the files there stay as they were") from None
        outputs.append(FamilyOutput(family_name, csv_path, png_path, rows))
    return outputs


SETTINGS_FAMILY = "sensitivity"
"""The family whose ``scale`` list (and the exclusions of it) are the settings a lead is ranged over."""


def _run(family: str, folder: Path, *, quick: bool, hardware: str | None, jobs: int, cache: Path | str | None,
         progress: Callable[[str, int, int], None] | None = None,
         settings: bool = False) -> tuple[list[dict[str, Any]], str]:
    """Run ``family``'s packaged experiment into ``folder`` (with ``settings``, under each sensitivity setting
    too): its finished points and the profile they ran on."""
    experiment = load_experiment(family)
    point = experiment.point
    updates: dict[str, Any] = {}
    if hardware is not None:
        updates["hardware"] = hardware
    if not quick and point.kind == "tune" and "exhaustive" not in experiment.sweep.grid:
        updates["exhaustive"] = True
    if updates:
        experiment = experiment.model_copy(update={"point": point.model_copy(update=updates)})
    if settings:
        sweep = load_experiment(SETTINGS_FAMILY).sweep
        scaled = [pattern for pattern in sweep.exclude if any(k.split(".")[0] == "scale" for k in pattern)]
        experiment = crossed(experiment, "scale", sweep.grid["scale"], scaled, family)
    try:
        points = None if progress is None else partial(progress, family)
        run_experiment(experiment, folder, jobs=jobs, yes=True, cache=cache, progress=points)
    except RunInterrupted as stop:  # reproduce has no --resume: say what does go on
        raise RunInterrupted(stop.what, stop.signum, "run the same command again to run the family anew") from None
    return _stored_run(folder, family, None)  # the run just stored: all of its points, on its profile


def _profile_name(hardware: Any) -> str:
    """How a figure's title names the profile of a point's ``hardware`` (a name, a path or an inline profile)."""
    if isinstance(hardware, dict):
        return str(hardware.get("name", "inline profile"))
    return str(getattr(hardware, "name", hardware))


def headline_table(rows: list[dict[str, Any]]) -> str:
    """The headline rows as a fixed-width text table (the baseline's rows name the algorithm and layout chosen)."""
    def shown(row: dict[str, Any]) -> tuple[str, str]:
        if row["algorithm"] == BASELINE and row.get("layout"):
            return f"{BASELINE}: {row.get('chosen_algorithm')}", str(row["layout"])
        return str(row["algorithm"]), str(row["mesh"] or "-")

    names = [shown(row) for row in rows]
    wide = max([len("algorithm"), *(len(name) for name, _ in names)])
    long = max([len("mesh"), *(len(mesh) for _, mesh in names)])
    lines = [f"{'model':<22} {'memory':<9} {'algorithm':<{wide}} {'mesh':<{long}} {'step (s)':>9} {'MFU':>6} "
             f"{'HFU':>6} {'MS speedup':>11}"]
    for row, (algorithm, mesh) in zip(rows, names, strict=True):
        speedup = row.get("meshslice_speedup")
        if row["step_time_s"] is None:  # no configuration: the CSV's error column says why
            numbers = f"{'-':>9} {'-':>6} {'-':>6} {'':>11}"
        else:
            numbers = (f"{row['step_time_s']:>9.3f} {100 * (row['mfu'] or 0):>5.1f}% "
                       f"{100 * (row['hfu'] or 0):>5.1f}% "
                       f"{'' if speedup is None or row['algorithm'] == 'meshslice' else f'{100 * speedup:+.1f}%':>11}")
        lines.append(f"{row['model']:<22} {row['memory']:<9} {algorithm:<{wide}} {mesh:<{long}} " + numbers)
    for model, memory in dict.fromkeys((r["model"], r["memory"]) for r in rows):
        first = next(r for r in rows if (r["model"], r["memory"]) == (model, memory))
        if first.get("speedup_vs_best_other_2d") is not None:
            lines.append(f"{model}, memory {memory}: MeshSlice vs best other 2D ({first['best_other_2d']}) "
                         f"{100 * first['speedup_vs_best_other_2d']:+.1f}% (paper: "
                         f"+{100 * first['paper_claim_vs_best_2d']:.1f}%)"
                         + lead_text(first, "speedup_vs_best_other_2d"))
    return "\n".join(lines)


def lead_text(row: dict[str, Any], column: str) -> str:
    """``; over N settings LOW (where) to HIGH (where), WHETHER IT HOLDS`` for a row's lead ``column``, or
    nothing when it was not run under the sensitivity settings."""
    settings = row.get(f"{column}_settings")
    if not settings:
        return ""
    verdict = {True: "the same sign under every setting", False: "its sign changes with the setting",
               None: "no unscaled lead, or a tie"}[row.get(f"{column}_holds")]
    return (f"; over {settings} settings {100 * row[f'{column}_low']:+.1f}% ({row[f'{column}_low_at']}) to "
            f"{100 * row[f'{column}_high']:+.1f}% ({row[f'{column}_high_at']}): {verdict}")

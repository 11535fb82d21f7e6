"""Running an experiment: expand, check every input and path first, run points, keep what finishes.

Points run on the chosen executor; each finished point is written at once (``results.ResultsFiles``).
``resume`` skips points already in the folder's results. ``timeout`` stops handing out work after that
many seconds and keeps what finished. A fault-injection variable, ``TPUSIM_FAULT_KILL_AFTER=n``, makes the
run kill itself with SIGKILL after writing its n-th point: the tests use it to prove nothing is lost.
"""

from __future__ import annotations

import math
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tpusim.config import Experiment
from tpusim.errors import UserError
from tpusim.experiments.arguments import check_run_arguments
from tpusim.experiments.executors import run_dask, run_local
from tpusim.experiments.points import HEADLINE, row_of
from tpusim.experiments.results import ResultsFiles, check_output_dir
from tpusim.experiments.spec import expand, experiment_hash, load_experiment, point_hash

FAULT_ENV = "TPUSIM_FAULT_KILL_AFTER"


class RunTimeout(UserError):
    """--timeout elapsed before every point finished (finished points are kept)."""

    exit_code = 1


@dataclass
class RunSummary:
    out: Path
    total: int
    finished: int
    skipped: int
    errors: int
    rows: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_frame(self) -> Any:
        """One row per point (pandas is imported only here)."""
        import pandas as pd

        return pd.DataFrame(self.rows)

    def to_dict(self) -> dict[str, Any]:
        return {"out": str(self.out), "points_total": self.total, "points_finished": self.finished,
                "points_resumed": self.skipped, "points_with_errors": self.errors, "rows": self.rows,
                "notes": self.notes}


def run_experiment(
    experiment: Experiment | Path | str,
    out: Path | str,
    *,
    jobs: int = 1,
    executor: str = "local",
    scheduler: str | None = None,
    resume: bool = False,
    timeout: float | None = None,
    yes: bool = False,
    progress: Callable[[int, int], None] | None = None,
    cache: Path | str | None = None,
) -> RunSummary:
    """Run every point of ``experiment`` into folder ``out``."""
    check_run_arguments(experiment, out, jobs=jobs, resume=resume, yes=yes, progress=progress, cache=cache,
                        scheduler=scheduler)
    source = "experiment"
    if not isinstance(experiment, Experiment):
        source = str(experiment)
        experiment = load_experiment(experiment)
    if executor not in ("local", "dask"):
        raise UserError(f"--executor {executor!r} is unknown; valid: local, dask")
    if jobs < 1:
        raise UserError(f"--jobs {jobs} must be an integer >= 1")
    if scheduler is not None and executor != "dask":
        raise UserError(f"--scheduler {scheduler!r} needs --executor dask (the {executor} executor runs here)")
    notes: list[str] = []
    cpus = os.cpu_count() or 1
    if executor == "local" and jobs > cpus:
        notes.append(f"--jobs {jobs} is more than this machine's {cpus} CPUs; ran {cpus} worker processes")
        jobs = cpus
    if timeout is not None and not (isinstance(timeout, int | float) and math.isfinite(timeout) and timeout > 0):
        raise UserError(f"--timeout {timeout!r} must be a finite number of seconds > 0")
    points = expand(experiment, source)
    if len(points) > experiment.max_points and not yes:
        raise UserError(f"{source}: the sweep has {len(points)} points, above its max_points of "
                        f"{experiment.max_points}; rerun with --yes to run them all")
    out_dir = Path(out)
    check_output_dir(out_dir)
    varying = _varying_keys(experiment)
    columns = ["index", *varying, *HEADLINE, "error"]
    files = ResultsFiles(out_dir, experiment.model_dump(by_alias=True), experiment_hash(experiment), len(points),
                         columns)
    if not resume:
        files.claim()
    skipped = files.resume() if resume else 0
    hashes = [point_hash(p) for p in points]
    todo = [(i, p.model_dump(by_alias=True)) for i, p in enumerate(points)
            if i not in files.points or files.points[i].get("point_hash") != hashes[i]]
    pending = dict(todo)
    files.flush({"started": time.time()})
    fault_after = int(os.environ.get(FAULT_ENV, "0") or 0)
    start = time.monotonic()
    folder = None if cache is None else str(cache)
    stream = run_dask(todo, scheduler, jobs, folder) if executor == "dask" else run_local(todo, jobs, folder)
    timed_out = False
    for written, (index, outcome, wall) in enumerate(stream, start=1):
        files.add(index, hashes[index], pending[index], outcome,
                  row_of(index, points[index], varying, outcome), wall)
        if progress is not None:
            progress(len(files.points), len(points))
        if fault_after and written >= fault_after:
            os.kill(os.getpid(), signal.SIGKILL)
        if timeout is not None and time.monotonic() - start > timeout and len(files.points) < len(points):
            timed_out = True
            break
    close = getattr(stream, "close", None)
    if close is not None:
        close()
    files.flush({"elapsed_s": time.monotonic() - start, "executor": executor, "jobs": jobs})
    rows = [files.rows[i] for i in sorted(files.rows)]
    summary = RunSummary(out_dir, len(points), len(files.points), skipped,
                         sum(1 for r in rows if r.get("error")), rows, notes)
    if timed_out:
        raise RunTimeout(f"stopped after --timeout {timeout:g} s with {len(files.points)} of {len(points)} "
                         f"points finished in {str(out_dir)!r}", "rerun with --resume to finish the rest")
    return summary


def _varying_keys(experiment: Experiment) -> list[str]:
    keys = list(experiment.sweep.grid)
    for extra in experiment.sweep.include:
        keys.extend(k for k in extra if k not in keys)
    return keys

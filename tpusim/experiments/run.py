"""Running an experiment: expand, check every input and path first, run points, keep what finishes.

Points run on the chosen executor; each finished point is written at once (``results.ResultsFiles``).
The folder is locked for the whole run (``lock``). ``resume`` skips points already in the folder's results,
except those stopped before they finished. ``timeout`` stops a point that runs longer than that many seconds
(``workers``): its row says so, the rest of the sweep runs, and the run ends with exit status 1. SIGINT and
SIGTERM stop the run cleanly (``interrupts``): the workers are stopped, finished points kept, exit status 128 +
the signal. A results file that cannot be written (a full disk, a file size limit) ends the run with one line,
exit status 2, the files written before intact. A fault-injection variable, ``TPUSIM_FAULT_KILL_AFTER=n``, makes
the run kill itself with SIGKILL after writing its n-th point: the tests use it to prove nothing is lost
(``TPUSIM_FAULT_HANG_POINT``, in ``jobs``, makes points hang).
"""

from __future__ import annotations

import math
import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tpusim.config import Experiment
from tpusim.config.catalog import EXPERIMENTS
from tpusim.errors import OutputPathError, UserError
from tpusim.experiments.arguments import check_run_arguments
from tpusim.experiments.executors import (
    DASK_CONNECT_TIMEOUT_S,
    check_scheduler_address,
    run_dask,
    run_local,
    worker_count,
)
from tpusim.experiments.interrupts import Interrupted, RunInterrupted, interrupts_raised
from tpusim.experiments.lock import folder_lock
from tpusim.experiments.points import INTERNAL_ERROR
from tpusim.experiments.references import check_references, digests_of, reference_digests
from tpusim.experiments.results import ResultsFiles, check_output_dir, render_csv
from tpusim.experiments.rows import NO_ERROR, csv_columns, row_of
from tpusim.experiments.spec import expand, experiment_hash, load_experiment, point_hash

FAULT_ENV = "TPUSIM_FAULT_KILL_AFTER"


class RunTimeout(UserError):
    """Some point ran past --timeout and was stopped (or lost its worker); the other points finished."""

    exit_code = 1


@dataclass
class RunSummary:
    """What a run did; ``rows`` are the rows of its results.csv (docs/results.md#the-columns-of-resultscsv)."""

    out: Path
    total: int
    finished: int
    skipped: int
    errors: int
    rows: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    internal_errors: int = 0
    """Points that met a bug in tpusim (their ``error`` begins ``internal error:``); the command exits 1."""

    def to_frame(self) -> Any:
        """The rows as a pandas DataFrame, one per finished point in sweep order, with the columns, values and
        dtypes ``pandas.read_csv`` gives for the run's results.csv (pandas is imported only here)."""
        import io

        import pandas as pd

        if not self.rows:
            return pd.DataFrame()
        return pd.read_csv(io.StringIO(render_csv(self.rows, list(self.rows[0]))))

    def to_dict(self) -> dict[str, Any]:
        return {"out": str(self.out), "points_total": self.total, "points_finished": self.finished,
                "points_resumed": self.skipped, "points_with_errors": self.errors,
                "points_with_internal_errors": self.internal_errors, "rows": self.rows,
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
    force: bool = False,
    connect_timeout: float = DASK_CONNECT_TIMEOUT_S,
) -> RunSummary:
    """Run every point of ``experiment`` into folder ``out``; the summary's ``rows`` (and ``to_frame()``) are
    those of the results.csv written there. ``timeout`` bounds each point's seconds; ``connect_timeout`` the
    connection to a Dask ``scheduler``."""
    check_run_arguments(experiment, out, jobs=jobs, resume=resume, yes=yes, progress=progress, cache=cache,
                        scheduler=scheduler, force=force)
    source = "experiment"
    experiment_file: Path | None = None
    if not isinstance(experiment, Experiment):
        source = str(experiment)
        experiment_file = experiment if isinstance(experiment, Path) else EXPERIMENTS.resolve(experiment)
        experiment = load_experiment(experiment)
    if executor not in ("local", "dask"):
        raise UserError(f"--executor {executor!r} is unknown; valid: local, dask")
    if jobs < 1:
        raise UserError(f"--jobs {jobs} must be an integer >= 1")
    if scheduler is not None and executor != "dask":
        raise UserError(f"--scheduler {scheduler!r} needs --executor dask (the {executor} executor runs here)")
    notes: list[str] = []
    if executor == "local":
        jobs, capped = worker_count(jobs)
        notes.extend([capped] if capped else [])
    if timeout is not None and not (isinstance(timeout, int | float) and math.isfinite(timeout) and timeout > 0):
        raise UserError(f"--timeout {timeout!r} must be a finite number of seconds > 0")
    if timeout is not None and executor == "dask":
        raise UserError(f"--timeout {timeout:g} needs the local executor: a Dask task cannot be stopped once it "
                        "runs")
    if not (isinstance(connect_timeout, int | float) and math.isfinite(connect_timeout) and connect_timeout > 0):
        raise UserError(f"--connect-timeout {connect_timeout!r} must be a finite number of seconds > 0")
    if scheduler is not None:
        check_scheduler_address(scheduler)
    points = expand(experiment, source, None if yes else experiment.max_points)  # sized before it is built
    check_references(points, experiment_file, source)
    if len(points) > experiment.max_points and not yes:
        raise UserError(f"{source}: the sweep has {len(points)} points, above its max_points of "
                        f"{experiment.max_points}; rerun with --yes to run them all")
    out_dir = Path(out)
    check_output_dir(out_dir)
    with folder_lock(out_dir), interrupts_raised():
        try:
            return _run_points(experiment, points, out_dir, notes, executor=executor, jobs=jobs,
                               scheduler=scheduler, connect_timeout=connect_timeout, resume=resume, timeout=timeout,
                               progress=progress, cache=cache, force=force)
        except Interrupted as interrupt:  # before any point ran: the folder is as it was
            raise RunInterrupted(f"interrupted by {signal.Signals(interrupt.signum).name} before any point ran",
                                 interrupt.signum, "run the same command again") from None


def _run_points(experiment: Experiment, points: list[Any], out_dir: Path, notes: list[str], *, executor: str,
                jobs: int, scheduler: str | None, connect_timeout: float, resume: bool, timeout: float | None,
                progress: Callable[[int, int], None] | None, cache: Path | str | None,
                force: bool) -> RunSummary:
    """The run itself, in the locked folder ``out_dir``."""
    varying = _varying_keys(experiment)
    columns = csv_columns([p.model_dump(by_alias=True) for p in points], varying)
    digests = reference_digests(points)
    files = ResultsFiles(out_dir, experiment.model_dump(by_alias=True), experiment_hash(experiment, digests),
                         len(points), columns, force=force)
    if not resume:
        files.claim()
    skipped = files.resume() if resume else 0
    hashes = [point_hash(p, digests_of(p, digests)) for p in points]
    # a point stopped before it finished (--timeout, a lost worker) runs again
    redo = {i for i, entry in files.points.items() if entry.get("stopped")}
    skipped -= len(redo)
    todo = [(i, p.model_dump(by_alias=True)) for i, p in enumerate(points)
            if i not in files.points or files.points[i].get("point_hash") != hashes[i] or i in redo]
    pending = dict(todo)
    with _writing(out_dir):
        files.flush({"started": time.time()})
    fault_after = int(os.environ.get(FAULT_ENV, "0") or 0)
    start = time.monotonic()
    folder = None if cache is None else str(cache)
    stream = (run_dask(todo, scheduler, jobs, folder, connect_timeout) if executor == "dask"
              else run_local(todo, jobs, folder, timeout))
    stopped: list[str] = []
    try:
        for written, (index, outcome, wall) in enumerate(stream, start=1):
            if outcome.get("stopped"):
                stopped.append(outcome["error"])
            with _writing(out_dir):
                files.add(index, hashes[index], pending[index], outcome,
                          row_of(index, pending[index], outcome, columns), wall)
            if progress is not None:
                progress(len(files.points), len(points))
            if fault_after and written >= fault_after:
                os.kill(os.getpid(), signal.SIGKILL)
    except Interrupted as interrupt:
        stream.close()  # stops every worker before the files are written for the last time
        with _writing(out_dir):
            files.flush({"elapsed_s": time.monotonic() - start, "executor": executor, "jobs": jobs})
        raise RunInterrupted(f"interrupted by {signal.Signals(interrupt.signum).name}: {len(files.points)} of "
                             f"{len(points)} points finished in {str(out_dir)!r}", interrupt.signum,
                             "run the same command with --resume to finish the rest") from None
    finally:
        stream.close()
    with _writing(out_dir):
        files.flush({"elapsed_s": time.monotonic() - start, "executor": executor, "jobs": jobs})
    rows = [files.rows[i] for i in sorted(files.rows)]
    summary = RunSummary(out_dir, len(points), len(files.points), skipped,
                         sum(1 for r in rows if r["error"] != NO_ERROR), rows, notes,
                         sum(1 for r in rows if str(r["error"]).startswith(INTERNAL_ERROR)))
    if stopped:
        others = ", the other points finished" if len(stopped) < len(todo) else ""
        raise RunTimeout(f"{len(stopped)} of {len(points)} points stopped before finishing ({stopped[0]}); their rows "
                         f"in {str(out_dir)!r} say so{others}",
                         "rerun with --resume (and a larger --timeout) to run them again")
    return summary


@contextmanager
def _writing(out_dir: Path) -> Iterator[None]:
    """Writes of the results files: one that fails (a full disk, a file size limit) ends the run with one line
    saying why; the files written before stay whole, since every write is atomic."""
    try:
        yield
    except OSError as error:
        raise OutputPathError(f"cannot write the results in {str(out_dir)!r}: {error.strerror or error}; the files "
                              "there stay as they were last written") from None


def _varying_keys(experiment: Experiment) -> list[str]:
    keys = list(experiment.sweep.grid)
    for extra in experiment.sweep.include:
        keys.extend(k for k in extra if k not in keys)
    return keys

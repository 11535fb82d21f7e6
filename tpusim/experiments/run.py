"""Running an experiment: expand, check every input and path first, run points, keep what finishes.

Points run on the chosen executor; each finished point is written at once (``results.ResultsFiles``). The folder is
locked for the whole run (``lock``). ``resume`` skips points already in the folder's results, except those stopped
before they finished. ``timeout`` stops a point that runs longer than that many seconds (``workers``): its row says
so, the rest of the sweep runs, and the run ends with exit status 1; so does a run in which a point lost its worker
(a local one, or a Dask worker on both of its tries, ``executors``). A Dask scheduler without workers for the
connect timeout ends the run with one line, exit status 2, its finished points kept. A point that could not be
simulated keeps its error in its row; ``tpusim run`` then ends with ``POINT_ERRORS_EXIT``. Every name a point uses
is checked before the first one runs (``names``). SIGINT and SIGTERM stop the run cleanly (``interrupts``): the
workers are stopped, finished points kept, exit status 128 + the signal. A results file that cannot be written (a
full disk, a file size limit) ends the run with one line, exit status 2, the files written before intact. A
fault-injection variable, ``TPUSIM_FAULT_KILL_AFTER=n``, makes the run kill itself with SIGKILL after writing its n-th
point (with ``TPUSIM_FAULT_KILL_FILE=FILE``, right after that one file is written): the tests use it to prove
nothing is lost (``TPUSIM_FAULT_HANG_POINT``, in ``jobs``, makes points hang). The files, what a resumed run
believes and when they are rewritten: ``results``.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tpusim.config import Experiment
from tpusim.config.catalog import EXPERIMENTS
from tpusim.errors import UserError, echo
from tpusim.experiments.arguments import check_run_arguments
from tpusim.experiments.executors import (
    DASK_CONNECT_TIMEOUT_S,
    NoDaskWorkers,
    check_scheduler_address,
    run_dask,
    run_local,
    worker_count,
)
from tpusim.experiments.interrupts import Interrupted, RunInterrupted, interrupts_raised
from tpusim.experiments.journal import JOURNAL_NAME
from tpusim.experiments.lock import folder_lock
from tpusim.experiments.names import check_names
from tpusim.experiments.points import CACHE_WARNING, INTERNAL_ERROR
from tpusim.experiments.references import check_references, digests_of, reference_digests
from tpusim.experiments.results import VIEWS, ResultsFiles, check_output_dir, render_csv
from tpusim.experiments.rows import NO_ERROR, csv_columns
from tpusim.experiments.spec import expand, experiment_hash, load_experiment, point_hash
from tpusim.limits import LIMIT_DIGITS

FAULT_ENV = "TPUSIM_FAULT_KILL_AFTER"
POINT_ERRORS_EXIT = 4
"""``tpusim run``'s exit status when every point ran but some could not be simulated (a user error in its
``error`` column: an infeasible corner of the sweep, say); a point that met a bug makes it 1 instead."""


class RunTimeout(UserError):
    """Some point ran past --timeout and was stopped (or lost its worker: a local one, or a Dask worker on both
    tries); the other points finished."""

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
    estimate: Callable[[str], None] | None = None,
) -> RunSummary:
    """Run every point of ``experiment`` into folder ``out``; the summary's ``rows`` (and ``to_frame()``) are
    those of the results.csv written there. ``timeout`` bounds each point's seconds; ``connect_timeout`` the
    connection to a Dask ``scheduler`` and how long the run waits while it has no worker. ``estimate`` hears the
    estimate line of the points still to run, before the first starts (docs/limits.md#cost-estimate)."""
    options = check_run_arguments(experiment, out, {
        "jobs": jobs, "timeout": timeout, "connect_timeout": connect_timeout, "resume": resume, "yes": yes,
        "force": force, "scheduler": scheduler, "executor": executor}, progress=progress, cache=cache)
    _fault_after()  # a malformed fault variable is refused before anything is written
    source = "experiment"
    experiment_file: Path | None = None
    if not isinstance(experiment, Experiment):
        source = str(experiment)
        experiment_file = experiment if isinstance(experiment, Path) else EXPERIMENTS.resolve(experiment)
        experiment = load_experiment(experiment_file)
    notes: list[str] = []
    if executor == "local" or scheduler is None:  # a LocalCluster's workers are processes of this machine too
        jobs, capped = worker_count(options.jobs)
        notes.extend([capped] if capped else [])
    if scheduler is not None:
        check_scheduler_address(scheduler)
    points = expand(experiment, source, None if yes else experiment.max_points)  # sized before it is built
    check_references(points, experiment_file, source)
    check_names(points, source)
    out_dir = Path(out)
    check_output_dir(out_dir)
    with folder_lock(out_dir), interrupts_raised():
        try:
            return _run_points(experiment, points, out_dir, notes, executor=executor, jobs=jobs,
                               scheduler=scheduler, connect_timeout=connect_timeout, resume=resume, timeout=timeout,
                               progress=progress, cache=cache, force=force, estimate=estimate)
        except Interrupted as interrupt:  # before any point ran: the folder is as it was
            raise RunInterrupted(f"interrupted by {signal.Signals(interrupt.signum).name} before any point ran",
                                 interrupt.signum, "run the same command again") from None


def _run_points(experiment: Experiment, points: list[Any], out_dir: Path, notes: list[str], *, executor: str,
                jobs: int, scheduler: str | None, connect_timeout: float, resume: bool, timeout: float | None,
                progress: Callable[[int, int], None] | None, cache: Path | str | None,
                force: bool, estimate: Callable[[str], None] | None = None) -> RunSummary:
    """The run itself, in the locked folder ``out_dir``."""
    varying = _varying_keys(experiment)
    settings = [p.model_dump(by_alias=True) for p in points]
    columns = csv_columns(settings, varying)
    digests = reference_digests(points)
    hashes = [point_hash(p, digests_of(p, digests)) for p in points]
    fault = _fault_after()
    files = ResultsFiles(out_dir, experiment.model_dump(by_alias=True), experiment_hash(experiment, digests),
                         settings, hashes, columns, force=force, renamed=_fault_hook(fault))
    files.open(resume)
    notes.extend(files.notes)
    # a point runs unless a resumed run's journal holds it, with these settings and files, finished (one stopped
    # before it finished, by --timeout or a lost worker, runs again)
    todo = [(i, settings[i]) for i in range(len(points)) if i not in files.finished]
    skipped = len(points) - len(todo)
    if estimate is not None:
        estimate(_sweep_line(points, [i for i, _ in todo], skipped, cache))
    files.start({"started": time.time()})
    start = time.monotonic()
    folder = None if cache is None else str(cache)
    stream = (run_dask(todo, scheduler, jobs, folder, connect_timeout) if executor == "dask"
              else run_local(todo, jobs, folder, timeout))
    stopped: list[str] = []
    cache_warnings: list[str] = []
    interrupted: Interrupted | None = None
    workerless: NoDaskWorkers | None = None
    try:
        for index, outcome, wall in stream:
            if outcome.get("stopped"):
                stopped.append(outcome["error"])
            if outcome.get(CACHE_WARNING):
                cache_warnings.append(outcome[CACHE_WARNING])
            files.add(index, outcome, wall)
            if progress is not None:
                progress(len(files.points), len(points))
    except Interrupted as interrupt:
        interrupted = interrupt
    except NoDaskWorkers as stuck:
        workerless = stuck
    finally:
        stream.close()  # stops every worker before the files are written for the last time
    files.finish({"elapsed_s": time.monotonic() - start, "executor": executor, "jobs": jobs})
    if interrupted is not None:
        raise RunInterrupted(f"interrupted by {signal.Signals(interrupted.signum).name}: {len(files.points)} of "
                             f"{len(points)} points finished in {str(out_dir)!r}", interrupted.signum,
                             "run the same command with --resume to finish the rest")
    if workerless is not None:
        raise UserError(f"{workerless.message}: {len(files.points)} of {len(points)} points finished in "
                        f"{str(out_dir)!r}; start workers for it and run the same command with --resume to finish "
                        "the rest")
    if cache_warnings:
        notes.append(f"the disk cache was not written for {len(cache_warnings)} point(s) (first: {cache_warnings[0]}); "
                     "their results are recorded")
    rows = [files.rows[i] for i in sorted(files.rows)]
    summary = RunSummary(out_dir, len(points), len(files.points), skipped,
                         sum(1 for r in rows if r["error"] != NO_ERROR), rows, notes,
                         sum(1 for r in rows if str(r["error"]).startswith(INTERNAL_ERROR)))
    if stopped:
        others = ", the other points finished" if len(stopped) < len(todo) else ""
        larger = " (and a larger --timeout)" if timeout is not None else ""
        raise RunTimeout(f"{len(stopped)} of {len(points)} points stopped before finishing ({stopped[0]}); their rows "
                         f"in {str(out_dir)!r} say so{others}", f"rerun with --resume{larger} to run them again")
    return summary


def _sweep_line(points: list[Any], todo: list[int], skipped: int, cache: Path | str | None) -> str:
    """The estimate line of the points ``todo`` (those ``skipped`` finished earlier): one worker's wall time,
    summed over them, and the memory of the largest (docs/limits.md#cost-estimate)."""
    from tpusim.config.requests import TuneRequest
    from tpusim.engine.context import Context
    from tpusim.experiments.estimate import estimate_line, sweep_cost

    tuned = sum(isinstance(points[i], TuneRequest) for i in todo)
    what = f"{len(todo)} point{'s' if len(todo) != 1 else ''} to run"
    if skipped:
        what += f" ({skipped} finished earlier)"
    if tuned:
        what += f", {tuned} of them tuning (a rough bound)"
    return estimate_line(sweep_cost([points[i] for i in todo], what, Context.with_cache(cache)))


FAULT_FILE_ENV = "TPUSIM_FAULT_KILL_FILE"
FAULT_FILES = (JOURNAL_NAME, *VIEWS)
"""The files ``TPUSIM_FAULT_KILL_FILE`` may name: the kill then comes right after that file is written for point
``TPUSIM_FAULT_KILL_AFTER`` (or the first rewrite of it from that point on), rather than once all its writes are
done."""


def _fault_after() -> tuple[int, str]:
    """The ``TPUSIM_FAULT_KILL_AFTER`` count (0: never) and the ``TPUSIM_FAULT_KILL_FILE`` name (``""``: once the
    point's writes are done); anything but a whole number >= 0, or a file not in ``FAULT_FILES``, is one line."""
    text = os.environ.get(FAULT_ENV, "").strip()
    name = os.environ.get(FAULT_FILE_ENV, "").strip()
    if name and name not in FAULT_FILES:
        raise UserError(f"{FAULT_FILE_ENV} {echo(name)} is not a file a run writes after each point; valid: "
                        f"{', '.join(FAULT_FILES)}")
    if not text:
        return 0, name
    if not (text.isascii() and text.isdigit()) or len(text) > LIMIT_DIGITS:
        raise UserError(f"{FAULT_ENV} {echo(text)} must be a whole number >= 0 (the points after which the run "
                        "kills itself; 0 or unset: never)")
    return int(text), name


def _fault_hook(fault: tuple[int, str]) -> Callable[[int, str], None] | None:
    """What the results files call after each write: SIGKILL once point ``fault[0]``'s file ``fault[1]`` is
    written (the tests' way to kill a run at an exact moment)."""
    after, name = fault
    if not after:
        return None

    def hook(written: int, written_name: str) -> None:
        if written >= after and written_name == name:
            os.kill(os.getpid(), signal.SIGKILL)

    return hook


def _varying_keys(experiment: Experiment) -> list[str]:
    keys = list(experiment.sweep.grid)
    for extra in experiment.sweep.include:
        keys.extend(k for k in extra if k not in keys)
    return keys

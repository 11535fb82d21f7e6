"""The tuner's independent simulations on worker processes (``tune --jobs N``).

The search prices layer options by GeMM simulations that do not depend on one another, and times its best
finalists as whole steps. With N > 1 worker processes these run on a pool: the search hands over every
simulation the refined meshes' DPs will ask for before it runs them (``search``), in one task per worker that
simulates its share of every mesh in one context (so a worker reuses its timings across meshes, as one process
does), stores the prices in its cost cache and then runs unchanged, so its result is the same as with one process.
Each task simulates in a context of
its own, sharing only the disk cache folder when one is named; a simulation is deterministic, so no price
depends on which process or which cache produced it. A task carries each mesh's network model, which pickles
without its context (``Network.__reduce__``), and puts it on the task's context (``Network.on``).

Workers are forked from a server that has imported tpusim once (``forkserver``): they start in milliseconds
and inherit no state of the calling process (threads, open files, caches); the server's import of the algorithm
registry loads the plug-ins (``tpusim.gemm.plugins``), so a worker knows every algorithm the caller does. They
die with the command, however it ends (``engine.lifetime.Lifeline``: their parent is the forkserver, not the
command), and ignore Ctrl-C, which the command handles: a pool left by an exception or an interrupt cuts its
workers off at once instead of waiting for what they run; the forkserver and the resource tracker then exit on
their own. The forkserver and the tracker start deaf to SIGINT and SIGTERM, and a stop signal that arrives while
the workers start is acted on once they have (``engine.lifetime``), so a signal at any moment ends the command
in one line.

A simulation that raises on a worker raises the same error in the caller, where the search waits for it: the
command reports it as it would with one process (one line, exit status 2 for a user error), and nothing is
simulated a second time.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence
from contextlib import contextmanager
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tpusim.collectives.network import Network
from tpusim.engine.context import Context
from tpusim.engine.lifetime import Lifeline, deaf_children, hold, ignore_interrupts
from tpusim.engine.signals import interrupts_deferred
from tpusim.gemm.algorithm import GemmAlgorithm
from tpusim.gemm.dataflow import GemmProblem
from tpusim.gemm.hoisted import hoisted_time
from tpusim.gemm.params import GemmParams
from tpusim.gemm.simulate import simulate_gemm
from tpusim.model.step import StepResult, StepSpec, simulate_step
from tpusim.vocabulary import Fidelity

if TYPE_CHECKING:
    from concurrent.futures import Future

__all__ = ["Entries", "PendingTimes", "SimulationPool", "simulation_pool"]

START_METHOD = "forkserver"


def _ready() -> None:
    """A task that only makes the pool start its workers (while the caller prices by closed forms)."""


def _start_worker(lifeline: Connection) -> None:
    """Each worker's start: tied to the command's lifeline, deaf to Ctrl-C."""
    ignore_interrupts()
    hold(lifeline)


Entries = list[tuple[str, dict[str, Any]]]
"""Timing-cache entries (``engine.cache``) a task computed, for the caller's context to adopt."""


Group = tuple[Sequence[tuple[GemmProblem, GemmParams, bool]], GemmAlgorithm, Network, Fidelity]
"""GeMMs of one mesh: (problem, parameters, hoisted: timed from when its early transfers have arrived) each, the
algorithm, the mesh's network model and the fidelity."""


def _simulate_groups(groups: Sequence[Group], folder: Path | None) -> tuple[list[list[float]], Entries]:
    """The simulated time of each GeMM of every group, in one context: a worker's share of every mesh reuses the
    timings it made for the others, as the search does in one process."""
    context = Context.with_cache(folder)
    times = []
    for jobs, algorithm, network, fidelity in groups:
        placed = network.on(context)
        times.append([hoisted_time(problem, algorithm, params, placed, fidelity) if hoisted
                      else simulate_gemm(problem, algorithm, params, placed, fidelity=fidelity).time_s
                      for problem, params, hoisted in jobs])
    return times, list(context.timings.memory.items())


def _simulate_step(spec: StepSpec, network: Network, folder: Path | None, entries: Entries) -> StepResult:
    """The whole step on ``network``, reusing ``entries`` (the GeMMs priced on its mesh)."""
    context = Context.with_cache(folder)
    context.timings.adopt(entries)
    return simulate_step(spec, network.on(context))


def _grouped(groups: Sequence[Group], folder: Path | None) -> tuple[list[float], Entries]:
    """``_simulate_groups`` with the times of every group in one list, in order."""
    times, entries = _simulate_groups(groups, folder)
    return [value for group in times for value in group], entries


class PendingTimes:
    """GeMM times the workers are simulating, under the caller's keys."""

    def __init__(self, parts: list[tuple[list[Hashable], Future[tuple[list[float], Entries]]]]) -> None:
        self._parts = parts

    def result(self) -> tuple[list[tuple[Hashable, float]], Entries]:
        """Each key and its time, once every one is done, and the timing-cache entries the workers made; the
        first error a worker's simulation raised is raised here."""
        times: list[tuple[Hashable, float]] = []
        entries: Entries = []
        for keys, future in self._parts:
            values, made = future.result()
            times.extend(zip(keys, values, strict=True))
            entries.extend(made)
        return times, entries


class SimulationPool:
    """``workers`` processes that simulate GeMMs and whole steps for one search."""

    def __init__(self, workers: int, folder: Path | None) -> None:
        # imported here: a command that runs in one process never pays for them
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor
        from multiprocessing import forkserver

        context = multiprocessing.get_context(START_METHOD)
        context.set_forkserver_preload([__name__])
        self.workers = workers
        self.folder = folder
        self._submitted: list[Future[Any]] = []  # every task sent, so ``close`` knows what still runs
        self._lifeline = Lifeline(context)
        with deaf_children():  # the forkserver, the resource tracker and so the workers: deaf to Ctrl-C
            forkserver.ensure_running()
        self._executor = ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_start_worker,
                                             initargs=(self._lifeline.reader,))
        try:
            with interrupts_deferred():  # every worker started (so known to ``abandon``) before Ctrl-C acts
                for _ in range(workers):
                    self._executor.submit(_ready)
        except BaseException:  # the Ctrl-C held back arrives as the block ends
            self.abandon()
            raise

    def gemm_groups(self, groups: Sequence[tuple[Sequence[tuple[Hashable, GemmProblem, GemmParams, bool]],
                                                  GemmAlgorithm, Network, Fidelity]]) -> PendingTimes:
        """Submit the GeMMs of several meshes (each group under the caller's keys) as one task per worker: each
        worker takes every ``workers``-th GeMM of every mesh (neighbouring options cost alike), so a worker is sent
        its whole share once and reuses, in one context, what it simulated for one mesh on the next."""
        parts = []
        for first in range(self.workers):
            shares = [(list(jobs[first::self.workers]), algorithm, network, fidelity)
                      for jobs, algorithm, network, fidelity in groups]
            shares = [share for share in shares if share[0]]
            if shares:
                future = self._executor.submit(_grouped, [([(p, q, h) for _, p, q, h in jobs], algorithm, network,
                                                           fidelity) for jobs, algorithm, network, fidelity in shares],
                                               self.folder)
                self._submitted.append(future)
                parts.append(([job[0] for jobs, *_ in shares for job in jobs], future))
        return PendingTimes(parts)

    def step(self, spec: StepSpec, network: Network, entries: Entries) -> Future[StepResult]:
        future = self._executor.submit(_simulate_step, spec, network, self.folder, entries)
        self._submitted.append(future)
        return future

    def close(self) -> None:
        """End the pool once the search has what it needs. A task still running then is one the search gave up
        (a finalist's step sent ahead and then pruned by the bound, whose cancel cannot stop it): waiting for it
        made ``--jobs 2`` slower than one process (a 25 s full-fidelity step at 4096 chips), so the workers are
        ended instead."""
        if any(not future.done() for future in self._submitted):
            self.abandon()
            return
        self._executor.shutdown(wait=True, cancel_futures=True)
        self._lifeline.cut()

    def abandon(self) -> None:
        """End the workers at once, whatever they run (the search was interrupted or failed): SIGKILL, so that
        one still reading its start from this process prints nothing once this process is gone. Only this pool's
        workers: the executor keeps no public list of them, and every other child of this process (a Dask
        cluster's, another pool's) is left alone."""
        for worker in list(self._executor._processes.values()):
            worker.kill()
        self._lifeline.cut()
        self._executor.shutdown(wait=True, cancel_futures=True)


@contextmanager
def simulation_pool(workers: int, folder: Path | None) -> Iterator[SimulationPool | None]:
    """A pool of ``workers`` processes, or None for one process (the search then simulates in its own)."""
    if workers <= 1:
        yield None
        return
    pool = SimulationPool(workers, folder)
    try:
        yield pool
    except BaseException:  # an interrupt or an error: what the workers run is no longer wanted
        pool.abandon()
        raise
    pool.close()

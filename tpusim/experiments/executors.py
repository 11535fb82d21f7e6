"""Where points run: in this process, on local worker processes, or on a Dask distributed cluster.

Every executor takes (index, point data) jobs and yields (index, outcome, wall seconds) as points finish,
in whatever order they finish; the results files put them back in sweep order. Parallelism is across
points, never inside one simulation. With a per-point timeout, even ``--jobs 1`` runs its point in a worker
process (``tpusim.experiments.workers``), the only way to stop a point that is stuck anywhere, in Python or not.

A Dask scheduler address is checked before anything runs (``tcp://HOST:PORT``), and the connection to it must
succeed within ``DASK_CONNECT_TIMEOUT_S`` (or the ``connect_timeout`` given), however the service at that address
behaves: one that is not a Dask scheduler may accept the connection and then say nothing.

On a Dask cluster a run keeps at most as many points submitted as the cluster has worker threads, so a worker that
dies takes only the point it was running with it, not points merely queued behind it. A point whose worker died
(the scheduler's ``KilledWorker``) runs once more; if that worker dies too, the point's outcome is an error saying
so, marked ``stopped`` as a point whose local worker died is. The scheduler first retries on its own as its
``allowed-failures`` setting says; the LocalCluster a run starts allows none, so there the one retry is tpusim's.
A scheduler left with no worker for the connect timeout ends the run (``NoDaskWorkers``) instead of a wait for
ever.
"""

from __future__ import annotations

import importlib
import os
import queue
import socket
import threading
import time
from collections import deque
from collections.abc import Generator, Sequence
from typing import Any
from urllib.parse import urlsplit

from tpusim.config.options import DASK_CONNECT_TIMEOUT_S
from tpusim.errors import UserError
from tpusim.experiments.jobs import Done, Job, run_job
from tpusim.experiments.workers import run_pool, stopped_outcome

__all__ = ["DASK_CONNECT_TIMEOUT_S", "DASK_TRIES", "Done", "Job", "NoDaskWorkers", "check_scheduler_address",
           "run_dask", "run_inline", "run_local", "worker_count"]

DASK_TRIES = 2
"""How many times a point runs on a Dask cluster when its worker dies under it: once, and once more."""
DASK_POLL_S = 0.25
"""How often a run waiting on a Dask cluster looks at its workers: a scheduler with none says nothing of its own."""
DEAD_TWICE = "the Dask worker running this point died, and so did the one that ran it once more"
"""The error of a point whose worker died on both tries."""
SCHEDULER_SCHEMES = ("tcp",)


def run_inline(jobs: Sequence[Job], cache: str | None) -> Generator[Done, None, None]:
    for index, point in jobs:
        yield run_job(index, point, cache)


def run_local(jobs: Sequence[Job], workers: int, cache: str | None = None,
              timeout: float | None = None) -> Generator[Done, None, None]:
    """``workers`` worker processes (``--jobs``); in this process when there is one worker and no ``timeout``."""
    if workers <= 1 and timeout is None:
        return run_inline(jobs, cache)
    return run_pool(jobs, workers, cache, timeout)


def check_scheduler_address(scheduler: str) -> tuple[str, int]:
    """The host and port of a Dask scheduler address ``tcp://HOST:PORT``, or a one-line error saying what is
    wrong with it."""
    valid = "valid: tcp://HOST:PORT, e.g. tcp://127.0.0.1:8786"
    try:
        parts = urlsplit(scheduler)
        host, port = parts.hostname, parts.port
    except ValueError as error:  # a port that is not a number, or out of range
        raise UserError(f"--scheduler {scheduler!r} is not a scheduler address ({error}); {valid}") from None
    if parts.scheme not in SCHEDULER_SCHEMES or not host or port is None or parts.path not in ("", "/"):
        raise UserError(f"--scheduler {scheduler!r} is not a scheduler address; {valid}")
    return host, port


def _connect(Client: Any, scheduler: str, timeout: float) -> Any:
    """A Dask client of ``scheduler``, connected within ``timeout`` seconds or a one-line error."""
    host, port = check_scheduler_address(scheduler)
    wait_more = "is it a Dask scheduler? (--connect-timeout sets the wait)"
    try:  # first a plain connection, to say at once when nothing listens there
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as error:
        reason = error.strerror or str(error) or type(error).__name__
        raise UserError(f"--scheduler {scheduler!r}: cannot connect ({reason})") from None
    # A service that is not a Dask scheduler may accept the connection and never answer, and the client's own
    # timeout does not cover that wait: the client is made in a thread the run stops waiting for.
    made: dict[str, Any] = {}

    def make() -> None:
        try:
            made["client"] = Client(scheduler, timeout=f"{timeout}s")
        except Exception as error:  # reported below, in the run's thread
            made["error"] = error

    maker = threading.Thread(target=make, name="tpusim-dask-connect", daemon=True)
    maker.start()
    maker.join(timeout)
    if "client" in made:
        return made["client"]
    failure = made.get("error")
    why = f"failed: {failure}" if failure is not None else f"no answer within {timeout:g} s"
    raise UserError(f"--scheduler {scheduler!r}: no Dask scheduler connection ({why}); {wait_more}")


class NoDaskWorkers(UserError):
    """The Dask scheduler had no worker for the whole connect timeout; the run ends, its finished points kept."""


def run_dask(jobs: Sequence[Job], scheduler: str | None, workers: int, cache: str | None = None,
             connect_timeout: float = DASK_CONNECT_TIMEOUT_S) -> Generator[Done, None, None]:
    """A Dask distributed cluster at ``scheduler`` (``tcp://host:8786``), or a LocalCluster when None."""
    try:
        # dask's distributed has no type hints: its names are used through Any
        distributed: Any = importlib.import_module("distributed")
    except ImportError:
        raise UserError("--executor dask needs the 'distributed' package: pip install 'dask[distributed]'") from None
    Client, LocalCluster = distributed.Client, distributed.LocalCluster
    cluster = None
    if scheduler is None:
        # no retries by the scheduler itself: a point whose worker dies runs exactly once more (DASK_TRIES)
        cluster = LocalCluster(n_workers=max(workers, 1), threads_per_worker=1, processes=True,
                               dashboard_address=None, scheduler_kwargs={"allowed_failures": 0})
        client = Client(cluster)
        where = "the local Dask cluster"
    else:
        client = _connect(Client, scheduler, connect_timeout)
        where = f"the Dask scheduler {scheduler!r}"
    try:
        yield from _on_cluster(client, distributed.KilledWorker, jobs, cache, connect_timeout, where)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def _on_cluster(client: Any, killed: type[BaseException], jobs: Sequence[Job], cache: str | None, patience: float,
                where: str) -> Generator[Done, None, None]:
    """Run ``jobs`` through ``client``, at most one submitted per worker thread; a point whose worker dies
    (``killed``) runs once more, then yields a stopped outcome; no worker for ``patience`` seconds ends the run."""
    waiting = deque((job, 1) for job in jobs)  # (job, its try)
    finished: queue.Queue[Any] = queue.Queue()  # futures, put there by the client's callback thread as they end
    # a future's key -> (the future, held so the cluster keeps its task; its job, its try, when it was submitted)
    running: dict[str, tuple[Any, Job, int, float]] = {}

    def submit(job: Job, attempt: int) -> None:
        index, point = job
        key = f"tpusim-point-{index}" if attempt == 1 else f"tpusim-point-{index}-try-{attempt}"
        future = client.submit(run_job, index, point, cache, pure=False, key=key)
        running[key] = (future, job, attempt, time.monotonic())
        future.add_done_callback(finished.put)

    idle_since: float | None = None
    while waiting or running:
        threads = sum(client.nthreads().values())
        while waiting and len(running) < max(threads, 1):
            submit(*waiting.popleft())
        now = time.monotonic()
        if threads:
            idle_since = None
        elif idle_since is None:
            idle_since = now
        if idle_since is not None and now - idle_since >= patience:
            raise NoDaskWorkers(f"{where} has had no workers for {patience:g} s (--connect-timeout sets the wait)")
        try:
            future = finished.get(timeout=DASK_POLL_S)
        except queue.Empty:
            continue
        _, job, attempt, submitted = running.pop(future.key)
        died = future.status == "error" and isinstance(future.exception(), killed)
        done = None if died else future.result()
        # released at once: a result the client still holds is one the scheduler recomputes when its worker dies
        del future
        if done is not None:
            yield done
        elif attempt < DASK_TRIES:  # first in line for the next free worker thread
            waiting.appendleft((job, attempt + 1))
        else:
            yield job[0], stopped_outcome(DEAD_TWICE), time.monotonic() - submitted


def worker_count(jobs: int) -> tuple[int, str | None]:
    """How many local worker processes ``--jobs jobs`` runs: at most one per CPU of this machine; with the note
    that says so when fewer than asked."""
    cpus = os.cpu_count() or 1
    if jobs > cpus:
        return cpus, f"--jobs {jobs} is more than this machine's {cpus} CPUs; ran {cpus} worker processes"
    return jobs, None

"""Where points run: in this process, on a local process pool, or on a Dask distributed cluster.

Every executor takes (index, point data) jobs and yields (index, outcome, wall seconds) as points finish,
in whatever order they finish; the results files put them back in sweep order. Parallelism is across
points, never inside one simulation.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any

from tpusim.engine.context import Context
from tpusim.errors import UserError
from tpusim.experiments.points import run_point

Job = tuple[int, dict[str, Any]]
Done = tuple[int, dict[str, Any], float]


def timed_point(point: dict[str, Any], cache: str | None) -> tuple[dict[str, Any], float]:
    """Run one point in a context of its own (sharing only the disk cache folder, when one is named)."""
    start = time.perf_counter()
    outcome = run_point(point, Context.with_cache(cache))
    return outcome, time.perf_counter() - start


def run_inline(jobs: Sequence[Job], cache: str | None) -> Iterator[Done]:
    for index, point in jobs:
        outcome, wall = timed_point(point, cache)
        yield index, outcome, wall


def run_local(jobs: Sequence[Job], workers: int, cache: str | None = None) -> Iterator[Done]:
    """A process pool with ``workers`` processes (``--jobs``)."""
    if workers <= 1:
        yield from run_inline(jobs, cache)
        return
    with ProcessPoolExecutor(max_workers=workers) as pool:
        pending = {pool.submit(timed_point, point, cache): index for index, point in jobs}
        try:
            while pending:
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in sorted(finished, key=lambda f: pending[f]):
                    index = pending.pop(future)
                    outcome, wall = future.result()
                    yield index, outcome, wall
        finally:
            for future in pending:
                future.cancel()


def run_dask(jobs: Sequence[Job], scheduler: str | None, workers: int, cache: str | None = None) -> Iterator[Done]:
    """A Dask distributed cluster at ``scheduler`` (``tcp://host:8786``), or a LocalCluster when None."""
    try:
        # dask's distributed has no type hints: its names are used through Any
        distributed: Any = importlib.import_module("distributed")
    except ImportError:
        raise UserError("--executor dask needs the 'distributed' package: pip install 'dask[distributed]'") from None
    Client, LocalCluster, as_completed = distributed.Client, distributed.LocalCluster, distributed.as_completed
    cluster = None
    if scheduler is None:
        cluster = LocalCluster(n_workers=max(workers, 1), threads_per_worker=1, processes=True,
                               dashboard_address=None)
        client = Client(cluster)
    else:
        try:
            client = Client(scheduler, timeout="10s")
        except OSError as error:
            raise UserError(f"--scheduler {scheduler!r}: cannot reach the Dask scheduler ({error})") from None
    try:
        futures = {client.submit(timed_point, point, cache, pure=False, key=f"tpusim-point-{index}"): index
                   for index, point in jobs}
        for future in as_completed(futures):
            outcome, wall = future.result()
            yield futures[future], outcome, wall
    finally:
        client.close()
        if cluster is not None:
            cluster.close()

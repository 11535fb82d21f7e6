"""One job of a run: a point and its sweep index, run in a context of its own and timed.

Every executor (in this process, worker processes, a Dask cluster) runs points through ``run_job``. A
fault-injection variable, ``TPUSIM_FAULT_HANG_POINT=i[,j...]``, makes the points of those sweep indices never finish
(they sleep until stopped): the tests use it to prove that ``--timeout``, interrupts and a killed run stop every
worker.
"""

from __future__ import annotations

import os
import time
from typing import Any

from tpusim.engine.context import Context
from tpusim.experiments.points import run_point

__all__ = ["HANG_ENV", "Done", "Job", "run_job", "timed_point"]

Job = tuple[int, dict[str, Any]]
"""(sweep index, the point's settings as plain data)."""
Done = tuple[int, dict[str, Any], float]
"""(sweep index, the point's outcome, wall seconds it took)."""

HANG_ENV = "TPUSIM_FAULT_HANG_POINT"
_HANG_NAP_S = 3600.0  # a hanging point sleeps in naps of this length, for ever


def timed_point(point: dict[str, Any], cache: str | None) -> tuple[dict[str, Any], float]:
    """Run one point in a context of its own (sharing only the disk cache folder, when one is named)."""
    start = time.perf_counter()
    outcome = run_point(point, Context.with_cache(cache))
    return outcome, time.perf_counter() - start


def _hangs(index: int) -> bool:
    return str(index) in {part.strip() for part in os.environ.get(HANG_ENV, "").split(",")}


def run_job(index: int, point: dict[str, Any], cache: str | None) -> Done:
    """Run the point of sweep index ``index``."""
    while _hangs(index):
        time.sleep(_HANG_NAP_S)
    outcome, wall = timed_point(point, cache)
    return index, outcome, wall

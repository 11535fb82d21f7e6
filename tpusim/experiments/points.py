"""Running one experiment point: the point's request goes to its runner; its result comes back as plain data.

A point that is infeasible or otherwise a user error still produces an outcome, with its ``error`` saying why,
so one bad corner of a sweep does not lose the rest (its row of results.csv: ``tpusim.experiments.rows``). So does
a point that meets a bug in tpusim: its ``error`` starts with ``internal error:`` and the run, having finished the
other points, exits 1.
"""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter

from tpusim.config import Point
from tpusim.config.requests import TuneRequest
from tpusim.engine.cache import cache_key
from tpusim.engine.context import Context
from tpusim.errors import UserError
from tpusim.experiments.runners import RUNNERS, request_hardware

_POINT: TypeAdapter[Point] = TypeAdapter(Point)
INTERNAL_ERROR = "internal error: "
"""How the ``error`` of a point that met a bug begins."""
CACHE_WARNING = "cache_warning"
"""The outcome's key naming a disk cache entry that could not be written (the result stands; the run notes it)."""


def _run(point: Point, context: Context) -> dict[str, Any]:
    if isinstance(point, TuneRequest):
        # families repeat the same tuning (headline, breakdown, sensitivity's baseline, weak scaling at 256)
        profile = request_hardware(point, context)
        key = cache_key("tune-point", point.model_dump(by_alias=True), profile)
        cached = context.timings.get(key)
        if cached is not None:
            return cached
        result: dict[str, Any] = RUNNERS[type(point)](point, context).to_dict()
        context.timings.put(key, result)
        return result
    return dict(RUNNERS[type(point)](point, context).to_dict())


def run_point(point_data: dict[str, Any], context: Context | None = None) -> dict[str, Any]:
    """Run one point given as plain data (so it can cross process and cluster boundaries)."""
    point = _POINT.validate_python(point_data)
    context = context if context is not None else Context.with_cache()
    try:
        result, error = _run(point, context), None
    except UserError as failure:
        result, error = {}, failure.message
    except Exception as failure:  # a bug: kept in the point's row, so the rest of the sweep still runs
        result, error = {}, f"{INTERNAL_ERROR}{type(failure).__name__}: {failure}"
    outcome: dict[str, Any] = {"result": result, "error": error}
    warning = context.timings.write_failure or context.timings.ignored
    if warning is not None:  # only the cache lost: the point's result is recorded
        outcome[CACHE_WARNING] = warning
    return outcome


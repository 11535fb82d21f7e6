"""Running one experiment point: the point's request goes to its runner; a flat row comes back.

A row holds the point's identity (index, the settings that vary) and the headline numbers of its result; the
full result (breakdowns, mapping, notes) goes to ``results.json``. A point that is infeasible or otherwise a
user error still produces a row, with its ``error`` column saying why, so one bad corner of a sweep does not
lose the rest.
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

HEADLINE = ("step_time_s", "time_s", "analytic_time_s", "mfu", "compute_s", "exposed_comm_s", "idle_s",
            "memory_feasible", "feasible", "fidelity", "mesh", "slices", "dataflows", "evaluated", "simulated")

_POINT: TypeAdapter[Point] = TypeAdapter(Point)


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
    try:
        result, error = _run(point, context if context is not None else Context.with_cache()), None
    except UserError as failure:
        result, error = {}, failure.message
    return {"result": result, "error": error}


def row_of(index: int, point: Point, varying: list[str], outcome: dict[str, Any]) -> dict[str, Any]:
    """The CSV row: index, the varying settings, the headline numbers, the error if any."""
    data = point.model_dump(by_alias=True)
    row: dict[str, Any] = {"index": index}
    for key in varying:
        node: Any = data
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        row[key] = node
    result = outcome["result"]
    best = result.get("best") if isinstance(result.get("best"), dict) else None
    for key in HEADLINE:
        if key in result:
            row[key] = result[key]
        elif best is not None and key in best:
            row[key] = best[key]
    row["error"] = outcome["error"] or ""
    return row

"""Running one experiment point: the point's settings go to the matching keyword call; a flat row comes back.

A row holds the point's identity (index, hash, the settings that vary) and the headline numbers of its
result; the full result (breakdowns, mapping, notes) goes to ``results.json``. A point that is infeasible
or otherwise a user error still produces a row, with its ``error`` column saying why, so one bad corner of a
sweep does not lose the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tpusim.config import Point
from tpusim.engine.cache import cache_key
from tpusim.engine.context import Context
from tpusim.errors import UserError
from tpusim.experiments import calls
from tpusim.experiments.calls import hardware_of


def _scale(point: Point) -> dict[str, float] | None:
    scale = point.scale.model_dump(by_alias=True)
    return None if all(v == 1.0 for v in scale.values()) else scale


def _step(point: Point, context: Context) -> dict[str, Any]:
    assert point.model is not None and point.mesh is not None
    result = calls.step(
        model=point.model, hardware=point.hardware, mesh=point.mesh, chips=point.chips,
        algorithm=point.algorithm, slices=point.slices, dataflows=point.dataflows, transposes=point.transposes,
        variant=point.variant, batch=point.batch, prefetch=point.prefetch, fidelity=point.fidelity,
        recompute=point.recompute, bytes_per_param=point.bytes_per_param,
        allow_infeasible=point.allow_infeasible, topology=point.topology, axis_map=point.axis_map,
        slow_chips=point.overrides.slow_chips, slow_links=point.overrides.slow_links, scale=_scale(point),
        embedding=point.embedding, optimizer=point.optimizer, context=context,
    )
    return result.to_dict()


def _gemm(point: Point, context: Context) -> dict[str, Any]:
    assert point.mesh and point.dataflow and point.m and point.n and point.k
    result = calls.gemm(
        hardware=point.hardware, mesh=point.mesh, algorithm=point.algorithm, dataflow=point.dataflow,
        m=point.m, n=point.n, k=point.k, topology=point.topology, axis_map=point.axis_map,
        slices=point.slices if isinstance(point.slices, int) else None, variant=point.variant,
        prefetch=point.prefetch, transpose=point.transpose,
        fidelity="full" if point.fidelity == "auto" else point.fidelity, scale=_scale(point), context=context,
    )
    return result.to_dict()


def _collective(point: Point, context: Context) -> dict[str, Any]:
    assert point.mesh and point.op and point.axis is not None and point.bytes is not None
    result = calls.collective(
        hardware=point.hardware, mesh=point.mesh, axis=point.axis, op=point.op, bytes=point.bytes,
        topology=point.topology, axis_map=point.axis_map, chunks=point.chunks, ring=point.ring,
        slow_chips=point.overrides.slow_chips, slow_links=point.overrides.slow_links, scale=_scale(point),
        context=context,
    )
    return result.to_dict()


def _tune(point: Point, context: Context) -> dict[str, Any]:
    assert point.model is not None and point.chips is not None
    # families repeat the same tuning (headline, breakdown, sensitivity's baseline, weak scaling at 256)
    key = cache_key("tune-point", point.model_dump(by_alias=True), hardware_of(point.hardware, _scale(point)))
    cached = context.timings.get(key)
    if cached is not None:
        return cached
    result = calls.tune(
        model=point.model, hardware=point.hardware, chips=point.chips, algorithm=point.algorithm,
        batch=point.batch, topology=point.topology, prefetch=point.prefetch, recompute=point.recompute,
        fidelity=point.fidelity, exhaustive=point.exhaustive, ignore_memory=point.ignore_memory,
        allow_infeasible=point.allow_infeasible, bytes_per_param=point.bytes_per_param, scale=_scale(point),
        context=context,
    )
    context.timings.put(key, result.to_dict())
    return result.to_dict()


RUNNERS: dict[str, Callable[[Point, Context], dict[str, Any]]] = {
    "step": _step, "gemm": _gemm, "collective": _collective, "tune": _tune,
}

HEADLINE = ("step_time_s", "time_s", "analytic_time_s", "mfu", "compute_s", "exposed_comm_s", "idle_s",
            "memory_feasible", "feasible", "fidelity", "mesh", "slices", "dataflows", "evaluated", "simulated")


def run_point(point_data: dict[str, Any], context: Context | None = None) -> dict[str, Any]:
    """Run one point given as plain data (so it can cross process and cluster boundaries)."""
    point = Point.model_validate(point_data)
    try:
        result = RUNNERS[point.kind](point, context if context is not None else Context.with_cache())
        error = None
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

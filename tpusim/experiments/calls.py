"""Keyword-level entry points: one collective, GeMM or step from names and plain values.

These are what the Python API exports, what the command line calls after parsing its arguments, and what
every experiment point runs: names are resolved (hardware, model, algorithm), sizes and meshes parsed,
overrides applied, and the layers below do the work.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from numbers import Integral, Real
from pathlib import Path
from typing import Any

from tpusim.collectives.network import place_mesh
from tpusim.collectives.simulate import CollectiveResult, CollectiveSpec, simulate_collective
from tpusim.config import HardwareProfile, TransformerModel
from tpusim.engine.context import Context
from tpusim.engine.overrides import parse_slow_chips, parse_slow_links
from tpusim.engine.trace import Tracer, check_trace_path, parse_chip_list
from tpusim.errors import InfeasibleError, TopologyError, UserError, unknown_name
from tpusim.gemm.algorithm import get_algorithm
from tpusim.gemm.dataflow import GemmProblem
from tpusim.gemm.params import GemmParams, default_prefetch
from tpusim.gemm.simulate import GemmResult, simulate_gemm
from tpusim.hardware import load_hardware, scaled_profile
from tpusim.model.layer import FF_LAYERS
from tpusim.model.registry import load_model
from tpusim.model.step import StepResult, StepSpec, simulate_step
from tpusim.topology import MeshMapping, parse_mesh
from tpusim.tuning.result import TuneResult
from tpusim.units import UnitError, dtype_bytes, parse_count, parse_size
from tpusim.vocabulary import CollectiveOp, Dataflow, Fidelity, Prefetch, Recompute, Ring

MeshLike = str | tuple[int, int]
SCALE_KEYS = ("alpha", "lambda", "beta", "flops")


def count_of(value: Any, what: str) -> int:
    """A count given by the caller (chips, batch, slices, a GeMM dimension): an integer >= 1."""
    try:
        return parse_count(value, what)
    except UnitError as error:
        raise UserError(str(error)) from None


def _check_scale(scale: dict[str, float]) -> None:
    for key, value in scale.items():
        if key not in SCALE_KEYS:
            raise unknown_name("scale key", str(key), SCALE_KEYS)
        if isinstance(value, bool) or not isinstance(value, Real):
            raise UserError(f"scale {key} {value!r} must be a number; valid: a finite factor > 0")


def hardware_of(hardware: str | HardwareProfile, scale: dict[str, float] | None = None) -> HardwareProfile:
    """A profile by name or as given, scaled where asked (keys alpha, lambda, beta, flops)."""
    profile = load_hardware(hardware) if isinstance(hardware, str) else hardware
    if scale:
        _check_scale(scale)
        profile = scaled_profile(profile, bandwidth=scale.get("beta", 1.0), latency=scale.get("lambda", 1.0),
                                 overhead=scale.get("alpha", 1.0), flops=scale.get("flops", 1.0))
    return profile


def model_of(model: str | TransformerModel) -> TransformerModel:
    return load_model(model) if isinstance(model, str) else model


def mesh_of(mesh: MeshLike) -> tuple[int, int]:
    if isinstance(mesh, str):
        return parse_mesh(mesh)
    pair = tuple(mesh) if isinstance(mesh, tuple | list) else ()
    if len(pair) != 2 or not all(isinstance(v, Integral) and not isinstance(v, bool) and v >= 1 for v in pair):
        raise TopologyError(f"mesh {mesh!r} is not a mesh shape; valid: 'RxC' (e.g. '16x16') or a pair (R, C) "
                            "of integers >= 1")
    return int(pair[0]), int(pair[1])


def _mapping(hardware: HardwareProfile, mesh: tuple[int, int], topology: str | None,
             axis_map: str | None) -> MeshMapping:
    return place_mesh(hardware, mesh[0], mesh[1], topology=topology, axis_map=axis_map)


def _prefetch(hardware: HardwareProfile, prefetch: str | Prefetch | None) -> Prefetch:
    return Prefetch.parse(str(prefetch)) if prefetch is not None else default_prefetch(hardware)


def collective(*, hardware: str | HardwareProfile, mesh: MeshLike, axis: int, op: str, bytes: str | int,
               topology: str | None = None, axis_map: str | None = None, chunks: int = 1, ring: str = "bi",
               root: int = 0, offset: int = 1, slow_chips: Sequence[str] = (),
               slow_links: Sequence[str] = (), scale: dict[str, float] | None = None,
               context: Context | None = None) -> CollectiveResult:
    """Simulate one collective on every group of ``axis``."""
    profile = hardware_of(hardware, scale)
    shape = mesh_of(mesh)
    if axis not in (0, 1):
        raise UserError(f"axis {axis!r} is out of range; valid: 0, 1")
    try:
        size = parse_size(bytes)
    except UnitError as error:
        raise UserError(f"bytes: {error}") from None
    if size != int(size):
        raise UserError(f"bytes {bytes!r} is not a whole number of bytes")
    chunks = count_of(chunks, "chunks")
    mapping = _mapping(profile, shape, topology, axis_map)
    spec = CollectiveSpec(CollectiveOp.parse(op), axis, int(size), Ring.parse(ring), chunks, root, offset)
    return simulate_collective(spec, profile, mapping,
                               chip_slowdown=parse_slow_chips(slow_chips, shape[0] * shape[1]) or None,
                               link_overrides=parse_slow_links(slow_links, mapping) or None, context=context)


def gemm(*, hardware: str | HardwareProfile, mesh: MeshLike, algorithm: str, dataflow: str, m: int, n: int,
         k: int, topology: str | None = None, axis_map: str | None = None, slices: int | None = None,
         block: int = 8, variant: str | None = None, prefetch: str | None = None, transpose: bool = False,
         dtype: str = "bf16", compat_mean_overlap: bool = False, fidelity: str = "full", verify: bool = False,
         seed: int = 0, trace: Path | str | None = None, trace_chips: str | None = None,
         scale: dict[str, float] | None = None, context: Context | None = None) -> GemmResult:
    """Simulate one distributed GeMM (optionally verified against the dense product, optionally traced)."""
    profile = hardware_of(hardware, scale)
    name = get_algorithm(algorithm).name
    shape = mesh_of(mesh)
    m, n, k = count_of(m, "m"), count_of(n, "n"), count_of(k, "k")
    if slices is not None:
        slices = count_of(slices, "slices")
    block = count_of(block, "block")
    try:
        dtype_bytes(dtype)
    except UnitError as error:
        raise UserError(f"dtype: {error}") from None
    tracer = None
    if trace is not None:
        check_trace_path(Path(trace))
        try:
            tracer = Tracer(chips=parse_chip_list(trace_chips) if trace_chips else None)
        except ValueError as error:
            raise UserError(f"trace chips: {error}") from None
    mapping = _mapping(profile, shape, topology, axis_map)
    problem = GemmProblem(m, n, k, Dataflow.parse(dataflow), transpose, dtype)
    params = GemmParams(_prefetch(profile, prefetch), slices, block, variant, compat_mean_overlap)
    result = simulate_gemm(problem, name, params, profile, mapping, verify=verify, seed=seed, tracer=tracer,
                           fidelity=Fidelity.parse(fidelity), context=context)
    if tracer is not None and trace is not None:
        tracer.write(Path(trace))
        result.notes.append(f"trace written to {trace}")
    if compat_mean_overlap:
        result.notes.append("analytic_time_s uses the simulation-branch (a+b)/2 compatibility rule")
    return result


def per_layer(value: Any, what: str, parse: Any) -> tuple[Any, ...] | None:
    """One value for all four FF layers, or one each (a list, or a comma-separated string such as 'os,ls,os,ls')."""
    if value is None:
        return None
    if isinstance(value, str):
        values: list[Any] = [part.strip() for part in value.split(",")]
    else:
        values = list(value) if isinstance(value, list | tuple) else [value]
    if len(values) == 1:
        values = values * len(FF_LAYERS)
    if len(values) != len(FF_LAYERS):
        raise UserError(f"{what} {value!r} needs 1 or {len(FF_LAYERS)} values ({', '.join(FF_LAYERS)})")
    return tuple(parse(v) for v in values)


def _slice_count(value: Any) -> int:
    return count_of(value, "slices")


def _flag(value: Any) -> bool:
    """A per-layer transposition: True/False, 1/0 or their strings."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if not isinstance(value, float) and text in ("0", "1", "true", "false"):
        return text in ("1", "true")
    raise UserError(f"transposes value {value!r} must be 0 or 1 (or true/false)")


def _bytes_per_param(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value) or value <= 0:
        raise UserError(f"bytes_per_param {value!r} must be a finite number > 0 (e.g. 16: weights, grads, Adam)")
    return float(value)


def step(*, model: str | TransformerModel, hardware: str | HardwareProfile, mesh: MeshLike,
         chips: int | None = None, algorithm: str = "meshslice", slices: Any = None, dataflows: Any = None,
         transposes: Any = None, variant: str | None = None, batch: int | None = None,
         prefetch: str | None = None, fidelity: str = "auto", recompute: str = "none",
         bytes_per_param: float = 16.0, allow_infeasible: bool = False, all_layers: bool = False,
         topology: str | None = None, axis_map: str | None = None, slow_chips: Sequence[str] = (),
         slow_links: Sequence[str] = (), scale: dict[str, float] | None = None,
         embedding: bool = False, optimizer: bool = False, context: Context | None = None) -> StepResult:
    """Simulate one training step."""
    transformer = model_of(model)
    profile = hardware_of(hardware, scale)
    alg = get_algorithm(algorithm)
    shape = mesh_of(mesh)
    count = shape[0] * shape[1]
    if chips is not None and count_of(chips, "chips") != count:
        raise UserError(f"mesh {shape[0]}x{shape[1]} has {count} chips but chips is {chips}; "
                        f"valid: a mesh R x C with R * C = {chips}, or chips {count}")
    if batch is not None:
        batch = count_of(batch, "batch")
    bytes_per_param = _bytes_per_param(bytes_per_param)
    layer_slices = per_layer(slices, "slices", _slice_count)
    if layer_slices is not None and not alg.uses_slices:
        raise InfeasibleError(f"--slices {slices} does not apply to algorithm {alg.name!r}; "
                              "only 'meshslice' takes a slice count")
    layer_dataflows = per_layer(dataflows, "dataflows", Dataflow.parse)
    layer_transposes = per_layer(transposes, "transposes", _flag)
    mapping = _mapping(profile, shape, topology, axis_map)
    spec = StepSpec(transformer, alg.name, batch or count, layer_slices, layer_dataflows, layer_transposes,
                    _prefetch(profile, prefetch), variant, Recompute.parse(recompute), bytes_per_param,
                    allow_infeasible=allow_infeasible, extrapolate=not all_layers,
                    fidelity=Fidelity.parse(fidelity), embedding=bool(embedding), optimizer=bool(optimizer))
    if layer_slices is None and alg.uses_slices:
        # no --slices: each FF layer takes its fastest feasible K on this mesh (reported in `slices`)
        from tpusim.tuning.slices import best_slices

        spec = replace(spec, slices=best_slices(spec, profile, mapping, context))
    return simulate_step(spec, profile, mapping,
                         chip_slowdown=parse_slow_chips(slow_chips, count) or None,
                         link_overrides=parse_slow_links(slow_links, mapping) or None, context=context)


def tune(*, model: str | TransformerModel, hardware: str | HardwareProfile, chips: int,
         algorithm: str = "meshslice", batch: int | None = None, topology: str | None = None,
         prefetch: str | None = None, recompute: str = "none", fidelity: str = "auto", exhaustive: bool = False,
         ignore_memory: bool = False, allow_infeasible: bool = False, bytes_per_param: float = 16.0,
         scale: dict[str, float] | None = None, context: Context | None = None) -> TuneResult:
    """Search mesh shape, per-layer dataflow, transposition and slice count for the fastest step."""
    from tpusim.tuning.search import TuneRequest
    from tpusim.tuning.search import tune as search

    profile = hardware_of(hardware, scale)
    chips = count_of(chips, "chips")
    if batch is not None:
        batch = count_of(batch, "batch")
    request = TuneRequest(
        model=model_of(model), hardware=profile, chips=chips, algorithm=get_algorithm(algorithm).name,
        batch=batch, topology=topology, prefetch=None if prefetch is None else Prefetch.parse(prefetch),
        recompute=Recompute.parse(recompute), fidelity=Fidelity.parse(fidelity), exhaustive=exhaustive,
        ignore_memory=ignore_memory, allow_infeasible=allow_infeasible,
        bytes_per_param=_bytes_per_param(bytes_per_param),
    )
    return search(request, context=context)

"""Simulating one distributed GeMM: shard the operands, run the SPMD program, account, verify.

``simulate_gemm`` runs the algorithm's chip program on every chip of the mapping. With ``verify`` the
operands are seeded standard-normal float64 matrices and the assembled output is compared with the
dense product of the dataflow (whatever dtype is being timed). The result carries the simulated time,
its closed-form twin, and the critical chip's compute / exposed-communication / idle breakdown.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tpusim.collectives.accounting import account
from tpusim.collectives.device import Device, run_spmd
from tpusim.collectives.link_busy import LinkBusy
from tpusim.collectives.network import Network
from tpusim.collectives.runtime import CollectiveRuntime
from tpusim.engine.cache import cache_key
from tpusim.engine.lines import LineSymmetry, with_lines
from tpusim.engine.links import LinkOverride
from tpusim.engine.result import ResultMixin
from tpusim.engine.simulation import Simulation
from tpusim.engine.tensor import Tensor
from tpusim.engine.trace import Tracer
from tpusim.errors import InfeasibleError
from tpusim.gemm.algorithm import GemmAlgorithm, GemmContext
from tpusim.gemm.costs import CostModel, NoClosedForm
from tpusim.gemm.dataflow import GemmProblem
from tpusim.gemm.fidelity import representative_chips, resolve_fidelity, symmetric_obstacle
from tpusim.gemm.params import GemmParams
from tpusim.gemm.sharding import assemble, block_shape, operand_blocks, take_block
from tpusim.vocabulary import Fidelity


@dataclass
class GemmResult(ResultMixin):
    """One simulated GeMM (field meanings: docs/results.md#result-fields)."""

    algorithm: str
    dataflow: str
    transpose: bool
    m: int
    n: int
    k: int
    mesh: str
    slices: int | None
    variant: str | None
    prefetch: str
    hardware: str
    multi_axis: str | None
    overlap_limits: str
    fidelity: str
    time_s: float
    analytic_time_s: float | None
    compute_s: float | None
    """None (null in JSON) where nothing was simulated: under fidelity analytic the closed form has no breakdown."""
    exposed_comm_s: float | None
    idle_s: float | None
    hbm_stall_s: float | None
    flops_per_chip: float
    bytes_sent: float | None
    max_link_bytes: float | None
    max_link_utilisation: float | None
    transfers: int
    events: int
    mapping: dict[str, Any]
    max_abs_error: float | None = None
    notes: list[str] = field(default_factory=list)



def check_gemm(algorithm: GemmAlgorithm, problem: GemmProblem, mesh: tuple[int, int], params: GemmParams) -> None:
    """Every feasibility rule of this algorithm on this mesh (raises InfeasibleError)."""
    algorithm.check(problem, mesh, params)
    sharding = algorithm.sharding(problem, mesh)
    block_shape(problem.x_shape, sharding.x, mesh, "X")
    block_shape(problem.w_shape, sharding.w, mesh, "W")
    block_shape(problem.y_shape, sharding.y, mesh, "Y")


def analytic_gemm(
    algorithm: GemmAlgorithm, problem: GemmProblem, params: GemmParams, network: Network, *,
    compute_slowdown: float = 1.0,
) -> float | None:
    """The algorithm's twin on ``network``, or None where the collectives have no closed form.
    ``compute_slowdown`` times every local product, as ``--slow-chip`` times a straggler's (the twin of a mesh
    whose every chip is that slow)."""
    try:
        ctx = GemmContext(problem, params, network.mapping.shape)
        return algorithm.analytic(ctx, CostModel(network, problem.dtype, compute_slowdown=compute_slowdown))
    except NoClosedForm:
        return None


def simulate_gemm(
    problem: GemmProblem,
    algorithm: GemmAlgorithm,
    params: GemmParams,
    network: Network,
    *,
    verify: bool = False,
    seed: int = 0,
    tracer: Tracer | None = None,
    fidelity: Fidelity = Fidelity.FULL,
    link_busy: LinkBusy | None = None,
    chip_slowdown: Mapping[int, float] | None = None,
) -> GemmResult:
    """Run ``algorithm`` on every chip of ``network``'s mapping; see the module docstring. ``network`` is the
    request's model: its context holds the timing cache, its link overrides are what-ifs like ``chip_slowdown``
    (``tpusim.engine.overrides``, as a step takes them: a straggler's compute and a slow link's transfers, in the
    simulation and in its closed form alike). ``link_busy``, when given, receives every directed link's busy
    seconds (the run is then never served from the cache)."""
    hardware, mapping, context = network.hardware, network.mapping, network.context
    what_if = _WhatIf(dict(chip_slowdown or {}), dict(network.link_overrides))
    cacheable = tracer is None and link_busy is None and not verify and fidelity is not Fidelity.ANALYTIC
    if not cacheable:
        return _simulate_gemm(problem, algorithm, params, network, verify, seed, tracer, fidelity, what_if, link_busy)
    # keyed by the fidelity actually run, so "auto" and the "symmetric" it resolves to share entries
    obstacle = symmetric_obstacle(algorithm, params, network, overrides=what_if.any)
    resolved = resolve_fidelity(fidelity, obstacle)[0] if fidelity is Fidelity.AUTO else fidelity
    key = cache_key("gemm", problem, algorithm.name, params, hardware, mapping.describe(), resolved,
                    *what_if.key)
    cached = context.timings.get(key)
    if cached is not None:
        return GemmResult(**cached)
    result = _simulate_gemm(problem, algorithm, params, network, verify, seed, tracer, fidelity, what_if)
    context.timings.put(key, result.to_dict())
    return result


@dataclass(frozen=True)
class _WhatIf:
    """A run's straggler chips (chip id -> factor on its compute) and slowed links (link id -> override)."""

    chip_slowdown: dict[int, float]
    link_overrides: dict[int, LinkOverride]

    @property
    def any(self) -> bool:
        return bool(self.chip_slowdown or self.link_overrides)

    @property
    def key(self) -> tuple[Any, ...]:
        """What the cache key adds (nothing without what-ifs, so earlier entries stay valid)."""
        return (self.chip_slowdown, self.link_overrides) if self.any else ()

    @property
    def slowest(self) -> float:
        """The largest compute factor: a GeMM's closed form charges every chip's products at the slowest chip's
        pace (each step of a distributed GeMM waits for its slowest member)."""
        return max(self.chip_slowdown.values(), default=1.0)


def _simulate_gemm(problem: GemmProblem, algorithm: GemmAlgorithm, params: GemmParams, network: Network, verify: bool,
                   seed: int, tracer: Tracer | None, fidelity: Fidelity, what_if: _WhatIf,
                   link_busy: LinkBusy | None = None) -> GemmResult:
    hardware, mapping = network.hardware, network.mapping
    mesh = mapping.shape
    check_gemm(algorithm, problem, mesh, params)
    obstacle = symmetric_obstacle(algorithm, params, network, overrides=what_if.any, payload=verify)
    fidelity, why = resolve_fidelity(fidelity, obstacle)
    if fidelity is Fidelity.ANALYTIC:
        if link_busy is not None:
            raise InfeasibleError("fidelity analytic simulates no links, so it has no link busy times; "
                                  "use auto, symmetric or full")
        if what_if.link_overrides:
            raise InfeasibleError("fidelity analytic: the closed form describes the network without --slow-link "
                                  "overrides", "use auto or full")
        return _analytic_result(algorithm, problem, params, network, what_if.slowest)
    symmetric = fidelity is Fidelity.SYMMETRIC
    ctx = GemmContext(problem, params, mesh)
    sharding = algorithm.sharding(problem, mesh)
    x_global = w_global = None
    if verify:
        rng = np.random.default_rng(seed)
        x_global = rng.standard_normal(problem.x_shape)
        w_global = rng.standard_normal(problem.w_shape)
    blocks_shape = operand_blocks(problem.x_shape, problem.w_shape, sharding, mesh)
    x_block, w_block = blocks_shape["x"], blocks_shape["w"]

    def blocks(dev: Device) -> tuple[GemmContext, Tensor, Tensor]:
        xd = None if x_global is None else take_block(x_global, sharding.x, mesh, dev.index)
        wd = None if w_global is None else take_block(w_global, sharding.w, mesh, dev.index)
        return ctx, Tensor(x_block, problem.dtype, xd), Tensor(w_block, problem.dtype, wd)

    reps = representative_chips(algorithm, params, network) if symmetric else None

    def simulate(lines: LineSymmetry | None) -> tuple[CollectiveRuntime, dict[tuple[int, ...], Any]]:
        sim = Simulation(network, tracer=tracer, chip_slowdown=what_if.chip_slowdown, lines=lines)
        runtime = CollectiveRuntime(sim, network, representatives=reps)
        return runtime, run_spmd(sim, runtime, algorithm.program, blocks)

    # a symmetric run without a link map leaves out the dimensional lines that run like a kept one (engine.lines)
    runtime, outputs = (with_lines(simulate, network.context.memo, network.mapping)
                        if symmetric and link_busy is None else simulate(None))
    run = account(runtime.sim, runtime, symmetric=symmetric)
    if link_busy is not None:
        link_busy.fill(runtime, symmetric=symmetric, scope="the GeMM")
    notes: list[str] = [why] if why else []
    error = None
    if verify:
        assert x_global is not None and w_global is not None
        dense = problem.dense(x_global, w_global)
        got = assemble({(i[0], i[1]): t.data for i, t in outputs.items()}, problem.y_shape, sharding.y, mesh)
        error = float(np.max(np.abs(got - dense))) if dense.size else 0.0
    twin = analytic_gemm(algorithm, problem, params, network, compute_slowdown=what_if.slowest)
    if twin is None:
        notes.append("no closed form is claimed for this mapping (multi-hop or chunked collectives)")
    elif what_if.link_overrides:
        notes.append("per-link overrides: the closed form describes the network without them")
    if symmetric and run.transfers:
        notes.append("symmetric fidelity: representative chips only; per-link totals are not reported"
                     + ("" if link_busy is None else " in the result (the link map fills in every link)"))
    links, parts = run.links, run.parts
    return GemmResult(
        algorithm=algorithm.name, dataflow=str(problem.dataflow), transpose=problem.transpose,
        m=problem.m, n=problem.n, k=problem.k, mesh=f"{mesh[0]}x{mesh[1]}", slices=params.slices,
        variant=params.variant, prefetch=str(params.prefetch), hardware=hardware.name,
        multi_axis=hardware.multi_axis_shown, overlap_limits=hardware.limits_shown, fidelity=str(fidelity),
        time_s=run.elapsed, analytic_time_s=twin, compute_s=parts.compute, exposed_comm_s=parts.exposed,
        idle_s=parts.idle, hbm_stall_s=run.hbm_stall, flops_per_chip=run.flops,
        bytes_sent=None if links is None else links.bytes_sent,
        max_link_bytes=None if links is None else links.max_link_bytes,
        max_link_utilisation=None if links is None else links.max_link_utilisation,
        transfers=run.transfers, events=runtime.sim.events,
        mapping=mapping.describe(), max_abs_error=error, notes=notes,
    )


def _analytic_result(algorithm: GemmAlgorithm, problem: GemmProblem, params: GemmParams,
                     network: Network, compute_slowdown: float) -> GemmResult:
    """The twin alone, shaped as a result (no simulation: breakdown fields hold what the form gives)."""
    hardware, mapping = network.hardware, network.mapping
    twin = analytic_gemm(algorithm, problem, params, network, compute_slowdown=compute_slowdown)
    if twin is None:
        raise InfeasibleError("fidelity analytic: no closed form covers this mapping; use auto or full")
    mesh = mapping.shape
    return GemmResult(
        algorithm=algorithm.name, dataflow=str(problem.dataflow), transpose=problem.transpose,
        m=problem.m, n=problem.n, k=problem.k, mesh=f"{mesh[0]}x{mesh[1]}", slices=params.slices,
        variant=params.variant, prefetch=str(params.prefetch), hardware=hardware.name,
        multi_axis=hardware.multi_axis_shown, overlap_limits=hardware.limits_shown, fidelity="analytic",
        time_s=twin, analytic_time_s=twin, compute_s=None, exposed_comm_s=None,
        idle_s=None, hbm_stall_s=None, flops_per_chip=problem.flops / (mesh[0] * mesh[1]),
        bytes_sent=None, max_link_bytes=None, max_link_utilisation=None, transfers=0, events=0,
        mapping=mapping.describe(), notes=["fidelity analytic: the closed form only; no breakdown"],
    )

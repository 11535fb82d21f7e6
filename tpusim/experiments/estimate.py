"""Cost estimates before work: what a request or a sweep will take, and the one line that says so
(docs/limits.md#cost-estimate).

Each request is resolved as its runner would resolve it, then probed (``gemm.estimate``, ``model.estimate``) or
counted (a collective's transfers, ``engine.footprint``); a request the runner would refuse costs nothing here
and is refused by the run itself. Above ``THRESHOLD_S`` the command line prints ``estimate_line`` on stderr before
it starts; results, stdout and exit statuses never depend on it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from tpusim.collectives.network import Network
from tpusim.config.requests import CollectiveRequest, GemmRequest, Request, StepRequest, TuneRequest
from tpusim.engine.context import Context
from tpusim.engine.footprint import Estimate, collective_transfers
from tpusim.errors import UserError
from tpusim.vocabulary import CollectiveOp, Fidelity, Ring

__all__ = ["CHIP_COLLECTIVE_EVENTS", "THRESHOLD_S", "Cost", "estimate_line", "long_run_line", "request_cost",
           "sweep_cost"]

THRESHOLD_S = 60.0
"""Estimated wall seconds above which a command says what it is about to cost before it starts."""
CHIP_COLLECTIVE_EVENTS = 4
"""Events each member of a collective brings: its program started and ended, the call and its completion."""


@dataclass(frozen=True)
class Cost:
    """A request's estimate, what it simulates, and the cheaper fidelity that gives the same answer (if any)."""

    estimate: Estimate
    what: str
    cheaper: tuple[Fidelity, Estimate] | None = None


def estimate_line(cost: Cost) -> str:
    """``estimate: ~N s and ~M MB for <what>; --fidelity symmetric would take ~n s (the same answer)``."""
    line = f"estimate: ~{_seconds(cost.estimate.wall_s)} and ~{cost.estimate.peak_bytes / 1e6:.0f} MB for {cost.what}"
    if cost.cheaper is not None:
        fidelity, cheaper = cost.cheaper
        line += f"; --fidelity {fidelity} would take ~{_seconds(cheaper.wall_s)} (the same answer)"
    return line


def long_run_line(cost: Cost | None) -> str | None:
    """The estimate line of a cost above ``THRESHOLD_S``, else None."""
    if cost is None or cost.estimate.wall_s <= THRESHOLD_S:
        return None
    return estimate_line(cost)


def _seconds(seconds: float) -> str:
    """Whole seconds, or two significant digits below ten (an estimate claims no more)."""
    return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.2g} s"


def request_cost(request: Request, context: Context | None = None) -> Cost | None:
    """The cost of running ``request``; None where the run will refuse it (its refusal, memory among them, is then
    the command's one line)."""
    try:
        if isinstance(request, CollectiveRequest):
            return _collective(request, context)
        if isinstance(request, GemmRequest):
            return _gemm(request, context)
        if isinstance(request, StepRequest):
            return _step(request, context)
        if isinstance(request, TuneRequest):
            return _tune(request, context)
    except UserError:
        return None
    return None


def sweep_cost(points: list[Any], what: str, context: Context | None = None) -> Cost:
    """The points' costs summed (a tuning point's is a rough bound, ``_tune``); their memory is the largest one
    point needs (each runs alone in a worker)."""
    total = Estimate(0)
    for point in points:
        cost = request_cost(point, context)
        if cost is not None:
            total = total + cost.estimate
    return Cost(total, what)


def _probe_network(network: Network) -> Network:
    """The model a request's probes share (``collectives.physical.probe``): each distinct collective runs once."""
    from tpusim.collectives.physical.probe import probe_network

    return probe_network(network)


def _collective(request: CollectiveRequest, context: Context | None) -> Cost:
    from tpusim.experiments.footprint import check_collective_memory
    from tpusim.experiments.runners import _placed

    placed = _placed(request, context)
    profile, mapping = placed.hardware, placed.mapping
    axis = mapping.axes[request.axis]
    op, group = CollectiveOp(request.op), axis.size
    # a collective the run will refuse for its memory is refused in one line, with no estimate before it
    check_collective_memory(op, mapping.num_chips, group, request.chunks, profile.most_chunks,
                            closed=all(g.closed for g in axis.groups[:1]), ring=Ring(request.ring))
    chunks = request.chunks or 1
    transfers = collective_transfers(op, mapping.num_chips, group, chunks,
                                     closed=all(g.closed for g in axis.groups[:1]), ring=Ring(request.ring))
    # a ring collective wakes its link program once per ring step (an all-reduce: two passes), chunks pipelined
    steps = (2 if op is CollectiveOp.ALL_REDUCE else 1) * (group - 1) + chunks - 1
    from tpusim.engine.simulation import LAUNCH_EVENTS

    events = CHIP_COLLECTIVE_EVENTS * mapping.num_chips + steps + LAUNCH_EVENTS
    return Cost(Estimate(events, steps + LAUNCH_EVENTS, transfers), f"the {op} over {mapping.num_chips} chips")


def _gemm(request: GemmRequest, context: Context | None) -> Cost:
    from tpusim.experiments.footprint import check_gemm_memory
    from tpusim.experiments.names import algorithm_named
    from tpusim.experiments.runners import _placed, _prefetch
    from tpusim.gemm.dataflow import GemmProblem
    from tpusim.gemm.estimate import gemm_estimate
    from tpusim.gemm.fidelity import symmetric_obstacle
    from tpusim.gemm.params import GemmParams

    placed = _placed(request, context)
    profile, mapping = placed.hardware, placed.mapping
    check_gemm_memory(mapping.num_chips, request.fidelity, request.verify, request.m, request.n, request.k)
    algorithm = algorithm_named(request.algorithm)
    problem = GemmProblem(request.m, request.n, request.k, request.dataflow, request.transpose, request.dtype)
    params = GemmParams(_prefetch(profile, request.prefetch), request.slices, request.block, request.variant,
                        request.compat_mean_overlap)
    network = _probe_network(placed)
    fidelity = Fidelity(request.fidelity)
    estimate = gemm_estimate(algorithm, problem, params, network, fidelity)
    cheaper = None
    if fidelity is Fidelity.FULL and not request.verify and symmetric_obstacle(algorithm, params, network) is None:
        cheaper = (Fidelity.SYMMETRIC, gemm_estimate(algorithm, problem, params, network, Fidelity.SYMMETRIC))
    rows, cols = mapping.shape
    return Cost(estimate, f"a {fidelity}-fidelity {algorithm.name} GeMM on {rows}x{cols}", cheaper)


def _step(request: StepRequest, context: Context | None, *, search: bool = True) -> Cost:
    """A step's cost, with the slice-count search a step without ``--slices`` runs first where ``search``."""
    from tpusim.experiments.runners import step_setup
    from tpusim.gemm.fidelity import symmetric_obstacle
    from tpusim.gemm.params import GemmParams
    from tpusim.model.estimate import step_estimate
    from tpusim.tuning.slices import likely_slices, slice_search_estimate

    setup = step_setup(request, context)
    spec, mapping = setup.spec, setup.network.mapping
    network = _probe_network(setup.network)
    searched = Estimate(0)
    if setup.slices is None and setup.sliced:
        replica = network if mapping.data == 1 else _probe_network(setup.network.over(mapping.tensor_mapping))
        if search:
            searched = slice_search_estimate(spec, replica, mapping.data)
        spec = replace(spec, slices=likely_slices(spec, replica, mapping.data))
    estimate = searched + step_estimate(spec, network)
    cheaper = None
    if spec.fidelity is Fidelity.FULL and not (request.slow_chips or request.slow_links):
        params = GemmParams(spec.prefetch, variant=spec.variant)
        if symmetric_obstacle(spec.algorithm, params, network) is None:
            symmetric = replace(spec, fidelity=Fidelity.SYMMETRIC)
            cheaper = (Fidelity.SYMMETRIC, step_estimate(symmetric, network))
    step = f"step of {spec.model.name} with {spec.algorithm.name} on {mapping.num_chips} chips"
    what = f"a {step} (fidelity auto)" if spec.fidelity is Fidelity.AUTO else f"a {spec.fidelity}-fidelity {step}"
    return Cost(estimate, what, cheaper)


_SEARCHED = ("kind", "algorithm", "zero_stage", "dataflows", "transposes", "slices", "dp", "layout")
"""Tuning-request fields that name what is searched, not one step's setting."""


def _tune(request: TuneRequest, context: Context | None) -> Cost | None:
    """A rough bound: the meshes timed as whole steps (every 2D mesh of the chips when exhaustive, else the
    ``refine_meshes`` refined) times one step's cost on the squarest mesh the step accepts, slice counts chosen by
    the closed forms, for each algorithm searched. The closed-form ranking and the GeMM pricing before it are not
    counted, nor a mesh's plans tied in priced ops (``finalists.TIED_PLANS``), which arise where a tensor axis is
    short: charging every counted step the squarest mesh's cost (the dearest to simulate) usually covers them."""
    from tpusim.config.requests import EVERY_ALGORITHM, EVERY_ZERO_STAGE, StepRequest, parse_request
    from tpusim.gemm.registry import algorithms as registered
    from tpusim.tuning.space import factorisations
    from tpusim.vocabulary import ZERO_STAGES

    meshes = factorisations(request.chips)
    # ``zero_stage any`` (``plan``'s default) searches once per stage
    stages = len(ZERO_STAGES) if request.zero_stage == EVERY_ZERO_STAGE else 1
    timed = stages * (len(meshes) if request.exhaustive else min(request.refine_meshes, len(meshes)))
    algorithms = list(registered()) if request.algorithm == EVERY_ALGORITHM else [request.algorithm]
    # the settings a step shares with the tuning request, where they mean the same (set, not searched, there)
    shared = {name: getattr(request, name) for name in StepRequest.model_fields
              if name in TuneRequest.model_fields and name not in _SEARCHED and getattr(request, name) is not None}
    total = Estimate(0)
    for algorithm in algorithms:
        for rows, cols in sorted(meshes, key=lambda shape: abs(shape[0] - shape[1])):
            step = parse_request(StepRequest, {**shared, "algorithm": algorithm, "mesh": f"{rows}x{cols}"})
            assert isinstance(step, StepRequest)
            try:
                one = _step(step, context, search=False)
            except UserError:  # a mesh the step refuses (heads, memory): the tuner skips it too
                continue
            total = total + one.estimate.times(timed)
            break
    return Cost(total, f"tuning {request.model if isinstance(request.model, str) else request.model.name} on "
                       f"{request.chips} chips (a rough upper bound: {timed} whole step(s) of each of "
                       f"{len(algorithms)} algorithm(s))")

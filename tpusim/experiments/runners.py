"""Running a request: names resolved, the mesh placed on the network, overrides applied, the layers below called.

Each entry point's request model (``tpusim.config.requests``) has one runner here; the command line, the Python
API and every experiment point go through them, so they behave alike wherever a request comes from.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from tpusim.collectives.factory import network_for, place_mesh
from tpusim.collectives.simulate import CollectiveResult, CollectiveSpec, simulate_collective
from tpusim.config import HardwareProfile, TransformerModel
from tpusim.config.requests import (
    EVERY_ALGORITHM,
    EVERY_ZERO_STAGE,
    FF_LAYERS,
    CollectiveRequest,
    GemmRequest,
    PlanRequest,
    Request,
    Scale,
    StepRequest,
    TuneRequest,
    _OnMesh,
    parse_request,
)
from tpusim.engine.context import Context
from tpusim.engine.overrides import parse_slow_chips, parse_slow_links
from tpusim.engine.trace import Tracer
from tpusim.errors import InfeasibleError, UserError
from tpusim.experiments.finite import finite_result
from tpusim.experiments.footprint import check_collective_memory, check_gemm_memory, check_step_memory
from tpusim.hardware import load_hardware, scaled_profile, with_collective_switches
from tpusim.topology import MeshMapping
from tpusim.units import parse_size
from tpusim.vocabulary import ZERO_STAGES, Activation, CollectiveOp, Dataflow, Precision, Prefetch, Recompute, Ring

if TYPE_CHECKING:
    from tpusim.collectives.link_busy import LinkBusy
    from tpusim.collectives.network import Network
    from tpusim.gemm.simulate import GemmResult
    from tpusim.model.step import StepResult, StepSpec
    from tpusim.tuning.plan import PlanResult
    from tpusim.tuning.result import Choice, TuneResult

# The GeMM, model and tuning layers are imported by the runners that use them, so that a collective (the
# command line's smallest request) starts without them.

__all__ = ["EVERY_ALGORITHM", "RUNNERS", "StepSetup", "hardware_of", "model_of", "run_collective", "run_gemm",
           "run_plan", "run_request", "run_step", "run_tune", "step_setup"]


def hardware_of(hardware: str | HardwareProfile, scale: Scale | None = None,
                context: Context | None = None) -> HardwareProfile:
    """A profile by name, path or as given, with its constants scaled where asked."""
    if isinstance(hardware, str):
        profile = load_hardware(hardware) if context is None else context.loaded("hardware", hardware, load_hardware)
    else:
        profile = hardware
    factors = scale.factors() if scale is not None else {}
    if factors:
        profile = scaled_profile(profile, bandwidth=factors.get("beta", 1.0), latency=factors.get("lambda", 1.0),
                                 overhead=factors.get("alpha", 1.0), flops=factors.get("flops", 1.0),
                                 step=factors.get("step", 1.0), op=factors.get("op", 1.0),
                                 vector=factors.get("vector", 1.0), dma=factors.get("dma", 1.0),
                                 dcn=factors.get("dcn", 1.0), hbm=factors.get("hbm", 1.0))
    return profile


def request_hardware(request: Request, context: Context | None = None) -> HardwareProfile:
    """The profile a request runs on: named, scaled, and with its collective switches applied."""
    from tpusim.hardware.profiles import with_precision

    profile = hardware_of(request.hardware, request.scale, context)
    profile = with_precision(profile, getattr(request, "precision", Precision.BF16))
    return with_collective_switches(profile, multi_axis=request.multi_axis, overlap_limit=request.overlap_limit)


def check_offload(offload: tuple[Activation, ...], profile: HardwareProfile) -> None:
    """Host offload moves activations over each chip's host link (``engine.host``): refused on a profile without
    one (the calibrated profiles)."""
    if offload and profile.host_link is None:
        raise InfeasibleError(f"remat_offload {','.join(offload)}: hardware profile {profile.name!r} has no host "
                              "link (host.link_bandwidth) to offload over; use a physical profile such as 'tpuv4', "
                              "or save the activations (remat_save)")


def model_of(model: str | TransformerModel, context: Context | None = None) -> TransformerModel:
    if not isinstance(model, str):
        return model
    from tpusim.model.registry import load_model

    return load_model(model) if context is None else context.loaded("model", model, load_model)


def _placed(request: _OnMesh, context: Context | None) -> Network:
    """The request's network model: its profile over its placed mesh, with its slow links, on ``context`` (the
    one model every simulation of the request runs on)."""
    profile = request_hardware(request, context)
    rows, cols = request.shape
    mapping = place_mesh(profile, rows, cols, topology=request.topology, axis_map=request.axis_map,
                         data=request.data, data_axes=getattr(request, "data_axes", None))
    return network_for(profile, mapping, context=context,
                       link_overrides=parse_slow_links(request.slow_links, mapping) or None)


def _prefetch(hardware: HardwareProfile, prefetch: Prefetch | None) -> Prefetch:
    return prefetch if prefetch is not None else hardware.prefetch


def _check_links(network: Network, link_busy: LinkBusy | None) -> None:
    """Link busy times need directed links: refuse before simulating on an abstract calibrated network."""
    if link_busy is not None and network.mapping.topology is None:
        raise UserError(f"--link-map: hardware {network.hardware.name!r} is an abstract calibrated network without "
                        "directed links; use a physical profile (e.g. tpuv4, see 'tpusim list hardware')")


@finite_result  # every number finite, whatever the inputs (docs/limits.md#finite-results)
def run_collective(request: CollectiveRequest, context: Context | None = None,
                   tracer: Tracer | None = None, link_busy: LinkBusy | None = None) -> CollectiveResult:
    """One collective on every group of ``request.axis`` (its per-link busy seconds into ``link_busy``)."""
    network = _placed(request, context)
    profile, mapping = network.hardware, network.mapping
    _check_links(network, link_busy)
    axis = mapping.axes[request.axis]
    check_collective_memory(CollectiveOp(request.op), mapping.num_chips, axis.size, request.chunks, profile.most_chunks,
                            closed=all(group.closed for group in axis.groups[:1]), ring=Ring(request.ring))
    spec = CollectiveSpec(request.op, request.axis, int(parse_size(request.bytes)), request.ring, request.chunks or 0,
                          request.root, request.offset)
    return simulate_collective(spec, network, tracer=tracer,
                               chip_slowdown=parse_slow_chips(request.slow_chips, mapping.num_chips) or None,
                               link_busy=link_busy)


@finite_result  # every number finite, whatever the inputs (docs/limits.md#finite-results)
def run_gemm(request: GemmRequest, context: Context | None = None, tracer: Tracer | None = None,
             link_busy: LinkBusy | None = None) -> GemmResult:
    """One distributed GeMM (optionally verified against the dense product, optionally traced, its per-link busy
    seconds into ``link_busy``)."""
    from tpusim.experiments.names import algorithm_named
    from tpusim.gemm.dataflow import GemmProblem
    from tpusim.gemm.params import GemmParams
    from tpusim.gemm.simulate import simulate_gemm
    from tpusim.tuning.slices import fastest_slice_count

    algorithm = algorithm_named(request.algorithm)
    network = _placed(request, context)
    profile, mapping = network.hardware, network.mapping
    check_gemm_memory(mapping.num_chips, request.fidelity, request.verify, request.m, request.n, request.k)
    _check_links(network, link_busy)
    _check_tracer(tracer, mapping)
    problem = GemmProblem(request.m, request.n, request.k, request.dataflow, request.transpose, request.dtype)
    params = GemmParams(_prefetch(profile, request.prefetch), request.slices, request.block, request.variant,
                        request.compat_mean_overlap)
    slow_chips = parse_slow_chips(request.slow_chips, mapping.num_chips) or None

    def time(candidate: GemmProblem, with_params: GemmParams) -> float:
        return simulate_gemm(candidate, algorithm, with_params, network, fidelity=request.fidelity,
                             chip_slowdown=slow_chips).time_s

    chosen = None
    if request.slices is None and algorithm.uses_slices:  # as a step does: the fastest feasible slice count
        chosen = fastest_slice_count(algorithm, [problem], mapping.shape, params, time)
        if chosen is not None:
            params = replace(params, slices=chosen[0])
    result = simulate_gemm(problem, algorithm, params, network, verify=request.verify, seed=request.seed,
                           tracer=tracer, fidelity=request.fidelity, link_busy=link_busy, chip_slowdown=slow_chips)
    if chosen is not None and len(chosen[1]) > 1:
        result.notes.append(f"slice count {chosen[0]} chosen, the fastest of the feasible "
                            f"{', '.join(map(str, chosen[1]))}")
    if request.compat_mean_overlap:
        result.notes.append("analytic_time_s uses the simulation-branch (a+b)/2 compatibility rule")
    return result


def _per_layer(value: Any) -> tuple[Any, ...] | None:
    """A request's per-layer setting as one value per FF layer."""
    if value is None:
        return None
    values = list(value) if isinstance(value, list | tuple) else [value]
    return tuple(values * len(FF_LAYERS) if len(values) == 1 else values)


@finite_result  # every number finite, whatever the inputs (docs/limits.md#finite-results)
def run_step(request: StepRequest, context: Context | None = None, link_busy: LinkBusy | None = None,
             tracer: Tracer | None = None, *, progress: Callable[[str, int, int], None] | None = None) -> StepResult:
    """One training step (its per-link busy seconds over the whole step into ``link_busy``; a run of its simulated
    window into ``tracer``, docs/results.md#traces). ``progress`` hears (what, done, in all): each FF layer's
    slice count chosen, then the step simulated."""
    from tpusim.model.step import micro_panels, simulate_step

    setup = step_setup(request, context, link_busy, tracer)
    spec, network, slices = setup.spec, setup.network, setup.slices
    spec = _sliced(spec, slices, setup.sliced, network, progress)
    if not request.ignore_memory and (request.recompute is Recompute.AUTO or request.microbatches is None):
        # the open choices are made again with the GeMM panels of the plan they led to (model.working_set)
        refit = setup.fit(panel_bytes=micro_panels(spec, network))
        if (refit.recompute, refit.microbatches) != (spec.recompute, spec.microbatches):
            spec = replace(spec, recompute=refit.recompute, microbatches=refit.microbatches, slices=slices)
            spec = _sliced(spec, slices, setup.sliced, network, progress)
    if progress is not None:
        progress("simulating the step", 0, 1)
    result = simulate_step(spec, network,
                           chip_slowdown=parse_slow_chips(request.slow_chips, network.mapping.num_chips) or None,
                           link_busy=link_busy, tracer=tracer)
    if progress is not None:
        progress("simulating the step", 1, 1)
    return result


@dataclass(frozen=True)
class StepSetup:
    """A step request resolved up to its slice counts: the spec (slices as asked), where it runs, the slices asked
    per layer, whether the algorithm slices (so that unasked counts are searched), and the memory plan to redo."""

    spec: StepSpec
    network: Network  # the request's model: its profile over its placed mesh, with its slow links
    slices: tuple[int, ...] | None
    sliced: bool
    fit: Callable[..., Any]


def step_setup(request: StepRequest, context: Context | None = None, link_busy: LinkBusy | None = None,
               tracer: Tracer | None = None) -> StepSetup:
    """Everything ``run_step`` resolves before it simulates anything, with the refusals it makes on the way."""
    from tpusim.experiments.names import algorithm_named
    from tpusim.gemm.algorithm import not_taken
    from tpusim.model.memory import plan_memory, slice_memory_shape
    from tpusim.model.plan import derived_spec
    from tpusim.model.program import prefetch_budget

    transformer = model_of(request.model, context)
    network = _placed(request, context)
    profile, mapping = network.hardware, network.mapping
    check_offload(request.remat_offload, profile)
    check_step_memory(mapping, request.fidelity)
    _check_links(network, link_busy)
    _check_tracer(tracer, mapping)
    algorithm = algorithm_named(request.algorithm)
    slices = _per_layer(request.slices)
    if slices is not None and not algorithm.uses_slices:
        shown = ",".join(str(k) for k in request.slices) if isinstance(request.slices, list) else request.slices
        raise not_taken(algorithm, "slices", str(shown))
    dataflows: tuple[Dataflow, ...] | None = _per_layer(request.dataflows)
    slices_over_dcn = request.dcn_slices
    _check_dcn(request, profile, slices_over_dcn)
    batch = request.batch or mapping.num_chips * slices_over_dcn
    if batch % slices_over_dcn:
        raise InfeasibleError(f"{slices_over_dcn} slices over DCN do not divide the batch of {batch} sequences",
                              f"choose a batch that is a multiple of {slices_over_dcn}")
    prefetch = _prefetch(profile, request.prefetch)
    budget = prefetch_budget(prefetch, request.prefetch_budget)
    chips, share, replicas = slice_memory_shape(mapping.num_chips, batch, mapping.data, slices_over_dcn,
                                                request.dcn_sharded)
    fit = partial(plan_memory, transformer, chips, share, request.recompute, request.microbatches,
                  profile.chip.usable_hbm, request.bytes_per_param, ignore_memory=request.ignore_memory,
                  reserved_bytes=budget, data_parallel=replicas, zero_stage=request.zero_stage,
                  embedding=request.embedding, remat_save=frozenset(request.remat_save),
                  remat_offload=frozenset(request.remat_offload), attention=request.attention,
                  combine_bytes=profile.combine_threshold)
    memory = fit()
    spec = derived_spec(request, model=transformer, algorithm=algorithm, batch=batch, slices=slices,
                        dataflows=dataflows, transposes=_per_layer(request.transposes), prefetch=prefetch,
                        recompute=memory.recompute, microbatches=memory.microbatches, prefetch_budget=budget,
                        remat_save=frozenset(request.remat_save), remat_offload=frozenset(request.remat_offload),
                        extrapolate=not request.all_layers, dcn_slices=slices_over_dcn,
                        dcn_sharded=request.dcn_sharded)
    return StepSetup(spec, network, slices, algorithm.uses_slices, fit)


def _sliced(spec: StepSpec, slices: tuple[int, ...] | None, sliced: bool, network: Network,
            progress: Callable[[str, int, int], None] | None) -> StepSpec:
    """``spec`` with its slice counts: those asked for, or with none asked each FF layer's fastest feasible K on
    this mesh (reported in ``slices``) where the algorithm slices."""
    if slices is not None or not sliced:
        return spec
    from tpusim.tuning.slices import best_slices

    chosen = None if progress is None else partial(progress, "choosing slice counts per layer")
    return replace(spec, slices=best_slices(spec, network, chosen))


def _check_dcn(request: StepRequest, profile: HardwareProfile, slices: int) -> None:
    """A layout across slices needs a profile with a DCN and slices that behave alike (docs/network.md#dcn)."""
    if slices == 1:
        return
    if profile.slice_network is None:
        raise UserError(f"layout {request.layout!r} joins {slices} slices over DCN, which profile {profile.name!r} "
                        "does not describe (no dcn block); use a physical profile such as 'tpuv4'")
    if request.slow_chips or request.slow_links:
        raise UserError(f"slow chips or links with layout {request.layout!r} are not supported: one slice stands "
                        "for all over DCN only while every slice behaves alike")


@finite_result  # every number finite, whatever the inputs (docs/limits.md#finite-results)
def run_tune(request: TuneRequest, context: Context | None = None,
             progress: Callable[[str], None] | None = None, tracer: Tracer | None = None, *,
             stages: Callable[[int, int], None] | None = None, jobs: int = 1) -> TuneResult:
    """Search mesh shape, per-layer dataflow, transposition and slice count for the fastest step; ``progress``
    hears each stage of the search, ``stages`` (done, in all) as each ends. With ``tracer``, the best choice is
    simulated once more as a step, traced. ``jobs`` worker processes simulate (at most one per CPU; the result is
    the same as with one, plus a note when capped)."""
    from tpusim.experiments.executors import worker_count
    from tpusim.experiments.names import algorithm_named
    from tpusim.tuning.search import check_jobs, tune
    from tpusim.tuning.spec import tune_spec

    check_jobs(jobs)
    check_offload(request.remat_offload, request_hardware(request, context))
    if tracer is not None:
        from tpusim.experiments.tracing import check_trace_chips

        check_trace_chips(tracer, request.chips, f"{request.chips}-chip")
    if request.algorithm == EVERY_ALGORITHM:
        return _tune_every_algorithm(request, context, progress, tracer, jobs)
    if request.zero_stage == EVERY_ZERO_STAGE:
        return _tune_every_zero_stage(request, context, progress, tracer, jobs)
    assert isinstance(request.zero_stage, int)
    workers, capped = worker_count(jobs)

    spec = tune_spec(request, model_of(request.model, context), request_hardware(request, context),
                     algorithm_named(request.algorithm))
    result = tune(spec, context=context, progress=progress, stages=stages, jobs=workers)
    if capped is not None:
        result.notes.append(capped)
    if tracer is not None:
        _trace_best(request, result, tracer, context)
    return result




def _tune_every_algorithm(request: TuneRequest, context: Context | None, progress: Callable[[str], None] | None,
                          tracer: Tracer | None, jobs: int) -> TuneResult:
    """Tune each registered algorithm in turn and keep the fastest best choice; its result's notes list every
    algorithm's best step (or why it had none)."""
    from tpusim.gemm.registry import algorithms

    return _tune_fastest(request, "algorithm", list(algorithms()), _Variants(
        progress="tuning algorithm {}", label="{}", shown=lambda choice: choice.mesh, none="no algorithm",
        note="algorithm all: {} is the fastest of {count} tuned"), context, progress, tracer, jobs)


def _tune_every_zero_stage(request: TuneRequest, context: Context | None, progress: Callable[[str], None] | None,
                           tracer: Tracer | None, jobs: int) -> TuneResult:
    """Tune at each ZeRO stage in turn and keep the fastest best choice (ties: the lower stage); its notes list
    every stage's best step (or why it had none). A layout of one replica is the same at every stage, so where no
    layout has more than one (``dp`` 1, or a profile without data axes) it is tuned once."""
    from tpusim.collectives.factory import takes_data_axis

    if request.dp == 1 or not takes_data_axis(request_hardware(request, context)):
        result = run_tune(request.model_copy(update={"zero_stage": 1}), context, progress, tracer, jobs=jobs)
        result.notes.append("zero_stage any: every layout has one replica per slice, which no ZeRO stage changes")
        return result
    return _tune_fastest(request, "zero_stage", list(ZERO_STAGES), _Variants(
        progress="tuning at ZeRO stage {}", label="stage {}", shown=lambda choice: choice.layout,
        none="no ZeRO stage",
        note="zero_stage any: stage {} is the fastest of {count} tuned"), context, progress, tracer, jobs)


@dataclass(frozen=True)
class _Variants:
    """How a search over one request field speaks: its progress line and each value's label (``{}`` the value),
    what of a value's best choice its line shows, and the note on the fastest (``{count}``: values tuned)."""

    progress: str
    label: str
    shown: Callable[[Choice], str]
    none: str
    note: str


def _tune_fastest(request: TuneRequest, field: str, values: list[Any], say: _Variants, context: Context | None,
                  progress: Callable[[str], None] | None, tracer: Tracer | None, jobs: int) -> TuneResult:
    """Tune with ``field`` set to each of ``values`` in turn and keep the fastest best choice (ties: the earlier
    value); a value the request or its layouts refuse is listed with its reason, in the kept result's notes."""
    from tpusim.units import format_time

    found: list[tuple[float, int, TuneResult]] = []
    lines: list[str] = []
    for index, value in enumerate(values):
        if progress is not None:
            progress(say.progress.format(value))
        try:
            result = run_tune(request.model_copy(update={field: value}), context, progress, jobs=jobs)
        except UserError as error:  # infeasible, or refused by the layouts (stage 0 with data axes over DCN)
            lines.append(f"{say.label.format(value)}: no configuration ({error.message})")
            continue
        found.append((result.best.step_time_s, index, result))
        lines.append(f"{say.label.format(value)}: {say.shown(result.best)}, {format_time(result.best.step_time_s)}")
    if not found:
        raise InfeasibleError(f"{say.none} has a feasible configuration of {request.chips} chips: " + "; ".join(lines))
    from tpusim.tuning.candidates import fastest_per_kind

    _, index, best = min(found, key=lambda item: item[:2])
    best.notes.append(say.note.format(values[index], count=len(found)) + " (" + "; ".join(lines) + ")")
    # every value's timed steps, as data: the fastest of each algorithm and layout kind over all the searches
    best.candidates = fastest_per_kind(c for _, _, result in found for c in result.candidates)
    if tracer is not None:
        _trace_best(request.model_copy(update={field: values[index]}), best, tracer, context)
    return best


def _check_tracer(tracer: Tracer | None, mapping: MeshMapping) -> None:
    """Traced chips must exist on the mesh; the trace names chips by their mesh coordinates."""
    if tracer is None:
        return
    from tpusim.experiments.tracing import check_trace_chips

    rows, cols = mapping.shape
    check_trace_chips(tracer, mapping.num_chips, f"{rows}x{cols}")
    tracer.name_chips(mapping)


def _trace_best(request: TuneRequest, result: TuneResult, tracer: Tracer, context: Context | None) -> None:
    """Simulate the tuner's best choice once more as a step, into ``tracer``; say so in ``result.notes``."""
    from tpusim.units import format_time

    best = result.best
    # the tune request's settings a step takes too (all they share but the kind), then the best choice's own
    shared = {name: getattr(request, name) for name in StepRequest.model_fields
              if name in TuneRequest.model_fields and name != "kind"}
    # on the slice the search placed it on: without --topology the tuner searched every legal shape
    topology = best.slice_shape if best.slice_shape is not None else request.topology
    step = parse_request(StepRequest, {
        **shared, "topology": topology, "layout": best.layout, "dp": None, "batch": result.batch,
        "recompute": result.recompute,
        "microbatches": result.microbatches, "dataflows": best.dataflows, "transposes": best.transposes,
        "slices": None if None in best.slices else best.slices,
    })
    assert isinstance(step, StepRequest)
    traced = run_step(step, context, tracer=tracer)
    same = abs(traced.step_time_s - best.step_time_s) <= 1e-9 * best.step_time_s
    result.notes.append(f"trace of the best choice ({best.mesh}): its step simulated again, "
                        f"{format_time(traced.step_time_s)}"
                        + (" as in the search" if same else f" (the search: {format_time(best.step_time_s)})"))
    result.notes += [text for text in traced.notes if text.startswith("trace")]


Runner = Callable[[Any, Context | None], Any]
def run_plan(request: PlanRequest, context: Context | None = None, progress: Callable[[str], None] | None = None,
             jobs: int = 1) -> PlanResult:
    """The planning table (``tpusim plan``): the tuner's search (``run_tune``) over the request's algorithms and
    ZeRO stages (default: every one), its timed steps ranked, the fastest of each algorithm and layout kind."""
    from tpusim.tuning.plan import PlanResult

    fields = {name: getattr(request, name) for name in TuneRequest.model_fields if name != "kind"}
    tune = parse_request(TuneRequest, fields)
    assert isinstance(tune, TuneRequest)
    tuned = run_tune(tune, context, progress, jobs=jobs)
    return PlanResult(model=tuned.model, hardware=tuned.hardware, chips=tuned.chips, batch=tuned.batch,
                      candidates=tuned.candidates, notes=tuned.notes)


RUNNERS: MappingProxyType[type[Request], Runner] = MappingProxyType({
    CollectiveRequest: run_collective,
    GemmRequest: run_gemm,
    StepRequest: run_step,
    TuneRequest: run_tune,
})


def run_request(kind: type[Request], fields: dict[str, Any], context: Context | None = None) -> Any:
    """Parse ``fields`` as a request of ``kind`` (named as Python keywords in errors) and run it."""
    return RUNNERS[kind](parse_request(kind, fields), context)

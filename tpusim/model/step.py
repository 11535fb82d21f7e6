"""One training step: the plan run as the step program, a window of layers simulated, the step extrapolated.

``plan`` says what a step runs and ``program`` how every chip runs it; this module decides how much of the step
to simulate and turns it into a ``StepResult``. Identical layers are simulated once: a window of ``w`` and
``w + 1`` layers is simulated and the step is T(L) = T(w) + (L - w) (T(w + 1) - T(w)), exact once the schedule
repeats from layer to layer (a test checks it against simulating every layer). Where a single representative
chip stands for all (symmetric fidelity) and nothing crosses op boundaries (no early prefetch, no data-parallel
collectives, no host copies of offloaded activations), the step is the sum of its distinct ops, each simulated
once. Breakdowns come from the critical chip.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, TypeVar

import numpy as np

from tpusim.collectives.link_busy import LinkBusy
from tpusim.collectives.network import Network
from tpusim.config.layout import layout_name
from tpusim.engine.accounting import breakdown
from tpusim.engine.cache import cache_key
from tpusim.engine.footprint import check_events_memory
from tpusim.engine.result import ResultMixin
from tpusim.engine.trace import Tracer
from tpusim.errors import InfeasibleError
from tpusim.gemm.fidelity import representative_chips, resolve_fidelity, symmetric_obstacle
from tpusim.gemm.simulate import simulate_gemm
from tpusim.model.layer import GemmOp, Op
from tpusim.model.memory import MemoryEstimate, estimate_memory, slice_memory_shape
from tpusim.model.plan import StepPlan, StepSpec, block_layers, plan_step, step_hardware_flops, step_model_flops
from tpusim.model.program import HostSchedule, HostTime, OpsRun, PrefetchWindow, panel_peak, run_ops, step_sequence
from tpusim.model.replicas import replica_representatives
from tpusim.model.step_trace import trace_step
from tpusim.vocabulary import EARLY_PREFETCH, Fidelity, Recompute

__all__ = ["DCN_UNEQUAL", "OpTiming", "StepResult", "StepSpec", "dcn_sharded_fidelity", "every_layer_refusal",
           "simulate_step", "throughput"]

_Value = TypeVar("_Value", float, np.ndarray)  # a number of the step, or one per directed link


@dataclass
class OpTiming:
    """One op of one steady-state layer on the critical chip."""

    op: str
    time_s: float
    compute_s: float
    exposed_comm_s: float
    idle_s: float


@dataclass
class StepResult(ResultMixin):
    """One simulated training step (field meanings: docs/results.md#result-fields)."""

    model: str
    algorithm: str
    hardware: str
    multi_axis: str | None
    overlap_limits: str
    mesh: str
    data_parallel: int
    zero_stage: int | None
    layout: str
    named_layout: str
    chips: int
    batch: int
    microbatches: int
    layers: int
    dataflows: list[str]
    transposes: list[bool]
    slices: list[int | None]
    prefetch: str
    recompute: str
    fidelity: str
    step_time_s: float
    mfu: float
    hfu: float
    tokens_per_s: float
    seconds_per_sequence: float
    compute_s: float
    exposed_comm_s: float
    exposed_data_comm_s: float
    dcn_slices: int
    dcn_axis: str | None
    exposed_dcn_comm_s: float
    idle_s: float
    hbm_stall_s: float
    per_layer: list[dict[str, Any]]
    memory_bytes_per_chip: float
    memory_capacity_bytes: float
    memory_feasible: bool
    memory_shortfall_bytes: float
    feasible: bool
    violations: list[str]
    bytes_sent_per_layer: float | None
    max_link_utilisation: float | None
    simulated_layers: list[int]
    mapping: dict[str, Any]
    switches: dict[str, Any]
    notes: list[str] = field(default_factory=list)



def simulate_step(spec: StepSpec, network: Network, *, chip_slowdown: dict[int, float] | None = None,
                  link_busy: LinkBusy | None = None, tracer: Tracer | None = None) -> StepResult:
    """Simulate (a window of) the step on ``network`` (the request's model, with its link overrides and the
    context holding the timing cache) and extrapolate to all layers; cached by everything that matters.

    ``link_busy``, when given, receives every directed link's busy seconds over the whole step, extrapolated
    like the step time (the step is then never served from the cache)."""
    if spec.recompute is Recompute.AUTO:
        raise ValueError("resolve recompute auto (model.memory.plan_memory) before simulating a step")
    if spec.microbatches > 1:
        return _microbatched(spec, network, chip_slowdown, link_busy, tracer)
    key = cache_key("step", _keyed(spec, network), network.hardware, network.mapping.describe(), chip_slowdown,
                    network.link_overrides or None)
    timings = network.context.timings
    cached = timings.get(key) if link_busy is None and tracer is None else None
    if cached is not None:
        return StepResult(**cached)
    # one model for every simulated run: each starts from idle links of its own Simulation
    result = _simulate_step(spec, network, chip_slowdown, link_busy, tracer)
    if tracer is None:  # a traced result carries the trace's notes
        timings.put(key, result.to_dict())
    return result


def _keyed(spec: StepSpec, network: Network) -> StepSpec:
    """``spec`` as the timing cache keys it: a layout of one replica on one slice is the same step at every ZeRO
    stage (nothing is sharded over one replica), so the searches of ``plan`` over the stages share its timing."""
    if network.mapping.data == 1 and spec.dcn_slices == 1:
        return replace(spec, zero_stage=StepSpec.zero_stage)
    return spec


def _simulate_step(spec: StepSpec, network: Network, chip_slowdown: dict[int, float] | None,
                   link_busy: LinkBusy | None = None, tracer: Tracer | None = None) -> StepResult:
    hardware, mapping, link_overrides = network.hardware, network.mapping, network.link_overrides
    mesh, data = mapping.shape, mapping.data
    slices = spec.dcn_slices
    if spec.batch % (data * slices):
        what = f"{data} data-parallel replicas" + (f" in each of {slices} slices" if slices > 1 else "")
        raise InfeasibleError(f"{what} do not divide the batch of {spec.batch} sequences",
                              f"choose a batch that is a multiple of {data * slices}, or another layout")
    whole, spec = spec, replace(spec, batch=spec.batch // (data * slices))  # from here on: one replica's share
    plan = plan_step(spec, mesh, data, hardware.combine_threshold)
    algorithm = next(iter(plan.gemms.values())).algorithm
    obstacle = symmetric_obstacle(algorithm, plan.params, network, overrides=bool(chip_slowdown or link_overrides))
    fidelity, why = resolve_fidelity(spec.fidelity, obstacle)
    if fidelity is Fidelity.ANALYTIC:
        raise InfeasibleError("fidelity analytic is not offered for a whole step; use auto, symmetric or full")
    notes: list[str] = [why] if why else []
    if spec.dcn_sharded and fidelity is Fidelity.SYMMETRIC:
        # a weight gather across slices completes chip by chip in each host's order, and the ICI collectives it
        # feeds start when their own members' parts are in: groups drift apart, so every chip runs
        fidelity = dcn_sharded_fidelity(spec.fidelity)
        notes.append(f"fidelity auto chose full: {DCN_UNEQUAL}")
    reps: list[tuple[int, ...]] | None = None
    if fidelity is Fidelity.SYMMETRIC:  # with DCN slices each representative stands for its host's chips
        reps = list(representative_chips(algorithm, plan.params, network))
    if reps is None and link_busy is None and slices == 1:  # a full run: replicas no slowdown touches behave alike
        reps = replica_representatives(mapping, chip_slowdown, link_overrides)
        if reps is not None:
            kept = len(reps) // (mesh[0] * mesh[1])
            alike = data - kept + 1
            notes.append(f"{kept} of {data} replicas simulated chip by chip: the {alike} "
                         f"{'no slowdown touches ' if kept > 1 else ''}behave alike, so one stands for all (exact; "
                         "link totals not reported)")
    total_layers = spec.model.layers
    sizes: list[int] = []
    bytes_per_layer, busiest = None, None
    host = HostSchedule.of(plan)
    host_s: dict[str, Any] = {}
    if (reps == [(0, 0)] and spec.extrapolate and spec.prefetch not in EARLY_PREFETCH and plan.data is None
            and host is None):
        # one representative chip: ops start and end with the chip idle and no collective in flight, so
        # the step is the sum of its ops' times and each distinct op is simulated once
        step_time, compute, exposed, idle, stall, per_op = _sum_of_ops(spec, network, plan, reps, link_busy)
        exposed_data = exposed_dcn = 0.0
        notes.append(f"each distinct op simulated once and summed over {total_layers} layers")
    else:
        # gathers across sharding slices drift apart in each host's order over many layers, so a window of two
        # or three is no steady state: every layer runs
        windowed = spec.extrapolate and not spec.dcn_sharded
        if spec.extrapolate and not windowed:
            notes.append("every layer simulated: weight gathers across slices (dcn_fsdp) settle over many layers")
        sizes = [spec.window, spec.window + 1] if windowed and total_layers > spec.window + 1 else [
            total_layers]

        def run(layers: int, keep_busy: bool, chip: int | None = None) -> OpsRun:
            return run_ops(network, step_sequence(plan, layers), plan.gemms, representatives=reps,
                           window=PrefetchWindow(spec.prefetch_window, spec.prefetch_budget),
                           chip_slowdown=chip_slowdown, keep_link_busy=keep_busy, host=host, dcn_slices=slices,
                           chip=chip)

        if len(sizes) == 1 and total_layers > spec.window + 1:
            _check_every_layer_memory(spec, run, total_layers)
        # the breakdown is extrapolated chip by chip, so every window accounts the critical chip of the largest
        largest = run(sizes[-1], link_busy is not None)
        windows = [run(n, link_busy is not None, largest.account.critical) for n in sizes[:-1]] + [largest]

        def extrapolate(values: list[float]) -> float:
            return _extrapolate(values, sizes, total_layers)

        step_time = extrapolate([w.account.elapsed for w in windows])
        if link_busy is not None:
            _extrapolate_busy(link_busy, [w.link_busy for w in windows], sizes, total_layers)
        compute = extrapolate([w.account.parts.compute for w in windows])
        exposed = extrapolate([w.account.parts.exposed for w in windows])
        exposed_data = extrapolate([w.account.exposed_data for w in windows])
        exposed_dcn = extrapolate([w.account.exposed_dcn for w in windows])
        idle = extrapolate([w.account.parts.idle for w in windows])
        stall = extrapolate([w.account.hbm_stall for w in windows])
        if host is not None:
            host_s = _host_switches(spec, [w.host for w in windows], extrapolate)
        if len(sizes) == 2:
            notes.append(f"simulated {sizes[0]} and {sizes[1]} layers and extrapolated to {total_layers}")
        last = windows[-1]
        per_op = _per_op(last, 1 if sizes[-1] > 2 else 0)
        links = [w.account.links for w in windows]
        if links[-1] is not None:
            busiest = links[-1].max_link_utilisation
            first = links[0]
            bytes_per_layer = (links[-1].bytes_sent - first.bytes_sent if len(windows) == 2 and first is not None
                               else links[-1].bytes_sent / sizes[-1])
    if link_busy is not None:
        link_busy.topology = mapping.topology
    if tracer is not None:  # one more run, of the largest window, recording the traced chips
        notes += trace_step(spec, network, plan, fidelity, reps, sizes, windows[-1].account.elapsed if sizes else None,
                            step_time, chip_slowdown, tracer)
    chips = mapping.num_chips * slices
    mfu, hfu = _utilisation(whole, chips * hardware.chip.peak_flops, step_time)
    tokens_per_s, seconds_per_sequence = throughput(whole.batch, spec.model.sequence, step_time)
    memory = step_memory(whole, network, 1, step_panels(spec, plan))
    layers_used = block_layers(spec, mesh)
    return StepResult(
        model=spec.model.name, algorithm=algorithm.name, hardware=hardware.name,
        multi_axis=hardware.multi_axis_shown, overlap_limits=hardware.limits_shown, mesh=f"{mesh[0]}x{mesh[1]}",
        data_parallel=data, zero_stage=spec.zero_stage if data > 1 else None, layout=mapping.layout,
        named_layout=layout_name(data, mesh[0], mesh[1], spec.zero_stage, slices, sharded=spec.dcn_sharded),
        chips=chips, batch=whole.batch,
        microbatches=1, layers=total_layers,
        dataflows=[str(layer.dataflow) for layer in layers_used],
        transposes=[layer.transpose for layer in layers_used], slices=plan.slices,
        prefetch=str(spec.prefetch), recompute=str(spec.recompute), fidelity=str(fidelity),
        step_time_s=step_time, mfu=mfu, hfu=hfu, tokens_per_s=tokens_per_s,
        seconds_per_sequence=seconds_per_sequence, compute_s=compute, exposed_comm_s=exposed,
        exposed_data_comm_s=exposed_data, dcn_slices=slices,
        dcn_axis=None if slices == 1 else "dcn_fsdp" if spec.dcn_sharded else "dcn_data",
        exposed_dcn_comm_s=exposed_dcn, idle_s=idle,
        hbm_stall_s=stall, per_layer=[asdict(t) for t in per_op],
        memory_bytes_per_chip=memory.total_bytes, memory_capacity_bytes=memory.capacity_bytes,
        memory_feasible=memory.feasible, memory_shortfall_bytes=memory.shortfall_bytes,
        feasible=not plan.violations, violations=list(plan.violations), bytes_sent_per_layer=bytes_per_layer,
        max_link_utilisation=busiest, simulated_layers=sizes, mapping=mapping.describe(),
        switches={"embedding_lm_head": spec.embedding, "optimizer_update": spec.optimizer, "dtype": spec.dtype,
                  "attention": str(spec.attention), "prefetch_window": spec.prefetch_window,
                  "prefetch_budget_bytes": spec.prefetch_budget,
                  "bytes_per_param": spec.bytes_per_param, "variant": spec.variant, **host_s},
        notes=notes,
    )


DCN_UNEQUAL = "weights gathered across slices (dcn_fsdp) complete at different times on a host's chips"
"""Why no representative chips stand for a step whose weights are gathered across slices."""


def dcn_sharded_fidelity(requested: Fidelity) -> Fidelity:
    """The fidelity of a step whose weights are gathered across slices, where symmetric would otherwise run: full
    under auto, refused when asked for."""
    if requested is Fidelity.SYMMETRIC:
        raise InfeasibleError(f"--fidelity symmetric is not exact here: {DCN_UNEQUAL}", "use --fidelity auto or full")
    return Fidelity.FULL


def _host_switches(spec: StepSpec, runs: list[HostTime | None], extrapolate: Callable[[list[float]], float]
                   ) -> dict[str, Any]:
    """What a step with offloaded activations records (docs/results.md#result-fields): the names, the critical
    chip's host-link busy seconds each way and the seconds it waited for copies back, over the whole step."""
    found = [run for run in runs if run is not None]
    if len(found) < len(runs):
        return {}
    return {"remat_offload": sorted(str(name) for name in spec.remat_offload),
            "host_transfer_s": {"to_host": extrapolate([run.to_host for run in found]),
                                "from_host": extrapolate([run.from_host for run in found])},
            "host_wait_s": extrapolate([run.waited for run in found])}


def _utilisation(spec: StepSpec, peak: float, step_time: float) -> tuple[float, float]:
    """(MFU, HFU): model FLOPs, and those plus recomputation, over the chips' peak times the step time."""
    if step_time <= 0:
        return 0.0, 0.0
    return step_model_flops(spec) / (peak * step_time), step_hardware_flops(spec) / (peak * step_time)


def throughput(batch: int, sequence: int, step_time: float) -> tuple[float, float]:
    """(tokens per second, seconds per sequence) of a step of ``batch`` sequences of ``sequence`` tokens each."""
    if step_time <= 0:
        return 0.0, 0.0
    return batch * sequence / step_time, step_time / batch


def _extrapolate(values: Sequence[_Value], sizes: list[int], layers: int) -> _Value:
    """The whole step's value from those of the simulated windows of ``sizes`` layers: T(L) = T(w) + (L - w)
    (T(w + 1) - T(w)), or the one window's where all ``layers`` were simulated."""
    if len(values) == 1:
        return values[0]
    value: _Value = values[0] + (layers - sizes[0]) * (values[1] - values[0])
    return value


def _check_every_layer_memory(spec: StepSpec, run: Callable[[int, bool], OpsRun], layers: int) -> None:
    """Refuse a step of ``layers`` layers, every one simulated, that this process cannot hold: its events are
    extrapolated from two short windows as the step time would be (each layer adds the same events), and a run
    holds a record per event until its account is drawn up (``engine.footprint``)."""
    sizes = [spec.window, spec.window + 1]
    events = int(_extrapolate([float(run(n, False).events) for n in sizes], sizes, layers))
    check_events_memory(events, *every_layer_refusal(spec, layers))


def every_layer_refusal(spec: StepSpec, layers: int) -> tuple[str, str]:
    """(what, what to do instead) of the refusal of a step of ``layers`` layers, every one simulated, that this
    process cannot hold."""
    return (f"simulating every one of the {layers} layers of {spec.model.name}",
            "simulate a window of layers and extrapolate (drop --all-layers), or use fewer layers")


def _extrapolate_busy(link_busy: LinkBusy, windows: list[np.ndarray | None], sizes: list[int], layers: int) -> None:
    """Every link's busy seconds over the whole step from the simulated windows, as the step time is extrapolated
    (one more layer adds the same transfers, so the difference of the windows is one layer's)."""
    arrays = [seconds for seconds in windows if seconds is not None]
    if len(arrays) < len(windows):
        return
    if len(arrays) == 1:
        link_busy.seconds = arrays[0]
        link_busy.scope = f"the whole step ({layers} layers simulated)"
        return
    # a link idle in both windows stays exactly 0; elsewhere the difference only drops rounding
    link_busy.seconds = np.maximum(_extrapolate(arrays, sizes, layers), 0.0)
    link_busy.scope = (f"the whole {layers}-layer step, extrapolated from {sizes[0]} and {sizes[1]} simulated "
                       "layers")


def _microbatched(spec: StepSpec, network: Network, chip_slowdown: dict[int, float] | None,
                  link_busy: LinkBusy | None = None, tracer: Tracer | None = None) -> StepResult:
    """A step of m micro-batches: m times the blocks (and embedding) of one micro-batch, one optimizer update.

    Ops run one after another on each chip, so the total is m times a micro-step without the update plus the
    update's own time (the difference between a micro-step with and without it). In a D x R x C layout the m - 1
    micro-steps before the last accumulate: they keep their gradients local where the ZeRO stage keeps whole
    gradients (0, 1) and gather weights only under ZeRO 3 (``model.data_parallel``).
    """
    hardware, mapping = network.hardware, network.mapping
    m = spec.microbatches
    if spec.batch % m:
        raise InfeasibleError(f"--microbatches {m} does not divide the batch of {spec.batch} sequences")
    micro = replace(spec, batch=spec.batch // m, microbatches=1)
    one_busy = LinkBusy() if link_busy is not None else None
    one = simulate_step(micro, network, chip_slowdown=chip_slowdown, link_busy=one_busy, tracer=tracer)
    if tracer is not None:
        tracer.metadata["microbatch"] = f"one micro-batch of {micro.batch} sequences, of {m}"
        one.notes.append(f"trace: one micro-batch of {m} ({micro.batch} sequences)")
    alike = not spec.optimizer and mapping.data == 1 and spec.dcn_slices == 1  # every micro-step is the same
    bare_busy = LinkBusy() if link_busy is not None and not alike else one_busy
    bare = one if alike else simulate_step(replace(micro, optimizer=False, accumulating=True), network,
                                           chip_slowdown=chip_slowdown, link_busy=bare_busy)
    if link_busy is not None and one_busy is not None and bare_busy is not None:
        if one_busy.seconds is not None and bare_busy.seconds is not None:
            link_busy.seconds = _accumulated(m, one_busy.seconds, bare_busy.seconds)
        link_busy.topology = one_busy.topology
        link_busy.scope = f"{one_busy.scope}, times {m} micro-batches"

    def total(name: str) -> float:
        return float(_accumulated(m, getattr(one, name), getattr(bare, name)))

    step_time = total("step_time_s")
    mfu, hfu = _utilisation(spec, one.chips * hardware.chip.peak_flops, step_time)
    tokens_per_s, seconds_per_sequence = throughput(spec.batch, spec.model.sequence, step_time)
    once = [what for what, present in (("the optimizer update", spec.optimizer),
                                       ("the data-parallel synchronisation",
                                        mapping.data > 1 or spec.dcn_slices > 1)) if present]
    note = (f"{m} micro-batches of {micro.batch} sequences, gradients accumulated: {m} x the micro-step"
            + (f" without {' and '.join(once)}, plus {'them' if len(once) > 1 else 'it'} once" if once else ""))
    switches = dict(one.switches)
    if "host_wait_s" in one.switches:  # every micro-step moves its own activations to the host and back
        switches["host_transfer_s"] = {way: float(_accumulated(m, seconds, bare.switches["host_transfer_s"][way]))
                                       for way, seconds in one.switches["host_transfer_s"].items()}
        switches["host_wait_s"] = float(_accumulated(m, one.switches["host_wait_s"], bare.switches["host_wait_s"]))
    memory = step_memory(spec, network, m, micro_panels(spec, network))
    return replace(
        one, batch=spec.batch, microbatches=m, memory_bytes_per_chip=memory.total_bytes,
        memory_feasible=memory.feasible, memory_shortfall_bytes=memory.shortfall_bytes, step_time_s=step_time,
        mfu=mfu, hfu=hfu, tokens_per_s=tokens_per_s,
        seconds_per_sequence=seconds_per_sequence, switches=switches,
        compute_s=total("compute_s"), exposed_comm_s=total("exposed_comm_s"),
        exposed_data_comm_s=total("exposed_data_comm_s"), exposed_dcn_comm_s=total("exposed_dcn_comm_s"),
        idle_s=total("idle_s"),
        hbm_stall_s=total("hbm_stall_s"), notes=[*one.notes, note],
    )


def micro_panels(spec: StepSpec, network: Network) -> float:
    """The GeMM panels a chip of ``network`` holds in a step of ``spec``: those of one replica's share of one
    micro-batch, as simulated (``step_panels``)."""
    hardware, mapping = network.hardware, network.mapping
    share = replace(spec, batch=spec.batch // (spec.microbatches * mapping.data * spec.dcn_slices), microbatches=1)
    return step_panels(share, plan_step(share, mapping.shape, mapping.data, hardware.combine_threshold))


def step_panels(spec: StepSpec, plan: StepPlan) -> float:
    """The GeMM panels a chip of ``plan`` (``spec``'s, one replica's micro-batch) holds at its busiest moment."""
    return panel_peak(plan, PrefetchWindow(spec.prefetch_window, spec.prefetch_budget))


def step_memory(spec: StepSpec, network: Network, microbatches: int, panel_bytes: float) -> MemoryEstimate:
    """The working-set peak per chip of ``network`` in a step of ``spec.batch`` sequences (all slices) in
    ``microbatches`` micro-batches (``model.memory``), its plan holding ``panel_bytes`` of GeMM panels
    (``step_panels``)."""
    hardware, mapping = network.hardware, network.mapping
    data, slices = mapping.data, spec.dcn_slices
    chips, share, replicas = slice_memory_shape(mapping.num_chips, spec.batch, data, slices, spec.dcn_sharded)
    return estimate_memory(spec.model, chips, share // microbatches, spec.recompute, hardware.chip.usable_hbm,
                           spec.bytes_per_param, reserved_bytes=spec.prefetch_budget, data_parallel=replicas,
                           zero_stage=spec.zero_stage, embedding=spec.embedding, remat_save=spec.remat_save,
                           remat_offload=spec.remat_offload, attention=spec.attention, microbatches=microbatches,
                           combine_bytes=hardware.combine_threshold, panel_bytes=panel_bytes)


def _accumulated(m: int, one: _Value, bare: _Value) -> _Value:
    """A step of ``m`` micro-batches from a micro-step with the optimizer update (``one``) and without (``bare``)."""
    total: _Value = m * bare + one - bare
    return total


def _sum_of_ops(spec: StepSpec, network: Network, plan: StepPlan, reps: list[tuple[int, ...]],
                link_busy: LinkBusy | None = None) -> tuple[float, float, float, float, float, list[OpTiming]]:
    """(time, compute, exposed, idle, HBM stall, per-op rows) of the step as the sum of its ops, each simulated once;
    ``link_busy`` gets the sum of the ops' link busy times the same way."""
    seen: dict[str, OpTiming] = {}
    stalls: dict[str, float] = {}
    busy: dict[str, np.ndarray] = {}  # of the ops whose network has links

    def timing(op: Op) -> OpTiming:
        if op.name not in seen:
            if isinstance(op, GemmOp):  # through the GeMM cache the tuner's pricing shares
                job = plan.gemms[op.name]
                links = LinkBusy() if link_busy is not None else None
                g = simulate_gemm(job.ctx.problem, job.algorithm, job.ctx.params, network,
                                  fidelity=Fidelity.SYMMETRIC, link_busy=links)
                # symmetric fidelity simulates, so the breakdown is there (only analytic leaves it None)
                assert g.compute_s is not None and g.exposed_comm_s is not None and g.idle_s is not None
                assert g.hbm_stall_s is not None
                seen[op.name] = OpTiming(op.name, g.time_s, g.compute_s, g.exposed_comm_s, g.idle_s)
                stalls[op.name] = g.hbm_stall_s
                if links is not None and links.seconds is not None:
                    busy[op.name] = links.seconds
            else:
                ran = run_ops(network, [(op, 0)], plan.gemms, representatives=reps,
                              keep_link_busy=link_busy is not None)
                run = ran.account
                seen[op.name] = OpTiming(op.name, run.elapsed, run.parts.compute, run.parts.exposed,
                                         run.parts.idle)
                stalls[op.name] = run.hbm_stall
                if ran.link_busy is not None:
                    busy[op.name] = ran.link_busy
        return seen[op.name]

    layer = [timing(op) for op in plan.forward + plan.backward]
    once = [timing(op) for op in plan.before + plan.middle + plan.after]
    layers = spec.model.layers

    def total(name: str) -> float:
        return float(layers * sum(getattr(t, name) for t in layer) + sum(getattr(t, name) for t in once))

    stall = float(layers * sum(stalls[t.op] for t in layer) + sum(stalls[t.op] for t in once))
    if link_busy is not None:
        if busy and all(t.op in busy for t in layer + once):  # a network without links has none
            zero = np.zeros(len(next(iter(busy.values()))))
            link_busy.seconds = layers * sum((busy[t.op] for t in layer), zero) + sum((busy[t.op] for t in once), zero)
        link_busy.scope = f"the whole {layers}-layer step, each distinct op simulated once and summed"
    return total("time_s"), total("compute_s"), total("exposed_comm_s"), total("idle_s"), stall, layer


def _per_op(run: OpsRun, layer: int) -> list[OpTiming]:
    """Breakdown of each op of one layer (forward and backward) on the critical chip."""
    rows = []
    for name, index, start, end in run.timeline:
        if index != layer:
            continue
        mxu = [(max(a, start) - start, min(b, end) - start) for a, b in run.account.mxu if b > start and a < end]
        comm = [(max(a, start) - start, min(b, end) - start) for a, b in run.account.comm if b > start and a < end]
        parts = breakdown(mxu, comm, end - start)
        rows.append(OpTiming(name, end - start, parts.compute, parts.exposed, parts.idle))
    return rows

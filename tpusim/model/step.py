"""One training step: every chip runs forward then backward over the layers; times are extrapolated.

The step program runs the block's ops (``layer.block_ops``) in order on every chip: distributed GeMMs by
the chosen algorithm's own chip program, local work on the MXU or HBM, LayerNorm statistics as small
all-reduces. Identical layers are simulated once: a window of ``w`` and ``w + 1`` layers is simulated and
the step is T(L) = T(w) + (L - w) (T(w + 1) - T(w)), exact once the schedule repeats from layer to layer
(a test checks it against simulating every layer). Breakdowns come from the critical chip.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import simpy

from tpusim.collectives.device import Device, run_spmd
from tpusim.collectives.network import Network, network_for
from tpusim.collectives.runtime import CollectiveRuntime
from tpusim.config import HardwareProfile, TransformerModel
from tpusim.engine.accounting import breakdown
from tpusim.engine.cache import cache_key
from tpusim.engine.context import Context
from tpusim.engine.links import LinkOverride
from tpusim.engine.result import ResultMixin
from tpusim.engine.simulation import Simulation
from tpusim.engine.tensor import Tensor
from tpusim.errors import InfeasibleError
from tpusim.gemm.algorithm import GemmAlgorithm, GemmContext, get_algorithm
from tpusim.gemm.fidelity import representative_chips, resolve_fidelity, symmetric_obstacle
from tpusim.gemm.params import GemmParams
from tpusim.gemm.sharding import operand_blocks
from tpusim.gemm.simulate import check_gemm, simulate_gemm
from tpusim.model.feasibility import split_for
from tpusim.model.layer import (
    FF_LAYERS,
    BlockShape,
    GemmOp,
    LocalOp,
    NormStatsOp,
    Op,
    block_ops,
    ff_layers,
    model_flops_per_block,
    step_extras,
)
from tpusim.model.memory import estimate_memory
from tpusim.topology import MeshMapping
from tpusim.vocabulary import Dataflow, Fidelity, Prefetch, Recompute


@dataclass(frozen=True)
class StepSpec:
    """Everything that determines a step's timing besides the hardware and the mapping."""

    model: TransformerModel
    algorithm: str
    batch: int
    slices: tuple[int | None, ...] | None = None  # one per FF layer (qkv, out_proj, ff1, ff2)
    dataflows: tuple[Dataflow, ...] | None = None
    transposes: tuple[bool, ...] | None = None
    prefetch: Prefetch = Prefetch.IDEAL
    variant: str | None = None
    recompute: Recompute = Recompute.NONE
    bytes_per_param: float = 16.0
    dtype: str = "bf16"
    stats_dtype: str = "fp32"
    allow_infeasible: bool = False
    extrapolate: bool = True
    window: int = 2
    fidelity: Fidelity = Fidelity.AUTO
    embedding: bool = False  # token embedding and LM head, once per step
    optimizer: bool = False  # the Adam update, once per step


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
    """One simulated training step (field meanings: DESIGN §5 glossary)."""

    model: str
    algorithm: str
    hardware: str
    mesh: str
    chips: int
    batch: int
    layers: int
    dataflows: list[str]
    transposes: list[bool]
    slices: list[int | None]
    prefetch: str
    recompute: str
    fidelity: str
    step_time_s: float
    mfu: float
    compute_s: float
    exposed_comm_s: float
    idle_s: float
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



@dataclass(frozen=True)
class _PreparedGemm:
    algorithm: GemmAlgorithm
    ctx: GemmContext
    x: Tensor
    w: Tensor


@dataclass
class _Window:
    """What one simulated window of layers produced."""

    time: float
    compute: float
    exposed: float
    idle: float
    timeline: list[tuple[str, int, float, float]]
    mxu: list[tuple[float, float]]
    comm: list[tuple[float, float]]
    bytes_sent: float | None
    busiest: float | None


def plan_ops(spec: StepSpec, mesh: tuple[int, int]) -> tuple[tuple[Op, ...], tuple[Op, ...],
                                                                  list[int | None], list[str]]:
    """The block's ops for this mesh, with feasibility resolved (or recorded, with allow_infeasible)."""
    algorithm = get_algorithm(spec.algorithm)
    split = split_for(spec.model, mesh, spec.batch, algorithm.parallelism, spec.allow_infeasible)
    tokens = spec.batch * spec.model.sequence
    layers = ff_layers(spec.model, tokens, spec.dataflows, spec.transposes)
    shape = BlockShape(
        tokens_per_chip=tokens / split.token_parts,
        hidden_per_chip=spec.model.hidden / split.feature_parts,
        ffn_per_chip=spec.model.ffn / split.feature_parts,
        sequences_per_chip=split.sequences_per_chip,
        heads_per_chip=split.heads_per_chip,
        rows_per_chip=tokens / split.token_parts,
    )
    forward, backward = block_ops(spec.model, layers, shape, spec.dtype, spec.stats_dtype, spec.recompute)
    if algorithm.parallelism != "2d":
        forward, backward = _one_d_statistics(forward, algorithm.parallelism), _one_d_statistics(
            backward, algorithm.parallelism)
    slices = list(spec.slices) if spec.slices else [None] * len(FF_LAYERS)
    violations = list(split.violations)
    return forward, backward, slices, violations


def _one_d_statistics(ops: tuple[Op, ...], parallelism: str) -> tuple[Op, ...]:
    """LayerNorm statistics under 1D parallelism: over the P-chip axis 0 (features split), or none (whole)."""
    out: list[Op] = []
    for op in ops:
        if isinstance(op, NormStatsOp):
            if parallelism == "1d-batch":
                continue
            op = replace(op, axis=0)
        out.append(op)
    return tuple(out)


def plan_extras(spec: StepSpec, mesh: tuple[int, int]) -> tuple[tuple[Op, ...], tuple[Op, ...], tuple[Op, ...]]:
    """Once-per-step ops (embedding and LM head, optimizer update) where switched on."""
    if not (spec.embedding or spec.optimizer):
        return (), (), ()
    algorithm = get_algorithm(spec.algorithm)
    split = split_for(spec.model, mesh, spec.batch, algorithm.parallelism, True)
    tokens = spec.batch * spec.model.sequence
    shape = BlockShape(tokens / split.token_parts, spec.model.hidden / split.feature_parts,
                       spec.model.ffn / split.feature_parts, split.sequences_per_chip, split.heads_per_chip,
                       tokens / split.token_parts)
    return step_extras(spec.model, shape, tokens, mesh, spec.dtype, embedding=spec.embedding,
                       optimizer=spec.optimizer, chips=mesh[0] * mesh[1])


def _prepare(spec: StepSpec, mesh: tuple[int, int], ops: tuple[Op, ...], slices: list[int | None],
             violations: list[str]) -> dict[str, _PreparedGemm]:
    algorithm = get_algorithm(spec.algorithm)
    prepared: dict[str, _PreparedGemm] = {}
    for op in ops:
        if not isinstance(op, GemmOp) or op.name in prepared:
            continue
        layer = op.layer.removeprefix("recompute.")
        # the LM head takes the first FF layer's slice count, or the nearest feasible one below it
        k = slices[FF_LAYERS.index(layer)] if layer in FF_LAYERS else slices[0]
        params = GemmParams(spec.prefetch, k, variant=spec.variant)
        try:
            check_gemm(algorithm, op.problem, mesh, params)
        except InfeasibleError as error:
            if (not spec.allow_infeasible and layer in FF_LAYERS) or k is None:
                raise
            fallback = _nearest_feasible_slices(algorithm, op.problem, mesh, params)
            if fallback is None:
                raise
            if layer in FF_LAYERS:
                violations.append(f"{op.name}: {error.message}; timed with slices {fallback}")
            params = replace(params, slices=fallback)
        ctx = GemmContext(op.problem, params, mesh)
        blocks = operand_blocks(op.problem.x_shape, op.problem.w_shape, algorithm.sharding(op.problem, mesh), mesh)
        x, w = Tensor(blocks["x"], spec.dtype), Tensor(blocks["w"], spec.dtype)
        prepared[op.name] = _PreparedGemm(algorithm, ctx, x, w)
    return prepared


def _nearest_feasible_slices(algorithm: GemmAlgorithm, problem: Any, mesh: tuple[int, int],
                             params: GemmParams) -> int | None:
    assert params.slices is not None
    for k in range(params.slices - 1, 0, -1):
        try:
            check_gemm(algorithm, problem, mesh, replace(params, slices=k))
            return k
        except InfeasibleError:
            continue
    return None


def _step_program(dev: Device, forward: tuple[Op, ...], backward: tuple[Op, ...], layers: int,
                  prepared: dict[str, _PreparedGemm], timeline: list[tuple[str, int, float, float]],
                  record: bool, extras: tuple[tuple[Op, ...], ...] = ((), (), ())
                  ) -> Generator[simpy.Event, Any, None]:
    before, middle, after = extras
    sequence = [(op, -1) for op in before]
    sequence += [(op, layer) for layer in range(layers) for op in forward]
    sequence += [(op, -1) for op in middle]
    sequence += [(op, layer) for layer in reversed(range(layers)) for op in backward]
    sequence += [(op, -1) for op in after]
    early: dict[tuple[str, int, int], simpy.Event] = {}
    pending: dict[tuple[str, int, int], simpy.Event] = {}
    for index, (op, layer) in enumerate(sequence):
        start = dev.env.now
        coming = sequence[index + 1][0] if index + 1 < len(sequence) else None
        if isinstance(coming, GemmOp) and prepared[coming.name].ctx.params.prefetch is Prefetch.PREVIOUS_OP:
            # previous-op prefetch: the coming GeMM's data-independent gathers start as this op starts
            job = prepared[coming.name]
            early = {key: dev.all_gather(job.w if key[0] == "w" else job.x, key[1], key[2])
                     for key in job.algorithm.prefetchable_gathers(job.ctx)}
        if isinstance(op, GemmOp):
            job = prepared[op.name]
            dev.prefetched = pending
            yield from job.algorithm.program(dev, job.ctx, job.x, job.w)
            dev.prefetched = {}
        elif isinstance(op, LocalOp):
            yield dev.compute(op.flops, op.hbm_bytes, name=op.name)
        elif isinstance(op, NormStatsOp) and dev.size(op.axis) > 1 and op.elements:
            # row means and mean-squares travel together in one all-reduce, as XLA fuses them
            yield dev.all_reduce(Tensor((2 * op.elements,), op.dtype), op.axis)
        pending, early = early, {}
        if record:
            timeline.append((op.name, layer, start, dev.env.now))


def _simulate_window(spec: StepSpec, network: Network, layers: int,
                     forward: tuple[Op, ...], backward: tuple[Op, ...], prepared: dict[str, _PreparedGemm],
                     chip_slowdown: dict[int, float] | None,
                     link_overrides: dict[int, LinkOverride] | None,
                     representatives: list[tuple[int, int]] | None,
                     extras: tuple[tuple[Op, ...], ...]) -> _Window:
    symmetric = representatives is not None
    sim = Simulation(network.hardware, network.mapping, chip_slowdown=chip_slowdown)
    network = network_for(network.hardware, network.mapping, context=network.context, link_overrides=link_overrides)
    runtime = CollectiveRuntime(sim, network, representatives=representatives)
    timelines: dict[int, list[tuple[str, int, float, float]]] = {}

    def args(dev: Device) -> tuple:
        timelines[dev.chip_id] = []
        return (forward, backward, layers, prepared, timelines[dev.chip_id], True, extras)

    run_spmd(sim, runtime, _step_program, args)
    ends = {chip: (tl[-1][3] if tl else 0.0) for chip, tl in timelines.items()}
    critical = max(ends, key=lambda c: (ends[c], -c))
    elapsed = float(sim.now)
    mxu = sim.chips[critical].spans
    comm = runtime.comm_spans.get(critical, [])
    parts = breakdown(mxu, comm, elapsed)
    links = None if symmetric else network.totals(elapsed)
    return _Window(elapsed, parts.compute, parts.exposed, parts.idle, timelines[critical], mxu, comm,
                   None if links is None else links.bytes_sent,
                   None if links is None else links.max_link_utilisation)


def simulate_step(spec: StepSpec, hardware: HardwareProfile, mapping: MeshMapping, *,
                  chip_slowdown: dict[int, float] | None = None,
                  link_overrides: dict[int, LinkOverride] | None = None,
                  context: Context | None = None) -> StepResult:
    """Simulate (a window of) the step and extrapolate to all layers; cached by everything that matters."""
    context = context if context is not None else Context()
    key = cache_key("step", spec, hardware, mapping.describe(), chip_slowdown, link_overrides)
    cached = context.timings.get(key)
    if cached is not None:
        return StepResult(**cached)
    network = network_for(hardware, mapping, context=context)
    result = _simulate_step(spec, network, chip_slowdown, link_overrides)
    context.timings.put(key, result.to_dict())
    return result


def _simulate_step(spec: StepSpec, network: Network, chip_slowdown: dict[int, float] | None,
                   link_overrides: dict[int, LinkOverride] | None) -> StepResult:
    hardware, mapping = network.hardware, network.mapping
    mesh = mapping.shape
    chips = mesh[0] * mesh[1]
    forward, backward, slices, violations = plan_ops(spec, mesh)
    extras = plan_extras(spec, mesh)
    prepared = _prepare(spec, mesh, forward + backward + extras[1], slices, violations)
    algorithm = get_algorithm(spec.algorithm)
    params = next(iter(prepared.values())).ctx.params
    obstacle = symmetric_obstacle(algorithm, params, network, overrides=bool(chip_slowdown or link_overrides))
    fidelity, why = resolve_fidelity(spec.fidelity, obstacle)
    if fidelity is Fidelity.ANALYTIC:
        raise InfeasibleError("fidelity analytic is not offered for a whole step; use auto, symmetric or full")
    notes: list[str] = [why] if why else []
    reps = representative_chips(algorithm, params, network) if fidelity is Fidelity.SYMMETRIC else None
    total_layers = spec.model.layers
    if reps == [(0, 0)] and spec.extrapolate and spec.prefetch is not Prefetch.PREVIOUS_OP:
        # one representative chip: ops start and end with the chip idle and no collective in flight, so
        # the step is the sum of its ops' times and each distinct op is simulated once
        step_time, compute, exposed, idle, per_op = _sum_of_ops(spec, network, forward, backward, prepared,
                                                                extras, reps)
        notes.append(f"each distinct op simulated once and summed over {total_layers} layers")
        sizes: list[int] = []
        bytes_per_layer, busiest = None, None
    else:
        if spec.extrapolate and total_layers > spec.window + 1:
            sizes = [spec.window, spec.window + 1]
        else:
            sizes = [total_layers]
        windows = [_simulate_window(spec, network, n, forward, backward, prepared, chip_slowdown,
                                    link_overrides, reps, extras) for n in sizes]

        def extrapolate(values: list[float]) -> float:
            if len(values) == 1:
                return values[0]
            return values[0] + (total_layers - sizes[0]) * (values[1] - values[0])

        step_time = extrapolate([w.time for w in windows])
        compute = extrapolate([w.compute for w in windows])
        exposed = extrapolate([w.exposed for w in windows])
        idle = extrapolate([w.idle for w in windows])
        if len(sizes) == 2:
            notes.append(f"simulated {sizes[0]} and {sizes[1]} layers and extrapolated to {total_layers}")
        last = windows[-1]
        per_op = _per_op(last, 1 if sizes[-1] > 2 else 0)
        busiest = last.busiest
        bytes_per_layer = None
        if last.bytes_sent is not None and len(windows) == 2 and windows[0].bytes_sent is not None:
            bytes_per_layer = last.bytes_sent - windows[0].bytes_sent
        elif last.bytes_sent is not None:
            bytes_per_layer = last.bytes_sent / sizes[-1]
    tokens = spec.batch * spec.model.sequence
    model_flops = model_flops_per_block(spec.model, tokens, spec.batch) * total_layers
    if spec.embedding:  # the LM head's three GeMMs onto the unpadded vocabulary
        model_flops += 3 * 2.0 * tokens * spec.model.hidden * spec.model.vocabulary
    mfu = model_flops / (chips * hardware.chip.peak_flops * step_time) if step_time > 0 else 0.0
    memory = estimate_memory(spec.model, chips, spec.batch, spec.recompute, hardware.chip.hbm_capacity,
                             spec.bytes_per_param)
    layers_used = ff_layers(spec.model, tokens, spec.dataflows, spec.transposes)
    used_slices = [prepared[f"{name}.fwd"].ctx.params.slices for name in FF_LAYERS]
    return StepResult(
        model=spec.model.name, algorithm=algorithm.name, hardware=hardware.name, mesh=f"{mesh[0]}x{mesh[1]}",
        chips=chips, batch=spec.batch, layers=total_layers,
        dataflows=[str(layer.dataflow) for layer in layers_used],
        transposes=[layer.transpose for layer in layers_used], slices=used_slices,
        prefetch=str(spec.prefetch), recompute=str(spec.recompute), fidelity=str(fidelity),
        step_time_s=step_time, mfu=mfu, compute_s=compute, exposed_comm_s=exposed, idle_s=idle,
        per_layer=[asdict(t) for t in per_op],
        memory_bytes_per_chip=memory.total_bytes, memory_capacity_bytes=memory.capacity_bytes,
        memory_feasible=memory.feasible, memory_shortfall_bytes=memory.shortfall_bytes,
        feasible=not violations, violations=violations, bytes_sent_per_layer=bytes_per_layer,
        max_link_utilisation=busiest, simulated_layers=sizes, mapping=mapping.describe(),
        switches={"embedding_lm_head": spec.embedding, "optimizer_update": spec.optimizer, "dtype": spec.dtype,
                  "bytes_per_param": spec.bytes_per_param, "variant": spec.variant},
        notes=notes,
    )


def _sum_of_ops(spec: StepSpec, network: Network, forward: tuple[Op, ...],
                backward: tuple[Op, ...], prepared: dict[str, _PreparedGemm], extras: tuple[tuple[Op, ...], ...],
                reps: list[tuple[int, int]]) -> tuple[float, float, float, float, list[OpTiming]]:
    """(time, compute, exposed, idle, per-op rows) of the step as the sum of its ops, each simulated once."""
    seen: dict[str, OpTiming] = {}

    def timing(op: Op) -> OpTiming:
        if op.name not in seen:
            if isinstance(op, GemmOp):  # through the GeMM cache the tuner's pricing shares
                job = prepared[op.name]
                g = simulate_gemm(job.ctx.problem, job.algorithm.name, job.ctx.params, network.hardware,
                                  network.mapping, context=network.context,
                                  fidelity=Fidelity.SYMMETRIC)
                seen[op.name] = OpTiming(op.name, g.time_s, g.compute_s, g.exposed_comm_s, g.idle_s)
            else:
                w = _simulate_window(spec, network, 1, (op,), (), prepared, None, None, reps,
                                     ((), (), ()))
                seen[op.name] = OpTiming(op.name, w.time, w.compute, w.exposed, w.idle)
        return seen[op.name]

    layer = [timing(op) for op in forward + backward]
    once = [timing(op) for part in extras for op in part]
    layers = spec.model.layers

    def total(field: str) -> float:
        return layers * sum(getattr(t, field) for t in layer) + sum(getattr(t, field) for t in once)

    return total("time_s"), total("compute_s"), total("exposed_comm_s"), total("idle_s"), layer


def _per_op(window: _Window, layer: int) -> list[OpTiming]:
    """Breakdown of each op of one layer (forward and backward) on the critical chip."""
    rows = []
    for name, index, start, end in window.timeline:
        if index != layer:
            continue
        mxu = [(max(a, start) - start, min(b, end) - start) for a, b in window.mxu if b > start and a < end]
        comm = [(max(a, start) - start, min(b, end) - start) for a, b in window.comm if b > start and a < end]
        parts = breakdown(mxu, comm, end - start)
        rows.append(OpTiming(name, end - start, parts.compute, parts.exposed, parts.idle))
    return rows

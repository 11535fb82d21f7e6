"""What a training step runs: the block's ops for a mesh, the step's once-only ops, and each GeMM made ready.

The plan is independent of time: it shards the block for the algorithm's parallelism (one block-shape builder
for the blocks and the once-per-step extras), lists the forward and backward ops of a block
(``tpusim.model.layer``), and prepares every distributed GeMM the step runs: its algorithm parameters and the
chip's operand blocks. Where a requested slice count is infeasible and infeasible points are allowed, the
GeMM takes the nearest feasible count below it (``GemmAlgorithm.slice_options``) and the plan records why.
The model FLOPs of a step (what MFU counts) are defined here too, once.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from pydantic import BaseModel

from tpusim.config import TransformerModel
from tpusim.config.requests import FF_LAYERS
from tpusim.engine.tensor import Tensor
from tpusim.errors import InfeasibleError
from tpusim.gemm.algorithm import GemmAlgorithm, GemmContext
from tpusim.gemm.params import GemmParams
from tpusim.gemm.sharding import operand_blocks
from tpusim.gemm.simulate import check_gemm
from tpusim.model.data_parallel import DataParallelPlan, data_parallel_plan
from tpusim.model.feasibility import Split, parts_for, split_for
from tpusim.model.layer import (
    BlockShape,
    FFLayer,
    GemmOp,
    NormStatsOp,
    Op,
    Pass,
    block_ops,
    ff_layers,
    kv_heads_on_mesh,
    lm_head_layer,
    model_flops_per_block,
    recompute_flops_per_block,
    stationary_elements,
    step_extras,
)
from tpusim.model.remat import HostCopy, block_graph, host_copies, plan_remat, tensor_bytes, tensor_widths
from tpusim.vocabulary import Activation, Attention, Dataflow, Fidelity, Prefetch, Recompute

__all__ = ["RESOLVED", "PreparedGemm", "StepPlan", "StepSpec", "block_layers", "block_shape", "derived_spec",
           "plan_block", "plan_step", "step_model_flops"]


@dataclass(frozen=True)
class StepSpec:
    """Everything that determines a step's timing besides the hardware and the mapping."""

    model: TransformerModel
    algorithm: GemmAlgorithm  # resolved from its name once, by the runner or the tuner's request
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
    microbatches: int = 1  # the batch runs as this many micro-batches, gradients accumulated
    attention: Attention = Attention.UNFUSED  # how the attention core meets HBM
    prefetch_window: int = 1  # ops ahead a gather may start under the ``window`` policy
    prefetch_budget: float | None = None  # bytes of gathered buffers in hand early (window policy); None: no bound
    zero_stage: int = 1  # how a D x R x C layout shards model state over the replicas (model.data_parallel)
    accumulating: bool = False  # a micro-step before the last of gradient accumulation (model.data_parallel)
    remat_save: frozenset[Activation] = frozenset()  # under recompute custom: saved in HBM (model.remat)
    remat_offload: frozenset[Activation] = frozenset()  # under recompute custom: kept in host memory
    dcn_slices: int = 1  # slices joined over DCN by a dcn_data or dcn_fsdp axis
    dcn_sharded: bool = False  # dcn_fsdp: the slices shard the model state (weights gathered across them)

    @property
    def tokens(self) -> int:
        return self.batch * self.model.sequence


RESOLVED = frozenset({"model", "algorithm", "batch", "slices", "dataflows", "transposes", "prefetch", "recompute",
                      "microbatches", "prefetch_budget", "remat_save", "remat_offload"})
"""The ``StepSpec`` fields a request holds as given (a name, text, ``auto``, an open choice, a list, or, in a tune
request, what is searched), which whoever builds the step resolves."""


def derived_spec(request: BaseModel, **resolved: Any) -> StepSpec:
    """The step ``request`` asks for. A ``StepSpec`` field the request also declares takes the request's value, so
    no option is copied by hand; those in ``RESOLVED`` (and the fields no request declares) come from ``resolved``.
    A resolved field the request declares but ``resolved`` leaves out is refused (``ValueError``): its raw value
    means something else."""
    declared = set(type(request).model_fields)
    missing = sorted((RESOLVED & declared) - set(resolved))
    if missing:
        raise ValueError(f"derived_spec needs the resolved {', '.join(missing)}")
    shared = {f.name: getattr(request, f.name) for f in fields(StepSpec)
              if f.name in declared and f.name not in RESOLVED and f.name not in resolved}
    return StepSpec(**shared, **resolved)


@dataclass(frozen=True)
class PreparedGemm:
    """One distributed GeMM of the step, ready to run: its algorithm, context and the chip's operand blocks."""

    algorithm: GemmAlgorithm
    ctx: GemmContext
    x: Tensor
    w: Tensor


@dataclass(frozen=True)
class StepPlan:
    """The ops of one block (forward, backward), the once-per-step ops around them, and the GeMMs prepared."""

    forward: tuple[Op, ...]
    backward: tuple[Op, ...]
    before: tuple[Op, ...]
    middle: tuple[Op, ...]
    after: tuple[Op, ...]
    gemms: dict[str, PreparedGemm]
    violations: tuple[str, ...]
    data: DataParallelPlan | None = None  # the collectives over the data axis of a D x R x C layout
    offload: tuple[HostCopy, ...] = ()  # each block's tensors offloaded to host memory (recompute custom)

    @property
    def params(self) -> GemmParams:
        """Parameters of the step's first GeMM (prefetch, variant: shared by all of them)."""
        return next(iter(self.gemms.values())).ctx.params

    @property
    def slices(self) -> list[int | None]:
        """The slice count each FF layer runs with (after any fallback)."""
        return [self.gemms[f"{name}.fwd"].ctx.params.slices for name in FF_LAYERS]


def block_shape(spec: StepSpec, mesh: tuple[int, int], allow_infeasible: bool) -> tuple[BlockShape, Split]:
    """One chip's share of the block under the algorithm's parallelism on ``mesh``."""
    algorithm = spec.algorithm
    split = split_for(spec.model, mesh, spec.batch, algorithm.parallelism, allow_infeasible)
    tokens = spec.tokens
    shape = BlockShape(
        tokens_per_chip=tokens / split.token_parts,
        hidden_per_chip=spec.model.hidden / split.feature_parts,
        ffn_per_chip=spec.model.ffn / split.feature_parts,
        sequences_per_chip=split.sequences_per_chip,
        heads_per_chip=split.heads_per_chip,
        rows_per_chip=tokens / split.token_parts,
        q_per_chip=spec.model.q_width / split.feature_parts,
        kv_per_chip=kv_heads_on_mesh(spec.model, split.feature_parts) * spec.model.head_dim / split.feature_parts,
    )
    return shape, split


def plan_block(spec: StepSpec, mesh: tuple[int, int]) -> tuple[tuple[Op, ...], tuple[Op, ...], tuple[str, ...]]:
    """(forward ops, backward ops, violations) of one block on ``mesh``; infeasible meshes raise unless allowed."""
    algorithm = spec.algorithm
    shape, split = block_shape(spec, mesh, spec.allow_infeasible)
    layers = block_layers(spec, mesh)
    forward, backward = block_ops(spec.model, layers, shape, spec.dtype, spec.stats_dtype, spec.recompute,
                                  spec.attention, remat_save=spec.remat_save, remat_offload=spec.remat_offload)
    if algorithm.parallelism != "2d":
        forward, backward = _one_d_statistics(forward, algorithm.parallelism), _one_d_statistics(
            backward, algorithm.parallelism)
    return forward, backward, split.violations


def block_layers(spec: StepSpec, mesh: tuple[int, int]) -> tuple[FFLayer, ...]:
    """The block's FF layers on ``mesh``: the requested dataflows, else each layer as ``runnable`` makes it."""
    feature_parts = parts_for(mesh, spec.algorithm.parallelism)[1]
    layers = ff_layers(spec.model, spec.tokens, spec.dataflows, spec.transposes, feature_parts)
    return layers if spec.dataflows is not None else tuple(runnable(layer, spec, mesh) for layer in layers)


def runnable(layer: FFLayer, spec: StepSpec, mesh: tuple[int, int]) -> FFLayer:
    """``layer`` with the heuristic's dataflow where the algorithm can run its three passes on ``mesh``, else the
    one it can run that keeps the largest matrix in place, as the heuristic would have: the heuristic ignores the
    algorithm's rules (a ring that cuts the tokens into two pieces per chip; docs/workloads.md#the-autotuner). A
    layer no dataflow can run keeps the heuristic's, whose refusal the step then reports."""
    algorithm = spec.algorithm
    params = GemmParams(spec.prefetch, variant=spec.variant)
    others = sorted((d for d in Dataflow if d is not layer.dataflow), key=lambda d: -stationary_elements(
        layer.tokens, layer.inputs, layer.outputs, d))
    for dataflow in (layer.dataflow, *others):
        option = replace(layer, dataflow=dataflow)
        try:
            for which in Pass:
                check_gemm(algorithm, option.gemm(which, spec.dtype), mesh, params)
        except InfeasibleError:
            continue
        return option
    return layer


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


def plan_step(spec: StepSpec, mesh: tuple[int, int], data: int = 1, combine_bytes: float = 0.0) -> StepPlan:
    """The whole plan of a step on ``mesh``, or on each of ``data`` replicas of it (``spec.batch`` is then one
    replica's batch); ``combine_bytes``: the hardware's data-parallel combine threshold."""
    forward, backward, violations = plan_block(spec, mesh)
    synced = data_parallel_plan(spec.model, mesh, data, spec.zero_stage, accumulating=spec.accumulating,
                                embedding=spec.embedding, dcn_slices=spec.dcn_slices,
                                dcn_sharded=spec.dcn_sharded, combine_bytes=combine_bytes)
    before: tuple[Op, ...] = ()
    middle: tuple[Op, ...] = ()
    after: tuple[Op, ...] = ()
    if spec.embedding or spec.optimizer:
        shape, _ = block_shape(spec, mesh, True)
        before, middle, after = step_extras(spec.model, shape, spec.tokens, mesh, spec.dtype,
                                            embedding=spec.embedding, optimizer=spec.optimizer,
                                            chips=mesh[0] * mesh[1],
                                            dataflow=runnable(lm_head_layer(spec.model, spec.tokens, mesh), spec,
                                                              mesh).dataflow,
                                            optimizer_share=1.0 if synced is None else synced.optimizer_share)
    found = list(violations)
    gemms = _prepare(spec, mesh, forward + backward + middle, found)
    offload = plan_offload(spec, mesh, forward, backward)
    return StepPlan(forward, backward, before, middle, after, gemms, tuple(found), synced, offload)


def plan_offload(spec: StepSpec, mesh: tuple[int, int], forward: tuple[Op, ...], backward: tuple[Op, ...]
                 ) -> tuple[HostCopy, ...]:
    """The host copies of one block on one chip under ``remat_offload`` (none otherwise): each offloaded tensor's
    share of the chip, bf16, as ``model.memory`` counts it in host memory."""
    if spec.recompute is not Recompute.CUSTOM or not spec.remat_offload:
        return ()
    model = spec.model
    activation = str(model.mlp.activation)
    plan = plan_remat(spec.recompute, spec.remat_save, spec.remat_offload, spec.attention,
                      [op.name for op in forward], block=model.block, activation=activation)
    shape, _ = block_shape(spec, mesh, True)
    qkv, out_proj, ff1, _ = ff_layers(model, 1)
    widths = tensor_widths(qkv.outputs, qkv.inputs, out_proj.inputs, ff1.outputs, model.ffn)
    # every activation is split like the [tokens, hidden] one: its rows over the token parts, its features over
    # the feature parts
    rows = shape.tokens_per_chip * shape.hidden_per_chip / spec.model.hidden
    nbytes = {tensor: tensor_bytes((tensor,), rows, widths) for tensor in plan.offloaded}
    return host_copies(plan, [op.name for op in backward], nbytes, block_graph(model.block, activation))


def _prepare(spec: StepSpec, mesh: tuple[int, int], ops: tuple[Op, ...], violations: list[str]
             ) -> dict[str, PreparedGemm]:
    algorithm = spec.algorithm
    slices = list(spec.slices) if spec.slices else [None] * len(FF_LAYERS)
    prepared: dict[str, PreparedGemm] = {}
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
            fallback = _nearest_below(algorithm, op, mesh, params)
            if fallback is None:
                raise
            if layer in FF_LAYERS:
                violations.append(f"{op.name}: {error.message}; timed with slices {fallback.slices}")
            params = fallback
        ctx = GemmContext(op.problem, params, mesh)
        blocks = operand_blocks(op.problem.x_shape, op.problem.w_shape, algorithm.sharding(op.problem, mesh), mesh)
        prepared[op.name] = PreparedGemm(algorithm, ctx, Tensor(blocks["x"], spec.dtype),
                                         Tensor(blocks["w"], spec.dtype))
    return prepared


def _nearest_below(algorithm: GemmAlgorithm, op: GemmOp, mesh: tuple[int, int], params: GemmParams
                   ) -> GemmParams | None:
    """The parameters with the largest feasible slice count below the requested one, if any."""
    assert params.slices is not None
    for k in reversed(algorithm.slice_options(op.problem, mesh, params) or []):
        if k >= params.slices:
            continue
        candidate = replace(params, slices=k)
        try:
            check_gemm(algorithm, op.problem, mesh, candidate)
        except InfeasibleError:
            continue
        return candidate
    return None


def step_hardware_flops(spec: StepSpec) -> float:
    """What HFU counts: the model FLOPs plus those the backward pass spends recomputing activations."""
    extra = recompute_flops_per_block(spec.model, spec.tokens, spec.batch, str(spec.recompute), spec.attention,
                                      remat_save=spec.remat_save, remat_offload=spec.remat_offload)
    return step_model_flops(spec) + extra * spec.model.layers


def step_model_flops(spec: StepSpec) -> float:
    """Model FLOPs of a whole step (what MFU counts): every block forward and backward, no padding and no
    recomputation, plus the LM head's three GeMMs onto the unpadded vocabulary when it is included."""
    flops = model_flops_per_block(spec.model, spec.tokens, spec.batch, spec.attention) * spec.model.layers
    if spec.embedding:
        flops += 3.0 * spec.tokens * spec.model.lm_head_flops_per_token
    return flops

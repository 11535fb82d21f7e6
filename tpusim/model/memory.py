"""Per-chip memory of a training step: weights, gradients, optimizer state and stored activations.

Parameters cost ``bytes_per_param`` each (16: bf16 weights and gradients plus fp32 master weights and
Adam moments) and are sharded over all chips: every block's (``TransformerModel.params_per_layer``), plus the
embedding and LM head (one matrix tied, two untied) when the step includes them. Stored activations follow
Korthikanti et al. (2022), "Reducing Activation Recomputation in Large Transformer Models", per layer with tensor
parallelism t and sequence parallelism (everything sharded over the t = P chips): no recomputation
s b (X + 5 a s) / t bytes; selective recomputation (attention recomputed) s b X / t; full recomputation only each
layer's input, 2 s b h / t. A batch split into m micro-batches (gradients accumulated) stores the activations of
one micro-batch at a time.

X is the bytes per token a block stores for its backward pass, from its real tensor widths (bf16 tensors 2 bytes
per element, dropout masks 1; ``stored_bytes_per_token``). With q = heads x head_dim, k = kv_heads x head_dim and
f = ffn: the attention side stores its input (2h), Q (2q), K and V (4k), the attention output (2q) and the
output projection's dropout mask (h); the MLP side its input (2h), its wide tensors (plain: FF1's output and the
activation's, 4f; gated: the gate, the up projection and their product, 6f) and its dropout mask (h); each
LayerNorm its input (2h; one LayerNorm in a parallel block, whose output feeds both sides and is stored once).
The score-sized tensors (softmax output 2, dropout mask 1 and dropout output 2 bytes per score) add 5 a s per
token, a = query heads. For GPT-3 and MT-NLG (q = k = h, f = 4h, plain, sequential) X = 4h + 11h + 19h = 34h,
Korthikanti's formula. K / V heads replicated over a wider feature split are not counted (the estimate is
independent of the mesh shape), nor are dropout masks dropped for models trained without dropout.
``minimal`` and ``custom`` store the tensors ``model.remat`` finds the backward pass reads (the layer input always,
bf16), an offloaded tensor in host memory instead of HBM.

With data parallelism (``data_parallel`` D replicas of a tensor-parallel group of t = P / D chips, each replica
training batch / D sequences) the model state splits as ZeRO (Rajbhandari et al. 2020, "ZeRO: Memory
Optimizations Toward Training Trillion Parameter Models") says: of the ``bytes_per_param``, 2 are bf16 weights, 2
bf16 gradients and the rest optimizer state (fp32 master weights and Adam moments); stage 0 replicates all of it
over D, stage 1 shards the optimizer state over D, stage 2 the gradients too, stage 3 the weights too. D = 1 is
2D tensor parallelism over every chip, exactly as before.

``plan_memory`` makes a configuration fit: ``recompute auto`` takes the least recomputation that fits, and an
open micro-batch count takes the fewest micro-batches that fit under full recomputation when no recomputation
fits the whole batch (docs/workloads.md#memory).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tpusim.config import TransformerModel
from tpusim.errors import InfeasibleError, UserError
from tpusim.model.layer import ff_layers, forward_op_names
from tpusim.model.remat import DERIVED, plan_remat, tensor_bytes, tensor_widths
from tpusim.model.working_set import Transients, transients
from tpusim.units import GB
from tpusim.vocabulary import Activation, Attention, BlockKind, MlpKind, Recompute, check_zero_stage

# least recomputation first: minimal recomputes the attention core as selective does, and the norms, residual and
# activation function besides, storing less (the projections' outputs, not Korthikanti's 34 s b h)
LEVELS = (Recompute.NONE, Recompute.SELECTIVE, Recompute.MINIMAL, Recompute.FULL)


@dataclass(frozen=True)
class MemoryEstimate:
    parameters_bytes: float
    activations_bytes: float
    capacity_bytes: float
    host_bytes: float = 0.0  # offloaded activations, per chip, in host memory (not counted against HBM)
    transient: Transients = field(default_factory=Transients)  # held at the busiest moment besides the rest

    @property
    def total_bytes(self) -> float:
        """The working-set peak: model state, every layer's stored activations and the transients."""
        return self.parameters_bytes + self.activations_bytes + self.transient.total_bytes

    @property
    def feasible(self) -> bool:
        return self.total_bytes <= self.capacity_bytes

    @property
    def shortfall_bytes(self) -> float:
        return max(self.total_bytes - self.capacity_bytes, 0.0)


def microbatches_text(count: int) -> str:
    """``"1 micro-batch"``, ``"8 micro-batches"``: how messages and summaries name a micro-batch count."""
    return f"{count} micro-batch{'es' if count != 1 else ''}"


def _usable(capacity_bytes: float, reserved_bytes: float | None) -> float:
    """The HBM left for the model once ``reserved_bytes`` (the prefetch window's budget of gathered buffers)
    are set aside."""
    return capacity_bytes - (reserved_bytes or 0.0)


WEIGHT_BYTES = 2  # bf16 weights
GRADIENT_BYTES = 2  # bf16 gradients


@dataclass(frozen=True)
class StateShares:
    """The share of each part of the model state a chip keeps under ZeRO: stage 1 shards the optimizer state
    over the data-parallel replicas, stage 2 the gradients too, stage 3 the weights too."""

    weights: float
    gradients: float
    optimizer: float


def state_shares(data_parallel: int, zero_stage: int) -> StateShares:
    """What a chip keeps of each state part with ``data_parallel`` replicas under ZeRO ``zero_stage``."""
    shard = 1.0 / data_parallel
    stage = check_zero_stage(zero_stage)
    return StateShares(shard if stage >= 3 else 1.0, shard if stage >= 2 else 1.0, shard if stage >= 1 else 1.0)


def state_bytes_per_param(bytes_per_param: float, data_parallel: int, zero_stage: int) -> float:
    """Bytes of model state per parameter of a tensor-parallel shard, after ZeRO sharding over ``data_parallel``."""
    optimizer = bytes_per_param - WEIGHT_BYTES - GRADIENT_BYTES
    if optimizer < 0:
        raise InfeasibleError(f"bytes per parameter {bytes_per_param!r} must cover the bf16 weights and gradients "
                              f"({WEIGHT_BYTES + GRADIENT_BYTES} bytes) to shard them over data-parallel replicas")
    shares = state_shares(data_parallel, zero_stage)
    return WEIGHT_BYTES * shares.weights + GRADIENT_BYTES * shares.gradients + optimizer * shares.optimizer


def stored_bytes_per_token(model: TransformerModel) -> int:
    """X of the module docstring: the bytes per token one block stores besides the score-sized tensors."""
    h, q, k, f = model.hidden, model.q_width, model.kv_width, model.ffn
    attention = 2 * h + 2 * q + 4 * k + 2 * q + h
    mlp = 2 * h + (6 if model.mlp.kind is MlpKind.GATED else 4) * f + h
    if model.block is BlockKind.PARALLEL:
        return 2 * h + attention + mlp - 2 * h  # one LayerNorm input, and its output stored once for both sides
    return 2 * 2 * h + attention + mlp


def layout_state_bytes_per_param(bytes_per_param: float, fsdp: int, data: int, zero_stage: int) -> float:
    """Bytes of model state per parameter of a tensor-parallel shard in a named layout: ``fsdp`` chips (every fsdp
    axis, ICI and DCN, multiplied) shard weights, gradients and optimizer state alike, and ``data`` chips (every
    data axis) shard them further as ZeRO ``zero_stage`` says (docs/workloads.md#layouts). fsdp = 1 is
    ``state_bytes_per_param`` over the data axes; data = 1 is ZeRO 3 over the fsdp axes."""
    if fsdp == 1 and data == 1:
        return bytes_per_param
    # stage 0 over one chip is the whole state, after the check that bytes_per_param covers weights and gradients
    return state_bytes_per_param(bytes_per_param, data, zero_stage if data > 1 else 0) / fsdp


def slice_memory_shape(chips: int, batch: int, data: int, slices: int, sharded: bool) -> tuple[int, int, int]:
    """(chips, batch, data-parallel replicas) whose memory per chip is that of a layout of ``slices`` slices of
    ``chips`` chips with ``data`` replicas each: slices that shard the model state (dcn_fsdp) are one slice of
    ``slices`` times the chips and replicas; slices that replicate it (dcn_data) are one slice on its share of
    the batch."""
    if sharded:
        return chips * slices, batch, data * slices
    return chips, batch // slices, data


def estimate_memory(model: TransformerModel, chips: int, batch: int, recompute: Recompute,
                    capacity_bytes: float, bytes_per_param: float = 16.0, *,
                    reserved_bytes: float | None = None, data_parallel: int = 1,
                    zero_stage: int = 0, embedding: bool = False, remat_save: frozenset[Activation] = frozenset(),
                    remat_offload: frozenset[Activation] = frozenset(), attention: Attention = Attention.UNFUSED,
                    microbatches: int = 1, combine_bytes: float = 0.0, panel_bytes: float = 0.0) -> MemoryEstimate:
    """Memory per chip of the whole model on ``chips`` chips: ``data_parallel`` replicas (each training
    ``batch / data_parallel`` sequences) of 2D (or 1D) tensor parallelism over ``chips / data_parallel`` chips,
    the model state sharded as ZeRO ``zero_stage`` says; against the capacity left after ``reserved_bytes``.
    ``embedding``: the step includes the embedding and LM head, whose parameters count too; ``batch`` is one
    micro-batch of ``microbatches``; ``attention``, ``combine_bytes`` (the profile's ``combine_threshold``) and
    ``panel_bytes`` (the GeMM panels held, which only the step's plan knows: 0 where the caller has none) shape the
    transients (``model.working_set``)."""
    if data_parallel < 1 or chips % data_parallel or batch % data_parallel:
        raise UserError(f"{data_parallel} data-parallel replicas must divide the {chips} chips and the batch of "
                              f"{batch} sequences")
    group = chips // data_parallel
    per_param = (bytes_per_param if data_parallel == 1
                 else state_bytes_per_param(bytes_per_param, data_parallel, zero_stage))
    weights = model.params_per_layer * model.layers + (model.embedding_params if embedding else 0)
    params = weights * per_param / group
    s, b, h, a = model.sequence, batch // data_parallel, model.hidden, model.heads
    stored = stored_bytes_per_token(model)
    # written as h x (X / h ...) so that X = 34h gives Korthikanti's figures to the last bit; a fused kernel
    # stores no score-sized tensor
    attention = Attention(attention)  # a request may carry its name
    scores = 5 * a * s / h if attention is Attention.UNFUSED else 0
    whole_layer = s * b * h * (stored / h + scores)
    host = 0.0
    if recompute in DERIVED:
        per_layer, host = stored_activation_bytes(model, s * b, recompute, remat_save, remat_offload)
    else:
        per_layer = {Recompute.NONE: whole_layer, Recompute.SELECTIVE: stored * s * b,
                     Recompute.FULL: 2 * s * b * h}[recompute]
    gradient_share = state_shares(data_parallel, zero_stage).gradients
    held = transients(model, s * b, group, max(whole_layer - per_layer, 0.0), attention,
                      data_parallel=data_parallel, zero_stage=zero_stage, microbatches=microbatches,
                      gradient_params=weights / group * gradient_share, combine_bytes=combine_bytes,
                      panel_bytes=panel_bytes)
    return MemoryEstimate(params, per_layer * model.layers / group, _usable(capacity_bytes, reserved_bytes),
                          host * model.layers / group, held)


def stored_activation_bytes(model: TransformerModel, tokens: int, recompute: Recompute,
                            remat_save: frozenset[Activation] = frozenset(),
                            remat_offload: frozenset[Activation] = frozenset()) -> tuple[float, float]:
    """(HBM bytes, host bytes) of one layer's stored activations over ``tokens`` tokens under ``minimal`` or
    ``custom`` (the whole layer, before sharding over chips)."""
    qkv, out_proj, ff1, _ = ff_layers(model, 1)
    widths = tensor_widths(qkv.outputs, qkv.inputs, out_proj.inputs, ff1.outputs, model.ffn)
    # what is kept does not depend on the attention variant: its gradient reads Q, K and V under every one
    plan = plan_remat(recompute, remat_save, remat_offload, Attention.UNFUSED, forward_op_names(model),
                      block=model.block, activation=str(model.mlp.activation))
    return tensor_bytes(plan.kept, tokens, widths), tensor_bytes(plan.offloaded, tokens, widths)



@dataclass(frozen=True)
class MemoryPlan:
    """How a step fits in HBM: its recomputation, its micro-batch count and the resulting estimate."""

    recompute: Recompute
    microbatches: int
    estimate: MemoryEstimate


def plan_memory(model: TransformerModel, chips: int, batch: int, recompute: Recompute, microbatches: int | None,
                capacity_bytes: float, bytes_per_param: float = 16.0, *, ignore_memory: bool = False,
                reserved_bytes: float | None = None, data_parallel: int = 1, zero_stage: int = 0,
                embedding: bool = False, remat_save: frozenset[Activation] = frozenset(),
                remat_offload: frozenset[Activation] = frozenset(), attention: Attention = Attention.UNFUSED,
                combine_bytes: float = 0.0, panel_bytes: float = 0.0,
                past: frozenset[tuple[Recompute, int]] = frozenset()) -> MemoryPlan:
    """The recomputation and micro-batch count a step runs with (see the module docstring).

    ``recompute`` AUTO and ``microbatches`` None are open choices; explicit values are kept. Unless memory is
    ignored, a configuration that cannot fit raises ``InfeasibleError`` naming the smallest shortfall and what
    would fit. ``panel_bytes``: the GeMM panels charged at every choice (those of the step's plan at the fewest
    micro-batches tried; more micro-batches hold no larger panels, so the charge never makes a choice that does
    not fit look as if it did). ``past``: (recompute, micro-batches) choices already found not to fit once the
    layout's own needs were counted (the tuner's), passed over for the next that fits.
    """
    capacity_bytes = _usable(capacity_bytes, reserved_bytes)
    shards: dict[str, Any] = {"data_parallel": data_parallel, "zero_stage": zero_stage, "attention": attention,
                              "combine_bytes": combine_bytes, "panel_bytes": panel_bytes}
    if recompute is Recompute.CUSTOM:
        shards |= {"remat_save": remat_save, "remat_offload": remat_offload}
    levels = LEVELS if recompute is Recompute.AUTO else (recompute,)
    counts = [microbatches] if microbatches is not None else [1]
    if ignore_memory:
        level, count = levels[0], counts[0]
        return MemoryPlan(level, count, estimate_memory(model, chips, batch // count, level, capacity_bytes,
                                                         bytes_per_param, **shards, embedding=embedding,
                                                         microbatches=count))
    if microbatches is None:
        counts += [m for m in range(2, batch + 1) if batch % m == 0 and (batch // m) % data_parallel == 0]
    tried: list[MemoryPlan] = []
    for count in counts:
        for level in levels if count == 1 else levels[-1:]:
            estimate = estimate_memory(model, chips, batch // count, level, capacity_bytes, bytes_per_param, **shards,
                                       embedding=embedding, microbatches=count)
            found = MemoryPlan(level, count, estimate)
            if estimate.feasible and (found.recompute, found.microbatches) not in past:
                return found
            tried.append(found)
    if past:  # every open choice is used up
        raise InfeasibleError(f"{model.name} on {chips} chips (batch {batch}): no choice of recomputation and "
                              "micro-batches beyond those tried fits in HBM")
    smallest = min(tried, key=lambda plan: plan.estimate.shortfall_bytes)
    raise InfeasibleError(_shortfall(model, chips, batch, recompute, microbatches, smallest),
                          _what_fits(model, chips, batch, capacity_bytes, bytes_per_param, shards, embedding))


def _shortfall(model: TransformerModel, chips: int, batch: int, recompute: Recompute, microbatches: int | None,
               smallest: MemoryPlan) -> str:
    asked = f"recompute {recompute}" + (
        f", {microbatches_text(microbatches)}" if microbatches else "")
    estimate = smallest.estimate
    return (f"{model.name} on {chips} chips (batch {batch}, {asked}) does not fit in HBM: the smallest shortfall is "
            f"{estimate.shortfall_bytes / GB:.1f} GB per chip ({estimate.total_bytes / GB:.1f} GB of "
            f"{estimate.capacity_bytes / GB:.1f} GB with recompute {smallest.recompute}, "
            f"{microbatches_text(smallest.microbatches)})")


def _what_fits(model: TransformerModel, chips: int, batch: int, capacity_bytes: float, bytes_per_param: float,
               shards: dict[str, Any], embedding: bool) -> str:
    """The least change that fits, or why nothing on this many chips can."""
    data = shards["data_parallel"]
    shards = {name: shards[name] for name in ("data_parallel", "zero_stage", "attention", "combine_bytes",
                                              "panel_bytes")}
    for count in (m for m in range(1, batch + 1) if batch % m == 0 and (batch // m) % data == 0):
        for level in LEVELS:
            estimate = estimate_memory(model, chips, batch // count, level, capacity_bytes, bytes_per_param, **shards,
                                       embedding=embedding, microbatches=count)
            if estimate.feasible:
                micro = f" --microbatches {count}" if count > 1 else ""
                return (f"--recompute {level}{micro} fits ({estimate.total_bytes / GB:.1f} GB per chip); or "
                        "--ignore-memory to time it anyway")
    weights = estimate_memory(model, chips, data, Recompute.FULL, capacity_bytes, bytes_per_param,
                              **shards, embedding=embedding).parameters_bytes
    return (f"the weights, gradients and optimizer state alone take {weights / GB:.1f} GB per chip; use more chips, "
            "or --ignore-memory to time it anyway")

"""The transient HBM of a training step: what a chip holds at its busiest moment besides its model state and the
stored activations of every layer (docs/workloads.md#working-set).

The busiest moment is the backward pass of the last layer: every layer's checkpoint is still held, and so are

- **the recomputed activations** of that layer: everything its backward reads that the recomputation level did
  not store (with no recomputation, nothing; under full recomputation the whole layer but its input);
- **the attention workspace at its precision**: the unfused core holds two fp32 score-sized tensors at a time
  (scores and probabilities in forward, their gradients in backward), 8 bytes per score; a fused (flash) kernel
  keeps its score blocks on chip, so none;
- **the activation gradients**: the residual stream's gradient and that of the widest intermediate tensor, bf16;
- **weights gathered over the data axis in flight** (ZeRO 3, every fsdp layout): the collective in use and the
  one gathered ahead of it (``model.data_parallel``: one collective of lookahead), the largest two consecutive
  collectives of the step's sequence of blocks (``in_flight_elements``): a block's last collective is followed by
  the next block's first, so a block that is one collective holds two of them;
- **gradient buckets in flight** (ZeRO 2 and 3): the whole bf16 gradient of the collective being produced and of
  the one being reduce-scattered, before each keeps its 1/D shard;
- **the gradient accumulator** across micro-batches (more than one): fp32, one per parameter of the chip's
  gradient shard, beside the bf16 gradient of the micro-batch;
- **the GeMM panels**: the operand buffers the busiest GeMM of that backward pass holds while it runs, as its
  algorithm declares them (``GemmAlgorithm.panel_bytes``: a collective 2D GeMM's whole gathered panels, two of a
  MeshSlice's slices, ...), plus the early transfers the prefetch policy has started for the GeMMs ahead. Only the
  step's plan knows them (``model.program.panel_peak``); the tuner's gate charges a bound over the plans it may
  choose (``tuning.capacity.mesh_memory``). They come in as ``panel_bytes``.

Everything else is per chip of a tensor-parallel group of ``group`` chips, which shards activations and weights
alike. Not counted: XLA's fragmentation.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from tpusim.config import TransformerModel
from tpusim.model.data_parallel import block_parts
from tpusim.units import dtype_bytes
from tpusim.vocabulary import Attention, MlpKind

__all__ = ["ACCUMULATION_DTYPE", "SCORE_WORKSPACE_BYTES", "Transients", "in_flight_elements", "transients"]

SCORE_WORKSPACE_BYTES = 2 * dtype_bytes("fp32")
"""Bytes per attention score the unfused core holds at once: two fp32 score-sized tensors."""
ACCUMULATION_DTYPE = "fp32"
"""Gradients accumulated across micro-batches are summed in fp32 (the optimizer's master precision)."""
_BF16 = dtype_bytes("bf16")


@dataclass(frozen=True)
class Transients:
    """Transient bytes per chip at the step's busiest moment (see the module docstring)."""

    recompute_bytes: float = 0.0
    attention_bytes: float = 0.0
    gradient_bytes: float = 0.0
    gathered_bytes: float = 0.0
    bucket_bytes: float = 0.0
    accumulation_bytes: float = 0.0
    panel_bytes: float = 0.0

    @property
    def total_bytes(self) -> float:
        return (self.recompute_bytes + self.attention_bytes + self.gradient_bytes + self.gathered_bytes
                + self.bucket_bytes + self.accumulation_bytes + self.panel_bytes)


def transients(model: TransformerModel, tokens: int, group: int, recomputed_bytes: float, attention: Attention, *,
               data_parallel: int, zero_stage: int, microbatches: int, gradient_params: float,
               combine_bytes: float, panel_bytes: float = 0.0) -> Transients:
    """The transients of one chip: ``tokens`` of one micro-batch per replica, a tensor-parallel group of
    ``group`` chips, ``recomputed_bytes`` the layer's activations (before sharding) its backward re-produces,
    ``gradient_params`` the parameters of the chip's gradient shard, ``panel_bytes`` the GeMM panels the step's
    plan holds (``model.program.panel_peak``; a bound of them where the plan is still open)."""
    h, q, k = model.hidden, model.q_width, model.kv_width
    wide = (2 if model.mlp.kind is MlpKind.GATED else 1) * model.ffn
    scores = 0.0
    if attention is Attention.UNFUSED:
        scores = SCORE_WORKSPACE_BYTES * model.heads * tokens * model.sequence
    gradients = _BF16 * tokens * (h + max(wide, q + 2 * k))
    gathered = buckets = 0.0
    if data_parallel > 1 and zero_stage >= 2:
        parts = [elements for _, elements in block_parts(model, group, combine_bytes)]
        in_flight = _BF16 * in_flight_elements(parts, model.layers)
        buckets = in_flight
        gathered = in_flight if zero_stage >= 3 else 0.0
    accumulation = dtype_bytes(ACCUMULATION_DTYPE) * gradient_params if microbatches > 1 else 0.0
    return Transients(recomputed_bytes / group, scores / group, gradients / group, gathered, buckets, accumulation,
                      panel_bytes)


def in_flight_elements(parts: list[int], layers: int) -> int:
    """The most elements two consecutive data-parallel collectives hold together over a step of ``layers``
    blocks, each block ``parts`` (its collectives' elements, in order): forward and backward visit the same
    sequence, one reversed, so the pairs are a block's neighbours and, between blocks, its last with its first.
    One collective in the whole step is held alone."""
    pairs = [first + second for first, second in itertools.pairwise(parts)]
    if layers > 1:
        pairs.append(parts[-1] + parts[0])
    return max(pairs) if pairs else parts[0]

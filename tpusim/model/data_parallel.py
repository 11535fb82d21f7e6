"""Data parallelism in a training step: the collectives over the data axis of a D x R x C layout, as step ops.

D replicas of the R x C tensor-parallel mesh each train batch / D sequences. The chips at the same place (i, j)
of every replica hold the same shard of every weight, so they synchronise it over the data axis (logical axis 2,
``tpusim.topology.pod``), in the same simulation as the tensor-parallel collectives
(docs/workloads.md#data-parallelism):

- **gradients**: each weight matrix's gradient shard (bf16, the matrix's parameters / (R C) per chip) leaves as one
  bucket when its backward-weight GeMM ends: reduce-scattered over D under ZeRO stage >= 1 (each replica keeps 1/D
  and updates that part of the optimizer state), all-reduced under stage 0. The step waits for every bucket before
  the optimizer update (or, without it, at its end); until then they overlap the backward pass that follows.
- **weights**: under ZeRO 3 each weight matrix is all-gathered from its D shards before its use in the forward pass
  and again before its first use in the backward pass (its recomputed forward GeMM under recomputation, else its
  backward-data GeMM), one collective ahead: the next collective's gather starts as this one's weights are first
  used, and a matrix is freed after its last use in the pass.
  Under stages 1 and 2 the weights updated shard by shard are all-gathered once per step, one collective ahead of
  their forward use (the gather that follows the previous step's update, which the periodic step issues at its
  start); stage 0 updates replicated weights and gathers nothing.
- **combining**: consecutive matrices of a block whose bf16 shards together stay within the profile's
  ``combine_threshold`` share one collective, as XLA's combiners join small collectives (a small model's block is
  one collective, a large model's matrices one each).
- **the embedding** (tied with the LM head, where the step includes them): one more bucket, sent once the
  embedding's gradient is complete (after its backward, before the optimizer update), and under ZeRO >= 1 one more
  gather, before the embedding lookup.

- **across slices** (``dcn_slices`` S > 1): over a ``dcn_data`` axis each gradient bucket, once reduce-scattered
  over the data axis (or whole, without one), is all-reduced with the same chip of the other S - 1 slices over
  the data-centre network (``tpusim.collectives.dcn``), and the slices keep replicated model state. Over a
  ``dcn_fsdp`` axis the state is sharded over D x S (ZeRO 3): the bucket's shard is reduce-scattered across the
  slices instead, and each weight gather first all-gathers this chip's shard from the S slices' parts, then over
  the data axis as before.

Collectives per weight matrix, combined up to the threshold, follow XLA; one collective of lookahead is an
ASSUMPTION (XLA's latency-hiding scheduler chooses it under its memory limit; docs/workloads.md#data-parallelism).
A block's norm gains and biases are not counted (``TransformerModel.params_per_layer``). The collectives share the
chip's overlap limits with the tensor-parallel ones of the same kind (docs/network.md#overlap-limits).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from tpusim.config import TransformerModel
from tpusim.errors import UserError
from tpusim.model.layer import padded_vocabulary
from tpusim.topology.mapping import DATA_AXIS
from tpusim.units import dtype_bytes
from tpusim.vocabulary import CollectiveOp, check_zero_stage

if TYPE_CHECKING:
    from tpusim.model.op_kinds import OpVisitor

T = TypeVar("T")

__all__ = ["DATA_AXIS", "DataParallelPlan", "DataSyncOp", "DataWaitOp", "block_parts", "data_parallel_plan",
           "matrix_params"]

GRADIENTS = "dp.grads"
WEIGHTS = "dp.weights"
FSDP_STAGE = 3  # sharding across slices is ZeRO 3 (tpusim.config.layout.FSDP_ZERO_STAGE)
PART_JOIN = "+"  # matrices sharing one collective: "qkv+out_proj"
SYNCED_DTYPE = "bf16"  # gradients and weights cross the data axis in bf16 (model.memory's WEIGHT/GRADIENT_BYTES)


@dataclass(frozen=True)
class DataSyncOp:
    """Start a data-parallel collective of block ``target``'s gradients or weights and go on at once."""

    name: str  # GRADIENTS or WEIGHTS: what a later DataWaitOp waits for
    collective: CollectiveOp | None  # over the data axis; None: nothing on it (a layout of one replica per slice)
    elements: int  # bf16 elements this chip passes in
    target: int
    dcn_elements: int = 0  # bf16 elements of the tensor that crosses the slices over DCN (0: none)
    dcn_collective: CollectiveOp = CollectiveOp.ALL_REDUCE  # what runs across the slices
    part: str | None = None  # the weight matrix of block ``target`` (None: the embedding and LM head)

    @property
    def nbytes(self) -> int:
        """Bytes this chip passes in."""
        return self.elements * dtype_bytes(SYNCED_DTYPE)

    def accept(self, visitor: OpVisitor[T]) -> T:
        return visitor.data_sync(self)


@dataclass(frozen=True)
class DataWaitOp:
    """Wait until the data-parallel collectives of kind ``key`` for block ``target`` (None: all) and its weight
    matrix ``part`` (None: every one) have finished."""

    key: str
    target: int | None
    part: str | None = None

    @property
    def name(self) -> str:
        return f"{self.key}.wait"

    def accept(self, visitor: OpVisitor[T]) -> T:
        return visitor.data_wait(self)


@dataclass(frozen=True)
class DataParallelPlan:
    """What one chip synchronises over the data axis: the degree D, the ZeRO stage and one block's shard."""

    degree: int
    zero_stage: int
    parts: tuple[tuple[str, int], ...]  # a block's collectives: their matrices ("qkv+out_proj") and elements here
    accumulating: bool = False  # a micro-step before the last of gradient accumulation
    embedding_elements: int = 0  # parameters of the (tied) embedding and LM head on this chip; 0: not in the step
    dcn_slices: int = 1  # slices joined over DCN (a dcn_data or dcn_fsdp axis)
    dcn_sharded: bool = False  # dcn_fsdp: the slices shard the state (ZeRO 3 over D x S), else they replicate it

    def part_of(self, matrix: str) -> str:
        """The collective (``parts``) that gathers and reduces the weight matrix ``matrix``."""
        return next(name for name, _ in self.parts if matrix in name.split(PART_JOIN))

    @property
    def block_elements(self) -> int:
        """Parameters of one block on this chip (its tensor-parallel shard of every weight matrix)."""
        return sum(elements for _, elements in self.parts)

    def _elements(self, block: int, part: str | None) -> int:
        """This chip's parameters of ``block``'s matrix ``part`` (block -1: the embedding and LM head)."""
        if block < 0:
            return self.embedding_elements
        return dict(self.parts)[part] if part is not None else self.block_elements

    def _padded(self, block: int, part: str | None) -> int:
        """The matrix's elements rounded up to a multiple of D, so every replica holds an equal part."""
        return math.ceil(self._elements(block, part) / self.shards) * self.shards

    @property
    def shards(self) -> int:
        """How many parts the state of a chip's tensor-parallel shard is cut into: D, times S across sharding
        slices."""
        return self.degree * (self.dcn_slices if self.dcn_sharded else 1)

    @property
    def syncs_gradients(self) -> bool:
        """Whether this step sends its gradients: always but in an accumulating micro-step that can keep whole
        gradients (ZeRO 0 and 1; stages 2 and 3 keep only a 1/D shard, so every micro-step reduce-scatters)."""
        return not self.accumulating or (self.shards > 1 and self.zero_stage >= 2)

    def gradients(self, block: int, part: str | None = None) -> DataSyncOp:
        """The bucket of the gradients of ``block``'s matrix ``part``, sent when its backward-weight GeMM ends
        (then, across slices, its shard: all-reduced over dcn_data, reduce-scattered over dcn_fsdp)."""
        across = CollectiveOp.REDUCE_SCATTER if self.dcn_sharded else CollectiveOp.ALL_REDUCE
        if self.degree == 1:
            whole = self._padded(block, part)
            return DataSyncOp(GRADIENTS, None, whole, block, whole, across, part)
        if self.zero_stage >= 1:
            padded = self._padded(block, part)
            return DataSyncOp(GRADIENTS, CollectiveOp.REDUCE_SCATTER, padded, block,
                              padded // self.degree if self.dcn_slices > 1 else 0, across, part)
        return DataSyncOp(GRADIENTS, CollectiveOp.ALL_REDUCE, self._elements(block, part), block, part=part)

    def weights(self, block: int, part: str | None = None) -> DataSyncOp:
        """The all-gather of ``block``'s matrix ``part`` from its D shards; over dcn_fsdp first from the S slices'
        parts of this chip's shard (``dcn_elements``: the shard gathered across them)."""
        shard = self._padded(block, part) // self.degree
        collective = CollectiveOp.ALL_GATHER if self.degree > 1 else None
        return DataSyncOp(WEIGHTS, collective, shard, block, shard if self.dcn_sharded else 0,
                          CollectiveOp.ALL_GATHER, part)

    @property
    def gathers_forward(self) -> bool:
        """Whether weights are all-gathered before the forward pass (ZeRO 1, 2 after the update, so once per step;
        3 before every use)."""
        return self.shards > 1 and (self.zero_stage >= 3 or (self.zero_stage >= 1 and not self.accumulating))

    @property
    def gathers_backward(self) -> bool:
        """Whether weights are all-gathered again before the backward pass (ZeRO 3 frees them after use)."""
        return self.shards > 1 and self.zero_stage >= 3

    @property
    def optimizer_share(self) -> float:
        """The part of the chip's shard whose optimizer update this chip runs (1/D, or 1/(D S) over dcn_fsdp, once
        the state is sharded)."""
        return 1.0 / self.shards if self.zero_stage >= 1 else 1.0


def data_parallel_plan(model: TransformerModel, mesh: tuple[int, int], degree: int, zero_stage: int, *,
                       accumulating: bool = False, embedding: bool = False, dcn_slices: int = 1,
                       dcn_sharded: bool = False, combine_bytes: float = 0.0) -> DataParallelPlan | None:
    """The data-parallel part of a step of ``degree`` replicas of ``mesh`` in each of ``dcn_slices`` slices (None
    for a single replica on one slice); ``embedding``: the step includes the embedding and LM head (one tied
    matrix over the padded vocabulary, or the embedding table and the LM head matrix when untied, synchronised as
    one bucket). ``combine_bytes``: consecutive matrices whose shards together stay within it (bf16) share one
    collective, as XLA's combiners do."""
    stage = check_zero_stage(zero_stage)
    if degree == 1 and dcn_slices == 1:
        return None
    if dcn_slices > 1 and degree > 1 and stage == 0:
        raise UserError(f"a data axis at ZeRO stage 0 with {dcn_slices} slices over DCN is not supported (its "
                        "all-reduce would be split around the DCN exchange); use zero_stage 1, 2 or 3")
    chips = mesh[0] * mesh[1]
    tied = (math.ceil(model.embedding_matrices * padded_vocabulary(model, mesh) * model.hidden / chips)
            if embedding else 0)
    if dcn_sharded and stage < FSDP_STAGE:
        raise UserError(f"slices that shard the model state (dcn_fsdp) need ZeRO stage {FSDP_STAGE}, not {stage}")
    return DataParallelPlan(degree, stage, block_parts(model, chips, combine_bytes), accumulating, tied, dcn_slices,
                            dcn_sharded and dcn_slices > 1)


def block_parts(model: TransformerModel, chips: int, combine_bytes: float) -> tuple[tuple[str, int], ...]:
    """A block's data-parallel collectives on one chip of a ``chips``-chip tensor-parallel group: their matrices
    and elements (``DataParallelPlan.parts``)."""
    shards = [(name, math.ceil(params / chips)) for name, params in matrix_params(model).items()]
    return _combined(shards, combine_bytes)


def _combined(shards: list[tuple[str, int]], combine_bytes: float) -> tuple[tuple[str, int], ...]:
    """Consecutive matrices joined while their bf16 shards together stay within ``combine_bytes``."""
    parts: list[tuple[str, int]] = []
    for name, elements in shards:
        if parts and (parts[-1][1] + elements) * dtype_bytes(SYNCED_DTYPE) <= combine_bytes:
            joined, held = parts.pop()
            parts.append((f"{joined}{PART_JOIN}{name}", held + elements))
        else:
            parts.append((name, elements))
    return tuple(parts)


def matrix_params(model: TransformerModel) -> dict[str, int]:
    """Parameters of each weight matrix of a block, by the FF layer that uses it (a gated MLP's gate and up
    matrices are ``ff1``, one fused GeMM); they sum to ``model.params_per_layer``."""
    h, q, k, f = model.hidden, model.q_width, model.kv_width, model.ffn
    return {"qkv": h * (q + 2 * k), "out_proj": q * h, "ff1": h * f * (model.mlp.matrices - 1), "ff2": f * h}

"""A transformer block as a sequence of ops per chip, forward and backward (docs/workloads.md#the-transformer-block).

Four FF layers (QKV h -> (heads + 2 kv_heads) head_dim, out-projection heads head_dim -> h, FF1 h -> ffn, or 2 ffn
for a gated MLP, FF2 ffn -> h) become distributed GeMMs: each layer's dataflow gives its forward, backward-data and
backward-weight GeMMs (docs/algorithms.md#training-triplets-and-transposition triplets); a transposed layer runs the
same triplet with the two mesh axes swapped. Attention is local to a chip (B/R whole sequences, H/C whole heads; K / V
heads replicated where the feature split exceeds them). LayerNorm, residual adds and the activation are HBM- or
vector-bound; each LayerNorm also all-reduces its row statistics over the feature axis. A sequential block runs
attention then the MLP, each behind its own LayerNorm and residual add; a parallel block feeds one LayerNorm to both
and adds both branches in one residual add (docs/workloads.md#model-files). Everything here is per chip and
shape-only; the step module times it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING, TypeVar

from tpusim.config import TransformerModel
from tpusim.config.requests import FF_LAYERS
from tpusim.gemm.dataflow import GemmProblem
from tpusim.model.remat import DERIVED, plan_remat
from tpusim.units import dtype_bytes
from tpusim.vocabulary import Activation, Attention, BlockKind, Dataflow, MlpKind, Recompute

if TYPE_CHECKING:
    from tpusim.model.op_kinds import BlockOpVisitor

T = TypeVar("T")

__all__ = ["FF_LAYERS", "FLASH", "VECTOR_OPS_PER_ELEMENT", "BlockShape", "FFLayer", "GemmOp", "LocalOp",
           "NormStatsOp", "Op", "Pass", "attention_forward_flops", "attention_ops", "attention_scores", "block_ops",
           "ff_layers", "forward_op_names", "heuristic_dataflow", "kv_heads_on_mesh", "lm_head_layer",
           "model_flops_per_block", "padded_vocabulary", "stationary_elements", "step_extras"]


class Pass(StrEnum):
    FORWARD = "fwd"
    BACKWARD_DATA = "bwd_data"
    BACKWARD_WEIGHT = "bwd_weight"


@dataclass(frozen=True)
class FFLayer:
    """One feed-forward layer: B tokens, I inputs, O outputs, its dataflow and transposition."""

    name: str
    tokens: int
    inputs: int
    outputs: int
    dataflow: Dataflow
    transpose: bool = False

    def gemm(self, which: Pass, dtype: str) -> GemmProblem:
        """The (M, N, K) GeMM of one pass (docs/algorithms.md#training-triplets-and-transposition)."""
        b, i, o = self.tokens, self.inputs, self.outputs
        triplets = {
            Dataflow.OS: ((Dataflow.OS, b, o, i), (Dataflow.LS, b, i, o), (Dataflow.RS, i, o, b)),
            Dataflow.LS: ((Dataflow.LS, b, o, i), (Dataflow.OS, b, i, o), (Dataflow.RS, o, i, b)),
            Dataflow.RS: ((Dataflow.RS, b, o, i), (Dataflow.LS, i, b, o), (Dataflow.OS, i, o, b)),
        }
        index = list(Pass).index(which)
        dataflow, m, n, k = triplets[self.dataflow][index]
        return GemmProblem(m, n, k, dataflow, self.transpose, dtype)


def heuristic_dataflow(tokens: int, inputs: int, outputs: int) -> Dataflow:
    """Keep the largest matrix stationary (docs/workloads.md#the-autotuner)."""
    if outputs > inputs and tokens >= inputs:
        return Dataflow.OS
    if inputs >= outputs and tokens >= outputs:
        return Dataflow.LS
    return Dataflow.RS


def stationary_elements(tokens: int, inputs: int, outputs: int, dataflow: Dataflow) -> int:
    """Elements of the matrix ``dataflow`` keeps in place: Y (os), X (ls) or W (rs); the heuristic keeps the
    largest."""
    return {Dataflow.OS: tokens * outputs, Dataflow.LS: tokens * inputs, Dataflow.RS: inputs * outputs}[dataflow]


def kv_heads_on_mesh(model: TransformerModel, feature_parts: int) -> int:
    """K / V heads the mesh computes: the model's, or one per chip of the feature split where that split exceeds
    fewer K / V heads than query heads (each chip computes its own copy of the K / V head its query heads share,
    as Megatron does). A multi-head model (kv_heads = heads) never replicates: a split beyond its heads is a heads
    violation and its K / V are cut as its queries are."""
    if model.kv_heads >= feature_parts or model.kv_heads == model.heads:
        return model.kv_heads
    return feature_parts


def ff_layers(model: TransformerModel, tokens: int, dataflows: tuple[Dataflow, ...] | None = None,
              transposes: tuple[bool, ...] | None = None, feature_parts: int = 1) -> tuple[FFLayer, ...]:
    """The four FF layers of a block, with the heuristic's dataflows unless given; ``feature_parts`` (the split of
    the heads) sets the replicated K / V heads of the QKV GeMM (``kv_heads_on_mesh``). A gated MLP's gate and up
    matrices are one GeMM of 2 ffn outputs, as MaxText fuses them (``mlpwi``)."""
    h, f = model.hidden, model.ffn
    qkv_width = (model.heads + 2 * kv_heads_on_mesh(model, feature_parts)) * model.head_dim
    wide = 2 * f if model.mlp.kind is MlpKind.GATED else f
    shapes = {"qkv": (h, qkv_width), "out_proj": (model.q_width, h), "ff1": (h, wide), "ff2": (f, h)}
    layers = []
    for index, name in enumerate(FF_LAYERS):
        i, o = shapes[name]
        dataflow = dataflows[index] if dataflows else heuristic_dataflow(tokens, i, o)
        transpose = transposes[index] if transposes else False
        layers.append(FFLayer(name, tokens, i, o, dataflow, transpose))
    return tuple(layers)


@dataclass(frozen=True)
class GemmOp:
    layer: str
    which: Pass
    problem: GemmProblem

    @property
    def name(self) -> str:
        return f"{self.layer}.{self.which}"

    def accept(self, visitor: BlockOpVisitor[T]) -> T:
        return visitor.gemm(self)

    def renamed(self, prefix: str) -> GemmOp:
        """The op with ``prefix`` before its layer's name (a recomputed forward op)."""
        return GemmOp(prefix + self.layer, self.which, self.problem)


@dataclass(frozen=True)
class LocalOp:
    """Work local to a chip: ``flops`` on the MXU, ``vector_ops`` elementwise operations on the vector units or
    ``hbm_bytes`` of traffic, whichever takes longest."""

    name: str
    flops: float
    hbm_bytes: float
    vector_ops: float = 0.0

    def accept(self, visitor: BlockOpVisitor[T]) -> T:
        return visitor.local(self)

    def renamed(self, prefix: str) -> LocalOp:
        return LocalOp(prefix + self.name, self.flops, self.hbm_bytes, self.vector_ops)


# Elementwise operations per element (per score for softmax, per parameter for Adam), counted from each op's
# formula (docs/chip.md#vector-work): they set the vector-unit time where a profile has a vector rate.
VECTOR_OPS_PER_ELEMENT: Mapping[str, float] = MappingProxyType({
    "layernorm": 7.0,       # mean (1), centre (1), square and sum (2), scale by rsqrt (1), gain and bias (2)
    "layernorm.bwd": 11.0,  # the two reductions and the three-term input gradient, plus gain and bias grads
    "residual": 1.0,        # one add
    "residual.bwd": 1.0,    # one add of the two gradient paths
    "gelu": 8.0,            # tanh form: x^3, two multiply-adds, tanh, add, two multiplies
    "gelu.bwd": 13.0,       # the derivative of the tanh form times the incoming gradient
    "relu": 1.0,            # one max
    "relu.bwd": 2.0,        # compare, then select the incoming gradient or zero
    "silu": 4.0,            # x sigmoid(x): exp, add, divide, multiply
    "silu.bwd": 8.0,        # sigmoid again (3), then s (1 + x (1 - s)) (4) times the incoming gradient (1)
    "gate": 1.0,            # a gated MLP's multiply of the activated gate by the up projection
    "gate.bwd": 2.0,        # the incoming gradient times each factor
    "softmax": 5.0,         # max, subtract, exp, sum, divide
    "softmax.bwd": 4.0,     # dot of probabilities and gradient, subtract, multiply (and the scale)
    "loss": 5.0,            # the softmax of the logits
    "loss.bwd": 2.0,        # probabilities minus the one-hot target, scaled
    "embedding.bwd": 1.0,   # scatter-add of token gradients
    "adam": 12.0,           # two moment updates, bias corrections, rsqrt, update and weight decay
})


@dataclass(frozen=True)
class NormStatsOp:
    """LayerNorm's psum of row means and mean-squares over the feature axis (two small all-reduces)."""

    name: str
    elements: int  # per all-reduce, per chip
    dtype: str
    axis: int  # the logical axis that splits the features here

    def accept(self, visitor: BlockOpVisitor[T]) -> T:
        return visitor.norm_stats(self)

    def renamed(self, prefix: str) -> NormStatsOp:
        return NormStatsOp(prefix + self.name, self.elements, self.dtype, self.axis)


Op = GemmOp | LocalOp | NormStatsOp  # each an op_kinds.BlockOpKind: it answers a visitor for itself


@dataclass(frozen=True)
class BlockShape:
    """Per-chip sizes of the non-FF work."""

    tokens_per_chip: float  # tokens x hidden elements are split over all chips: tokens / R rows, hidden / C cols
    hidden_per_chip: float
    ffn_per_chip: float
    sequences_per_chip: float
    heads_per_chip: float
    rows_per_chip: float  # tokens per chip row (B S / R), the LayerNorm statistics count
    q_per_chip: float  # query (and attention output) features per chip: heads x head_dim / feature split
    kv_per_chip: float  # key (and value) features per chip, replicated K / V heads included


# bytes per attention score of the unfused core: QK^T writes the fp32 scores, softmax reads them and writes fp32
# probabilities, AV reads those (forward); the backward reads the probabilities, writes and reads the probability
# gradient, reads the probabilities again for the softmax gradient, writes the score gradient and reads it twice
# (for dQ and dK) (docs/workloads.md#attention)
UNFUSED_SCORE_BYTES = MappingProxyType({"forward": 4 * 4.0, "backward": 7 * 4.0})


def attention_ops(attention: Attention, shape: BlockShape, model: TransformerModel, dtype: str) -> tuple[LocalOp,
                                                                                                          LocalOp]:
    """(forward, backward) of the attention core on one chip (docs/workloads.md#attention).

    Every variant multiplies QK^T and AV forward (4 x sequences x heads x head_dim FLOP per score) and four such
    products backward. Unfused and fused compute every score of the S x S square (no causal discount);
    fused-causal only those on or below the diagonal (``attention_scores``). Unfused, the scores and
    probabilities pass through HBM in fp32; fused (flash-style), the core reads Q, K, V and writes O once, and
    the backward pass recomputes QK^T and the softmax.
    """
    b = dtype_bytes(dtype)
    act = shape.tokens_per_chip * (shape.q_per_chip + shape.kv_per_chip) / 2  # mean of Q, K, V and O per tensor
    causal = attention is Attention.FUSED_CAUSAL
    # the square is multiplied out as it always was, so unfused and fused figures stay bit for bit
    scores = (shape.sequences_per_chip * shape.heads_per_chip * attention_scores(model, causal) if causal
              else shape.sequences_per_chip * shape.heads_per_chip * model.sequence * model.sequence)
    flops = attention_forward_flops(model, shape.sequences_per_chip, shape.heads_per_chip, causal)
    softmax, softmax_bwd = VECTOR_OPS_PER_ELEMENT["softmax"], VECTOR_OPS_PER_ELEMENT["softmax.bwd"]
    if attention in FLASH:
        return (LocalOp("attention", flops, 4 * b * act, softmax * scores),
                LocalOp("attention.bwd", 2.5 * flops, 8 * b * act, (softmax + softmax_bwd) * scores))
    return (LocalOp("attention", flops, 4 * b * act + UNFUSED_SCORE_BYTES["forward"] * scores, softmax * scores),
            LocalOp("attention.bwd", 2 * flops, 8 * b * act + UNFUSED_SCORE_BYTES["backward"] * scores,
                    softmax_bwd * scores))


def activation_ops(model: TransformerModel, shape: BlockShape, dtype: str) -> tuple[LocalOp, LocalOp]:
    """(forward, backward) of the MLP's activation on one chip, named after it. Plain: read and write one
    [tokens, ffn] tensor (W elements per chip) forward, read it and the gradient and write one backward. Gated
    (``act(gate) * up``, one op): read the gate and up halves, write their product (3W) forward; read both halves
    and the gradient, write both halves' gradients (5W) backward, the activation recomputed from the gate."""
    b = dtype_bytes(dtype)
    wide = shape.tokens_per_chip * shape.ffn_per_chip
    per = VECTOR_OPS_PER_ELEMENT
    name = str(model.mlp.activation)
    if model.mlp.kind is MlpKind.GATED:
        return (LocalOp(name, 0.0, 3 * b * wide, (per[name] + per["gate"]) * wide),
                LocalOp(f"{name}.bwd", 0.0, 5 * b * wide,
                        (per[name] + per[f"{name}.bwd"] + per["gate.bwd"]) * wide))
    return (LocalOp(name, 0.0, 2 * b * wide, per[name] * wide),
            LocalOp(f"{name}.bwd", 0.0, 3 * b * wide, per[f"{name}.bwd"] * wide))
FLASH = frozenset({Attention.FUSED, Attention.FUSED_CAUSAL})
"""The attention variants whose core runs as one flash-style kernel."""


def attention_scores(model: TransformerModel, causal: bool, window: int | None = None) -> float:
    """Scores one head of one sequence computes: the S x S square, or the causal half S^2 / 2; with a sliding
    window of W tokens (causal), S W - W^2 / 2."""
    s = model.sequence
    if not causal:
        return float(s * s)
    if window is not None and window < s:
        return float(s * window - window * window / 2)
    return s * s / 2


RECOMPUTE_PREFIX = "recompute."  # the forward ops the backward pass reruns carry it (``_renamed``)


def block_ops(model: TransformerModel, layers: tuple[FFLayer, ...], shape: BlockShape, dtype: str,
              stats_dtype: str, recompute: str,
              attention_kind: Attention = Attention.UNFUSED, *, remat_save: frozenset[Activation] = frozenset(),
              remat_offload: frozenset[Activation] = frozenset()) -> tuple[tuple[Op, ...], tuple[Op, ...]]:
    """(forward ops, backward ops) of one block on one chip, sequential or parallel (see the module docstring);
    under ``minimal`` and ``custom`` the backward pass starts by rerunning the forward ops ``model.remat``
    derives."""
    b = dtype_bytes(dtype)
    act = shape.tokens_per_chip * shape.hidden_per_chip  # one [tokens, hidden] activation, per chip
    qkv, out_proj, ff1, ff2 = layers
    stats = int(shape.rows_per_chip)
    per = VECTOR_OPS_PER_ELEMENT
    attention, attention_bwd = attention_ops(attention_kind, shape, model, dtype)
    activation, activation_bwd = activation_ops(model, shape, dtype)

    def feature_axis(layer: FFLayer) -> int:
        return 0 if layer.transpose else 1

    def norm(tag: str, consumer: FFLayer) -> list[Op]:
        return [LocalOp(f"{tag}.norm", 0.0, 2 * b * act, per["layernorm"] * act),
                NormStatsOp(f"{tag}.psum", stats, stats_dtype, feature_axis(consumer))]

    def norm_bwd(tag: str, consumer: FFLayer) -> list[Op]:
        return [LocalOp(f"{tag}.norm.bwd", 0.0, 4 * b * act, per["layernorm.bwd"] * act),
                NormStatsOp(f"{tag}.psum.bwd", stats, stats_dtype, feature_axis(consumer))]

    def gemm(layer: FFLayer, which: Pass) -> GemmOp:
        return GemmOp(layer.name, which, layer.gemm(which, dtype))

    def both(layer: FFLayer) -> list[Op]:
        return [gemm(layer, Pass.BACKWARD_DATA), gemm(layer, Pass.BACKWARD_WEIGHT)]

    recomputed_attention: list[Op] = []
    if recompute == "selective":
        recomputed_attention.append(LocalOp("recompute.attention", attention.flops, attention.hbm_bytes,
                                            attention.vector_ops))
    if model.block is BlockKind.PARALLEL:
        forward: list[Op] = [
            *norm("ln1", qkv),
            gemm(qkv, Pass.FORWARD), attention, gemm(out_proj, Pass.FORWARD),
            gemm(ff1, Pass.FORWARD), activation, gemm(ff2, Pass.FORWARD),
            # x + attention + MLP: three tensors read, one written, two adds per element
            LocalOp("residual", 0.0, 4 * b * act, 2 * per["residual"] * act),
        ]
        body: list[Op] = [
            LocalOp("residual.bwd", 0.0, 2 * b * act, per["residual.bwd"] * act),
            *both(ff2), activation_bwd, *both(ff1),
            *both(out_proj), *recomputed_attention, attention_bwd, *both(qkv),
            # the two branches' input gradients summed before the one LayerNorm's backward
            LocalOp("branches.bwd", 0.0, 3 * b * act, per["residual.bwd"] * act),
            *norm_bwd("ln1", qkv),
        ]
    else:
        forward = [
            *norm("ln1", qkv),
            gemm(qkv, Pass.FORWARD),
            attention,
            gemm(out_proj, Pass.FORWARD),
            LocalOp("residual1", 0.0, 3 * b * act, per["residual"] * act),
            *norm("ln2", ff1),
            gemm(ff1, Pass.FORWARD),
            activation,
            gemm(ff2, Pass.FORWARD),
            LocalOp("residual2", 0.0, 3 * b * act, per["residual"] * act),
        ]
        body = [
            LocalOp("residual2.bwd", 0.0, 2 * b * act, per["residual.bwd"] * act),
            *both(ff2), activation_bwd, *both(ff1),
            *norm_bwd("ln2", ff1),
            LocalOp("residual1.bwd", 0.0, 2 * b * act, per["residual.bwd"] * act),
            *both(out_proj), *recomputed_attention, attention_bwd, *both(qkv),
            *norm_bwd("ln1", qkv),
        ]
    backward: list[Op] = []
    if recompute == "full":
        backward = _renamed(forward, RECOMPUTE_PREFIX)
    elif Recompute(recompute) in DERIVED:
        rerun = plan_remat(Recompute(recompute), remat_save, remat_offload, attention_kind,
                           [op.name for op in forward], block=model.block,
                           activation=str(model.mlp.activation)).recomputed
        backward = _renamed([op for op in forward if op.name in rerun], RECOMPUTE_PREFIX)
    backward += body
    return tuple(forward), tuple(backward)


def _renamed(ops: list[Op], prefix: str) -> list[Op]:
    return [op.renamed(prefix) for op in ops]


def attention_forward_flops(model: TransformerModel, sequences: float, heads: float, causal: bool = False) -> float:
    """FLOPs of the attention core's forward pass (QK^T and AV, 2 x head_dim each per score: the S x S square,
    or its causal half) for ``sequences`` x ``heads``."""
    if causal:
        return 4.0 * sequences * heads * model.head_dim * attention_scores(model, causal)
    return 4.0 * sequences * heads * model.head_dim * model.sequence * model.sequence


def _ff_forward_flops(model: TransformerModel, tokens: int) -> float:
    """FLOPs of the four FF layers' forward GeMMs for ``tokens`` tokens (the model's weights: replicated K / V
    heads are not model FLOPs)."""
    return 1.0 * tokens * model.block_matmul_flops_per_token


def model_flops_per_block(model: TransformerModel, tokens: int, sequences: int,
                          attention: Attention = Attention.UNFUSED) -> float:
    """Model FLOPs of one block, forward plus backward, no padding and no recomputation (for MFU): the attention
    core's full square, or its causal half where the kernel computes only that (fused-causal)."""
    causal = attention is Attention.FUSED_CAUSAL
    return 3 * _ff_forward_flops(model, tokens) + 3 * attention_forward_flops(model, sequences, model.heads, causal)


def recompute_flops_per_block(model: TransformerModel, tokens: int, sequences: int, recompute: str,
                              attention: Attention = Attention.UNFUSED, *,
                              remat_save: frozenset[Activation] = frozenset(),
                              remat_offload: frozenset[Activation] = frozenset()) -> float:
    """FLOPs the backward pass spends recomputing one block's forward (for HFU): the attention core under
    ``selective``, the whole forward under ``full``, the forward ops ``model.remat`` derives under ``minimal`` and
    ``custom``; a flash-style attention core also recomputes QK^T."""
    causal = attention is Attention.FUSED_CAUSAL
    attention_fwd = attention_forward_flops(model, sequences, model.heads, causal)
    fused = 0.5 * attention_fwd if attention in FLASH else 0.0
    if recompute == "selective":
        return attention_fwd + fused
    if recompute == "full":
        return _ff_forward_flops(model, tokens) + attention_fwd + fused
    if Recompute(recompute) in DERIVED:
        rerun = plan_remat(Recompute(recompute), remat_save, remat_offload, attention,
                           forward_op_names(model, attention), block=model.block,
                           activation=str(model.mlp.activation)).recomputed
        # the model's GeMMs (feature split 1: replicated K / V heads are not model FLOPs)
        gemms = {f"{layer.name}.fwd": 2.0 * tokens * layer.inputs * layer.outputs for layer in ff_layers(model, tokens)}
        flops = {**gemms, "attention": attention_fwd}
        return sum(flops.get(name, 0.0) for name in rerun) + fused
    return fused


def forward_op_names(model: TransformerModel, attention: Attention = Attention.UNFUSED) -> list[str]:
    """The names of a block's forward ops, in order (what ``model.remat`` derives recomputation from)."""
    shape = BlockShape(1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0)  # a stand-in: only the names are read
    forward, _ = block_ops(model, ff_layers(model, model.sequence), shape, "bf16", "fp32", "none", attention)
    return [op.name for op in forward]


OPTIMIZER = "optimizer"  # the name of the once-per-step Adam update


def padded_vocabulary(model: TransformerModel, mesh: tuple[int, int]) -> int:
    """Vocabulary padded to a multiple of 128 x R x C, so the LM head splits evenly (Megatron pads likewise)."""
    unit = 128 * mesh[0] * mesh[1]
    return -(-model.vocabulary // unit) * unit


def lm_head_layer(model: TransformerModel, tokens: int, mesh: tuple[int, int], dataflow: Dataflow | None = None
                  ) -> FFLayer:
    """The LM head as an FF layer onto the vocabulary padded for ``mesh``, with the heuristic's dataflow unless
    given."""
    vocab = padded_vocabulary(model, mesh)
    return FFLayer("lm_head", tokens, model.hidden, vocab, dataflow or heuristic_dataflow(tokens, model.hidden, vocab))


def step_extras(model: TransformerModel, shape: BlockShape, tokens: int, mesh: tuple[int, int], dtype: str,
                *, embedding: bool, optimizer: bool, chips: int, dataflow: Dataflow | None = None,
                optimizer_share: float = 1.0) -> tuple[tuple[Op, ...], tuple[Op, ...], tuple[Op, ...]]:
    """Once-per-step work outside the blocks: (before the blocks, between forward and backward, after).

    ``embedding`` adds the token-embedding lookup and its gradient, and the LM head (a distributed GeMM
    onto the padded vocabulary, forward and backward, plus the softmax cross-entropy); ``optimizer`` adds
    the Adam update, HBM-bound over this chip's share of the parameters (the blocks', and the embedding's when it is
    included: one matrix tied, two untied; fp32 master weights and two moments read and written, bf16 weight and
    gradient); ``optimizer_share`` is the part of that share this chip updates
    (1/D where ZeRO shards the optimizer state over D data-parallel replicas).
    """
    b = dtype_bytes(dtype)
    act = shape.tokens_per_chip * shape.hidden_per_chip
    before: list[Op] = []
    middle: list[Op] = []
    after: list[Op] = []
    if embedding:
        vocab = padded_vocabulary(model, mesh)
        head = lm_head_layer(model, tokens, mesh, dataflow)
        logits = shape.tokens_per_chip * vocab / (chips / (tokens / shape.tokens_per_chip))
        before.append(LocalOp("embedding", 0.0, 2 * b * act))
        middle += [GemmOp("lm_head", Pass.FORWARD, head.gemm(Pass.FORWARD, dtype)),
                   LocalOp("loss", 0.0, 2 * b * logits, VECTOR_OPS_PER_ELEMENT["loss"] * logits),
                   LocalOp("loss.bwd", 0.0, 2 * b * logits, VECTOR_OPS_PER_ELEMENT["loss.bwd"] * logits),
                   GemmOp("lm_head", Pass.BACKWARD_DATA, head.gemm(Pass.BACKWARD_DATA, dtype)),
                   GemmOp("lm_head", Pass.BACKWARD_WEIGHT, head.gemm(Pass.BACKWARD_WEIGHT, dtype))]
        after.append(LocalOp("embedding.bwd", 0.0, 3 * b * act, VECTOR_OPS_PER_ELEMENT["embedding.bwd"] * act))
    if optimizer:
        weights = model.params_per_layer * model.layers + (model.embedding_params if embedding else 0)
        params = weights / chips * optimizer_share
        after.append(LocalOp(OPTIMIZER, 0.0, params * (2 * 3 * 4 + 2 * b), VECTOR_OPS_PER_ELEMENT["adam"] * params))
    return tuple(before), tuple(middle), tuple(after)

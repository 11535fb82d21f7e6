"""The named choices every layer shares: dataflows, fidelity, prefetch, recompute, collective ops, ring variants.

Each is a closed set of lowercase names (a ``StrEnum``); ``parse`` accepts any letter case and turns an unknown
name into the standard one-line error listing the valid names, with a "did you mean" where one is close. This
module sits at the bottom of the layering (it imports only ``tpusim.errors``), so configuration models,
engines, algorithms and the command line all speak the same words.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from types import MappingProxyType
from typing import Self

from tpusim.errors import UserError, unknown_name

__all__ = ["EARLY_PREFETCH", "QKV_PARTS", "Activation", "Attention", "BlockKind", "Choice", "CollectiveOp", "Dataflow",
           "Fidelity", "MlpActivation", "MlpKind", "MultiAxis", "Precision", "Prefetch", "Recompute", "Ring",
           "check_remat"]


class Choice(StrEnum):
    """A closed set of names; ``parse`` turns a bad one into the standard unknown-name error."""

    @classmethod
    def noun(cls) -> str:
        """What the names are, for messages ("dataflow", "fidelity", ...)."""
        return _NOUNS[cls.__name__]

    @classmethod
    def parse(cls, name: object) -> Self:
        text = str(name)
        try:
            return cls(text.strip().lower())
        except ValueError:
            raise unknown_name(cls.noun(), text, [member.value for member in cls]) from None

    @classmethod
    def names(cls) -> list[str]:
        """The valid names, in declaration order."""
        return [member.value for member in cls]


class Dataflow(Choice):
    """Which operand of a distributed GeMM stays put (docs/algorithms.md#dataflows)."""

    OS = "os"  # output-stationary: Y = X W
    LS = "ls"  # LHS-stationary: Y = X W^T
    RS = "rs"  # RHS-stationary: Y = X^T W


class Fidelity(Choice):
    """How much of the cluster a run simulates (docs/network.md#fidelity-modes)."""

    FULL = "full"
    SYMMETRIC = "symmetric"
    ANALYTIC = "analytic"
    AUTO = "auto"


class Prefetch(Choice):
    """When a data-independent gather (a weight, or RS's saved activation) may run.

    ``none``: it is issued when its op starts and must finish before the GeMM that uses it.
    ``previous-op``: it is issued when the previous op starts (physically honest; for a GeMM simulated on
    its own there is no previous op, so it behaves like ``none``).
    ``previous-gemm``: it is issued when the previous GeMM starts, after that GeMM's own collectives: where XLA's
    latency-hiding scheduler places it with one all-gather in flight (docs/algorithms.md#prefetch-policy); alone, a GeMM
    has no previous GeMM and behaves as under ``none``.
    ``window``: it is issued when the op ``prefetch_window`` places earlier starts, while the gathered buffers
    issued early and not yet consumed fit in ``prefetch_budget`` bytes (window 0 is ``none``, window 1 with no
    budget ``previous-op``).
    ``ideal``: the MeshSlice authors' accounting: it overlaps the very GeMM that consumes it.
    """

    NONE = "none"
    PREVIOUS_OP = "previous-op"
    PREVIOUS_GEMM = "previous-gemm"
    WINDOW = "window"  # up to ``prefetch_window`` ops early, within ``prefetch_budget`` bytes of gathered buffers
    IDEAL = "ideal"


EARLY_PREFETCH = frozenset({Prefetch.PREVIOUS_OP, Prefetch.PREVIOUS_GEMM, Prefetch.WINDOW})
"""The policies under which a step starts data-independent gathers before their GeMM's op."""


class Recompute(Choice):
    """Which activations the backward pass recomputes instead of storing (docs/workloads.md#memory)."""

    AUTO = "auto"  # the least recomputation whose memory fits in HBM (none where memory is ignored)
    NONE = "none"
    SELECTIVE = "selective"
    MINIMAL = "minimal"  # MaxText's: the projection GeMMs' outputs saved, norms, activations and attention recomputed
    FULL = "full"
    CUSTOM = "custom"  # ``remat_save``'s activations saved, ``remat_offload``'s in host memory, the rest recomputed


class Activation(Choice):
    """MaxText's names of a decoder layer's activations, for ``recompute custom`` (docs/workloads.md#memory)."""

    DECODER_LAYER_INPUT = "decoder_layer_input"
    QUERY_PROJ = "query_proj"
    KEY_PROJ = "key_proj"
    VALUE_PROJ = "value_proj"
    QKV_PROJ = "qkv_proj"
    OUT_PROJ = "out_proj"
    CONTEXT = "context"
    MLPWI = "mlpwi"
    MLPWO = "mlpwo"


QKV_PARTS = frozenset({Activation.QUERY_PROJ, Activation.KEY_PROJ, Activation.VALUE_PROJ})
"""The three outputs of the one fused QKV GeMM of tpusim's block."""


def check_remat(recompute: Recompute, save: Iterable[Activation], offload: Iterable[Activation]) -> None:
    """One line for activation names given with a policy other than custom, or named twice."""
    save, offload = list(save), list(offload)
    if (save or offload) and recompute is not Recompute.CUSTOM:
        given = "remat_save" if save else "remat_offload"
        raise UserError(f"{given} applies to recompute custom; the recompute policy is {recompute}")
    both = sorted(set(save) & set(offload))
    if both:
        raise UserError(f"activation {both[0]} is in both remat_save and remat_offload; name it in one of them")
    for names, field in ((save, "remat_save"), (offload, "remat_offload")):
        parts = QKV_PARTS & set(names)
        if parts and parts != QKV_PARTS:
            raise UserError(f"{field} names {', '.join(sorted(parts))} alone: tpusim's block computes query_proj, "
                            "key_proj and value_proj in one fused QKV GeMM; name all three, or qkv_proj")



class Attention(Choice):
    """How the attention core meets HBM (docs/workloads.md#attention)."""

    UNFUSED = "unfused"  # scores and probabilities written to and read from HBM in fp32 (XLA without a fused kernel)
    FUSED = "fused"  # one pass over Q, K, V and O, flash-style; the backward pass recomputes the scores
    FUSED_CAUSAL = "fused-causal"  # as fused, computing only the scores on or below the causal diagonal


class Precision(Choice):
    """The element type a training step's GeMMs multiply in (docs/chip.md#int8-gemms)."""

    BF16 = "bf16"
    INT8 = "int8"  # operands quantized to int8 (as AQT), products at the chip's int8 rate, outputs bf16


class MlpKind(Choice):
    """The feed-forward layer of a block (docs/workloads.md#model-files)."""

    PLAIN = "plain"  # ff2(act(ff1 x)): two matrices of hidden x ffn
    GATED = "gated"  # ff2(act(gate x) * (up x)): three matrices of hidden x ffn (GLU family: SwiGLU, GeGLU)


class MlpActivation(Choice):
    """The elementwise nonlinearity of the feed-forward layer (docs/workloads.md#model-files)."""

    GELU = "gelu"
    RELU = "relu"
    SILU = "silu"  # x sigmoid(x), the "swish" of SwiGLU


class BlockKind(Choice):
    """How attention and the feed-forward layer compose in a block (docs/workloads.md#model-files)."""

    SEQUENTIAL = "sequential"  # x + attn(ln1 x), then + mlp(ln2 .): two LayerNorms, two residual adds
    PARALLEL = "parallel"  # x + attn(ln x) + mlp(ln x): one LayerNorm, one residual add (GPT-J, PaLM)


class CollectiveOp(Choice):
    """The collective operations (docs/network.md#rings-and-collectives)."""

    ALL_GATHER = "all-gather"
    REDUCE_SCATTER = "reduce-scatter"
    ALL_REDUCE = "all-reduce"
    ALL_TO_ALL = "all-to-all"
    BROADCAST = "broadcast"
    REDUCE = "reduce"
    SHIFT = "shift"
    SEND_RECV = "send-recv"


class MultiAxis(Choice):
    """How a collective runs over a logical axis laid on several physical axes
    (docs/network.md#collectives-over-several-physical-axes)."""

    DIMENSIONAL = "dimensional"  # the shard in parts, each gathered axis by axis in its own order: every link busy
    SNAKE = "snake"  # one ring snaking through the sub-grid, one hop per step: half the links idle


class Ring(Choice):
    """How a ring collective uses the two directions of its links."""

    BIDIRECTIONAL = "bi"  # each shard split in halves travelling opposite ways
    UNIDIRECTIONAL = "uni"


_NOUNS = MappingProxyType({
    "Dataflow": "dataflow",
    "Fidelity": "fidelity",
    "Prefetch": "prefetch policy",
    "Recompute": "recompute policy",
    "Activation": "activation name",
    "Attention": "attention variant",
    "MlpKind": "MLP kind",
    "MlpActivation": "activation",
    "BlockKind": "block kind",
    "Precision": "precision",
    "CollectiveOp": "collective operation",
    "Ring": "ring variant",
    "MultiAxis": "multi-axis schedule",
})


ZERO_STAGES = (0, 1, 2, 3)
"""0: model state replicated over the data-parallel replicas; 1: optimizer state sharded; 2: and gradients;
3: and weights."""


def check_zero_stage(stage: object) -> int:
    """The ZeRO stage, or a one-line error naming the valid ones."""
    if isinstance(stage, bool) or not isinstance(stage, int) or stage not in ZERO_STAGES:
        raise UserError(f"ZeRO stage {stage!r} does not exist; valid: 0 (model state replicated), 1 (optimizer "
                        "state sharded over the data-parallel replicas), 2 (and gradients), 3 (and weights)")
    return stage

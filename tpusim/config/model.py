"""Models of a transformer model file (``configs/models/*.yaml``): the dimensions that generate the workload,
and the one home of the counts derived from them (parameters, FLOPs; docs/workloads.md#model-files)."""

from __future__ import annotations

from typing import Annotated, Any, Self

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from tpusim.config.loader import WHOLE_NUMBER, FrozenModel
from tpusim.vocabulary import BlockKind, MlpActivation, MlpKind

Count = Annotated[int, WHOLE_NUMBER, Field(ge=1)]


class Mlp(FrozenModel):
    """The feed-forward layer: plain (two matrices) or gated (three: gate, up and down), and its activation."""

    kind: MlpKind = MlpKind.PLAIN
    activation: MlpActivation = MlpActivation.GELU

    @property
    def matrices(self) -> int:
        """Weight matrices of hidden x ffn: up and down, plus the gate of a gated MLP."""
        return 3 if self.kind is MlpKind.GATED else 2


class TransformerModel(FrozenModel):
    """A decoder-only transformer as the step model sees it (docs/workloads.md#model-files).

    Counts exclude biases and the LayerNorm / RMSNorm gains (under 0.01 % of every shipped model), so GPT-3's and
    MT-NLG's per-layer count stays 4 h^2 + 2 h ffn."""

    name: str = Field(min_length=1)
    description: str
    layers: Count
    hidden: Count
    heads: Count
    head_dim: Count
    """Width of one attention head; free of ``hidden`` (heads x head_dim may differ from it, as in PaLM)."""
    kv_heads: Count
    """Key / value heads (default: ``heads``; 1 is multi-query attention); must divide ``heads``."""
    ffn: Count
    """Width of the feed-forward layer: for a gated MLP the width of each of the gate and up matrices."""
    mlp: Mlp = Mlp()
    block: BlockKind = BlockKind.SEQUENTIAL
    tied_embeddings: bool = True
    """One matrix for the token embedding and the LM head (true), or two (false)."""
    sequence: Count
    vocabulary: Count = 51200
    """Used only by the optional embedding / LM-head add-on and the embedding parameter count."""
    sliding_window: Count | None = None
    """Tokens a query attends back to (itself included) in a local layer; none: every layer attends globally."""
    sliding_window_pattern: Count | None = None
    """Local (sliding-window) layers per global layer, repeating from the first layer (5: five local, then one
    global); none: every layer is local once ``sliding_window`` is set."""

    @model_validator(mode="before")
    @classmethod
    def _kv_heads_default(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("kv_heads") is None and "heads" in data:
            return {**data, "kv_heads": data["heads"]}
        return data

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Block-structure fields at their defaults are left out, so a GPT-style model dumps exactly the keys it
        always had (and the dump still reads back as the same model)."""
        data: dict[str, Any] = handler(self)
        defaults = {"mlp": Mlp(), "block": BlockKind.SEQUENTIAL, "tied_embeddings": True, "sliding_window": None,
                    "sliding_window_pattern": None, "kv_heads": self.heads}
        for key, default in defaults.items():
            if getattr(self, key) == default:
                data.pop(key, None)
        return data

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.heads % self.kv_heads:
            raise ValueError(f"kv_heads = {self.kv_heads} must divide heads = {self.heads} (each key / value head "
                             "serves a whole group of query heads)")
        if self.sliding_window_pattern is not None and self.sliding_window is None:
            raise ValueError("sliding_window_pattern needs sliding_window (the local layers' window in tokens)")
        return self

    # ------------------------------------------------------------------------------------------ widths

    @property
    def q_width(self) -> int:
        """Width of the queries (and of the attention output): heads x head_dim."""
        return self.heads * self.head_dim

    @property
    def kv_width(self) -> int:
        """Width of the keys, and of the values: kv_heads x head_dim."""
        return self.kv_heads * self.head_dim

    # ------------------------------------------------------------------------------------------ parameters

    @property
    def attention_params_per_layer(self) -> int:
        """Q (h x heads d), K and V (h x kv_heads d each) and the output projection (heads d x h)."""
        return 2 * self.hidden * self.q_width + 2 * self.hidden * self.kv_width

    @property
    def mlp_params_per_layer(self) -> int:
        """Two (plain) or three (gated) matrices of hidden x ffn."""
        return self.mlp.matrices * self.hidden * self.ffn

    @property
    def params_per_layer(self) -> int:
        """Weights of one block, norm gains and biases excluded (4 h^2 + 2 h ffn for GPT-3 and MT-NLG)."""
        return self.attention_params_per_layer + self.mlp_params_per_layer

    @property
    def embedding_matrices(self) -> int:
        """Vocabulary x hidden matrices: one shared by the embedding and the LM head, or one each (untied)."""
        return 1 if self.tied_embeddings else 2

    @property
    def embedding_params(self) -> int:
        """Token embedding and LM head: vocabulary x hidden, twice if untied (no position embedding counted)."""
        return self.embedding_matrices * self.vocabulary * self.hidden

    @property
    def total_params(self) -> int:
        """Every block's weights plus the embedding and LM head."""
        return self.params_per_layer * self.layers + self.embedding_params

    # ------------------------------------------------------------------------------------------ FLOPs

    @property
    def block_matmul_flops_per_token(self) -> int:
        """Forward FLOPs of one block's weight GeMMs per token: 2 per weight (K / V replication not counted)."""
        return 2 * self.params_per_layer

    @property
    def lm_head_flops_per_token(self) -> int:
        """Forward FLOPs of the LM head per token, onto the unpadded vocabulary."""
        return 2 * self.vocabulary * self.hidden

    @property
    def global_layers(self) -> int:
        """Layers that attend over the whole sequence."""
        if self.sliding_window is None:
            return self.layers
        if self.sliding_window_pattern is None:
            return 0
        return self.layers // (self.sliding_window_pattern + 1)

    def attention_pairs(self, causal: bool, window: int | None = None) -> int:
        """(query, key) pairs one head of one layer scores in one sequence: S^2 without a causal mask (the full
        matrix, as the simulated attention core computes it); with one, S (S + 1) / 2, or with a window w < S
        (each query sees the last w tokens, itself included) w (w + 1) / 2 + (S - w) w."""
        s = self.sequence
        if not causal:
            return s * s
        if window is None or window >= s:
            return s * (s + 1) // 2
        return window * (window + 1) // 2 + (s - window) * window

    def attention_flops_per_sequence(self, causal: bool) -> int:
        """Forward FLOPs of every layer's attention core (QK^T and AV: 4 x head_dim per scored pair and query
        head) for one sequence; ``causal`` counts only the pairs the causal mask and the sliding window keep,
        otherwise every layer's full S x S matrix."""
        global_pairs = self.global_layers * self.attention_pairs(causal)
        local_pairs = (self.layers - self.global_layers) * self.attention_pairs(causal, self.sliding_window)
        return 4 * self.head_dim * self.heads * (global_pairs + local_pairs)

    def forward_flops_per_token(self, causal: bool) -> float:
        """Forward FLOPs per token of the whole model: every block's GeMMs, the attention cores (``causal`` as in
        ``attention_flops_per_sequence``) and the LM head; training costs three times this."""
        return (self.block_matmul_flops_per_token * self.layers + self.lm_head_flops_per_token
                + self.attention_flops_per_sequence(causal) / self.sequence)

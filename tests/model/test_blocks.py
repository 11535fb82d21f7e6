"""Today's transformer blocks (docs/workloads.md#model-files): published parameter counts, the count formulas,
K / V replication, the parallel block's ops, a step of every block kind under every algorithm, and memory."""

from __future__ import annotations

from pathlib import Path

import pytest

from tpusim.cli.main import main
from tpusim.collectives.factory import network_for
from tpusim.config import TransformerModel
from tpusim.gemm.registry import algorithms, get_algorithm
from tpusim.model.feasibility import parts_for, split_for
from tpusim.model.layer import GemmOp, LocalOp, NormStatsOp, ff_layers
from tpusim.model.memory import estimate_memory
from tpusim.model.plan import StepSpec, plan_block
from tpusim.model.registry import load_model
from tpusim.model.step import simulate_step
from tpusim.vocabulary import Fidelity, Recompute

# Published total parameter counts and where they come from.
PUBLISHED = {
    "llama2-7b": 6.74e9,       # Touvron et al. 2023, Table 1 / the released checkpoint (6,738,415,616)
    "llama2-70b": 68.98e9,     # the released checkpoint's config-derived count (68,976,648,192; "70B" in Table 1)
    "llama3.1-8b": 8.03e9,     # Llama 3.1 model card (8,030,261,248 in the released checkpoint)
    "llama3.1-70b": 70.6e9,    # Llama 3.1 model card (70,553,706,496)
    "llama3.1-405b": 405.8e9,  # Llama 3.1 model card (405,853,388,800)
    "mistral-7b": 7.24e9,      # Jiang et al. 2023 / the released checkpoint (7,241,732,096)
    "palm-540b": 540.35e9,     # Chowdhery et al. 2022, Table 1
    "gpt3-175b": 175.0e9,      # Brown et al. 2020, Table 2.1
}


@pytest.mark.parametrize(("name", "published"), PUBLISHED.items())
def test_shipped_models_match_their_published_parameter_counts(name: str, published: float) -> None:
    assert load_model(name).total_params == pytest.approx(published, rel=0.005)


def _model(**fields: object) -> TransformerModel:
    base: dict[str, object] = {"name": "t", "description": "test block", "layers": 2, "hidden": 128, "heads": 4,
                               "head_dim": 32, "ffn": 192, "sequence": 32, "vocabulary": 1000}
    return TransformerModel.model_validate({**base, **fields})


GATED_GQA = _model(kv_heads=2, mlp={"kind": "gated", "activation": "silu"}, tied_embeddings=False)
MQA = _model(kv_heads=1, mlp={"kind": "gated", "activation": "gelu"})
PARALLEL = _model(hidden=160, kv_heads=1, ffn=320, mlp={"kind": "gated", "activation": "silu"}, block="parallel")
RELU_GQA = _model(heads=8, kv_heads=2, head_dim=16, ffn=256, mlp={"kind": "plain", "activation": "relu"})
PLAIN = _model()
BLOCKS = {"gated-gqa": GATED_GQA, "mqa": MQA, "parallel": PARALLEL, "relu-gqa": RELU_GQA, "plain": PLAIN}


def _params_per_layer(h: int, heads: int, kv: int, d: int, f: int, gated: bool) -> int:
    q, k, v, o = h * heads * d, h * kv * d, h * kv * d, heads * d * h
    return q + k + v + o + (3 if gated else 2) * h * f


def test_counts_follow_the_formulas() -> None:
    assert GATED_GQA.params_per_layer == _params_per_layer(128, 4, 2, 32, 192, True) == 49152 + 73728
    assert GATED_GQA.embedding_params == 2 * 1000 * 128  # untied: embedding table and LM head
    assert MQA.embedding_params == 1000 * 128
    assert GATED_GQA.total_params == 2 * (49152 + 73728) + 256000
    assert PARALLEL.params_per_layer == _params_per_layer(160, 4, 1, 32, 320, True)
    gpt3 = load_model("gpt3-175b")
    assert gpt3.params_per_layer == 4 * 12288**2 + 2 * 12288 * 49152
    # forward FLOPs per token: 2 per weight, the LM head, and the attention core per token
    assert GATED_GQA.forward_flops_per_token(causal=False) == 2 * GATED_GQA.params_per_layer * 2 + 2 * 1000 * 128 \
        + 2 * 4 * 32 * 4 * 32 * 32 / 32


def _pairs(sequence: int, window: int | None) -> int:
    """(query, key) pairs a causal (and windowed) mask keeps, counted one by one."""
    return sum(1 for q in range(sequence) for k in range(sequence)
               if k <= q and (window is None or q - k < window))


@pytest.mark.parametrize(("window", "pattern"), [(None, None), (8, None), (32, None), (64, None), (8, 1), (8, 3),
                                                  (32, 3), (64, 1)])
def test_attention_flops_causal_and_windowed(window: int | None, pattern: int | None) -> None:
    model = _model(layers=8, sliding_window=window, sliding_window_pattern=pattern)
    local = 0 if window is None else (8 if pattern is None else 8 - 8 // (pattern + 1))
    per_pair = 4 * 32 * 4  # QK^T and AV, 2 FLOPs each per head dimension, 4 query heads
    assert model.attention_flops_per_sequence(causal=True) == per_pair * (
        (8 - local) * _pairs(32, None) + local * _pairs(32, window))
    assert model.attention_flops_per_sequence(causal=False) == per_pair * 8 * 32 * 32


def test_mistral_attends_through_its_window_on_every_layer() -> None:
    mistral = load_model("mistral-7b")
    assert (mistral.sliding_window, mistral.global_layers) == (4096, 0)
    s, w = 8192, 4096
    assert mistral.attention_pairs(True, w) == w * (w + 1) // 2 + (s - w) * w


@pytest.mark.parametrize(("model", "parts", "width"), [
    (_model(heads=8, kv_heads=2, head_dim=16), 4, (8 + 2 * 4) * 16),   # 2 K / V heads over 4 chips: replicated
    (_model(heads=8, kv_heads=2, head_dim=16), 2, (8 + 2 * 2) * 16),   # one K / V head per chip
    (_model(heads=8, kv_heads=2, head_dim=16), 1, (8 + 2 * 2) * 16),
    (_model(heads=8, kv_heads=1, head_dim=16), 8, (8 + 2 * 8) * 16),   # multi-query over 8 chips
    (_model(heads=8, head_dim=16), 16, 3 * 8 * 16),                    # multi-head never replicates
])
def test_qkv_width_replicates_kv_heads_past_the_feature_split(model: TransformerModel, parts: int,
                                                               width: int) -> None:
    qkv, out_proj, ff1, ff2 = ff_layers(model, 64, feature_parts=parts)
    assert (qkv.inputs, qkv.outputs) == (128, width)
    assert (out_proj.inputs, out_proj.outputs) == (8 * 16, 128)
    assert (ff1.outputs, ff2.inputs) == (192, 192)


def test_gated_mlp_fuses_gate_and_up_into_ff1() -> None:
    _, _, ff1, ff2 = ff_layers(GATED_GQA, 64)
    assert (ff1.inputs, ff1.outputs, ff2.inputs, ff2.outputs) == (128, 2 * 192, 192, 128)


def test_kv_heads_that_do_not_divide_the_split_are_a_violation() -> None:
    model = _model(heads=12, kv_heads=4, head_dim=16)
    with pytest.raises(Exception, match="6 and the 4 key / value heads of t do not divide one another"):
        split_for(model, (1, 6), 4, "2d", allow_infeasible=False)
    assert split_for(model, (1, 12), 4, "2d", allow_infeasible=False).violations == ()  # replicated, 12 % 4 == 0


def _ops(model: TransformerModel) -> tuple[list[str], list[str]]:
    forward, backward, _ = plan_block(StepSpec(model, get_algorithm("collective"), 4), (2, 2))
    return [op.name for op in forward], [op.name for op in backward]


def test_the_parallel_block_has_one_norm_and_one_residual_add() -> None:
    forward, backward = _ops(PARALLEL)
    assert forward == ["ln1.norm", "ln1.psum", "qkv.fwd", "attention", "out_proj.fwd", "ff1.fwd", "silu",
                       "ff2.fwd", "residual"]
    assert backward == ["residual.bwd", "ff2.bwd_data", "ff2.bwd_weight", "silu.bwd", "ff1.bwd_data",
                        "ff1.bwd_weight", "out_proj.bwd_data", "out_proj.bwd_weight", "attention.bwd",
                        "qkv.bwd_data", "qkv.bwd_weight", "branches.bwd", "ln1.norm.bwd", "ln1.psum.bwd"]
    sequential, _ = _ops(GATED_GQA)
    assert [name for name in sequential if name.endswith(".norm")] == ["ln1.norm", "ln2.norm"]


def test_activation_and_attention_bytes_follow_the_block() -> None:
    forward, _, _ = plan_block(StepSpec(GATED_GQA, get_algorithm("collective"), 4), (2, 2))
    ops = {op.name: op for op in forward if isinstance(op, LocalOp)}
    tokens = 4 * 32 / 2  # per chip: 4 sequences of 32 over R = 2
    wide = tokens * 192 / 2
    # silu (4) and the gating multiply (1) per element; gate and up read, their product written (bf16)
    assert ops["silu"].vector_ops == 5 * wide and ops["silu"].hbm_bytes == 3 * 2 * wide
    # 16 B per fp32 score (2 sequences x 2 heads x 32 x 32 per chip); Q and O 4 heads x 32 over C = 2, K and V
    # 2 heads x 32 over C = 2, each read or written once in bf16
    assert ops["attention"].hbm_bytes == 16 * (2 * 2 * 32 * 32) + 2 * tokens * (64 + 32 + 32 + 64)
    assert not [op for op in forward if isinstance(op, NormStatsOp) and op.axis != 1]


def _model_flops(model: TransformerModel, batch: int) -> float:
    """Forward plus backward (3x) of every block's GeMMs (model widths, no replication) and attention core
    (the full S x S matrix), written out per weight matrix."""
    tokens = batch * model.sequence
    h, d, f = model.hidden, model.head_dim, model.ffn
    weights = h * model.heads * d + 2 * h * model.kv_heads * d + model.heads * d * h \
        + (3 if model.mlp.kind == "gated" else 2) * h * f
    attention = 2 * 2 * batch * model.heads * d * model.sequence**2
    return 3.0 * model.layers * (2 * tokens * weights + attention)


@pytest.mark.parametrize("name", sorted(BLOCKS))
@pytest.mark.parametrize("algorithm", sorted(algorithms()))
def test_every_block_kind_steps_under_every_algorithm(profile_mesh, name: str, algorithm: str) -> None:
    model = BLOCKS[name]
    parallelism = algorithms()[algorithm].parallelism
    mesh = (4, 4) if parallelism == "2d" else (4, 1)  # 2D: 4 > kv_heads, so K / V heads are replicated
    hardware, mapping = profile_mesh("tpuv4", *mesh)
    slices = (1, 1, 1, 1) if algorithms()[algorithm].uses_slices else None
    # symmetric wherever it is exact: every algorithm but Cannon and SUMMA, which schedule chips by position
    spec = StepSpec(model, get_algorithm(algorithm), 4, slices, fidelity=Fidelity.AUTO)
    result = simulate_step(spec, network_for(hardware, mapping))
    assert result.fidelity == ("full" if algorithm in ("cannon", "summa") else "symmetric") and result.feasible
    flops = result.mfu * mesh[0] * mesh[1] * hardware.chip.peak_flops * result.step_time_s
    assert flops == pytest.approx(_model_flops(model, 4), rel=1e-9)
    fp = parts_for(mesh, parallelism)[1]
    qkv = next(op for op in plan_block(spec, mesh)[0] if isinstance(op, GemmOp) and op.layer == "qkv")
    kv = model.kv_heads if model.kv_heads >= fp or model.kv_heads == model.heads else fp
    assert qkv.problem.m * qkv.problem.n * qkv.problem.k == 128 * model.hidden * (model.heads + 2 * kv) * model.head_dim


def test_memory_of_a_gated_gqa_parallel_block() -> None:
    model = _model(hidden=160, heads=4, kv_heads=2, head_dim=32, ffn=320, mlp={"kind": "gated"},
                   block="parallel", tied_embeddings=False)
    s, b, h, q, k, f, a, chips = 32, 8, 160, 128, 64, 320, 4, 4
    stored = {  # bytes per token a parallel block keeps for its backward pass
        "layernorm input": 2 * h, "layernorm output (both branches)": 2 * h,
        "Q": 2 * q, "K": 2 * k, "V": 2 * k, "attention output": 2 * q, "attention dropout mask": h,
        "gate": 2 * f, "up": 2 * f, "gate x up": 2 * f, "MLP dropout mask": h,
    }
    none = estimate_memory(model, chips, b, Recompute.NONE, 1e12)
    assert none.activations_bytes == pytest.approx(s * b * (sum(stored.values()) + 5 * a * s) * 2 / chips,
                                                   rel=1e-12)
    selective = estimate_memory(model, chips, b, Recompute.SELECTIVE, 1e12)
    assert selective.activations_bytes == s * b * sum(stored.values()) * 2 / chips
    assert none.parameters_bytes == model.params_per_layer * 2 * 16 / chips
    with_embedding = estimate_memory(model, chips, b, Recompute.NONE, 1e12, embedding=True)
    assert with_embedding.parameters_bytes - none.parameters_bytes == pytest.approx(2 * 1000 * 160 * 16 / chips)


def test_gpt3_activations_stay_korthikantis() -> None:
    gpt3 = load_model("gpt3-175b")
    s, b, h, a = 2048, 256, 12288, 96
    assert estimate_memory(gpt3, 256, b, Recompute.NONE, 1e12).activations_bytes == \
        s * b * h * (34 + 5 * a * s / h) * 96 / 256
    assert estimate_memory(gpt3, 256, b, Recompute.SELECTIVE, 1e12).activations_bytes == 34 * s * b * h * 96 / 256


def test_kv_heads_not_dividing_heads_exits_2_on_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "gqa.yaml"
    bad.write_text("name: gqa\ndescription: x\nlayers: 2\nhidden: 128\nheads: 4\nkv_heads: 3\nhead_dim: 32\n"
                   "ffn: 256\nsequence: 16\n")
    assert main(["step", "--model", str(bad), "--hardware", "tpuv4", "--mesh", "2x2"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"{bad}: kv_heads = 3 must divide heads = 4 (each key / value head serves a whole group of query heads)"]

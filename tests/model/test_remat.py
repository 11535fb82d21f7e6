"""Recompute policies minimal and custom, and the fused-causal attention core (docs/workloads.md#memory,
docs/workloads.md#attention): stored bytes per layer, recomputed FLOPs and ops against formulas written here."""

from __future__ import annotations

import pytest

from tpusim.config.requests import StepRequest, TuneRequest, parse_request
from tpusim.errors import UserError
from tpusim.gemm.registry import get_algorithm
from tpusim.model.layer import (
    GemmOp,
    LocalOp,
    NormStatsOp,
    attention_forward_flops,
    attention_scores,
    model_flops_per_block,
    recompute_flops_per_block,
)
from tpusim.model.memory import estimate_memory, plan_memory, stored_activation_bytes
from tpusim.model.plan import StepSpec, plan_block, step_hardware_flops, step_model_flops
from tpusim.model.registry import load_model
from tpusim.vocabulary import Activation, Attention, Recompute

GPT3 = load_model("gpt3-175b")
S, H, F, HEAD_DIM, HEADS = 2048, 12288, 4 * 12288, 128, 96
BATCH, CHIPS, MESH = 256, 256, (32, 8)
TOKENS = S * BATCH
A = Activation


def _custom(save: set[Activation], offload: set[Activation] = frozenset()) -> tuple[float, float]:  # type: ignore[assignment]
    return stored_activation_bytes(GPT3, TOKENS, Recompute.CUSTOM, frozenset(save), frozenset(offload))


def test_minimal_stores_the_layer_input_and_the_projections_outputs() -> None:
    # bf16: layer input 2h, Q K V 6h, out-projection output 2h, FF1 output 2f per token; FF2's output is not
    # read by the backward pass, so it is not kept although minimal saves it
    assert stored_activation_bytes(GPT3, TOKENS, Recompute.MINIMAL) == (TOKENS * (10 * H + 2 * F), 0.0)
    whole = estimate_memory(GPT3, CHIPS, BATCH, Recompute.MINIMAL, 32 * 2**30)
    assert whole.activations_bytes == S * BATCH * H * 18 * 96 / CHIPS


def test_custom_stores_what_the_backward_reads_and_offloads_to_the_host() -> None:
    assert _custom(set()) == (2 * TOKENS * H, 0.0)  # only the layer input, as full recomputation
    assert _custom({A.CONTEXT}) == (4 * TOKENS * H, 0.0)
    assert _custom({A.QUERY_PROJ, A.KEY_PROJ, A.VALUE_PROJ}) == _custom({A.QKV_PROJ}) == (8 * TOKENS * H, 0.0)
    assert _custom({A.MLPWO}) == (2 * TOKENS * H, 0.0)  # read by nothing: not kept
    assert _custom(set(), {A.DECODER_LAYER_INPUT, A.MLPWI}) == (0.0, TOKENS * (2 * H + 2 * F))
    estimate = estimate_memory(GPT3, CHIPS, BATCH, Recompute.CUSTOM, 32 * 2**30,
                               remat_offload=frozenset({A.DECODER_LAYER_INPUT, A.MLPWI}))
    assert (estimate.activations_bytes, estimate.host_bytes) == (0.0, TOKENS * (2 * H + 2 * F) * 96 / CHIPS)


def _attention_fwd(causal: bool = False) -> float:
    scores = S * S / 2 if causal else S * S
    return 4.0 * BATCH * HEADS * HEAD_DIM * scores


def test_recomputed_flops_of_each_policy() -> None:
    attention = _attention_fwd()
    gemm = {"qkv": 2.0 * TOKENS * H * 3 * H, "out_proj": 2.0 * TOKENS * H * H, "ff1": 2.0 * TOKENS * H * F,
            "ff2": 2.0 * TOKENS * F * H}

    def flops(recompute: Recompute, kind: Attention = Attention.UNFUSED, save: set[Activation] = frozenset()  # type: ignore[assignment]
              ) -> float:
        return recompute_flops_per_block(GPT3, TOKENS, BATCH, str(recompute), kind, remat_save=frozenset(save))

    assert flops(Recompute.MINIMAL) == attention
    assert flops(Recompute.MINIMAL, Attention.FUSED) == 1.5 * attention
    assert flops(Recompute.CUSTOM) == gemm["qkv"] + gemm["out_proj"] + gemm["ff1"] + attention  # FF2 never needed
    everything = {A.QKV_PROJ, A.CONTEXT, A.OUT_PROJ, A.MLPWI}
    assert flops(Recompute.CUSTOM, Attention.UNFUSED, everything) == attention  # the probabilities are never saved
    assert flops(Recompute.CUSTOM, Attention.FUSED, everything) == 0.5 * attention  # flash's own QK^T only
    spec = StepSpec(GPT3, get_algorithm("meshslice"), BATCH, recompute=Recompute.MINIMAL)
    assert step_hardware_flops(spec) - step_model_flops(spec) == pytest.approx(96 * attention, rel=1e-12)


def test_minimal_backward_reruns_the_forward_ops_it_needs() -> None:
    spec = StepSpec(GPT3, get_algorithm("meshslice"), BATCH, recompute=Recompute.MINIMAL)
    forward, backward, _ = plan_block(spec, MESH)
    rerun = [op for op in backward if op.name.startswith("recompute.")]
    assert [op.name for op in rerun] == ["recompute.ln1.norm", "recompute.ln1.psum", "recompute.attention",
                                         "recompute.residual1", "recompute.ln2.norm", "recompute.ln2.psum",
                                         "recompute.gelu"]
    originals = {op.name: op for op in forward}
    for op in rerun:
        first = originals[op.name.removeprefix("recompute.")]
        if isinstance(op, LocalOp):
            assert isinstance(first, LocalOp)
            assert (op.flops, op.hbm_bytes, op.vector_ops) == (first.flops, first.hbm_bytes, first.vector_ops)
        else:
            assert isinstance(op, NormStatsOp) and isinstance(first, NormStatsOp)
            assert (op.elements, op.axis) == (first.elements, first.axis)
    custom = StepSpec(GPT3, get_algorithm("meshslice"), BATCH, recompute=Recompute.CUSTOM)
    gemms = [op.name for op in plan_block(custom, MESH)[1] if isinstance(op, GemmOp) and "recompute" in op.name]
    assert gemms == ["recompute.qkv.fwd", "recompute.out_proj.fwd", "recompute.ff1.fwd"]


def test_auto_takes_minimal_between_selective_and_full() -> None:
    def total(level: Recompute) -> float:
        return estimate_memory(GPT3, CHIPS, BATCH, level, 1e15).total_bytes

    assert total(Recompute.SELECTIVE) > total(Recompute.MINIMAL) > total(Recompute.FULL)
    capacity = (total(Recompute.SELECTIVE) + total(Recompute.MINIMAL)) / 2
    plan = plan_memory(GPT3, CHIPS, BATCH, Recompute.AUTO, None, capacity)
    assert (plan.recompute, plan.microbatches) == (Recompute.MINIMAL, 1)


@pytest.mark.parametrize(("fields", "message"), [
    ({"recompute": "full", "remat_save": "context"},
     "remat_save applies to recompute custom; the recompute policy is full"),
    ({"recompute": "custom", "remat_save": "contxt"},
     "unknown activation name 'contxt'; valid: context, decoder_layer_input, key_proj, mlpwi, mlpwo, out_proj, "
     "qkv_proj, query_proj, value_proj"),
    ({"recompute": "custom", "remat_offload": "query_proj"},
     "remat_offload names query_proj alone: tpusim's block computes query_proj, key_proj and value_proj in one "
     "fused QKV GeMM; name all three, or qkv_proj"),
    ({"recompute": "custom", "remat_save": "mlpwi", "remat_offload": "mlpwi"},
     "activation mlpwi is in both remat_save and remat_offload; name it in one of them"),
])
def test_bad_activation_names_are_one_line(fields: dict[str, str], message: str) -> None:
    for kind, base in ((StepRequest, {"mesh": "32x8"}), (TuneRequest, {"chips": 256})):
        with pytest.raises(UserError) as caught:
            parse_request(kind, {"hardware": "tpuv4", "model": "gpt3-175b", **base, **fields})
        assert caught.value.message == message


def test_fused_causal_computes_half_of_fused() -> None:
    def ops(kind: Attention) -> dict[str, LocalOp]:
        forward, backward, _ = plan_block(StepSpec(GPT3, get_algorithm("meshslice"), BATCH, attention=kind), MESH)
        return {op.name: op for op in forward + backward if isinstance(op, LocalOp) and "attention" in op.name}

    fused, causal = ops(Attention.FUSED), ops(Attention.FUSED_CAUSAL)
    for name in ("attention", "attention.bwd"):
        assert causal[name].flops == fused[name].flops / 2
        assert causal[name].vector_ops == fused[name].vector_ops / 2
        assert causal[name].hbm_bytes == fused[name].hbm_bytes
    assert attention_forward_flops(GPT3, BATCH, HEADS, causal=True) == _attention_fwd(causal=True)
    ff = 2.0 * TOKENS * (4 * H * H + 2 * H * F)
    assert model_flops_per_block(GPT3, TOKENS, BATCH, Attention.FUSED_CAUSAL) == 3 * ff + 3 * _attention_fwd(True)
    assert model_flops_per_block(GPT3, TOKENS, BATCH, Attention.FUSED) == 3 * ff + 3 * _attention_fwd()
    assert (recompute_flops_per_block(GPT3, TOKENS, BATCH, "selective", Attention.FUSED_CAUSAL)
            == 1.5 * _attention_fwd(True))


def test_attention_scores_of_square_causal_and_window() -> None:
    assert attention_scores(GPT3, causal=False) == S * S
    assert attention_scores(GPT3, causal=True) == S * S / 2
    assert attention_scores(GPT3, causal=True, window=512) == S * 512 - 512 * 512 / 2
    assert attention_scores(GPT3, causal=True, window=4 * S) == S * S / 2


def test_offload_and_remat_save_errors_exit_2_on_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from tpusim.cli.main import main

    base = ["step", "--model", "gpt3-175b", "--mesh", "32x8"]
    # offload is refused only where the profile has no host link (the calibrated ones; tests/model/test_offload.py)
    for extra, start in ((["--hardware", "tpuv4", "--recompute", "full", "--remat-save", "context"],
                          "remat_save applies to recompute"),
                         (["--hardware", "tpuv4", "--recompute", "custom", "--remat-save", "ctx"],
                          "unknown activation name 'ctx'"),
                         (["--hardware", "meshslice-sim", "--recompute", "custom", "--remat-offload", "mlpwi"],
                          "remat_offload mlpwi: hardware profile 'meshslice-sim' has no host link")):
        assert main([*base, *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err[0].startswith(start)
        assert len(err) <= 2  # the line, and for an unknown name its "did you mean"

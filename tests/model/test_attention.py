"""The attention core's two variants (docs/workloads.md#attention): what each moves through HBM, what it computes,
how the step and HFU account for it, and that results record the choice."""

from __future__ import annotations

import pytest

from tpusim import api
from tpusim.errors import UnknownNameError
from tpusim.gemm.registry import get_algorithm
from tpusim.hardware import ChipModel, load_hardware
from tpusim.model.layer import LocalOp, model_flops_per_block
from tpusim.model.plan import StepSpec, block_shape, plan_block, step_hardware_flops
from tpusim.model.registry import load_model
from tpusim.vocabulary import Attention, Recompute

GPT3 = load_model("gpt3-175b")
MESH = (32, 8)
BATCH = 256


def _attention(attention: Attention, recompute: Recompute = Recompute.NONE) -> dict[str, LocalOp]:
    spec = StepSpec(GPT3, get_algorithm("meshslice"), BATCH, recompute=recompute, attention=attention)
    forward, backward, _ = plan_block(spec, MESH)
    return {op.name: op for op in forward + backward if isinstance(op, LocalOp) and "attention" in op.name}


def _sizes() -> tuple[float, float, float]:
    """(scores, activation elements, forward FLOPs) per chip: 8 sequences and 12 heads on 32x8."""
    shape, _ = block_shape(StepSpec(GPT3, get_algorithm("meshslice"), BATCH), MESH, False)
    assert (shape.sequences_per_chip, shape.heads_per_chip) == (8, 12)
    scores = 8 * 12 * 2048**2
    act = shape.tokens_per_chip * shape.hidden_per_chip
    return scores, act, 4.0 * 8 * 12 * 128 * 2048**2


def test_unfused_core_moves_scores_and_probabilities_in_fp32() -> None:
    scores, act, flops = _sizes()
    ops = _attention(Attention.UNFUSED)
    assert (ops["attention"].flops, ops["attention"].hbm_bytes) == (flops, 4 * 2 * act + 16 * scores)
    assert (ops["attention.bwd"].flops, ops["attention.bwd"].hbm_bytes) == (2 * flops, 8 * 2 * act + 28 * scores)
    assert ops["attention"].vector_ops == 5 * scores
    assert ops["attention.bwd"].vector_ops == 4 * scores


def test_fused_core_touches_no_score_and_recomputes_qk_backward() -> None:
    scores, act, flops = _sizes()
    ops = _attention(Attention.FUSED)
    assert (ops["attention"].flops, ops["attention"].hbm_bytes) == (flops, 4 * 2 * act)
    assert (ops["attention.bwd"].flops, ops["attention.bwd"].hbm_bytes) == (2.5 * flops, 8 * 2 * act)
    assert ops["attention.bwd"].vector_ops == 9 * scores


def test_selective_recompute_repeats_the_forward_of_the_chosen_variant() -> None:
    for attention in Attention:
        ops = _attention(attention, Recompute.SELECTIVE)
        again, first = ops["recompute.attention"], ops["attention"]
        assert (again.flops, again.hbm_bytes, again.vector_ops) == (first.flops, first.hbm_bytes, first.vector_ops)


def test_on_tpuv4_unfused_is_hbm_bound_and_fused_vector_bound() -> None:
    """GPT-3 on 32x8: 6.1 ms of HBM unfused; fused, the softmax's vector work (0.94 ms) exceeds the MXU's 0.86 ms
    (both at tpuv4's achievable rates, docs/chip.md#achievable-rates)."""
    spec = load_hardware("tpuv4").chip
    chip = ChipModel(spec)
    scores, act, flops = _sizes()
    unfused, fused = _attention(Attention.UNFUSED)["attention"], _attention(Attention.FUSED)["attention"]
    assert chip.op_time(unfused.flops, unfused.hbm_bytes, unfused.vector_ops) == pytest.approx(
        1e-6 + (4 * 2 * act + 16 * scores) / (1.2e12 * spec.hbm_efficiency), rel=1e-12)
    assert chip.op_time(fused.flops, fused.hbm_bytes, fused.vector_ops) == pytest.approx(
        1e-6 + 5 * scores / 2.15e12, rel=1e-12)
    assert flops / (275e12 * spec.mxu_efficiency) < 5 * scores / 2.15e12


def test_hfu_counts_the_fused_backward_recomputation() -> None:
    _, _, flops = _sizes()
    per_chip_to_global = 256  # the forward FLOPs above are one chip's share
    for attention, extra in ((Attention.UNFUSED, 0.0), (Attention.FUSED, 0.5)):
        spec = StepSpec(GPT3, get_algorithm("meshslice"), BATCH, attention=attention)
        model = model_flops_per_block(GPT3, spec.tokens, BATCH) * GPT3.layers
        assert step_hardware_flops(spec) == pytest.approx(model + extra * flops * per_chip_to_global * GPT3.layers,
                                                          rel=1e-12)


@pytest.mark.slow
def test_step_and_tune_record_the_variant_and_fused_is_faster_on_tpuv4() -> None:
    common = {"model": "gpt3-175b", "hardware": "tpuv4", "mesh": "4x4", "algorithm": "collective",
              "batch": 16, "ignore_memory": True}
    unfused = api.step(**common)
    fused = api.step(**common, attention="fused")
    assert unfused.switches["attention"] == "unfused" and fused.switches["attention"] == "fused"
    assert fused.step_time_s < unfused.step_time_s
    assert fused.hfu > fused.mfu and unfused.hfu == unfused.mfu
    tuned = api.tune(model="gpt3-175b", hardware="meshslice-sim", chips=16, algorithm="collective",
                     ignore_memory=True, attention="fused")
    assert tuned.attention == "fused"


def test_an_unknown_variant_is_refused_with_the_valid_names() -> None:
    with pytest.raises(UnknownNameError,
                       match=r"^unknown attention variant 'flash'; valid: fused, fused-causal, unfused$"):
        api.step(model="gpt3-175b", hardware="tpuv4", mesh="4x4", algorithm="collective", attention="flash")

"""The working-set peak: each transient against its formula worked by hand (docs/workloads.md#working-set), the
runtime reserve of every generation, and every measured run fitting in the HBM it ran in."""

from __future__ import annotations

import pytest

from tpusim.config.requests import StepRequest
from tpusim.experiments.measurements.convert import row_request
from tpusim.experiments.measurements.table import read_measurements
from tpusim.experiments.runners import run_request
from tpusim.hardware import load_hardware
from tpusim.model.memory import estimate_memory
from tpusim.model.registry import load_model
from tpusim.model.working_set import in_flight_elements
from tpusim.units import GiB
from tpusim.vocabulary import Attention, Recompute

GPT3 = load_model("gpt3-175b")
CAPACITY = load_hardware("tpuv4").chip.usable_hbm
H, A, S, F = 12288, 96, 2048, 4 * 12288


def test_full_recomputation_holds_the_layer_its_scores_and_its_gradients() -> None:
    # 256 chips, batch 256: 2048 tokens per chip
    held = estimate_memory(GPT3, 256, 256, Recompute.FULL, CAPACITY).transient
    tokens = S * 256 / 256
    assert held.recompute_bytes == pytest.approx(tokens * (34 * H + 5 * A * S - 2 * H), rel=1e-12)
    assert held.attention_bytes == pytest.approx(8 * A * S * tokens, rel=1e-12)
    assert held.gradient_bytes == pytest.approx(2 * tokens * (H + F), rel=1e-12)
    assert (held.gathered_bytes, held.bucket_bytes, held.accumulation_bytes) == (0.0, 0.0, 0.0)


def test_a_fused_kernel_holds_no_score_sized_tensor() -> None:
    unfused = estimate_memory(GPT3, 256, 256, Recompute.NONE, CAPACITY)
    fused = estimate_memory(GPT3, 256, 256, Recompute.NONE, CAPACITY, attention=Attention.FUSED)
    assert fused.transient.attention_bytes == 0.0 and fused.transient.recompute_bytes == 0.0
    assert unfused.activations_bytes - fused.activations_bytes == pytest.approx(
        GPT3.layers * 5 * A * S * S * 256 / 256, rel=1e-12)


def test_zero3_holds_two_gathered_matrices_and_two_buckets() -> None:
    # 256 replicas of one chip: FF1 and FF2 are the two largest collectives, h f parameters each, bf16
    held = estimate_memory(GPT3, 256, 256, Recompute.FULL, CAPACITY, data_parallel=256, zero_stage=3,
                           combine_bytes=30 * 2**20 + 7).transient
    assert held.gathered_bytes == held.bucket_bytes == 2 * 2 * H * F
    stage2 = estimate_memory(GPT3, 256, 256, Recompute.FULL, CAPACITY, data_parallel=256, zero_stage=2).transient
    assert (stage2.gathered_bytes, stage2.bucket_bytes) == (0.0, 2 * 2 * H * F)


@pytest.mark.parametrize(("parts", "layers", "held"), [
    ([5, 1, 1, 4], 2, 9),  # a block's last and the next block's first: the pair across blocks
    ([5, 1, 1, 4], 1, 6),  # one block: no next block, so its neighbours only
    ([3, 7, 1, 6], 4, 10),  # the largest pair inside a block, though 7 and 6 are the two largest
    ([6], 3, 12),  # a block that is one collective holds the next block's beside it
    ([6], 1, 6),  # the step's only collective is held alone
])
def test_in_flight_collectives_are_the_largest_consecutive_pair(parts: list[int], layers: int, held: int) -> None:
    assert in_flight_elements(parts, layers) == held


def test_micro_batches_accumulate_the_gradient_shard_in_fp32() -> None:
    one = estimate_memory(GPT3, 256, 32, Recompute.FULL, CAPACITY)
    eight = estimate_memory(GPT3, 256, 32, Recompute.FULL, CAPACITY, microbatches=8)
    assert eight.total_bytes - one.total_bytes == pytest.approx(4 * GPT3.params_per_layer * GPT3.layers / 256,
                                                                rel=1e-12)


@pytest.mark.parametrize(("profile", "usable"), [("tpuv4", 30.75 * GiB), ("tpuv5e", 15.25 * GiB),
                                                 ("tpuv5p", 95 * GiB), ("tpuv6e", 31.25 * GiB)])
def test_every_generation_keeps_its_runtime_reserve(profile: str, usable: float) -> None:
    assert load_hardware(profile).chip.usable_hbm == usable


@pytest.mark.slow
def test_every_measured_run_fits_in_the_hbm_it_ran_in() -> None:
    for run in read_measurements():
        result = run_request(StepRequest, row_request(run).fields, None)
        assert result.memory_feasible, run.id
        assert result.memory_bytes_per_chip <= result.memory_capacity_bytes, run.id

"""Memory-feasible steps by default: the least recomputation that fits, micro-batches when nothing else does,
and one clear error with the smallest shortfall and what would fit."""

from __future__ import annotations

import pytest

from tpusim.errors import InfeasibleError
from tpusim.hardware import load_hardware
from tpusim.model.memory import estimate_memory, plan_memory
from tpusim.model.registry import load_model
from tpusim.units import GB
from tpusim.vocabulary import Recompute

GPT3 = load_model("gpt3-175b")
CAPACITY = load_hardware("tpuv4").chip.usable_hbm


def test_auto_takes_the_least_recomputation_that_fits() -> None:
    # GPT-3 on 256 chips at batch 256: none and selective overflow 30.75 GiB; full stores 15.70 GB of state and
    # layer inputs, and holds 6.29 GB of transients (docs/workloads.md#working-set, tests/model/test_working_set.py)
    plan = plan_memory(GPT3, 256, 256, Recompute.AUTO, 1, CAPACITY)
    assert (plan.recompute, plan.microbatches) == (Recompute.FULL, 1)
    assert (plan.estimate.parameters_bytes + plan.estimate.activations_bytes) / GB == pytest.approx(15.70, abs=0.01)
    assert plan.estimate.total_bytes / GB == pytest.approx(21.99, abs=0.01)
    # at batch 32 selective fits: 10.87 + 82.14 / 8 GB
    plan = plan_memory(GPT3, 256, 32, Recompute.AUTO, 1, CAPACITY)
    assert plan.recompute is Recompute.SELECTIVE
    assert plan.estimate.activations_bytes == estimate_memory(GPT3, 256, 256, Recompute.SELECTIVE, CAPACITY)\
        .activations_bytes / 8


def test_open_microbatches_split_the_batch_only_when_nothing_else_fits() -> None:
    assert plan_memory(GPT3, 256, 256, Recompute.AUTO, None, CAPACITY).microbatches == 1
    # no recomputation asked for: the fewest micro-batches whose activations fit (16 of 16 sequences)
    plan = plan_memory(GPT3, 256, 256, Recompute.NONE, None, CAPACITY)
    assert (plan.recompute, plan.microbatches) == (Recompute.NONE, 16)
    assert plan.estimate.feasible
    assert not estimate_memory(GPT3, 256, 256 // 8, Recompute.NONE, CAPACITY).feasible


def test_ignore_memory_keeps_the_request_or_no_recomputation() -> None:
    plan = plan_memory(GPT3, 256, 256, Recompute.AUTO, None, CAPACITY, ignore_memory=True)
    assert (plan.recompute, plan.microbatches, plan.estimate.feasible) == (Recompute.NONE, 1, False)


def test_a_recompute_mode_that_cannot_fit_names_the_shortfall_and_what_fits() -> None:
    with pytest.raises(InfeasibleError) as caught:
        plan_memory(GPT3, 256, 256, Recompute.NONE, 1, CAPACITY)
    assert caught.value.message == (
        "gpt3-175b on 256 chips (batch 256, recompute none, 1 micro-batch) does not fit in HBM: the smallest "
        "shortfall is 256.7 GB per chip (289.8 GB of 33.0 GB with recompute none, 1 micro-batch)")
    assert caught.value.suggestion == "--recompute full fits (22.0 GB per chip); or --ignore-memory to time it anyway"

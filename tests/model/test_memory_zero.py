"""Per-chip memory with data parallelism: model state sharded as each ZeRO stage says, activations per replica.

D replicas of a tensor-parallel group of t = P / D chips: the weights (2 B), gradients (2 B) and optimizer state
(the rest of bytes_per_param) of a parameter shard are replicated over D (stage 0) or sharded over D from the
optimizer state (stage 1) through the gradients (2) to the weights (3); each replica stores the activations of
batch / D sequences over its t chips.
"""

from __future__ import annotations

import pytest

from tpusim.errors import UserError
from tpusim.model.memory import estimate_memory, state_bytes_per_param
from tpusim.model.registry import load_model
from tpusim.vocabulary import Recompute

GPT3 = load_model("gpt3-175b")
CAPACITY = 32 * 2**30
CHIPS = 4096
BATCH = 4096


def _estimate(data_parallel: int, stage: int, recompute: Recompute = Recompute.FULL):  # type: ignore[no-untyped-def]
    return estimate_memory(GPT3, CHIPS, BATCH, recompute, CAPACITY, 16.0, data_parallel=data_parallel,
                           zero_stage=stage)


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_one_replica_is_todays_estimate(stage: int) -> None:
    plain = estimate_memory(GPT3, CHIPS, BATCH, Recompute.FULL, CAPACITY, 16.0)
    assert _estimate(1, stage) == plain


@pytest.mark.parametrize("stage, per_param", [
    (0, lambda d: 16.0),
    (1, lambda d: 2 + 2 + 12 / d),
    (2, lambda d: 2 + (2 + 12) / d),
    (3, lambda d: 16 / d),
])
def test_model_state_per_chip_follows_the_zero_stage(stage: int, per_param) -> None:  # type: ignore[no-untyped-def]
    params = GPT3.params_per_layer * GPT3.layers
    for data_parallel in (1, 2, 4, 8, 16, 64):
        group = CHIPS // data_parallel
        expected = params * per_param(data_parallel) / group
        assert _estimate(data_parallel, stage).parameters_bytes == pytest.approx(expected, rel=1e-12)


def test_state_per_chip_falls_with_each_stage_and_never_rises_with_replicas() -> None:
    for data_parallel in (2, 4, 16):
        by_stage = [state_bytes_per_param(16.0, data_parallel, stage) for stage in (0, 1, 2, 3)]
        assert by_stage == sorted(by_stage, reverse=True) and by_stage[0] > by_stage[3]
    # at a fixed tensor-parallel group (P grows with D), stage 3 state per chip falls as 1 / D
    group = 64
    states = [estimate_memory(GPT3, group * d, d, Recompute.FULL, CAPACITY, 16.0, data_parallel=d,
                              zero_stage=3).parameters_bytes for d in (1, 2, 4, 8)]
    assert states == pytest.approx([states[0] / d for d in (1, 2, 4, 8)], rel=1e-12)


def test_activations_are_those_of_one_replica_on_its_group() -> None:
    one_replica = estimate_memory(GPT3, CHIPS // 16, BATCH // 16, Recompute.SELECTIVE, CAPACITY, 16.0)
    assert _estimate(16, 1, Recompute.SELECTIVE).activations_bytes == pytest.approx(one_replica.activations_bytes,
                                                                                   rel=1e-12)


@pytest.mark.parametrize("stage", [4, -1, "2", 1.0, True])
def test_a_zero_stage_that_does_not_exist_is_one_line(stage: object) -> None:
    with pytest.raises(UserError) as info:
        _estimate(2, stage)  # type: ignore[arg-type]
    assert str(info.value) == (f"ZeRO stage {stage!r} does not exist; valid: 0 (model state replicated), 1 (optimizer "
                               "state sharded over the data-parallel replicas), 2 (and gradients), 3 (and weights)")


def test_replicas_must_divide_chips_and_batch() -> None:
    with pytest.raises(UserError, match="3 data-parallel replicas must divide the 4096 chips and the batch"):
        _estimate(3, 1)

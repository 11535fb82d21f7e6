"""The step's timing cache keys a step by what determines it: a layout of one replica on one slice is the same step
at every ZeRO stage, so ``plan``'s searches over the stages simulate it once; a layout with replicas is not."""

from __future__ import annotations

from typing import Any

import pytest

import tpusim.api as tp
import tpusim.model.step as step_module
from tpusim.config import TransformerModel
from tpusim.engine.context import Context

TINY = TransformerModel(name="tiny", description="test model", layers=4, hidden=1024, heads=16, head_dim=64,
                        ffn=4096, sequence=64)
COMMON: dict[str, Any] = {"model": TINY, "hardware": "tpuv4", "batch": 64, "ignore_memory": True,
                          "topology": "4x4x4", "algorithm": "collective"}


def _simulated(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    simulate = step_module._simulate_step

    def counted(spec: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(spec.zero_stage)
        return simulate(spec, *args, **kwargs)

    monkeypatch.setattr(step_module, "_simulate_step", counted)
    return calls


def test_one_replica_is_simulated_once_for_every_zero_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _simulated(monkeypatch)
    context = Context()
    results = [tp.step(mesh="16x4", zero_stage=stage, context=context, **COMMON).to_dict() for stage in (0, 1, 2, 3)]
    assert calls == [0]
    uncached = [tp.step(mesh="16x4", zero_stage=stage, **COMMON).to_dict() for stage in (0, 3)]
    assert results[0] == results[3] == uncached[0] == uncached[1]
    assert results[0]["zero_stage"] is None


def test_replicas_are_simulated_at_each_zero_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _simulated(monkeypatch)
    context = Context()
    times = [tp.step(mesh="4x4x4", zero_stage=stage, context=context, **COMMON).step_time_s for stage in (0, 3)]
    assert calls == [0, 3]
    assert times[0] != times[1]

"""``tune --exhaustive`` is the whole-step optimum of the space it states: on a small case every mesh x dataflows x
ZeRO stage that space contains is simulated with ``step``, and the tuner's answer is their minimum."""

from __future__ import annotations

import itertools

import pytest

from tpusim import api
from tpusim.config import TransformerModel
from tpusim.engine.context import Context
from tpusim.errors import UserError
from tpusim.tuning import TuneResult

SMALL = TransformerModel(name="small", description="test model", layers=2, hidden=1024, heads=16, head_dim=64,
                         ffn=4096, sequence=64)
CHIPS = 8
DATAFLOWS = ("os", "ls")
STAGES = (0, 1, 2, 3)


def brute_force() -> tuple[float, tuple[str, int, tuple[str, ...]]]:
    """The fastest step of every layout D x (P / D) x 1 of tp1d (D = 1: the plain mesh P x 1), every ZeRO stage of
    the layouts with replicas and every per-layer dataflow, each simulated by ``step``."""
    context = Context()
    found = []
    for data in (d for d in range(1, CHIPS + 1) if CHIPS % d == 0):
        mesh = f"{CHIPS}x1" if data == 1 else f"{data}x{CHIPS // data}x1"
        for stage in STAGES if data > 1 else (1,):
            for dataflows in itertools.product(DATAFLOWS, repeat=4):
                try:
                    step = api.step(model=SMALL, hardware="tpuv4", mesh=mesh, algorithm="tp1d", zero_stage=stage,
                                    dataflows=list(dataflows), batch=CHIPS, context=context)
                except UserError:  # a layout the rules refuse is outside the space too
                    continue
                found.append((step.step_time_s, (mesh, stage, dataflows)))
    assert len(found) == 16 + 3 * 4 * 16  # every layout of 8 chips is feasible for this model
    return min(found)


@pytest.mark.slow
def test_exhaustive_tune_is_the_minimum_over_every_step() -> None:
    fastest, (mesh, stage, dataflows) = brute_force()
    result = api.tune(model=SMALL, hardware="tpuv4", chips=CHIPS, algorithm="tp1d", exhaustive=True,
                      zero_stage="any", dataflows=list(DATAFLOWS))
    assert isinstance(result, TuneResult)
    assert result.best.step_time_s == pytest.approx(fastest, rel=1e-12, abs=0.0)
    assert (result.best.mesh, tuple(result.best.dataflows)) == (mesh, dataflows)
    if result.best.data_parallel > 1:
        assert result.zero_stage == stage


@pytest.mark.slow
def test_no_step_the_exhaustive_search_times_is_shorter_than_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    import tpusim.tuning.finalists as finalists

    # the branch and bound stops once a plan's bound reaches the fastest step: sound only if no step is shorter than
    # its bound. Under previous-gemm a step starts each GeMM's weight gather behind the GeMM before it, so the ops
    # priced alone bound nothing (here one timed step came 0.58% under them); the bound times each GeMM from when its
    # early transfers have arrived
    layers = api.model("gpt3-175b").layers
    seen: list[tuple[float, float]] = []
    simulate = finalists._simulate

    def spy(finalist: finalists.Finalist) -> object:
        result = simulate(finalist)
        seen.append((result.step_time_s, finalists.ops_bound(finalist.plan, finalist.search, layers)))
        return result

    monkeypatch.setattr(finalists, "_simulate", spy)
    result = api.tune(model="gpt3-175b", hardware="tpuv4", chips=16, algorithm="collective", ignore_memory=True,
                      exhaustive=True)
    assert isinstance(result, TuneResult) and result.prefetch == "previous-gemm"
    assert len(seen) == result.steps_simulated > 10
    assert all(step >= bound * (1 - 1e-12) for step, bound in seen)

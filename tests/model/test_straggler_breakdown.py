"""The breakdown of a run with a straggler is the straggler's, in every simulated window alike.

Every chip of a distributed step finishes with the last collective, so "the chip that finishes last" is a tie the
lowest chip id used to win: with ``--slow-chip 5:1.5`` the breakdown described chip 0, which computes at full
speed. And a step extrapolated from windows of 2 and 3 layers accounted whichever chip finished each window last,
so the two windows could describe two chips (Llama 2 7B, 4x4 Wang on tpuv4: chip 0 then chip 1, an HBM stall of
-0.022 s). The critical chip is now the straggler (docs/results.md#result-fields), and every window accounts the
critical chip of the largest.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from tpusim.collectives.factory import network_for
from tpusim.collectives.network import place_mesh
from tpusim.config import TransformerModel
from tpusim.gemm.dataflow import GemmProblem
from tpusim.gemm.params import GemmParams
from tpusim.gemm.registry import get_algorithm
from tpusim.gemm.simulate import simulate_gemm
from tpusim.hardware import load_hardware
from tpusim.model.step import StepSpec, simulate_step
from tpusim.vocabulary import Dataflow, Fidelity

TINY = TransformerModel(name="tiny", description="test model", layers=6, hidden=512, heads=8, head_dim=64,
                        ffn=2048, sequence=64)
FACTOR = 1.5
ALGORITHMS = ("wang", "collective", "summa", "cannon")


@pytest.fixture(scope="module")
def network():  # type: ignore[no-untyped-def]
    hardware = load_hardware("tpuv4")
    return network_for(hardware, place_mesh(hardware, 4, 4))


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("straggler", [0, 5])
def test_a_steps_breakdown_is_the_stragglers(network, algorithm: str, straggler: int) -> None:  # type: ignore[no-untyped-def]
    spec = StepSpec(TINY, get_algorithm(algorithm), 16, fidelity=Fidelity.FULL)
    plain = simulate_step(spec, network)
    slowed = simulate_step(spec, network, chip_slowdown={straggler: FACTOR})
    # its every op runs 1.5x longer, and HBM contention only adds
    assert slowed.compute_s >= FACTOR * (plain.compute_s - plain.hbm_stall_s) * (1 - 1e-12)
    assert slowed.hbm_stall_s >= 0.0
    assert slowed.compute_s + slowed.exposed_comm_s + slowed.idle_s == pytest.approx(slowed.step_time_s, rel=1e-12)
    every = simulate_step(replace(spec, extrapolate=False), network, chip_slowdown={straggler: FACTOR})
    for field in ("step_time_s", "compute_s", "exposed_comm_s", "hbm_stall_s"):
        assert getattr(slowed, field) == pytest.approx(getattr(every, field), rel=1e-9, abs=1e-15), field


@pytest.mark.parametrize("algorithm", ("collective", "summa"))
def test_a_gemms_breakdown_is_the_stragglers(network, algorithm: str) -> None:  # type: ignore[no-untyped-def]
    problem = GemmProblem(2048, 2048, 2048, Dataflow.OS)
    plain = simulate_gemm(problem, get_algorithm(algorithm), GemmParams(), network, fidelity=Fidelity.FULL)
    slowed = simulate_gemm(problem, get_algorithm(algorithm), GemmParams(), network, fidelity=Fidelity.FULL,
                           chip_slowdown={5: FACTOR})
    assert plain.compute_s is not None and slowed.compute_s is not None and plain.hbm_stall_s is not None
    assert slowed.compute_s >= FACTOR * (plain.compute_s - plain.hbm_stall_s) * (1 - 1e-12)

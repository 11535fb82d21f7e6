"""A GeMM timed from when its early transfers have arrived (``gemm.hoisted``), the tuner's whole-step bound: never
more than the GeMM alone, never less than its compute, exactly its compute where the early gather is its only
communication, and the GeMM alone wherever the policy starts nothing early."""

from __future__ import annotations

import pytest

from tpusim.collectives.factory import network_for, place_mesh
from tpusim.errors import UserError
from tpusim.gemm.algorithm import GemmContext
from tpusim.gemm.dataflow import GemmProblem
from tpusim.gemm.hoisted import hoisted_time, hoists
from tpusim.gemm.params import GemmParams
from tpusim.gemm.registry import algorithms, get_algorithm
from tpusim.gemm.simulate import check_gemm, simulate_gemm
from tpusim.hardware import load_hardware
from tpusim.vocabulary import Dataflow, Fidelity, Prefetch

TPUV4 = load_hardware("tpuv4")
PROBLEM = (2048, 1024, 4096)  # M, N, K: divisible by every mesh here and by MeshSlice's two slices


def _case(name: str, dataflow: Dataflow, prefetch: Prefetch) -> tuple[GemmProblem, GemmParams, tuple[int, int]]:
    algorithm = get_algorithm(name)
    problem = GemmProblem(*PROBLEM, dataflow)
    params = GemmParams(prefetch, slices=2 if algorithm.uses_slices else None)
    try:  # a 2D algorithm on a 4x4 mesh, a 1D one on 16 chips in a line
        check_gemm(algorithm, problem, (4, 4), params)
    except UserError:
        return problem, params, (16, 1)
    return problem, params, (4, 4)


@pytest.mark.parametrize("dataflow", list(Dataflow), ids=str)
@pytest.mark.parametrize("name", sorted(algorithms()))
def test_the_hoisted_time_lies_between_the_compute_and_the_gemm_alone(name: str, dataflow: Dataflow) -> None:
    problem, params, mesh = _case(name, dataflow, Prefetch.PREVIOUS_GEMM)
    algorithm = get_algorithm(name)
    network = network_for(TPUV4, place_mesh(TPUV4, *mesh))
    alone = simulate_gemm(problem, algorithm, params, network, fidelity=Fidelity.FULL)
    hoisted = hoisted_time(problem, algorithm, params, network, Fidelity.FULL)
    assert alone.compute_s is not None
    assert alone.compute_s * (1 - 1e-12) <= hoisted <= alone.time_s * (1 + 1e-12)
    # symmetric fidelity, where it is exact for the GeMM alone, is exact for the hoisted GeMM too
    assert hoisted_time(problem, algorithm, params, network, Fidelity.AUTO) == pytest.approx(hoisted, rel=1e-12)


@pytest.mark.parametrize("prefetch", [Prefetch.NONE, Prefetch.IDEAL], ids=str)
@pytest.mark.parametrize("name", sorted(algorithms()))
def test_a_policy_that_starts_nothing_early_hoists_nothing(name: str, prefetch: Prefetch) -> None:
    problem, params, mesh = _case(name, Dataflow.OS, prefetch)
    algorithm = get_algorithm(name)
    network = network_for(TPUV4, place_mesh(TPUV4, *mesh))
    assert not hoists(algorithm, problem, params, mesh)
    alone = simulate_gemm(problem, algorithm, params, network, fidelity=Fidelity.FULL).time_s
    assert hoisted_time(problem, algorithm, params, network, Fidelity.FULL) == alone


def test_an_fsdp_forward_with_its_weight_gathered_is_its_compute_alone() -> None:
    # FSDP's forward (OS) gathers the weight shard over the data axis and then multiplies locally: with the gather
    # arrived there is nothing left to communicate
    problem, params, mesh = _case("fsdp", Dataflow.OS, Prefetch.PREVIOUS_GEMM)
    algorithm = get_algorithm("fsdp")
    network = network_for(TPUV4, place_mesh(TPUV4, *mesh))
    assert hoists(algorithm, problem, params, mesh)
    assert algorithm.early_elements(GemmContext(problem, params, mesh)) == PROBLEM[1] * PROBLEM[2]
    alone = simulate_gemm(problem, algorithm, params, network, fidelity=Fidelity.FULL)
    assert alone.compute_s is not None and alone.time_s > 2 * alone.compute_s  # the gather dominates it alone
    assert hoisted_time(problem, algorithm, params, network, Fidelity.FULL) == pytest.approx(alone.compute_s,
                                                                                             rel=1e-12)

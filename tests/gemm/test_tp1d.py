"""Megatron 1D TP with Wang overlap (docs/algorithms.md#1d-tensor-parallelism): exact products, DES == twin, the
reference form, feasibility."""

from __future__ import annotations

import pytest

from tpusim.collectives.factory import network_for
from tpusim.config import HardwareProfile
from tpusim.errors import InfeasibleError
from tpusim.gemm.algorithms.ring import RingTerms, ring_terms
from tpusim.gemm.costs import CostModel
from tpusim.gemm.dataflow import GemmProblem
from tpusim.gemm.params import GemmParams
from tpusim.gemm.registry import get_algorithm
from tpusim.gemm.simulate import check_gemm, simulate_gemm
from tpusim.hardware import load_hardware
from tpusim.topology import MeshMapping
from tpusim.vocabulary import Dataflow, Prefetch

MESHES = [(4, 1), (8, 1), (16, 1), (1, 4), (1, 8), (1, 16)]
SMALL = (64, 96, 128)  # (m, n, k): distinct; the circulated dimension cuts into 2 P pieces for P <= 16
LARGE = (8192, 262144, 262144)  # GeMM-bound steps on the calibrated profile



def _terms(problem: GemmProblem, hw: HardwareProfile, mapping: MeshMapping) -> RingTerms:
    mesh = mapping.shape
    axis = 0 if mesh[1] == 1 else 1
    return ring_terms(problem, (None, axis), mesh, CostModel(network_for(hw, mapping), problem.dtype))


@pytest.mark.parametrize("hw_name", ["meshslice-tpu-fit", "tpuv4"])
@pytest.mark.parametrize("mesh", MESHES, ids=lambda m: f"{m[0]}x{m[1]}")
def test_products_exact(profile_mesh, hw_name: str, mesh: tuple[int, int]) -> None:
    hw = load_hardware(hw_name)
    mapping = profile_mesh(hw, *mesh)[1]
    for dataflow in Dataflow:
        for transpose in (False, True):  # no axis pair to swap: must not change the result
            problem = GemmProblem(*SMALL, dataflow, transpose)
            result = simulate_gemm(problem, get_algorithm("tp1d"), GemmParams(), network_for(hw, mapping), verify=True)
            assert result.max_abs_error is not None and result.max_abs_error < 1e-9, (dataflow, transpose)


def test_sharding_is_megatron() -> None:
    """os: X split on K, W and Y on N; ls: X and W split on K, Y on N; rs (dW = X^T dY): X split on M, W
    (dY) and Y (dW) on N."""
    algorithm = get_algorithm("tp1d")
    for dataflow in Dataflow:  # each of these stored dims is number 1, split; number 0 is whole
        for mesh, axis in (((8, 1), 0), ((1, 8), 1)):
            sharding = algorithm.sharding(GemmProblem(*SMALL, dataflow), mesh)
            assert sharding.x == sharding.w == sharding.y == (None, axis)


@pytest.mark.parametrize("mesh", [(2, 1), (4, 1), (8, 1), (16, 1), (1, 8)], ids=lambda m: f"{m[0]}x{m[1]}")
@pytest.mark.parametrize("dataflow", list(Dataflow), ids=str)
def test_des_equals_twin_calibrated(profile_mesh, mesh: tuple[int, int], dataflow: Dataflow) -> None:
    hw = load_hardware("meshslice-tpu-fit")
    mapping = profile_mesh(hw, *mesh)[1]
    for dims, shift_bound in ((SMALL, True), (LARGE, False)):
        problem = GemmProblem(*dims, dataflow)
        terms = _terms(problem, hw, mapping)
        assert (terms.shift > terms.gemm) == shift_bound
        for prefetch in Prefetch:  # no weight gather: the policy must not matter
            result = simulate_gemm(problem, get_algorithm("tp1d"), GemmParams(prefetch=prefetch), network_for(hw,
                                                                                                              mapping))
            assert result.analytic_time_s == pytest.approx(result.time_s, rel=1e-9, abs=0.0), (dims, prefetch)
            assert result.time_s == pytest.approx(terms.loop, rel=1e-9)


@pytest.mark.parametrize("dataflow", list(Dataflow), ids=str)
def test_reference_form_counts_one_extra_roll(profile_mesh, dataflow: Dataflow) -> None:
    """The published form (docs/algorithms.md#1d-tensor-parallelism) writes P max(roll, g); P GeMM steps need only
    P - 1 rolls, so it exceeds the DES by max(roll - g, 0). Its roll (rolled bytes / (2 beta) + lambda + alpha) is
    exactly one half-block shift."""
    hw = load_hardware("meshslice-tpu-fit")
    mesh = (8, 1)
    mapping = profile_mesh(hw, *mesh)[1]
    for dims in (SMALL, LARGE):
        problem = GemmProblem(*dims, dataflow)
        terms = _terms(problem, hw, mapping)
        des = simulate_gemm(problem, get_algorithm("tp1d"), GemmParams(), network_for(hw, mapping)).time_s
        assert terms.reference() - des == pytest.approx(max(terms.shift - terms.gemm, 0.0), rel=1e-9, abs=1e-15)
    cal = hw.calibration
    assert cal is not None
    m, n, k = SMALL
    rolled = {Dataflow.OS: m * k / 8, Dataflow.LS: m * n / 8, Dataflow.RS: k * m / 8}[dataflow]  # elements
    roll = 2 * rolled / (2 * cal.send_recv.bandwidth[1]) + cal.send_recv.step_latency + cal.send_recv.launch_overhead
    assert _terms(GemmProblem(*SMALL, dataflow), hw, mapping).shift == pytest.approx(roll, rel=1e-12)


def test_infeasible() -> None:
    algorithm = get_algorithm("tp1d")
    problem = GemmProblem(*SMALL, Dataflow.OS)
    with pytest.raises(InfeasibleError, match="algorithm 'tp1d' runs on a P x 1 mesh; got 8x4"):
        check_gemm(algorithm, problem, (8, 4), GemmParams())
    with pytest.raises(InfeasibleError, match="unknown variant"):
        check_gemm(algorithm, problem, (8, 1), GemmParams(variant="x"))
    with pytest.raises(InfeasibleError, match="--slices 4"):
        check_gemm(algorithm, problem, (8, 1), GemmParams(slices=4))
    with pytest.raises(InfeasibleError, match="K = 40 into 16 pieces"):
        check_gemm(algorithm, GemmProblem(64, 96, 40, Dataflow.OS), (8, 1), GemmParams())

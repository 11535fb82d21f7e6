"""FSDP baseline (docs/algorithms.md#fsdp): exact products, DES == twin, the prefetch policy, feasibility."""

from __future__ import annotations

import pytest

from tests.gemm.helpers import assert_exact_products
from tpusim.collectives.factory import network_for
from tpusim.errors import InfeasibleError
from tpusim.gemm.costs import CostModel
from tpusim.gemm.dataflow import GemmProblem
from tpusim.gemm.params import GemmParams
from tpusim.gemm.registry import get_algorithm
from tpusim.gemm.simulate import check_gemm, simulate_gemm
from tpusim.hardware import load_hardware
from tpusim.vocabulary import Dataflow, Prefetch

MESHES = [(4, 1), (8, 1), (16, 1), (1, 4), (1, 8), (1, 16)]
SMALL = (64, 96, 128)
LARGE = (65536, 8192, 8192)  # GeMM longer than the weight gather on the calibrated profile



@pytest.mark.parametrize("hw_name", ["meshslice-tpu-fit", "tpuv4"])
@pytest.mark.parametrize("mesh", MESHES, ids=lambda m: f"{m[0]}x{m[1]}")
def test_products_exact(profile_mesh, hw_name: str, mesh: tuple[int, int]) -> None:
    hw = load_hardware(hw_name)
    mapping = profile_mesh(hw, *mesh)[1]
    assert_exact_products("fsdp", hw, mapping, SMALL, [GemmParams(prefetch=p) for p in (Prefetch.NONE, Prefetch.IDEAL)])


@pytest.mark.parametrize("mesh", [(4, 1), (8, 1), (16, 1), (1, 8)], ids=lambda m: f"{m[0]}x{m[1]}")
@pytest.mark.parametrize("dataflow", list(Dataflow), ids=str)
def test_des_equals_twin_calibrated(profile_mesh, mesh: tuple[int, int], dataflow: Dataflow) -> None:
    hw = load_hardware("meshslice-tpu-fit")
    mapping = profile_mesh(hw, *mesh)[1]
    for dims in (SMALL, LARGE):
        for prefetch in Prefetch:
            problem = GemmProblem(*dims, dataflow)
            result = simulate_gemm(problem, get_algorithm("fsdp"), GemmParams(prefetch=prefetch), network_for(hw,
                                                                                                              mapping))
            assert result.analytic_time_s == pytest.approx(result.time_s, rel=1e-9, abs=0.0), (dims, prefetch)


@pytest.mark.parametrize("dataflow", list(Dataflow), ids=str)
def test_closed_form(profile_mesh, dataflow: Dataflow) -> None:
    """os / ls: A(W) + g, or max(A, g) under ideal; rs: g + RdS(dW) whatever the policy (nothing gathered)."""
    hw = load_hardware("meshslice-tpu-fit")
    mesh = (8, 1)
    mapping = profile_mesh(hw, *mesh)[1]
    costs = CostModel(network_for(hw, mapping))
    m, n, k = LARGE
    p = 8
    if dataflow is Dataflow.RS:  # dW [m, n] = X^T dY, contracting over the batch: put the long dim on k
        m, k = k, m
        g, gather, reduce = costs.gemm(m, n, k / p), 0.0, costs.reduce_scatter(0, m * n)
    else:
        g, gather, reduce = costs.gemm(m / p, n, k), costs.all_gather(0, k * n / p), 0.0
    problem = GemmProblem(m, n, k, dataflow)
    none = simulate_gemm(problem, get_algorithm("fsdp"), GemmParams(prefetch=Prefetch.NONE), network_for(hw,
                                                                                                         mapping)).time_s
    ideal = simulate_gemm(problem, get_algorithm("fsdp"), GemmParams(prefetch=Prefetch.IDEAL), network_for(hw,
                                                                                                           mapping)).time_s
    assert none == pytest.approx(gather + g + reduce, rel=1e-9)
    assert ideal == pytest.approx(max(gather, g) + reduce, rel=1e-9)
    if dataflow is not Dataflow.RS:
        assert ideal < none


def test_infeasible() -> None:
    algorithm = get_algorithm("fsdp")
    problem = GemmProblem(*SMALL, Dataflow.OS)
    with pytest.raises(InfeasibleError, match="algorithm 'fsdp' runs on a P x 1 mesh; got 4x4"):
        check_gemm(algorithm, problem, (4, 4), GemmParams())
    with pytest.raises(InfeasibleError, match="unknown variant"):
        check_gemm(algorithm, problem, (8, 1), GemmParams(variant="2d"))
    with pytest.raises(InfeasibleError, match="does not split over the 16 chips"):
        check_gemm(algorithm, GemmProblem(40, 96, 128, Dataflow.OS), (16, 1), GemmParams())

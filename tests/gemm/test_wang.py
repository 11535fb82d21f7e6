"""Wang collective matmul in 2D (docs/algorithms.md#wang-collective-matmul): exact products, DES == twin, the
reference form, feasibility."""

from __future__ import annotations

import pytest

from tests.gemm.helpers import assert_exact_products
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

MESHES = [(4, 4), (8, 4), (4, 8), (8, 8)]
SMALL = (128, 192, 256)  # (m, n, k): distinct, every dimension a multiple of 2 * 8 chips
LARGE = (8192, 262144, 262144)  # GeMM-bound steps on the calibrated profile (wide non-circulated dims)



def _terms(problem: GemmProblem, hw: HardwareProfile, mapping: MeshMapping) -> RingTerms:
    axes = (problem.layout.axis(0), problem.layout.axis(1))
    return ring_terms(problem, axes, mapping.shape, CostModel(network_for(hw, mapping), problem.dtype))


@pytest.mark.parametrize("hw_name", ["meshslice-tpu-fit", "tpuv4"])
@pytest.mark.parametrize("mesh", MESHES, ids=lambda m: f"{m[0]}x{m[1]}")
@pytest.mark.slow
def test_products_exact(profile_mesh, hw_name: str, mesh: tuple[int, int]) -> None:
    hw = load_hardware(hw_name)
    mapping = profile_mesh(hw, *mesh)[1]
    assert_exact_products("wang", hw, mapping, SMALL, [GemmParams(prefetch=p) for p in (Prefetch.NONE, Prefetch.IDEAL)])


@pytest.mark.parametrize("mesh", [pytest.param(m, marks=[pytest.mark.slow] if m == (8, 8) else [])
                                  for m in [*MESHES, (2, 4), (4, 2)]], ids=lambda m: f"{m[0]}x{m[1]}")
@pytest.mark.parametrize("dataflow", list(Dataflow), ids=str)
def test_des_equals_twin_calibrated(profile_mesh, mesh: tuple[int, int], dataflow: Dataflow) -> None:
    """Both regimes (shift-bound small blocks, GeMM-bound large ones), every prefetch policy, both layouts.

    The 2-chip ring (4x2 not transposed) circulates whole blocks one way (a 2-ring has one neighbour).
    """
    hw = load_hardware("meshslice-tpu-fit")
    mapping = profile_mesh(hw, *mesh)[1]
    for dims, shift_bound in ((SMALL, True), (LARGE, False)):
        for transpose in (False, True):
            problem = GemmProblem(*dims, dataflow, transpose)
            terms = _terms(problem, hw, mapping)
            assert (terms.shift > terms.gemm) == shift_bound
            for prefetch in Prefetch:
                result = simulate_gemm(problem, get_algorithm("wang"), GemmParams(prefetch=prefetch), network_for(hw,
                                                                                                                  mapping))
                assert result.analytic_time_s == pytest.approx(result.time_s, rel=1e-9, abs=0.0), (dims, prefetch)


@pytest.mark.parametrize("dataflow", list(Dataflow), ids=str)
def test_reference_form_counts_one_extra_shift(profile_mesh, dataflow: Dataflow) -> None:
    """The published form (docs/algorithms.md#wang-collective-matmul) writes A + C max(sigma, g) + D; the schedule
    does C GeMM steps but only C - 1 shift steps, so the reference exceeds the DES by max(sigma - g, 0): one exposed
    shift when shift-bound, nothing when GeMM-bound. (Prefetch ``none``: the reference form exposes the blocking
    weight gather.)"""
    hw = load_hardware("meshslice-tpu-fit")
    mesh = (8, 4)
    mapping = profile_mesh(hw, *mesh)[1]
    for dims in (SMALL, LARGE):
        problem = GemmProblem(*dims, dataflow)
        terms = _terms(problem, hw, mapping)
        des = simulate_gemm(problem, get_algorithm("wang"), GemmParams(prefetch=Prefetch.NONE), network_for(hw,
                                                                                                            mapping)).time_s
        excess = terms.reference() - des
        assert excess == pytest.approx(max(terms.shift - terms.gemm, 0.0), rel=1e-9, abs=1e-15)
        if dims is SMALL:
            assert excess > 0.0


def test_ideal_prefetch_overlaps_the_weight_gather(profile_mesh) -> None:
    """``ideal`` hides the blocking weight gather under the ring (OS) but the LS accumulators still wait
    for the first product, which needs the weight: max(A + (C-1) sigma, loop) rather than max(A, loop)."""
    hw = load_hardware("meshslice-tpu-fit")
    mesh = (8, 4)
    mapping = profile_mesh(hw, *mesh)[1]
    for dataflow in (Dataflow.OS, Dataflow.LS):
        problem = GemmProblem(*SMALL, dataflow)
        terms = _terms(problem, hw, mapping)
        ideal = simulate_gemm(problem, get_algorithm("wang"), GemmParams(prefetch=Prefetch.IDEAL), network_for(hw,
                                                                                                               mapping)).time_s
        none = simulate_gemm(problem, get_algorithm("wang"), GemmParams(prefetch=Prefetch.NONE), network_for(hw,
                                                                                                             mapping)).time_s
        assert none == pytest.approx(terms.gather + terms.loop, rel=1e-9)
        lead = terms.gather + (3 * terms.shift if dataflow is Dataflow.LS else 0.0)
        assert ideal == pytest.approx(max(lead, terms.loop), rel=1e-9)
        assert ideal < none


def test_infeasible() -> None:
    algorithm = get_algorithm("wang")
    problem = GemmProblem(*SMALL, Dataflow.OS)
    with pytest.raises(InfeasibleError, match="unknown variant 'halves'"):
        check_gemm(algorithm, problem, (4, 4), GemmParams(variant="halves"))
    with pytest.raises(InfeasibleError, match="--slices 2"):
        check_gemm(algorithm, problem, (4, 4), GemmParams(slices=2))
    # K = 36 splits over 4 chips but not into 2 halves on each of them
    with pytest.raises(InfeasibleError, match="K = 36 into 8 pieces"):
        check_gemm(algorithm, GemmProblem(128, 192, 36, Dataflow.OS), (4, 4), GemmParams())
    with pytest.raises(InfeasibleError, match="N = 36 into 8 pieces"):
        check_gemm(algorithm, GemmProblem(128, 36, 256, Dataflow.LS), (4, 4), GemmParams())

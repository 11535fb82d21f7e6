"""SUMMA (docs/algorithms.md#summa): exact products, DES == closed form, the docs/validation.md#worked-gemm-examples
worked example, feasibility."""

from __future__ import annotations

import pytest

from tpusim.config import HardwareProfile
from tpusim.errors import InfeasibleError
from tpusim.experiments.validation import toy_profile
from tpusim.gemm.algorithm import GemmContext
from tpusim.gemm.costs import CostModel
from tpusim.gemm.dataflow import GemmProblem
from tpusim.gemm.params import GemmParams, default_prefetch
from tpusim.gemm.registry import get_algorithm
from tpusim.gemm.simulate import simulate_gemm
from tpusim.hardware import load_hardware
from tpusim.vocabulary import Dataflow, Prefetch

MESHES = [(4, 4), (8, 4), (4, 8), (8, 8)]



# -- 1. exact products --------------------------------------------------------------------------------
@pytest.mark.parametrize("hw_name", ["meshslice-tpu-fit", "tpuv4"])
@pytest.mark.parametrize("mesh", MESHES, ids=lambda m: f"{m[0]}x{m[1]}")
def test_products_exact(profile_mesh, hw_name: str, mesh: tuple[int, int]) -> None:
    hw = load_hardware(hw_name)
    mapping = profile_mesh(hw, *mesh)[1]
    for dataflow in Dataflow:
        for transpose in (False, True):
            # M, N, K all different so a misplaced panel or a swapped axis cannot hide behind a square shape.
            problem = GemmProblem(64, 128, 256, dataflow, transpose)
            params = GemmParams(prefetch=default_prefetch(hw))
            result = simulate_gemm(problem, "summa", params, hw, mapping, verify=True)
            assert result.max_abs_error is not None and result.max_abs_error < 1e-9, (dataflow, transpose)


# -- 2. DES == twin on the calibrated network ----------------------------------------------------------
# GeMM-bound (262144 cubed), broadcast-bound (small), reduce-bound (wide outputs, short contraction).
SHAPES = [(262144, 262144, 262144), (1024, 1024, 1024), (16384, 1024, 1024), (1024, 16384, 1024), (4096, 32768, 256)]


@pytest.mark.parametrize("mesh", MESHES[:3], ids=lambda m: f"{m[0]}x{m[1]}")
@pytest.mark.parametrize("dataflow", list(Dataflow), ids=str)
def test_des_equals_twin_calibrated(profile_mesh, mesh: tuple[int, int], dataflow: Dataflow) -> None:
    hw = load_hardware("meshslice-tpu-fit")
    mapping = profile_mesh(hw, *mesh)[1]
    algorithm = get_algorithm("summa")
    bottlenecks = set()
    for m, n, k in SHAPES:
        for transpose in (False, True):
            problem = GemmProblem(m, n, k, dataflow, transpose)
            result = simulate_gemm(problem, "summa", GemmParams(), hw, mapping)
            assert result.analytic_time_s is not None
            assert result.time_s == pytest.approx(result.analytic_time_s, rel=1e-9), (m, n, k, transpose)
            broadcasts, r, g = algorithm.terms(GemmContext(problem, GemmParams(), mesh), CostModel(hw, mapping))
            step = {"broadcast": max(broadcasts), "reduce": r, "gemm": g}
            bottlenecks.add(max(step, key=step.__getitem__))
    # every steady-state regime the dataflow has is exercised
    assert bottlenecks == ({"broadcast", "gemm"} if dataflow is Dataflow.OS else {"broadcast", "reduce", "gemm"})


@pytest.mark.parametrize("dataflow", [Dataflow.LS, Dataflow.RS], ids=str)
def test_physical_reduces_pipeline_below_twin(profile_mesh, dataflow: Dataflow) -> None:
    """On the tpuv4 torus a link is held only for serialization (hop latency is propagation), so successive
    reduces on the 8-chip axis overlap their latency where the closed form queues whole reduces FIFO; when
    the reduce is the steady-state bottleneck the DES is faster than the twin, yet never faster than the
    form with the reduce dropped from the steady state."""
    hw = load_hardware("tpuv4")
    mapping = profile_mesh(hw, 8, 4)[1]
    problem = GemmProblem(64, 128, 256, dataflow, transpose=dataflow is Dataflow.LS)  # reduce on the 8-chip axis
    params = GemmParams(prefetch=Prefetch.PREVIOUS_OP)
    result = simulate_gemm(problem, "summa", params, hw, mapping)
    broadcasts, r, g = get_algorithm("summa").terms(GemmContext(problem, params, mapping.shape), CostModel(hw, mapping))
    assert r > max(*broadcasts, g)
    assert result.analytic_time_s is not None
    assert result.time_s < result.analytic_time_s * (1 - 0.2)
    assert result.time_s >= max(broadcasts) + r + g + 7 * max(*broadcasts, g) - 1e-15


# -- 3. docs/validation.md#worked-gemm-examples worked example
# --------------------------------------------------------------------
def _toy() -> HardwareProfile:
    """The worked examples' profile (docs/validation.md#worked-gemm-examples)."""
    return toy_profile()


def test_worked_example_os(profile_mesh) -> None:
    hw = _toy()
    mapping = profile_mesh(hw, 8, 4)[1]
    problem = GemmProblem(65536, 32768, 8192, Dataflow.OS)
    result = simulate_gemm(problem, "summa", GemmParams(), hw, mapping)
    (b_x, b_w), r, g = get_algorithm("summa").terms(GemmContext(problem, GemmParams(), (8, 4)), CostModel(hw, mapping))
    assert [b_x * 1e6, b_w * 1e6, g * 1e6] == pytest.approx([348.54, 352.54, 549.76], abs=0.01)
    assert r == 0.0
    assert result.analytic_time_s is not None
    assert result.analytic_time_s * 1e6 == pytest.approx(4750.59, abs=0.01)
    assert result.time_s * 1e6 == pytest.approx(4750.59, abs=0.01)


# -- 4. feasibility --------------------------------------------------------------------------------------
def test_panel_dimension_must_divide_into_steps() -> None:
    with pytest.raises(InfeasibleError, match=r"panel dimension k = 100 is not divisible by lcm\(8, 4\) = 8"):
        get_algorithm("summa").check(GemmProblem(64, 64, 100, Dataflow.OS), (8, 4), GemmParams())


def test_unknown_variant() -> None:
    with pytest.raises(InfeasibleError, match="unknown variant 'fast' for algorithm 'summa'"):
        get_algorithm("summa").check(GemmProblem(64, 64, 64, Dataflow.OS), (4, 4), GemmParams(variant="fast"))


def test_slices_rejected() -> None:
    with pytest.raises(InfeasibleError, match="--slices 4 does not apply to algorithm 'summa'"):
        get_algorithm("summa").check(GemmProblem(64, 64, 64, Dataflow.OS), (4, 4), GemmParams(slices=4))

"""SUMMA (docs/algorithms.md#summa): exact products, DES == closed form, the docs/validation.md#worked-gemm-examples
worked example, feasibility."""

from __future__ import annotations

import math

import pytest

from tests.gemm.helpers import assert_exact_products
from tpusim.collectives.factory import network_for, place_mesh
from tpusim.config import HardwareProfile
from tpusim.errors import InfeasibleError
from tpusim.experiments.validation import toy_profile
from tpusim.gemm.algorithm import GemmContext
from tpusim.gemm.costs import CostModel
from tpusim.gemm.dataflow import GemmProblem
from tpusim.gemm.params import GemmParams, default_prefetch
from tpusim.gemm.registry import get_algorithm
from tpusim.gemm.simulate import simulate_gemm
from tpusim.hardware import ChipModel, load_hardware
from tpusim.vocabulary import Dataflow, Prefetch

MESHES = [(4, 4), (8, 4), (4, 8), (8, 8)]



# -- 1. exact products --------------------------------------------------------------------------------
@pytest.mark.parametrize("hw_name", ["meshslice-tpu-fit", "tpuv4"])
@pytest.mark.parametrize("mesh", MESHES, ids=lambda m: f"{m[0]}x{m[1]}")
@pytest.mark.slow
def test_products_exact(profile_mesh, hw_name: str, mesh: tuple[int, int]) -> None:
    hw = load_hardware(hw_name)
    mapping = profile_mesh(hw, *mesh)[1]
    for dataflow in Dataflow:
        for transpose in (False, True):
            # M, N, K all different so a misplaced panel or a swapped axis cannot hide behind a square shape.
            problem = GemmProblem(64, 128, 256, dataflow, transpose)
            params = GemmParams(prefetch=default_prefetch(hw))
            result = simulate_gemm(problem, get_algorithm("summa"), params, network_for(hw, mapping), verify=True)
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
            result = simulate_gemm(problem, get_algorithm("summa"), GemmParams(), network_for(hw, mapping))
            assert result.analytic_time_s is not None
            assert result.time_s == pytest.approx(result.analytic_time_s, rel=1e-9), (m, n, k, transpose)
            broadcasts, r, g = algorithm.terms(GemmContext(problem, GemmParams(), mesh),
                                               CostModel(network_for(hw, mapping)))
            step = {"broadcast": max(broadcasts), "reduce": r, "gemm": g}
            bottlenecks.add(max(step, key=step.__getitem__))
    # every steady-state regime the dataflow has is exercised
    assert bottlenecks == ({"broadcast", "gemm"} if dataflow is Dataflow.OS else {"broadcast", "reduce", "gemm"})


@pytest.mark.parametrize("dataflow", [Dataflow.LS, Dataflow.RS], ids=str)
@pytest.mark.slow
def test_physical_reduces_pipeline_below_twin(profile_mesh, dataflow: Dataflow) -> None:
    """On the tpuv4 torus a link is held only for serialization (hop latency is propagation), so successive
    reduces on the 8-chip axis overlap their latency where the closed form queues whole reduces FIFO; when
    the reduce is the steady-state bottleneck the DES is faster than the twin, yet never faster than the
    form with the reduce dropped from the steady state."""
    hw = load_hardware("tpuv4")
    mapping = profile_mesh(hw, 8, 4)[1]
    problem = GemmProblem(64, 128, 256, dataflow, transpose=dataflow is Dataflow.LS)  # reduce on the 8-chip axis
    params = GemmParams(prefetch=Prefetch.PREVIOUS_OP)
    result = simulate_gemm(problem, get_algorithm("summa"), params, network_for(hw, mapping))
    broadcasts, r, g = get_algorithm("summa").terms(GemmContext(problem, params, mapping.shape),
                                                    CostModel(network_for(hw, mapping)))
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
    result = simulate_gemm(problem, get_algorithm("summa"), GemmParams(), network_for(hw, mapping))
    (b_x, b_w), r, g = get_algorithm("summa").terms(GemmContext(problem, GemmParams(), (8, 4)),
                                                    CostModel(network_for(hw, mapping)))
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


def test_panel_count_outside_the_rule_is_refused() -> None:
    with pytest.raises(InfeasibleError, match=r"^--slices 3: summa's panel count must divide lcm\(8, 4\) = 8 with 8 "
                                              r"and 4 each dividing it or divisible by it; feasible panel counts: "
                                              r"1, 2, 4, 8$"):
        get_algorithm("summa").check(GemmProblem(64, 64, 64, Dataflow.OS), (8, 4), GemmParams(slices=3))


# -- 5. the panel count (docs/algorithms.md#summa) -----------------------------------------------------
def _rule(rows: int, cols: int) -> list[int]:
    """Written independently: S divides lcm(R, C) and, on each axis, the panels either nest in the blocks or the
    blocks in the panels."""
    lcm = rows * cols // math.gcd(rows, cols)
    return [s for s in range(1, lcm + 1) if lcm % s == 0 and (rows % s == 0 or s % rows == 0)
            and (cols % s == 0 or s % cols == 0)]


@pytest.mark.parametrize(("mesh", "counts"), [((4, 4), [1, 2, 4]), ((8, 4), [1, 2, 4, 8]), ((2, 3), [1, 6]),
                                              ((4, 6), [1, 2, 12]), ((16, 16), [1, 2, 4, 8, 16])])
def test_panel_options(mesh: tuple[int, int], counts: list[int]) -> None:
    assert counts == _rule(*mesh)
    problem = GemmProblem(192, 192, 192, Dataflow.OS)
    assert get_algorithm("summa").slice_options(problem, mesh, GemmParams()) == counts
    assert get_algorithm("summa").slice_options(GemmProblem(64, 64, 97, Dataflow.OS), mesh, GemmParams()) == []


@pytest.mark.parametrize("hw_name", ["meshslice-tpu-fit", "tpuv4"])
@pytest.mark.parametrize(("mesh", "panels"), [((8, 4), (1, 2, 4)), ((4, 8), (2, 4)), ((4, 4), (1, 2))],
                         ids=str)
@pytest.mark.slow
def test_products_exact_for_every_panel_count(profile_mesh, hw_name: str, mesh: tuple[int, int],
                                              panels: tuple[int, ...]) -> None:
    """Fewer, wider panels than lcm(R, C): a panel spanning several ranks' blocks is broadcast by each of them,
    and an output panel spanning several is reduced to each; the product is X @ W for every count."""
    hw = load_hardware(hw_name)
    mapping = profile_mesh(hw, *mesh)[1]
    prefetch = default_prefetch(hw)
    assert_exact_products("summa", hw, mapping, (64, 128, 256), [GemmParams(prefetch, s) for s in panels])


@pytest.mark.parametrize("mesh", [(8, 4), (4, 8)], ids=lambda m: f"{m[0]}x{m[1]}")
@pytest.mark.parametrize("dataflow", list(Dataflow), ids=str)
@pytest.mark.slow
def test_des_equals_twin_for_every_panel_count(profile_mesh, mesh: tuple[int, int], dataflow: Dataflow) -> None:
    hw = load_hardware("meshslice-tpu-fit")
    mapping = profile_mesh(hw, *mesh)[1]
    for s in (1, 2, 4, 8):
        for m, n, k in SHAPES[1:]:
            problem = GemmProblem(m, n, k, dataflow, transpose=True)
            result = simulate_gemm(problem, get_algorithm("summa"), GemmParams(slices=s), network_for(hw, mapping))
            assert result.analytic_time_s is not None
            assert result.time_s == pytest.approx(result.analytic_time_s, rel=1e-9), (s, m, n, k)


def test_wider_panels_read_and_write_the_accumulator_fewer_times() -> None:
    """OS accumulates like MeshSlice's slices: every panel GeMM but a single one reads and writes the fp32
    partial output, so S panels move 2 x 4 x (M/R)(N/C) bytes S times; a single panel writes the bf16 output
    once. Checked against the chip's roofline written out here."""
    hw = load_hardware("tpuv4")
    problem = GemmProblem(8192, 8192, 8192, Dataflow.OS)
    costs = CostModel(network_for(hw, place_mesh(hw, 8, 4)))
    chip = ChipModel(hw.chip)  # its achievable rates; every dimension below is a multiple of the 128 tile
    for s in (1, 2, 4, 8):
        _, _, g = get_algorithm("summa").terms(GemmContext(problem, GemmParams(slices=s), (8, 4)), costs)
        m, n, k = 8192 // 8, 8192 // 4, 8192 // s
        output = 2 * 4 * m * n if s > 1 else 2 * m * n  # fp32 read and written, or bf16 written once
        memory = (2 * (m * k + k * n) + output) / chip.hbm_rate
        compute = 2 * m * n * k / chip.gemm_peak
        assert g == pytest.approx(chip.op_overhead + max(memory, compute), rel=1e-12), s

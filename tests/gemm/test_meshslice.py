"""MeshSlice (docs/algorithms.md#meshslice): exact products, DES == closed form, the
docs/validation.md#worked-gemm-examples worked examples, feasibility."""

from __future__ import annotations

import math

import pytest

from tpusim.collectives.factory import network_for
from tpusim.config import HardwareProfile
from tpusim.errors import InfeasibleError
from tpusim.experiments.validation import toy_profile
from tpusim.gemm.algorithm import GemmContext
from tpusim.gemm.costs import CostModel
from tpusim.gemm.dataflow import GemmProblem
from tpusim.gemm.params import GemmParams, default_prefetch
from tpusim.gemm.registry import get_algorithm
from tpusim.gemm.simulate import simulate_gemm
from tpusim.hardware import load_hardware, with_collective_switches
from tpusim.vocabulary import Dataflow, Prefetch

MESHES = [(4, 4), (8, 4), (4, 8)]
SLICED = {Dataflow.OS: "k", Dataflow.LS: "n", Dataflow.RS: "m"}



def _problem(dataflow: Dataflow, sliced: int, free: tuple[int, int], transpose: bool = False) -> GemmProblem:
    """The sliced dimension of ``dataflow`` set to ``sliced``, the other two (in m, n, k order) to ``free``."""
    name = SLICED[dataflow]
    dims = dict(zip([d for d in "mnk" if d != name], free, strict=True))
    dims[name] = sliced
    return GemmProblem(dims["m"], dims["n"], dims["k"], dataflow, transpose)


# -- 1. exact products --------------------------------------------------------------------------------
@pytest.mark.parametrize("hw_name", ["meshslice-tpu-fit", "tpuv4"])
@pytest.mark.parametrize("mesh", [*MESHES, (8, 8)], ids=lambda m: f"{m[0]}x{m[1]}")
@pytest.mark.slow
def test_products_exact(profile_mesh, hw_name: str, mesh: tuple[int, int]) -> None:
    hw = load_hardware(hw_name)
    mapping = profile_mesh(hw, *mesh)[1]
    unit = math.lcm(*mesh) * 8
    for dataflow in Dataflow:
        for transpose in (False, True):
            for slices in (1, 2, 3):
                # Free dims != sliced dim so a misplaced slice cannot hide behind a square shape.
                problem = _problem(dataflow, unit * slices, (unit, 2 * unit), transpose)
                params = GemmParams(prefetch=default_prefetch(hw), slices=slices)
                result = simulate_gemm(problem, get_algorithm("meshslice"), params, network_for(hw, mapping),
                                       verify=True)
                assert result.max_abs_error is not None and result.max_abs_error < 1e-9, (dataflow, transpose, slices)


# -- 2. DES == twin on the calibrated network ----------------------------------------------------------
# Per-slice shapes held fixed across K (sliced dim = 64 K q), chosen so every dataflow meets every
# steady-state regime: GeMM-bound (65536-wide free dims), gather-bound (small), reduce-scatter-bound.
REGIMES = [((65536, 65536), 8), ((1024, 1024), 2), ((16384, 1024), 2)]


@pytest.mark.parametrize("mesh", MESHES, ids=lambda m: f"{m[0]}x{m[1]}")
@pytest.mark.parametrize("dataflow", list(Dataflow), ids=str)
@pytest.mark.slow
def test_des_equals_twin_calibrated(profile_mesh, mesh: tuple[int, int], dataflow: Dataflow) -> None:
    hw = load_hardware("meshslice-tpu-fit")
    mapping = profile_mesh(hw, *mesh)[1]
    unit = math.lcm(*mesh) * 8
    for free, q in REGIMES:
        for slices in range(1, 17):
            problem = _problem(dataflow, unit * slices * q, free)
            result = simulate_gemm(problem, get_algorithm("meshslice"), GemmParams(slices=slices), network_for(hw,
                                                                                                               mapping))
            assert result.analytic_time_s is not None
            assert result.time_s == pytest.approx(result.analytic_time_s, rel=1e-9), (free, slices)


@pytest.mark.parametrize("dataflow", [Dataflow.LS, Dataflow.RS], ids=str)
def test_physical_reduce_scatters_pipeline_below_twin_without_limits(profile_mesh, dataflow: Dataflow) -> None:
    """On tpuv4-wire (no overlap limits) a link is held only for serialization (hop latency is propagation), so
    back-to-back reduce-scatters on one axis overlap their latency, where the closed form queues whole
    collectives FIFO. When r is the steady-state bottleneck the DES is therefore faster than the twin, yet never
    faster than the form with r dropped from the steady state. tpuv4's limit of one reduce-scatter in flight
    queues them FIFO, and then the DES equals the twin."""
    algorithm = get_algorithm("meshslice")
    for name in ("tpuv4-wire", "tpuv4"):
        hw = load_hardware(name)
        # 8x4 untransposed puts RS's reduce-scatter on the 8-chip axis; LS needs the transposed layer for that.
        mapping = profile_mesh(hw, 8, 4)[1]
        for slices in (2, 3):
            problem = _problem(dataflow, 64 * slices, (64, 64), transpose=dataflow is Dataflow.LS)
            params = GemmParams(prefetch=Prefetch.PREVIOUS_OP, slices=slices)
            result = simulate_gemm(problem, get_algorithm("meshslice"), params, network_for(hw, mapping))
            gathers, r, g = algorithm.terms(GemmContext(problem, params, mapping.shape),
                                            CostModel(network_for(hw, mapping)))
            assert r > max(*gathers, g)  # the reduce-scatter-bound regime
            assert result.analytic_time_s is not None
            if name == "tpuv4":
                assert result.time_s == pytest.approx(result.analytic_time_s, rel=1e-9)
                continue
            assert result.time_s < result.analytic_time_s * (1 - 0.2)
            assert result.time_s >= max(gathers) + r + g + (slices - 1) * max(*gathers, g) - 1e-15


@pytest.mark.parametrize("limit", [1, 2, "unlimited"])
def test_overlap_limit_changes_os_time_by_what_its_twin_says(profile_mesh, limit: int | str) -> None:
    """MeshSlice OS gathers X and W per slice: one all-gather in flight serialises them (c = a_x + a_w), two or
    no limit overlap them (c = max). The DES moves with the twin exactly, and the twin is the form of
    docs/algorithms.md#meshslice with that c."""
    hw = with_collective_switches(load_hardware("tpuv4"), overlap_limit=limit)
    mapping = profile_mesh(hw, 8, 4)[1]
    algorithm = get_algorithm("meshslice")
    slices = 4
    problem = _problem(Dataflow.OS, 64 * slices, (4096, 2048))
    params = GemmParams(prefetch=Prefetch.PREVIOUS_OP, slices=slices)
    result = simulate_gemm(problem, get_algorithm("meshslice"), params, network_for(hw, mapping))
    gathers, r, g = algorithm.terms(GemmContext(problem, params, mapping.shape), CostModel(network_for(hw, mapping)))
    assert r == 0 and len(gathers) == 2 and min(gathers) > 0
    c = sum(gathers) if limit == 1 else max(gathers)
    assert result.analytic_time_s == pytest.approx(c + g + (slices - 1) * max(c, g), rel=1e-12)
    assert result.time_s == pytest.approx(result.analytic_time_s, rel=1e-9)
    assert result.overlap_limits == ("all-gather=1,reduce-scatter=1,all-reduce=1" if limit == 1 else
                                     "all-gather=2,reduce-scatter=2,all-reduce=2" if limit == 2 else "unlimited")


# -- 3. docs/validation.md#worked-gemm-examples worked examples
# ---------------------------------------------------------------
def _toy() -> HardwareProfile:
    """The worked examples' profile (docs/validation.md#worked-gemm-examples)."""
    return toy_profile()


TOY_SHAPE = {"m": 65536, "k": 8192, "n": 32768}


@pytest.mark.parametrize(
    ("algorithm", "dataflow", "params", "terms_us", "total_us"),
    [
        ("meshslice", Dataflow.OS, GemmParams(slices=4), ([516.32, 604.20], 0.0, 1099.51), 5002.25),
        ("meshslice", Dataflow.LS, GemmParams(slices=4), ([604.20], 2026.27, 1099.51), 9808.78),
        ("collective", Dataflow.OS, GemmParams(prefetch=Prefetch.IDEAL), None, 6424.31),
        ("collective", Dataflow.LS, GemmParams(prefetch=Prefetch.IDEAL), None, 12464.11),
    ],
    ids=["meshslice-os", "meshslice-ls", "collective-os", "collective-ls"],
)
def test_worked_examples(profile_mesh, algorithm: str, dataflow: Dataflow, params: GemmParams,
                         terms_us: tuple[list[float], float, float] | None, total_us: float) -> None:
    hw = _toy()
    mapping = profile_mesh(hw, 8, 4)[1]
    problem = GemmProblem(TOY_SHAPE["m"], TOY_SHAPE["n"], TOY_SHAPE["k"], dataflow)
    result = simulate_gemm(problem, get_algorithm(algorithm), params, network_for(hw, mapping))
    assert result.analytic_time_s is not None
    assert result.analytic_time_s * 1e6 == pytest.approx(total_us, abs=0.01)
    assert result.time_s * 1e6 == pytest.approx(total_us, abs=0.01)
    if terms_us is not None:
        ctx = GemmContext(problem, params, mapping.shape)
        gathers, r, g = get_algorithm(algorithm).terms(ctx, CostModel(network_for(hw, mapping)))  # type: ignore[attr-defined]
        assert [t * 1e6 for t in gathers] == pytest.approx(terms_us[0], abs=0.01)
        assert r * 1e6 == pytest.approx(terms_us[1], abs=0.01)
        assert g * 1e6 == pytest.approx(terms_us[2], abs=0.01)


def test_mean_overlap_switch_changes_only_the_twin(profile_mesh) -> None:
    hw = _toy()
    mapping = profile_mesh(hw, 8, 4)[1]
    problem = GemmProblem(TOY_SHAPE["m"], TOY_SHAPE["n"], TOY_SHAPE["k"], Dataflow.OS)
    result = simulate_gemm(problem, get_algorithm("meshslice"), GemmParams(slices=4, compat_mean_overlap=True),
                           network_for(hw, mapping))
    assert result.analytic_time_s is not None
    assert result.analytic_time_s * 1e6 == pytest.approx(4958.31, abs=0.01)
    assert result.time_s * 1e6 == pytest.approx(5002.25, abs=0.01)


# -- 4. the headline ordering on GPT-3 FF1 ---------------------------------------------------------------
@pytest.mark.slow
def test_gpt3_ff1_exposed_communication(profile_mesh) -> None:
    """GPT-3 FF1 (M = 256 x 2048 tokens, K = 12288, N = 49152, OS) on 32x8: with K = 8 only MeshSlice's
    slice-0 gathers stay exposed (833.57 us, the 32-chip W gather), against the collective's whole X gather
    (4465.77 us); compute (9297.52 us) is the same for both."""
    hw = load_hardware("meshslice-tpu-fit")
    mapping = profile_mesh(hw, 32, 8)[1]
    problem = GemmProblem(256 * 2048, 49152, 12288, Dataflow.OS)
    sliced = simulate_gemm(problem, get_algorithm("meshslice"), GemmParams(slices=8), network_for(hw, mapping))
    baseline = simulate_gemm(problem, get_algorithm("collective"), GemmParams(prefetch=Prefetch.IDEAL),
                             network_for(hw, mapping))
    assert sliced.compute_s == pytest.approx(baseline.compute_s, rel=1e-9)
    assert sliced.exposed_comm_s < 0.25 * baseline.exposed_comm_s
    assert sliced.exposed_comm_s * 1e6 == pytest.approx(833.57, abs=0.01)
    assert baseline.exposed_comm_s * 1e6 == pytest.approx(4465.77, abs=0.01)
    assert sliced.time_s < baseline.time_s


# -- 5. feasibility ------------------------------------------------------------------------------------
def test_infeasible_slice_count_lists_feasible_ones(profile_mesh) -> None:
    hw = load_hardware("meshslice-tpu-fit")
    problem = GemmProblem(256 * 2048, 49152, 12288, Dataflow.OS)
    with pytest.raises(InfeasibleError) as info:
        simulate_gemm(problem, get_algorithm("meshslice"), GemmParams(slices=7), network_for(hw, profile_mesh(hw, 32,
                                                                                                              8)[1]))
    assert str(info.value).startswith(
        "--slices 7: the sliced dimension k = 12288 is not divisible by lcm(32, 8) x 8 x 7; "
        "feasible slice counts: 1, 2, 3, 4, 6, 8, 12, 16, 24, 48"
    )


def test_transposed_layer_swaps_the_lcm_axes() -> None:
    algorithm = get_algorithm("meshslice")
    with pytest.raises(InfeasibleError, match=r"lcm\(8, 32\)"):
        algorithm.check(GemmProblem(4096, 4096, 12288, Dataflow.OS, transpose=True), (32, 8), GemmParams(slices=7))


@pytest.mark.parametrize("slices", [0, -1])
def test_slice_count_below_one(slices: int) -> None:
    with pytest.raises(InfeasibleError, match=f"--slices {slices}"):
        get_algorithm("meshslice").check(GemmProblem(256, 256, 256, Dataflow.OS), (4, 4), GemmParams(slices=slices))


def test_one_slice_needs_only_the_mesh_to_divide_the_sliced_dimension() -> None:
    """One slice is the whole block, with no strided runs: k = 80 on 4x4 is no multiple of lcm(4, 4) x 8 = 32, yet
    one slice runs; two do not."""
    algorithm = get_algorithm("meshslice")
    problem = GemmProblem(256, 256, 80, Dataflow.OS)
    assert algorithm.slice_options(problem, (4, 4), GemmParams()) == [1]
    algorithm.check(problem, (4, 4), GemmParams(slices=1))
    with pytest.raises(InfeasibleError, match=r"lcm\(4, 4\) x 8 x 2; feasible slice counts: 1$"):
        algorithm.check(problem, (4, 4), GemmParams(slices=2))


def test_no_feasible_slice_count() -> None:
    with pytest.raises(InfeasibleError, match="feasible slice counts: none"):
        get_algorithm("meshslice").check(GemmProblem(256, 256, 82, Dataflow.OS), (4, 4), GemmParams(slices=1))


def test_no_feasible_slice_count_when_none_was_asked_for_names_no_flag() -> None:
    with pytest.raises(InfeasibleError) as info:
        get_algorithm("meshslice").check(GemmProblem(256, 256, 82, Dataflow.OS), (4, 4), GemmParams())
    assert str(info.value) == ("meshslice: the sliced dimension k = 82 is not divisible by lcm(4, 4) = 4, so no slice "
                               "count is feasible; use a multiple of 4")


def test_unknown_variant() -> None:
    with pytest.raises(InfeasibleError, match="unknown variant"):
        get_algorithm("meshslice").check(GemmProblem(256, 256, 256, Dataflow.OS), (4, 4),
                                         GemmParams(slices=1, variant="fast"))


def test_slices_rejected_by_collective(profile_mesh) -> None:
    hw = load_hardware("meshslice-tpu-fit")
    with pytest.raises(InfeasibleError, match="--slices 4 does not apply to algorithm 'collective'"):
        simulate_gemm(GemmProblem(256, 256, 256, Dataflow.OS), get_algorithm("collective"), GemmParams(slices=4),
                      network_for(hw, profile_mesh(hw, 4, 4)[1]))

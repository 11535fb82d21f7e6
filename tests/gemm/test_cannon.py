"""Cannon (docs/algorithms.md#cannon): exact products, DES == closed form, the reference's accounting, feasibility."""

from __future__ import annotations

import pytest

from tpusim.collectives.factory import network_for
from tpusim.errors import InfeasibleError
from tpusim.gemm.algorithm import GemmContext
from tpusim.gemm.costs import CostModel
from tpusim.gemm.dataflow import GemmProblem
from tpusim.gemm.params import GemmParams, default_prefetch
from tpusim.gemm.registry import get_algorithm
from tpusim.gemm.simulate import simulate_gemm
from tpusim.hardware import load_hardware
from tpusim.vocabulary import Dataflow

VARIANTS = [None, "bidirectional-halves"]



# -- 1. exact products --------------------------------------------------------------------------------
@pytest.mark.parametrize("hw_name", ["meshslice-tpu-fit", "tpuv4"])
@pytest.mark.parametrize("n", [4, 8])
@pytest.mark.parametrize("variant", VARIANTS, ids=str)
@pytest.mark.slow
def test_products_exact(profile_mesh, hw_name: str, n: int, variant: str | None) -> None:
    hw = load_hardware(hw_name)
    mapping = profile_mesh(hw, n, n)[1]
    for dataflow in Dataflow:
        for transpose in (False, True):
            # M, N, K all different so a mispaired block or a swapped axis cannot hide behind a square shape.
            problem = GemmProblem(64, 128, 256, dataflow, transpose)
            params = GemmParams(prefetch=default_prefetch(hw), variant=variant)
            result = simulate_gemm(problem, get_algorithm("cannon"), params, network_for(hw, mapping), verify=True)
            assert result.max_abs_error is not None and result.max_abs_error < 1e-9, (dataflow, transpose)


# -- 2. DES == twin on the calibrated network ----------------------------------------------------------
def _shapes(n: int) -> list[tuple[int, int, int]]:
    """GeMM-bound, near-balanced, and shift-bound blocks (the same per-chip blocks on every mesh)."""
    return [(n * 131072,) * 3, (n * 65536, n * 65536, n * 8192), (n * 64, n * 64, n * 64), (256 * n, 2048 * n, 16 * n)]


def _run(profile_mesh, problem: GemmProblem, variant: str | None, n: int):  # type: ignore[no-untyped-def]
    hw, mapping = profile_mesh("meshslice-tpu-fit", n, n)
    params = GemmParams(variant=variant)
    result = simulate_gemm(problem, get_algorithm("cannon"), params, network_for(hw, mapping))
    terms = get_algorithm("cannon").terms(GemmContext(problem, params, (n, n)), CostModel(network_for(hw, mapping)))
    return result, terms


@pytest.mark.parametrize("n", [4, *(pytest.param(n, marks=pytest.mark.slow) for n in (8, 16))])
@pytest.mark.parametrize("variant", VARIANTS, ids=str)
@pytest.mark.parametrize("dataflow", list(Dataflow), ids=str)
def test_des_equals_twin_calibrated(profile_mesh, n: int, variant: str | None, dataflow: Dataflow) -> None:
    regimes = set()
    for m, nn, k in _shapes(n):
        result, terms = _run(profile_mesh, GemmProblem(m, nn, k, dataflow), variant, n)
        assert result.analytic_time_s is not None
        assert result.time_s == pytest.approx(result.analytic_time_s, rel=1e-9), (m, nn, k)
        shift = terms["roll"] if variant is None else terms["half_roll"]
        regimes.add("gemm" if terms["g"] >= shift else "shift")
    assert regimes == {"gemm", "shift"}


@pytest.mark.parametrize("dataflow", list(Dataflow), ids=str)
def test_transposed_layer_same_time_on_square_mesh(profile_mesh, dataflow: Dataflow) -> None:
    """On a square calibrated mesh the only asymmetry is beta per axis; send/recv always uses beta_SR[1],
    so a transposed layer costs the same."""
    plain, _ = _run(profile_mesh, GemmProblem(4096, 8192, 2048, dataflow), None, 4)
    flipped, _ = _run(profile_mesh, GemmProblem(4096, 8192, 2048, dataflow, transpose=True), None, 4)
    assert flipped.time_s == pytest.approx(plain.time_s, rel=1e-12)


@pytest.mark.parametrize("n", [4, 8])
def test_os_against_reference_form(profile_mesh, n: int) -> None:
    """The reference charges max(skew) + n max(roll, g): n rolls, but after the n-th GeMM no block needs to
    move, so the DES issues n-1. Equal when the GeMM hides the roll; otherwise the reference is longer by
    exactly roll - g."""
    for m, nn, k in _shapes(n):
        result, t = _run(profile_mesh, GemmProblem(m, nn, k, Dataflow.OS), None, n)
        reference = t["skew"] + n * max(t["roll"], t["g"])
        assert reference - result.time_s == pytest.approx(max(t["roll"] - t["g"], 0.0), abs=1e-12)


@pytest.mark.parametrize("dataflow", [Dataflow.LS, Dataflow.RS], ids=str)
def test_ls_rs_against_reference_form(profile_mesh, dataflow: Dataflow) -> None:
    """For LS/RS the reference skews the partial output together with the moving operand,
    max(skew_mv, skew_y) + n max(roll, g). The output starts as zeros, so skewing it is free; what costs is
    bringing it home after the last GeMM (a shift of up to floor(n/2) hops, which no uniform one-hop
    circulation can avoid while pairing it with the moving blocks). The DES therefore pays
    skew_mv + unskew_y where the reference pays their max, and (as for OS) one roll fewer."""
    n = 8
    for m, nn, k in _shapes(n):
        result, t = _run(profile_mesh, GemmProblem(m, nn, k, dataflow), None, n)
        reference = max(t["skew"], t["unskew"]) + n * max(t["roll"], t["g"])
        expected = min(t["skew"], t["unskew"]) - (max(t["roll"], t["g"]) - t["g"])
        assert result.time_s - reference == pytest.approx(expected, abs=1e-12)
        if t["g"] >= t["roll"]:
            assert result.time_s > reference


@pytest.mark.slow
def test_halves_beat_textbook_when_shift_bound(profile_mesh) -> None:
    """Half-blocks in both directions halve the per-step bandwidth term; on shift-bound blocks the
    authors' version is faster despite its full all-gathers."""
    for dataflow in Dataflow:
        textbook, _ = _run(profile_mesh, GemmProblem(8 * 256, 8 * 2048, 8 * 16, dataflow), None, 8)
        halves, _ = _run(profile_mesh, GemmProblem(8 * 256, 8 * 2048, 8 * 16, dataflow), "bidirectional-halves", 8)
        assert halves.time_s < textbook.time_s, dataflow


# -- 3. feasibility --------------------------------------------------------------------------------------
def test_non_square_mesh() -> None:
    with pytest.raises(InfeasibleError) as info:
        get_algorithm("cannon").check(GemmProblem(256, 256, 256, Dataflow.OS), (8, 4), GemmParams())
    assert str(info.value) == ("algorithm 'cannon' needs a square mesh; got 8x4 (R != C); "
                               "valid on 16, 64, 256, 1024 chips as 4x4, 8x8, 16x16, 32x32")


def test_non_square_mesh_through_simulate(profile_mesh) -> None:
    hw = load_hardware("meshslice-tpu-fit")
    with pytest.raises(InfeasibleError, match="needs a square mesh; got 4x8"):
        simulate_gemm(GemmProblem(256, 256, 256, Dataflow.OS), get_algorithm("cannon"), GemmParams(),
                      network_for(hw, profile_mesh(hw, 4, 8)[1]))


def test_unknown_variant() -> None:
    with pytest.raises(InfeasibleError) as info:
        get_algorithm("cannon").check(GemmProblem(256, 256, 256, Dataflow.OS), (4, 4), GemmParams(variant="fast"))
    assert str(info.value) == ("unknown variant 'fast' for algorithm 'cannon'; "
                               "valid: textbook, bidirectional-halves")


def test_halves_need_even_blocks() -> None:
    with pytest.raises(InfeasibleError, match="n = 36 must be divisible by 2 x 4 = 8"):
        get_algorithm("cannon").check(GemmProblem(64, 36, 64, Dataflow.LS), (4, 4),
                                      GemmParams(variant="bidirectional-halves"))


def test_slices_rejected() -> None:
    with pytest.raises(InfeasibleError, match="--slices 2 does not apply to algorithm 'cannon'"):
        get_algorithm("cannon").check(GemmProblem(64, 64, 64, Dataflow.OS), (4, 4), GemmParams(slices=2))

"""The prefetch window (docs/algorithms.md#prefetch-policy): window 0 is ``none``, window 1 ``previous-op``, a wider
window starts weight gathers earlier, a budget that no gathered buffer fits turns it off, and the budget is HBM
the memory estimate reserves."""

from __future__ import annotations

import pytest

from tests.panels import plan_panel_bytes
from tpusim import api
from tpusim.errors import InfeasibleError
from tpusim.model.registry import load_model
from tpusim.vocabulary import Prefetch, Recompute

WANG = {"model": "gpt3-175b", "hardware": "tpuv4", "mesh": "4x4", "algorithm": "wang", "batch": 16,
        "ignore_memory": True}


def _time(**changes: object) -> float:
    return api.step(**WANG, **changes).step_time_s


@pytest.mark.slow
def test_window_zero_is_none_and_window_one_is_previous_op() -> None:
    assert _time(prefetch="window", prefetch_window=0) == _time(prefetch="none")
    assert _time(prefetch="window", prefetch_window=1) == _time(prefetch="previous-op")


@pytest.mark.slow
def test_a_wider_window_hides_more_and_a_budget_too_small_for_any_buffer_hides_nothing() -> None:
    none, one, wide = _time(prefetch="none"), _time(prefetch="window", prefetch_window=1), _time(
        prefetch="window", prefetch_window=8)
    assert wide < one < none
    assert _time(prefetch="window", prefetch_window=8, prefetch_budget="1 B") == none


@pytest.mark.slow
def test_the_budget_is_reserved_in_the_memory_estimate() -> None:
    plain = api.step(**WANG, prefetch="window", prefetch_window=4)
    reserved = api.step(**WANG, prefetch="window", prefetch_window=4, prefetch_budget="2 GiB")
    assert reserved.memory_capacity_bytes == plain.memory_capacity_bytes - 2 * 2**30
    # unbudgeted, the weights gathered early for the GeMMs of the four ops ahead are held beside the busiest GeMM
    # (docs/workloads.md#working-set); budgeted, they are within the reserve
    early = [plan_panel_bytes(load_model("gpt3-175b"), "wang", 16, (4, 4), Prefetch.WINDOW, Recompute(plain.recompute),
                              window=window) for window in (4, None)]
    assert plain.memory_bytes_per_chip - reserved.memory_bytes_per_chip == pytest.approx(early[0] - early[1],
                                                                                         rel=1e-12)
    assert early[0] > early[1]


def test_a_budget_needs_the_window_policy() -> None:
    with pytest.raises(InfeasibleError, match=r"^--prefetch-budget applies to --prefetch window; the prefetch "
                                              r"policy is previous-op$"):
        api.step(**WANG, prefetch="previous-op", prefetch_budget="1 GiB")


@pytest.mark.slow
def test_previous_gemm_starts_gathers_earlier_than_previous_op() -> None:
    """XLA's placement: the weight gather of GeMM j + 1 starts with GeMM j, so the attention core, the norms and
    the LayerNorm all-reduce between them hide it too, where ``previous-op`` starts it with the last of those."""
    none, previous_op, previous_gemm = (_time(prefetch=p) for p in ("none", "previous-op", "previous-gemm"))
    assert previous_gemm < previous_op < none


def test_previous_gemm_alone_is_none() -> None:
    """A GeMM simulated on its own has no previous GeMM."""
    gemm = {"algorithm": "wang", "dataflow": "os", "m": 4096, "n": 4096, "k": 4096, "mesh": "4x4",
            "hardware": "tpuv4", "topology": "torus:4x4"}
    assert api.gemm(**gemm, prefetch="previous-gemm").time_s == api.gemm(**gemm, prefetch="none").time_s


@pytest.mark.slow
def test_an_unbounded_window_is_not_ideal() -> None:
    """``ideal`` hides each gather behind the GeMM that consumes it; an unbounded window hides gathers behind the
    ops before their GeMM, one after the other as the overlap limit allows. Neither contains the other: with 16
    sequences on 4x4 the weight gathers take longer than the GeMMs they feed, so ``ideal`` exposes the excess of
    every one while the window, running ahead, hides them behind several GeMMs and finishes first (the step's
    very first gather is the one only ``ideal`` hides). HBM contention is off, so only scheduling differs."""
    free = {"scale": {"dma": 0}}
    ideal, none = _time(prefetch="ideal", **free), _time(prefetch="none", **free)
    unbounded = _time(prefetch="window", prefetch_window=10_000, **free)
    assert unbounded < ideal < none


MESHSLICE = {**WANG, "algorithm": "meshslice", "slices": 4}


@pytest.mark.slow
def test_meshslice_first_slice_gather_follows_the_prefetch_policy_like_every_other_gather() -> None:
    """One policy for every algorithm (docs/algorithms.md#prefetch-policy): MeshSlice's slice-0 weight gather is
    data-independent, so ``previous-gemm`` starts it with the GeMM before and ``previous-op`` with the op before;
    its exposed communication shrinks by what they hide. (Before, all three policies gave one time.)"""
    runs = {p: api.step(**MESHSLICE, prefetch=p) for p in ("none", "previous-op", "previous-gemm")}
    exposed = {p: r.exposed_comm_s for p, r in runs.items()}
    assert exposed["previous-gemm"] < exposed["previous-op"] < exposed["none"]
    # the GeMMs themselves are untouched: the compute time is the same, only the exposure moves
    assert runs["previous-gemm"].compute_s == pytest.approx(runs["none"].compute_s, rel=1e-9)
    assert runs["previous-gemm"].step_time_s - runs["none"].step_time_s == pytest.approx(
        exposed["previous-gemm"] - exposed["none"], rel=1e-9)


@pytest.mark.slow
def test_meshslice_prefetches_its_first_slice_not_the_whole_block() -> None:
    """The window's budget counts the gathered slice: a budget of exactly one slice-0 gather of the largest weight
    (1/K of its gathered block, which would need K times as much) lets the FF layers' first slices start early,
    one byte less does not."""
    model = api.model("gpt3-175b")
    # the largest weight on 4x4 is an FF matrix, h x 4h over 16 chips, gathered over one axis of 4, in bf16
    largest_slice = model.hidden * model.ffn // 16 * 4 * 2 // MESHSLICE["slices"]

    def time(**changes: object) -> float:
        return api.step(**MESHSLICE, **changes).step_time_s

    fits = time(prefetch="window", prefetch_window=1, prefetch_budget=f"{largest_slice} B")
    short = time(prefetch="window", prefetch_window=1, prefetch_budget=f"{largest_slice - 1} B")
    assert fits < short < time(prefetch="none")
    assert time(prefetch="window", prefetch_window=1) <= fits


@pytest.mark.parametrize("extra", [{"algorithm": "summa", "slices": 4}, {"algorithm": "cannon"},
                                   {"algorithm": "cannon", "variant": "bidirectional-halves"}],
                         ids=["summa", "cannon", "cannon-halves"])
@pytest.mark.slow
def test_summa_first_panel_and_cannon_skew_follow_the_prefetch_policy(extra: dict[str, object]) -> None:
    """SUMMA's first weight panel broadcast and Cannon's weight skew (its all-gather in bidirectional-halves) are
    data-independent first transfers like MeshSlice's slice 0: ``previous-gemm`` starts them with the GeMM before,
    ``previous-op`` with the op before, and only the exposure moves. (Before, the three policies gave one time.)"""
    runs = {p: api.step(**{**WANG, **extra}, prefetch=p) for p in ("none", "previous-op", "previous-gemm")}
    exposed = {p: r.exposed_comm_s for p, r in runs.items()}
    assert exposed["previous-gemm"] < exposed["previous-op"] < exposed["none"]
    assert runs["previous-gemm"].step_time_s - runs["none"].step_time_s == pytest.approx(
        exposed["previous-gemm"] - exposed["none"], rel=1e-9)


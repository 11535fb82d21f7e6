"""The GeMM panels of the working set (docs/workloads.md#working-set): each algorithm's declaration worked out by
hand on a small problem, the step's memory growing by exactly the panel term of its plan, and the tuner's memory
gate bounding every plan it may choose."""

from __future__ import annotations

from dataclasses import replace

import pytest

import tpusim.api as tp
from tests.panels import BF16, role_sizes, rule, step_panel_bytes
from tests.tune_specs import tune_for
from tpusim.config import TransformerModel
from tpusim.errors import InfeasibleError, UserError
from tpusim.gemm.algorithm import GemmContext
from tpusim.gemm.dataflow import GemmProblem
from tpusim.gemm.params import GemmParams, default_prefetch
from tpusim.gemm.registry import get_algorithm
from tpusim.hardware import load_hardware
from tpusim.model.memory import MemoryEstimate, estimate_memory
from tpusim.model.plan import StepSpec, plan_step
from tpusim.model.program import PrefetchWindow, held_panels, panel_peak
from tpusim.model.registry import load_model
from tpusim.tuning import tune
from tpusim.tuning.capacity import PanelLimit, mesh_memory, mesh_panels
from tpusim.vocabulary import Dataflow, Prefetch, Recompute

M, N, K = 64, 128, 192
R, C = 2, 4
TINY = TransformerModel(name="tiny", description="test model", layers=6, hidden=512, heads=8, head_dim=64,
                        ffn=2048, sequence=64)


# (algorithm, params, mesh) -> {dataflow: (panel elements, early elements)}, worked out from M, N, K, R, C:
# X is [M, K] (RS: [K, M]) split R x C, W [K, N] (LS: [N, K]); OS gathers X over C and W over R, LS W over R,
# RS X over C, each to its whole panel (X: M K / R, W: K N / C)
CASES = [
    ("collective", GemmParams(), (R, C), {Dataflow.OS: (M * K // R + K * N // C, K * N // C),
                                          Dataflow.LS: (N * K // C, N * K // C),
                                          Dataflow.RS: (K * M // R, K * M // R)}),
    # 2 x 2 (four slices need each sliced dimension divisible by lcm(2, 2) x 8 x 4): two of the four slices of
    # every panel, the one multiplied and the next arriving
    ("meshslice", GemmParams(slices=4), (2, 2), {Dataflow.OS: (2 * (M * K // 2 + K * N // 2) // 4, K * N // 2 // 4),
                                                 Dataflow.LS: (2 * (N * K // 2) // 4, N * K // 2 // 4),
                                                 Dataflow.RS: (2 * (K * M // 2) // 4, K * M // 2 // 4)}),
    ("meshslice", GemmParams(slices=1), (R, C), {Dataflow.OS: (M * K // R + K * N // C, K * N // C),
                                                 Dataflow.LS: (N * K // C, N * K // C),
                                                 Dataflow.RS: (K * M // R, K * M // R)}),
    # S = lcm(2, 4) = 4 panels by default: two in hand
    ("summa", GemmParams(), (R, C), {Dataflow.OS: (2 * (M * K // R + K * N // C) // 4, K * N // C // 4),
                                     Dataflow.LS: (2 * (N * K // C) // 4, N * K // C // 4),
                                     Dataflow.RS: (2 * (K * M // R) // 4, K * M // R // 4)}),
    # 4 x 4: a block is a sixteenth; two of each moving block (in hand and arriving), one output block arriving
    ("cannon", GemmParams(), (4, 4), {Dataflow.OS: (2 * (M * K + K * N) // 16, K * N // 16),
                                      Dataflow.LS: (2 * N * K // 16 + M * N // 16, N * K // 16),
                                      Dataflow.RS: (2 * K * M // 16 + M * N // 16, K * M // 16)}),
    # the moving operand gathered over 4 chips, beside the output block (LS, RS), or the output gathered over 4
    ("cannon", GemmParams(variant="bidirectional-halves"), (4, 4), {
        Dataflow.OS: (4 * (M * K + K * N) // 16, 4 * K * N // 16),
        Dataflow.LS: (max(4 * N * K // 16 + M * N // 16, 4 * M * N // 16), 4 * N * K // 16),
        Dataflow.RS: (max(4 * K * M // 16 + M * N // 16, 4 * M * N // 16), 4 * K * M // 16)}),
    # the weight gathered over R; X's blocks on the ring of C = 4: the one received and the next (2 blocks), or
    # LS's arriving accumulators (one output block)
    ("wang", GemmParams(), (R, C), {Dataflow.OS: (K * N // C + 2 * M * K // (R * C), K * N // C),
                                    Dataflow.LS: (N * K // C + M * N // (R * C), N * K // C),
                                    Dataflow.RS: (2 * K * M // (R * C), 0)}),
    # P = 8 on one ring: no weight gather
    ("tp1d", GemmParams(), (8, 1), {Dataflow.OS: (2 * M * K // 8, 0), Dataflow.LS: (M * N // 8, 0),
                                    Dataflow.RS: (2 * K * M // 8, 0)}),
    # the whole weight gathered over the P chips; RS gathers nothing
    ("fsdp", GemmParams(), (8, 1), {Dataflow.OS: (K * N, K * N), Dataflow.LS: (N * K, N * K),
                                    Dataflow.RS: (0, 0)}),
]


@pytest.mark.parametrize("name, params, mesh, expected", CASES,
                         ids=[f"{c[0]}-{c[1].slices or c[1].variant or 'default'}" for c in CASES])
def test_each_algorithm_declares_its_panels(name: str, params: GemmParams, mesh: tuple[int, int],
                                            expected: dict[Dataflow, tuple[int, int]]) -> None:
    algorithm = get_algorithm(name)
    for dataflow, (panels, early) in expected.items():
        ctx = GemmContext(GemmProblem(M, N, K, dataflow), params, mesh)
        assert (algorithm.panel_bytes(ctx), algorithm.early_bytes(ctx)) == (BF16 * panels, BF16 * early), dataflow


def test_the_hand_rule_matches_the_table() -> None:
    """The rule the memory tests add by hand (tests/panels.py) is the table above, transposed layers included."""
    for name, params, mesh, expected in CASES:
        for dataflow, figures in expected.items():
            problem = GemmProblem(M, N, K, dataflow)
            assert rule(name, problem, *role_sizes(name, problem, mesh), params) == figures, (name, dataflow)
            flipped = replace(problem, transpose=True)
            ctx = GemmContext(flipped, params, mesh)
            algorithm = get_algorithm(name)
            assert BF16 * rule(name, flipped, *role_sizes(name, flipped, mesh), params)[0] == \
                algorithm.panel_bytes(ctx), (name, dataflow)


def test_the_collective_figure_in_bytes() -> None:
    """One figure written out: OS on 2 x 4 gathers X to 32 x 192 and W to 192 x 32, 6144 elements each, bf16."""
    ctx = GemmContext(GemmProblem(M, N, K, Dataflow.OS), GemmParams(), (R, C))
    assert get_algorithm("collective").panel_bytes(ctx) == 2 * (6144 + 6144)


@pytest.mark.parametrize("prefetch, ahead", [(Prefetch.IDEAL, 0), (Prefetch.NONE, 0), (Prefetch.PREVIOUS_OP, 1),
                                             (Prefetch.PREVIOUS_GEMM, 4)])
def test_a_prefetch_adds_the_next_gemms_early_transfers(prefetch: Prefetch, ahead: int) -> None:
    # GeMMs of panels 10, 30 and 20 (early 1, 2, 3) with a local op after the second; the pass repeats
    gemms = [(10.0, 1.0), (30.0, 2.0), None, (20.0, 3.0)]
    # previous-op: the 10's next op is the 30 (+2 -> 12), the 30's is local (30), the 20's wraps to the 10 (+1);
    # previous-gemm: the 30 holds the 20's early transfers (+3)
    assert held_panels(gemms, prefetch, PrefetchWindow()) == 30.0 + {0: 0.0, 1: 0.0, 4: 3.0}[ahead]


def test_a_window_holds_every_gemm_within_it_unless_budgeted() -> None:
    gemms = [(10.0, 1.0), (30.0, 2.0), None, (20.0, 3.0)]
    # the 30 with the two places ahead: the local op and the 20 (+3); three places: the 10 of the next layer too
    assert held_panels(gemms, Prefetch.WINDOW, PrefetchWindow(2)) == 33.0
    assert held_panels(gemms, Prefetch.WINDOW, PrefetchWindow(3)) == 34.0
    assert held_panels(gemms, Prefetch.WINDOW, PrefetchWindow(3, budget=1e9)) == 30.0  # set aside already


STEP = {"model": TINY, "hardware": "tpuv4", "batch": 64, "ignore_memory": True}


@pytest.mark.parametrize("algorithm, mesh, prefetch, recompute", [
    pytest.param("summa", "4x4", "previous-gemm", "none", marks=pytest.mark.slow),
    pytest.param("meshslice", "2x8", "previous-op", "full", marks=pytest.mark.slow),
    ("collective", "8x2", "ideal", "selective"), ("tp1d", "8x1", "previous-gemm", "full"),
])
@pytest.mark.slow
def test_the_step_memory_grows_by_exactly_its_panels(algorithm: str, mesh: str, prefetch: str,
                                                     recompute: str) -> None:
    rows, cols = (int(v) for v in mesh.split("x"))
    topology = "4x4x1" if rows * cols == 16 else "2x2x2"
    result = tp.step(**STEP, topology=topology, algorithm=algorithm, mesh=mesh, prefetch=prefetch,
                     recompute=recompute)
    spec = StepSpec(TINY, get_algorithm(algorithm), 64, tuple(result.slices), prefetch=Prefetch(prefetch),
                    recompute=Recompute(recompute), allow_infeasible=True)
    plan = plan_step(spec, (rows, cols))
    panels = step_panel_bytes(plan, algorithm, (rows, cols), Prefetch(prefetch))
    assert panels > 0
    without = estimate_memory(TINY, rows * cols, 64, Recompute(recompute), load_hardware("tpuv4").chip.usable_hbm)
    assert result.memory_bytes_per_chip == pytest.approx(without.total_bytes + panels, rel=1e-12)


def _gate(algorithm: str, mesh: tuple[int, int], prefetch: Prefetch, model: TransformerModel = TINY,
          batch: int = 64, hardware: str = "tpuv4") -> tuple[MemoryEstimate, PanelLimit]:
    return mesh_memory(model, mesh, batch, Recompute.FULL, load_hardware(hardware), 16.0,
                       algorithm=get_algorithm(algorithm), prefetch=prefetch, window=PrefetchWindow(), dtype="bf16")


@pytest.mark.parametrize("algorithm", ["meshslice", "summa", "cannon", "collective", "wang"])
@pytest.mark.parametrize("prefetch", [Prefetch.PREVIOUS_GEMM, Prefetch.PREVIOUS_OP, Prefetch.IDEAL])
def test_the_gate_is_never_below_a_plan_the_search_may_build(algorithm: str, prefetch: Prefetch) -> None:
    """Every plan of options the mesh's limit admits holds no more panels than the gate charged."""
    mesh = (4, 4)
    estimate, limit = _gate(algorithm, mesh, prefetch)
    found = 0
    for dataflows in ((Dataflow.OS,) * 4, (Dataflow.LS,) * 4, (Dataflow.RS,) * 4,
                      (Dataflow.OS, Dataflow.LS, Dataflow.OS, Dataflow.LS)):
        for transposes in ((False,) * 4, (True, False, True, False)):
            for slices in ((None,) * 4, (1,) * 4, (2,) * 4, (4,) * 4):
                spec = StepSpec(TINY, get_algorithm(algorithm), 64, slices, dataflows, transposes, prefetch,
                                recompute=Recompute.FULL)
                try:
                    plan = plan_step(spec, mesh)
                except UserError:
                    continue
                if not all(limit.admits(get_algorithm(algorithm).panel_bytes(job.ctx))
                           for job in plan.gemms.values()):
                    continue
                found += 1
                assert panel_peak(plan, PrefetchWindow()) <= estimate.transient.panel_bytes
    assert found


def test_a_limit_drops_the_options_whose_panels_overflow() -> None:
    """GPT-3 on 256 x 1: gathering the tokens' activations whole over 256 chips (meshslice unsliced) cannot fit
    beside the rest of the working set, so the limit admits less than the largest option, and the mesh stays."""
    gpt3 = load_model("gpt3-175b")
    estimate, limit = _gate("meshslice", (256, 1), Prefetch.PREVIOUS_GEMM, gpt3, 256)
    assert estimate.feasible
    assert limit.panels is not None
    largest = max(p for layer in mesh_panels(gpt3, (256, 1), 256 * gpt3.sequence, get_algorithm("meshslice"),
                                             GemmParams(Prefetch.PREVIOUS_GEMM), "bf16") for p, _ in layer)
    assert limit.panels < largest
    assert estimate.total_bytes <= estimate.capacity_bytes


@pytest.mark.slow
def test_the_tuned_steps_memory_is_no_more_than_its_gate() -> None:
    """The whole step of the tuner's choice reports the exact panels of its plan, never above the gate's figure."""
    hardware = load_hardware("tpuv4")
    result = tune(tune_for(model=TINY, hardware=hardware, chips=16, batch=64, recompute=Recompute.FULL))
    rows, cols = (int(v) for v in result.best.mesh.split("x")[-2:])
    estimate, _ = _gate(result.best.algorithm, (rows, cols), default_prefetch(hardware))
    assert result.best.memory_feasible
    assert result.best.memory_bytes_per_chip <= estimate.total_bytes


# GPT-3 at batch 64 on 256 meshslice-sim chips: recompute selective needs 32.78 GB of the 33.02 GB a program may fill
# before the GeMM panels of a collective 64x4 step are counted, and more once they are
EDGE = {"model": "gpt3-175b", "hardware": "meshslice-sim", "batch": 64, "algorithm": "collective"}


def test_an_open_recompute_choice_is_made_again_with_the_panels_of_its_plan() -> None:
    from tpusim.model.memory import plan_memory

    hardware = load_hardware("meshslice-sim")
    model = load_model("gpt3-175b")
    blind = plan_memory(model, 256, 64, Recompute.AUTO, None, hardware.chip.usable_hbm,
                        combine_bytes=hardware.combine_threshold)
    assert (blind.recompute, blind.microbatches, blind.estimate.feasible) == (Recompute.SELECTIVE, 1, True)
    selective = tp.step(**EDGE, mesh="64x4", recompute="selective", ignore_memory=True)
    assert not selective.memory_feasible  # the choice made without panels would not fit
    chosen = tp.step(**EDGE, mesh="64x4")
    explicit = tp.step(**EDGE, mesh="64x4", recompute="minimal")
    assert (chosen.recompute, chosen.microbatches, chosen.memory_feasible) == ("minimal", 1, True)
    assert chosen.memory_bytes_per_chip == explicit.memory_bytes_per_chip
    assert chosen.step_time_s == explicit.step_time_s


@pytest.mark.slow
def test_the_tuner_passes_over_a_choice_no_layout_fits_once_its_panels_are_counted() -> None:
    found = tp.tune(**EDGE, chips=256)
    explicit = tp.tune(**EDGE, chips=256, recompute="minimal")
    assert (found.recompute, found.best.mesh, found.best.step_time_s) == (
        "minimal", explicit.best.mesh, explicit.best.step_time_s)
    assert found.best.memory_bytes_per_chip <= load_hardware("meshslice-sim").chip.usable_hbm
    assert any(note.startswith("recompute selective with 1 micro-batch: no layout fits once its GeMM panels")
               for note in found.notes)
    # with the recomputation asked for, the micro-batch count is the choice left open
    assert tp.tune(**EDGE, chips=256, recompute="selective").microbatches == 2
    with pytest.raises(InfeasibleError) as refused:  # both asked for: kept, and refused where nothing fits
        tp.tune(**EDGE, chips=256, recompute="selective", microbatches=1)
    assert str(refused.value).startswith("no feasible configuration of gpt3-175b with algorithm 'collective'")

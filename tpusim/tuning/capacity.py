"""The tuner's memory gates: the per-chip memory of a candidate mesh, so that candidates that overflow HBM are
skipped (``model.memory.plan_memory`` explains when nothing fits), and the memory simulating it takes on this
machine, so that a layout the machine cannot simulate is skipped before any work."""

from __future__ import annotations

from dataclasses import dataclass, replace

from tpusim.config import HardwareProfile, TransformerModel
from tpusim.engine.footprint import step_footprint
from tpusim.gemm.algorithm import GemmAlgorithm, GemmContext
from tpusim.gemm.params import GemmParams
from tpusim.limits import MEMORY_ENV, memory_exceeded
from tpusim.model.feasibility import parts_for
from tpusim.model.layer import FFLayer, ff_layers
from tpusim.model.memory import MemoryEstimate, estimate_memory
from tpusim.model.program import PrefetchWindow, held_panels
from tpusim.topology import MeshMapping
from tpusim.tuning.space import LayerOption, layer_options, layer_problems
from tpusim.units import format_size
from tpusim.vocabulary import Activation, Attention, Dataflow, Prefetch, Recompute


@dataclass(frozen=True)
class PanelLimit:
    """Which layer options a search on one mesh may use: those whose GeMMs hold at most ``panels`` bytes (None: no
    limit, memory ignored), chosen so that with the ``hoisted`` bytes the prefetch policy may start early beside
    the busiest GeMM (the largest early transfers of any admitted option, as many as the policy hoists) they fit
    in what the rest of the working set leaves."""

    panels: float | None
    hoisted: float
    counted: bool = True  # False: the rest of the working set alone overflows, so no panels were counted


    def admits(self, panels: float) -> bool:
        return self.panels is None or panels <= self.panels


def mesh_memory(model: TransformerModel, mesh: tuple[int, int], batch: int, recompute: Recompute,
                hardware: HardwareProfile, bytes_per_param: float,
                reserved_bytes: float | None = None, data: int = 1, zero_stage: int = 0,
                remat: tuple[frozenset[Activation], frozenset[Activation]] = (frozenset(), frozenset()), *,
                algorithm: GemmAlgorithm, prefetch: Prefetch, window: PrefetchWindow, dtype: str,
                attention: Attention = Attention.UNFUSED, microbatches: int = 1,
                ignore_memory: bool = False, exact: bool = True) -> tuple[MemoryEstimate, PanelLimit]:
    """Per-chip memory of a candidate mesh (``data`` replicas of it, model state sharded as ZeRO ``zero_stage``
    says; ``batch`` is one micro-batch of ``microbatches``; ``remat`` the activations saved and offloaded under
    recompute custom), and the limit its layer options' GeMM panels must keep to (``PanelLimit``).

    Everything but the panels shards over the R x C chips of a replica whatever the shape. The panels are those
    of the largest option the limit admits of any FF layer, with the most the prefetch policy hoists beside it:
    no less than any plan the search can then build from admitted options (``mesh_panels``). A layer none of
    whose options is admitted makes the mesh infeasible by its smallest. Unless ``exact``, a mesh whose working
    set overflows without panels is reported at that figure, its panels not counted (the tuner's cheap first look).
    """
    def estimate(panels: float) -> MemoryEstimate:
        return estimate_memory(model, data * mesh[0] * mesh[1], batch, recompute, hardware.chip.usable_hbm,
                               bytes_per_param, reserved_bytes=reserved_bytes, data_parallel=data,
                               zero_stage=zero_stage, remat_save=remat[0], remat_offload=remat[1],
                               attention=attention, microbatches=microbatches,
                               combine_bytes=hardware.combine_threshold, panel_bytes=panels)

    rest = estimate(0.0)
    if not exact and not ignore_memory and not rest.feasible:
        return rest, PanelLimit(-1.0, 0.0, counted=False)
    options = mesh_panels(model, mesh, batch // data * model.sequence, algorithm, GemmParams(prefetch), dtype)
    figures = sorted(figure for layer in options for figure in layer)

    def hoisted(early: float) -> float:
        # a pass one GeMM longer than the window: every place ahead of the busiest GeMM is another GeMM
        return held_panels([(0.0, early)] * (window.ops + 1), prefetch, window)

    limit = PanelLimit(None, hoisted(max((e for _, e in figures), default=0.0)))
    if not ignore_memory and figures:
        budget = rest.capacity_bytes - rest.total_bytes
        # nothing admitted unless the smallest fits: then any plan needs more than the budget
        limit = PanelLimit(-1.0, hoisted(figures[0][1]))
        early = 0.0
        for held, sent in figures:  # the most panels whose options, with their early transfers, fit
            early = max(early, sent)
            if held + hoisted(early) <= budget:
                limit = PanelLimit(held, hoisted(early))
    need = 0.0
    for layer in options:
        if not layer:
            continue  # a layer with no option at all: the search skips the mesh
        panels = [p for p, _ in layer]
        admitted = [p for p in panels if limit.admits(p)]
        # the largest option the search may pick; where none fits, the least any plan needs
        need = max(need, max(admitted) if admitted else min(panels))
    return estimate(need + limit.hoisted), limit


def mesh_panels(model: TransformerModel, mesh: tuple[int, int], tokens: int, algorithm: GemmAlgorithm,
                base: GemmParams, dtype: str) -> list[list[tuple[float, float]]]:
    """Per FF layer of ``tokens`` per replica, the (panel bytes, early bytes) of each of its options on ``mesh``
    (``space.layer_options``, both transpositions): the most any of its three GeMMs holds, and sends early."""
    layers = ff_layers(model, tokens, feature_parts=parts_for(mesh, algorithm.parallelism)[1])
    return [[option_panels(algorithm, layer, option, mesh, base, dtype)
             for flag in (False, True)
             for option in layer_options(layer, algorithm, mesh, flag, tuple(Dataflow), base, dtype)]
            for layer in layers]


def option_panels(algorithm: GemmAlgorithm, layer: FFLayer, option: LayerOption, mesh: tuple[int, int],
                  base: GemmParams, dtype: str) -> tuple[float, float]:
    """(panel bytes, early bytes): the most any of ``layer``'s three GeMMs under ``option`` holds while it runs
    (``GemmAlgorithm.panel_bytes``), and the most one fills by early transfers (``early_bytes``)."""
    params = replace(base, slices=option.slices)
    contexts = [GemmContext(problem, params, mesh) for problem in layer_problems(layer, option, dtype).values()]
    return (max(algorithm.panel_bytes(ctx) for ctx in contexts), max(algorithm.early_bytes(ctx) for ctx in contexts))


def host_shortfall(mapping: MeshMapping, full: bool) -> tuple[float, str] | None:
    """(bytes needed, why) where this machine cannot simulate steps on ``mapping`` (``full``: at full fidelity), by
    the measured footprint of ``engine.footprint``; None when it can. The tuner skips such a layout instead of
    failing midway (docs/limits.md#memory-estimate)."""
    needed, what = step_footprint(mapping, full)
    available = memory_exceeded(needed)
    if available is None:
        return None
    return needed, (f"simulating it needs about {format_size(int(needed))} of this machine's memory ({what}), more "
                    f"than the {format_size(available)} available here (set {MEMORY_ENV}=N if the estimate is wrong)")

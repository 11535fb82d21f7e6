"""The tuner's memory gates: the per-chip memory of a candidate mesh, so that candidates that overflow HBM are
skipped (``model.memory.plan_memory`` explains when nothing fits), and the memory simulating it takes on this
machine, so that a layout the machine cannot simulate is skipped before any work."""

from __future__ import annotations

from dataclasses import replace

from tpusim.config import HardwareProfile, TransformerModel
from tpusim.engine.footprint import step_footprint
from tpusim.errors import InfeasibleError
from tpusim.gemm.algorithm import GemmAlgorithm, GemmContext
from tpusim.gemm.dataflow import GemmProblem
from tpusim.gemm.params import GemmParams
from tpusim.gemm.simulate import check_gemm
from tpusim.limits import MEMORY_ENV, memory_exceeded
from tpusim.model.feasibility import parts_for
from tpusim.model.layer import Pass, ff_layers
from tpusim.model.memory import MemoryEstimate, estimate_memory
from tpusim.model.program import PrefetchWindow, held_panels
from tpusim.topology import MeshMapping
from tpusim.units import format_size
from tpusim.vocabulary import Activation, Attention, Dataflow, Prefetch, Recompute


def mesh_memory(model: TransformerModel, mesh: tuple[int, int], batch: int, recompute: Recompute,
                hardware: HardwareProfile, bytes_per_param: float,
                reserved_bytes: float | None = None, data: int = 1, zero_stage: int = 0,
                remat: tuple[frozenset[Activation], frozenset[Activation]] = (frozenset(), frozenset()), *,
                algorithm: GemmAlgorithm, prefetch: Prefetch, window: PrefetchWindow, dtype: str,
                attention: Attention = Attention.UNFUSED, microbatches: int = 1) -> MemoryEstimate:
    """Per-chip memory of a candidate mesh (``data`` replicas of it, model state sharded as ZeRO ``zero_stage``
    says; ``batch`` is one micro-batch of ``microbatches``; ``remat`` the activations saved and offloaded under
    recompute custom), its GeMM panels bounded over every plan the search may choose on it (``panel_bound``).

    Everything else shards over the R x C chips of a replica whatever the shape; the panels depend on it.
    """
    tokens = batch // data * model.sequence
    panels = panel_bound(model, mesh, tokens, algorithm, prefetch, window, dtype)
    return estimate_memory(model, data * mesh[0] * mesh[1], batch, recompute, hardware.chip.usable_hbm,
                           bytes_per_param, reserved_bytes=reserved_bytes, data_parallel=data, zero_stage=zero_stage,
                           remat_save=remat[0], remat_offload=remat[1], attention=attention,
                           microbatches=microbatches, combine_bytes=hardware.combine_threshold, panel_bytes=panels)


def panel_bound(model: TransformerModel, mesh: tuple[int, int], tokens: int, algorithm: GemmAlgorithm,
                prefetch: Prefetch, window: PrefetchWindow, dtype: str) -> float:
    """No less than the GeMM panels any plan of ``tokens`` per replica holds on ``mesh`` (``model.program.panel_peak``),
    before its dataflows, transpositions, slice counts and variant are chosen: the largest panels of any feasible
    choice of any FF layer's pass, held with the largest early transfers the prefetch policy can hoist beside
    them, each GeMM ahead taken at its largest (``held_panels`` over a pass of such GeMMs)."""
    panels, early = 0.0, 0.0
    for layer in ff_layers(model, tokens, feature_parts=parts_for(mesh, algorithm.parallelism)[1]):
        for dataflow in Dataflow:
            for transpose in (False, True):
                for which in Pass:
                    problem = replace(layer, dataflow=dataflow, transpose=transpose).gemm(which, dtype)
                    for params in _choices(algorithm, problem, mesh, prefetch):
                        try:
                            check_gemm(algorithm, problem, mesh, params)
                        except InfeasibleError:
                            continue  # never chosen
                        ctx = GemmContext(problem, params, mesh)
                        panels = max(panels, algorithm.panel_bytes(ctx))
                        early = max(early, algorithm.early_bytes(ctx))
    # a pass one GeMM longer than the window: every place ahead of the busiest GeMM is another GeMM
    return held_panels([(panels, early)] * (window.ops + 1), prefetch, window)


def _choices(algorithm: GemmAlgorithm, problem: GemmProblem, mesh: tuple[int, int], prefetch: Prefetch
             ) -> list[GemmParams]:
    """Every parameter setting the search may run ``problem`` with: each slice count (or none) and variant."""
    counts = [None, *(algorithm.slice_options(problem, mesh, GemmParams(prefetch)) or [])]
    return [GemmParams(prefetch, slices, variant=variant) for slices in counts
            for variant in (None, *algorithm.variants)]


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

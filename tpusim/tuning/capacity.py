"""The tuner's memory gates: the per-chip memory of a candidate mesh, so that candidates that overflow HBM are
skipped (``model.memory.plan_memory`` explains when nothing fits), and the memory simulating it takes on this
machine, so that a layout the machine cannot simulate is skipped before any work."""

from __future__ import annotations

from tpusim.config import HardwareProfile, TransformerModel
from tpusim.engine.footprint import step_footprint
from tpusim.limits import MEMORY_ENV, memory_exceeded
from tpusim.model.memory import MemoryEstimate, estimate_memory
from tpusim.topology import MeshMapping
from tpusim.units import format_size
from tpusim.vocabulary import Activation, Attention, Recompute


def mesh_memory(model: TransformerModel, mesh: tuple[int, int], batch: int, recompute: Recompute,
                hardware: HardwareProfile, bytes_per_param: float,
                reserved_bytes: float | None = None, data: int = 1, zero_stage: int = 0,
                remat: tuple[frozenset[Activation], frozenset[Activation]] = (frozenset(), frozenset()), *,
                attention: Attention = Attention.UNFUSED, microbatches: int = 1) -> MemoryEstimate:
    """Per-chip memory of a candidate mesh (``data`` replicas of it, model state sharded as ZeRO ``zero_stage``
    says; ``batch`` is one micro-batch of ``microbatches``; ``remat`` the activations saved and offloaded under
    recompute custom).

    The memory model shards everything over the R x C chips of a replica, so the shape within it does not change
    the answer; the gate still asks per mesh so that a shape-aware model needs no change here.
    """
    return estimate_memory(model, data * mesh[0] * mesh[1], batch, recompute, hardware.chip.usable_hbm,
                           bytes_per_param, reserved_bytes=reserved_bytes, data_parallel=data, zero_stage=zero_stage,
                           remat_save=remat[0], remat_offload=remat[1], attention=attention,
                           microbatches=microbatches, combine_bytes=hardware.combine_threshold)


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

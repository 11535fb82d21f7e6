"""The tuner's memory gate: the per-chip memory of a candidate mesh, so that candidates that overflow HBM are
skipped (``model.memory.plan_memory`` explains when nothing fits)."""

from __future__ import annotations

from tpusim.config import HardwareProfile, TransformerModel
from tpusim.model.memory import MemoryEstimate, estimate_memory
from tpusim.vocabulary import Recompute


def mesh_memory(model: TransformerModel, mesh: tuple[int, int], batch: int, recompute: Recompute,
                hardware: HardwareProfile, bytes_per_param: float,
                reserved_bytes: float | None = None) -> MemoryEstimate:
    """Per-chip memory of a candidate mesh.

    The memory model shards everything over all chips, so the shape does not change the answer; the
    gate still asks per mesh so that a shape-aware model needs no change here.
    """
    return estimate_memory(model, mesh[0] * mesh[1], batch, recompute, hardware.chip.hbm_capacity, bytes_per_param,
                           reserved_bytes=reserved_bytes)

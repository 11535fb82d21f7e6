"""The tuner's memory gate: skip candidates that do not fit in HBM, and explain when none does."""

from __future__ import annotations

from tpusim.config import HardwareProfile, TransformerModel
from tpusim.errors import InfeasibleError
from tpusim.model.memory import MemoryEstimate, estimate_memory
from tpusim.units import GB
from tpusim.vocabulary import Recompute


def mesh_memory(model: TransformerModel, mesh: tuple[int, int], batch: int, recompute: Recompute,
                hardware: HardwareProfile, bytes_per_param: float) -> MemoryEstimate:
    """Per-chip memory of a candidate mesh.

    The memory model shards everything over all chips, so the shape does not change the answer; the
    gate still asks per mesh so that a shape-aware model needs no change here.
    """
    return estimate_memory(model, mesh[0] * mesh[1], batch, recompute, hardware.chip.hbm_capacity, bytes_per_param)


def nothing_fits(model: TransformerModel, chips: int, batch: int, recompute: Recompute,
                 hardware: HardwareProfile, bytes_per_param: float, smallest: MemoryEstimate) -> InfeasibleError:
    """The error for a search in which every candidate overflows HBM, naming the smallest shortfall."""
    message = (f"no configuration of {model.name} on {chips} chips (batch {batch}, recompute {recompute}) fits "
               f"in HBM: the smallest shortfall is {smallest.shortfall_bytes / GB:.1f} GB per chip "
               f"(needs {smallest.total_bytes / GB:.1f} GB of {smallest.capacity_bytes / GB:.1f} GB)")
    if recompute is Recompute.FULL:
        return InfeasibleError(message, "use more chips, or --ignore-memory to tune anyway")
    full = estimate_memory(model, chips, batch, Recompute.FULL, hardware.chip.hbm_capacity, bytes_per_param)
    if full.feasible:
        hint = f"--recompute full fits ({full.total_bytes / GB:.1f} GB per chip); use it, or --ignore-memory"
    else:
        hint = (f"even --recompute full needs {full.total_bytes / GB:.1f} GB per chip; use more chips, "
                "or --ignore-memory to tune anyway")
    return InfeasibleError(message, hint)

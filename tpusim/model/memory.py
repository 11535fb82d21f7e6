"""Per-chip memory of a training step: weights, gradients, optimizer state and stored activations.

Parameters cost ``bytes_per_param`` each (16: bf16 weights and gradients plus fp32 master weights and
Adam moments) and are sharded over all chips. Stored activations follow Korthikanti et al. (2022),
"Reducing Activation Recomputation in Large Transformer Models", per layer with tensor parallelism t and
sequence parallelism (everything sharded over the t = P chips): no recomputation s b h (34 + 5 a s / h) / t
bytes; selective recomputation (attention recomputed) 34 s b h / t; full recomputation only each layer's
input, 2 s b h / t.
"""

from __future__ import annotations

from dataclasses import dataclass

from tpusim.config import TransformerModel
from tpusim.vocabulary import Recompute


@dataclass(frozen=True)
class MemoryEstimate:
    parameters_bytes: float
    activations_bytes: float
    capacity_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.parameters_bytes + self.activations_bytes

    @property
    def feasible(self) -> bool:
        return self.total_bytes <= self.capacity_bytes

    @property
    def shortfall_bytes(self) -> float:
        return max(self.total_bytes - self.capacity_bytes, 0.0)


def estimate_memory(model: TransformerModel, chips: int, batch: int, recompute: Recompute,
                    capacity_bytes: float, bytes_per_param: float = 16.0) -> MemoryEstimate:
    """Memory per chip of the whole model under 2D (or 1D) tensor parallelism over ``chips``."""
    params = model.params_per_layer * model.layers * bytes_per_param / chips
    s, b, h, a = model.sequence, batch, model.hidden, model.heads
    per_layer = {
        Recompute.NONE: s * b * h * (34 + 5 * a * s / h),
        Recompute.SELECTIVE: 34 * s * b * h,
        Recompute.FULL: 2 * s * b * h,
    }[recompute]
    return MemoryEstimate(params, per_layer * model.layers / chips, capacity_bytes)

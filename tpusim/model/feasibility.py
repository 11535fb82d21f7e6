"""Which configurations can exist: heads over the feature axis, sequences over the token axis, GeMM rules.

Each algorithm declares its parallelism: 2D algorithms split tokens over axis 0 and features over axis 1
(C must divide the heads, R the sequences); ``tp1d`` splits features over all P chips (P must divide the
heads); ``fsdp`` splits tokens over all P chips (P must divide the sequences). With ``allow_infeasible``
a violation is recorded instead of raised, and the timing pads the heads up to a multiple of the split.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tpusim.config import TransformerModel
from tpusim.errors import InfeasibleError


@dataclass(frozen=True)
class Split:
    """How one chip's share of the non-FF work is cut: token and feature divisors, head count per chip."""

    token_parts: int
    feature_parts: int
    heads_per_chip: int
    sequences_per_chip: float
    violations: tuple[str, ...]


def split_for(model: TransformerModel, mesh: tuple[int, int], batch: int, parallelism: str,
              allow_infeasible: bool) -> Split:
    rows, cols = mesh
    chips = rows * cols
    if parallelism == "1d-feature":
        token_parts, feature_parts = 1, chips
    elif parallelism == "1d-batch":
        token_parts, feature_parts = chips, 1
    else:
        token_parts, feature_parts = rows, cols
    violations = []
    if model.heads % feature_parts:
        violations.append(f"{feature_parts} does not divide the {model.heads} heads of {model.name} "
                          f"(heads are split over the {feature_parts} chips of the feature axis)")
    if batch % token_parts:
        violations.append(f"{token_parts} does not divide the batch of {batch} sequences "
                          f"(sequences are split over the {token_parts} chips of the token axis)")
    if violations and not allow_infeasible:
        raise InfeasibleError(f"infeasible configuration on mesh {rows}x{cols}: {violations[0]}",
                              "use --allow-infeasible to time it anyway (heads padded, marked feasible: false)")
    return Split(token_parts, feature_parts, math.ceil(model.heads / feature_parts), batch / token_parts,
                 tuple(violations))

"""Which configurations can exist: heads over the feature axis, sequences over the token axis, GeMM rules.

Each algorithm declares its parallelism: 2D algorithms split tokens over axis 0 and features over axis 1
(C must divide the heads, R the sequences; C and the K / V heads must divide one another: a split wider than
the K / V heads replicates them, ``tpusim.model.layer.kv_heads_on_mesh``); ``tp1d`` splits features over all P
chips (P must divide the heads); ``fsdp`` splits tokens over all P chips (P must divide the sequences). With
``allow_infeasible`` a violation is recorded instead of raised, and the timing pads the heads up to a multiple of
the split.
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


def parts_for(mesh: tuple[int, int], parallelism: str) -> tuple[int, int]:
    """(token parts, feature parts) of ``mesh`` under an algorithm's parallelism."""
    rows, cols = mesh
    if parallelism == "1d-feature":
        return 1, rows * cols
    if parallelism == "1d-batch":
        return rows * cols, 1
    return rows, cols


def split_for(model: TransformerModel, mesh: tuple[int, int], batch: int, parallelism: str,
              allow_infeasible: bool) -> Split:
    rows, cols = mesh
    token_parts, feature_parts = parts_for(mesh, parallelism)
    violations = []
    if model.heads % feature_parts:
        violations.append(f"{feature_parts} does not divide the {model.heads} heads of {model.name} "
                          f"(heads are split over the {feature_parts} chips of the feature axis)")
    elif model.kv_heads % feature_parts and feature_parts % model.kv_heads:
        violations.append(f"{feature_parts} and the {model.kv_heads} key / value heads of {model.name} do not "
                          "divide one another (each chip of the feature axis needs whole K / V heads, or one "
                          "replicated K / V head per group of chips)")
    if batch % token_parts:
        violations.append(f"{token_parts} does not divide the batch of {batch} sequences "
                          f"(sequences are split over the {token_parts} chips of the token axis)")
    if violations and not allow_infeasible:
        raise InfeasibleError(f"infeasible configuration on mesh {rows}x{cols}: {violations[0]}",
                              "use --allow-infeasible to time it anyway (heads padded, marked feasible: false)")
    return Split(token_parts, feature_parts, math.ceil(model.heads / feature_parts), batch / token_parts,
                 tuple(violations))

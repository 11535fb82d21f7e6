"""How global operands are split over the logical mesh, and back.

A ``Placement`` gives, for each stored dimension of a matrix, the logical mesh axis that splits it (or
None: not split). Chip (i, j) holds the block whose index along a split dimension is its rank on that
axis. 2D algorithms use ``layout_placement`` (dimension 0 over role axis 0, dimension 1 over role axis 1);
1D baselines declare their own.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tpusim.errors import InfeasibleError
from tpusim.gemm.dataflow import Layout

Placement = tuple[int | None, int | None]


@dataclass(frozen=True)
class Sharding:
    """Placements of the stored X, W and of the produced Y."""

    x: Placement
    w: Placement
    y: Placement

    def of(self, operand: str) -> Placement:
        return {"x": self.x, "w": self.w, "y": self.y}[operand]


def layout_placement(layout: Layout) -> Placement:
    return (layout.axis(0), layout.axis(1))


def two_d(layout: Layout) -> Sharding:
    p = layout_placement(layout)
    return Sharding(p, p, p)


def block_shape(shape: tuple[int, int], placement: Placement, mesh: tuple[int, int], what: str) -> tuple[int, int]:
    """Per-chip block shape; raises InfeasibleError where a split dimension does not divide."""
    out = []
    for d, axis in enumerate(placement):
        if axis is None:
            out.append(shape[d])
            continue
        parts = mesh[axis]
        if shape[d] % parts:
            raise InfeasibleError(
                f"{what} dimension {d} of {shape[d]} does not split over the {parts} chips of mesh axis {axis}"
            )
        out.append(shape[d] // parts)
    return (out[0], out[1])


def operand_blocks(x_shape: tuple[int, int], w_shape: tuple[int, int], sharding: Sharding,
                   mesh: tuple[int, int]) -> dict[str, tuple[int, int]]:
    """Per-chip block shapes of the stored operands, keyed "x" and "w" as the role table names them."""
    return {"x": block_shape(x_shape, sharding.x, mesh, "X"), "w": block_shape(w_shape, sharding.w, mesh, "W")}


def take_block(matrix: np.ndarray, placement: Placement, mesh: tuple[int, int], index: tuple[int, int]) -> np.ndarray:
    """Chip ``index``'s block of ``matrix``."""
    slices = []
    for d, axis in enumerate(placement):
        if axis is None:
            slices.append(slice(None))
            continue
        size = matrix.shape[d] // mesh[axis]
        r = index[axis]
        slices.append(slice(r * size, (r + 1) * size))
    return matrix[tuple(slices)]


def assemble(
    blocks: dict[tuple[int, int], np.ndarray], shape: tuple[int, int], placement: Placement, mesh: tuple[int, int]
) -> np.ndarray:
    """The global matrix from every chip's block (replicated blocks must agree; the first one wins)."""
    out = np.zeros(shape)
    for index, block in blocks.items():
        slices = []
        for d, axis in enumerate(placement):
            if axis is None:
                slices.append(slice(None))
            else:
                size = shape[d] // mesh[axis]
                r = index[axis]
                slices.append(slice(r * size, (r + 1) * size))
        out[tuple(slices)] = block
    return out

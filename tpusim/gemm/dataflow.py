"""The GeMM problem, the three dataflows as one role table, and the layout that transposition flips.

docs/algorithms.md#dataflows: OS computes Y = X W (W stored [K, N]); LS computes Y = X W^T (W stored [N, K]); RS
computes Y = X^T W (X stored [K, M]). Every stored matrix is split with dimension 0 over one mesh axis and dimension 1
over the other. The role table says, per dataflow, which operand stays put, which is all-gathered over which axis
along which dimension, and which partial result is reduce-scattered. Role axis 0 is the axis that splits stored
dimension 0; ``Layout`` maps role axes to logical mesh axes, and a transposed layer simply swaps them. Algorithms read
this table instead of being written once per dataflow.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from tpusim.vocabulary import Dataflow


@dataclass(frozen=True)
class Move:
    """An operand (or partial result) moved over role axis ``axis`` along its stored dimension ``dim``."""

    operand: str  # "x", "w" or "y"
    axis: int
    dim: int


@dataclass(frozen=True)
class Roles:
    stationary: str  # the operand that never moves
    gathers: tuple[Move, ...]  # all-gathers of stored operands
    reduce: Move | None  # reduce-scatter of the partial output
    sliced: str  # the global dimension MeshSlice cuts: "k", "n" or "m"
    prefetchable: str  # the gathered operand that does not depend on the previous op (W; RS: saved X)


ROLES: MappingProxyType[Dataflow, Roles] = MappingProxyType({
    Dataflow.OS: Roles("y", (Move("x", 1, 1), Move("w", 0, 0)), None, "k", "w"),
    Dataflow.LS: Roles("x", (Move("w", 0, 0),), Move("y", 1, 1), "n", "w"),
    Dataflow.RS: Roles("w", (Move("x", 1, 1),), Move("y", 0, 0), "m", "x"),
})


@dataclass(frozen=True)
class Layout:
    """Logical mesh axis of each role axis: (0, 1) normally, (1, 0) for a transposed layer."""

    axes: tuple[int, int] = (0, 1)

    @classmethod
    def of(cls, transpose: bool) -> Layout:
        return cls((1, 0) if transpose else (0, 1))

    def axis(self, role_axis: int) -> int:
        return self.axes[role_axis]


@dataclass(frozen=True)
class GemmProblem:
    """The global problem: M x N output, contraction K, in one dataflow, optionally transposed."""

    m: int
    n: int
    k: int
    dataflow: Dataflow
    transpose: bool = False
    dtype: str = "bf16"

    @property
    def roles(self) -> Roles:
        return ROLES[self.dataflow]

    @property
    def layout(self) -> Layout:
        return Layout.of(self.transpose)

    @property
    def x_shape(self) -> tuple[int, int]:
        return (self.k, self.m) if self.dataflow is Dataflow.RS else (self.m, self.k)

    @property
    def w_shape(self) -> tuple[int, int]:
        return (self.n, self.k) if self.dataflow is Dataflow.LS else (self.k, self.n)

    @property
    def y_shape(self) -> tuple[int, int]:
        return (self.m, self.n)

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k

    def dim(self, name: str) -> int:
        return {"m": self.m, "n": self.n, "k": self.k}[name]

    def dense(self, x: np.ndarray, w: np.ndarray) -> np.ndarray:
        """The product this dataflow computes, from global numpy operands."""
        product: np.ndarray
        if self.dataflow is Dataflow.OS:
            product = x @ w
        elif self.dataflow is Dataflow.LS:
            product = x @ w.T
        else:
            product = x.T @ w
        return product

"""Tensors a chip program holds: a shape, a data type and, optionally, real numpy data.

Without data only bytes and FLOP are simulated; with data (small shapes) the same program computes real
products, so a test can check a schedule against ``X @ W``. Layout helpers used by the algorithms (plain
and strided slices, concatenation, splitting) keep shape and data in step.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tpusim.units import dtype_bytes


@dataclass(frozen=True, eq=False)
class Tensor:
    """One chip's tensor. ``data`` is None in timing-only runs."""

    shape: tuple[int, ...]
    dtype: str = "bf16"
    data: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.data is not None and tuple(self.data.shape) != tuple(self.shape):
            raise ValueError(f"tensor data shape {self.data.shape} differs from declared shape {self.shape}")

    @property
    def itemsize(self) -> int:
        return dtype_bytes(self.dtype)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize

    @property
    def has_data(self) -> bool:
        return self.data is not None

    def like(self, shape: Sequence[int], data: np.ndarray | None = None) -> Tensor:
        """A tensor of the same dtype with another shape (and data, when this one has data)."""
        return Tensor(tuple(shape), self.dtype, data if self.data is not None else None)

    def _dim_len(self, dim: int) -> int:
        return self.shape[dim]

    def slice(self, dim: int, start: int, stop: int) -> Tensor:
        """Contiguous indices [start, stop) along ``dim``."""
        shape = list(self.shape)
        shape[dim] = stop - start
        data = None
        if self.data is not None:
            index = [slice(None)] * len(self.shape)
            index[dim] = slice(start, stop)
            data = self.data[tuple(index)]
        return self.like(shape, data)

    def strided_indices(self, dim: int, k: int, slices: int, block: int) -> np.ndarray:
        """Local indices of slice ``k``: runs of ``block`` elements strided by ``block * slices``."""
        length = self.shape[dim]
        if slices == 1:  # the one slice is the whole dimension, whatever the run length
            return np.arange(length)
        period = block * slices
        if length % period:
            raise ValueError(f"dimension of {length} is not divisible by block*slices = {period}")
        starts = np.arange(0, length, period) + block * k
        return (starts[:, None] + np.arange(block)[None, :]).reshape(-1)

    def strided_slice(self, dim: int, k: int, slices: int, block: int) -> Tensor:
        """Slice ``k`` of ``slices`` in MeshSlice's strided layout along ``dim``."""
        shape = list(self.shape)
        shape[dim] = self.shape[dim] // slices
        if slices > 1 and self.shape[dim] % (block * slices):
            raise ValueError(f"dimension of {self.shape[dim]} is not divisible by block*slices")
        data = None
        if self.data is not None:
            data = np.take(self.data, self.strided_indices(dim, k, slices, block), axis=dim)
        return self.like(shape, data)

    def split(self, dim: int, parts: int) -> list[Tensor]:
        """``parts`` equal contiguous pieces along ``dim``."""
        length = self.shape[dim]
        if length % parts:
            raise ValueError(f"dimension of {length} does not split into {parts} equal parts")
        step = length // parts
        return [self.slice(dim, p * step, (p + 1) * step) for p in range(parts)]

    def transpose(self) -> Tensor:
        """The 2-D transpose (a layout change: costs nothing by itself)."""
        data = None if self.data is None else self.data.T
        return self.like(tuple(reversed(self.shape)), data)


def concat(tensors: Sequence[Tensor], dim: int) -> Tensor:
    """Concatenate along ``dim``; data is concatenated only when every part has data."""
    first = tensors[0]
    shape = list(first.shape)
    shape[dim] = sum(t.shape[dim] for t in tensors)
    parts = [t.data for t in tensors if t.data is not None]
    data = np.concatenate(parts, axis=dim) if len(parts) == len(tensors) else None
    return Tensor(tuple(shape), first.dtype, data)


def add(tensors: Sequence[Tensor]) -> Tensor:
    """Elementwise sum of equally shaped tensors (the data semantics of every reduction)."""
    first = tensors[0]
    parts = [t.data for t in tensors if t.data is not None]
    data = np.sum(parts, axis=0) if len(parts) == len(tensors) else None
    return Tensor(first.shape, first.dtype, data)


def assign_strided(target: Tensor, part: Tensor, dim: int, k: int, slices: int, block: int) -> Tensor:
    """``target`` with slice ``k`` (strided layout along ``dim``) replaced by ``part``."""
    if target.data is None or part.data is None:
        return target
    data = target.data.copy()
    index: list[slice | np.ndarray] = [slice(None)] * len(target.shape)
    index[dim] = target.strided_indices(dim, k, slices, block)
    data[tuple(index)] = part.data
    return Tensor(target.shape, target.dtype, data)

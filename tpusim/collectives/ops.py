"""The collective operations, what every member of a group agrees on, and their data semantics.

A ``CollectiveCall`` is the part of a collective that all members must agree on (operation, axis, bytes,
root or offset, ring variant, chunking). ``apply`` gives the result each rank receives, from the inputs of
all ranks in rank order: an all-gather returns the concatenation in rank order, a reduce-scatter the
reduced shard of the caller, and so on. Shapes follow the same rules whether or not tensors carry data.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tpusim.engine.tensor import Tensor, add, concat
from tpusim.vocabulary import CollectiveOp, Ring


@dataclass(frozen=True)
class CollectiveCall:
    """What every member of one group's collective agrees on."""

    op: CollectiveOp
    axis: int
    nbytes: int  # bytes of the caller's input tensor
    dim: int = 0  # tensor dimension gathered, scattered or split
    root: int = 0  # broadcast / reduce root; send-recv source
    offset: int = 0  # shift: data moves from rank r to rank r + offset; send-recv: destination rank
    ring: Ring = Ring.BIDIRECTIONAL
    chunks: int = 1

    def unit_bytes(self, group_size: int) -> float:
        """The size the cost formulas use: shard for AG, output shard for RS and AR, part for all-to-all."""
        if self.op in (CollectiveOp.REDUCE_SCATTER, CollectiveOp.ALL_REDUCE, CollectiveOp.ALL_TO_ALL):
            return self.nbytes / group_size
        return float(self.nbytes)


def result_shape(call: CollectiveCall, tensor: Tensor, n: int) -> Tensor:
    """The shape (no data) a member's handle delivers, from its own input alone; cheap, for timing."""
    if call.op in (CollectiveOp.ALL_GATHER, CollectiveOp.REDUCE_SCATTER):
        shape = list(tensor.shape)
        if call.op is CollectiveOp.ALL_GATHER:
            shape[call.dim] *= n
        else:
            shape[call.dim] //= n
        return Tensor(tuple(shape), tensor.dtype)
    return Tensor(tensor.shape, tensor.dtype)


def apply(call: CollectiveCall, inputs: Sequence[Tensor]) -> list[Tensor | None]:
    """The tensor each rank holds after the collective, given every rank's input in rank order."""
    n = len(inputs)
    op = call.op
    if op is CollectiveOp.ALL_GATHER:
        gathered = concat(inputs, call.dim)
        return [gathered] * n
    if op is CollectiveOp.REDUCE_SCATTER:
        return list(add(inputs).split(call.dim, n))
    if op is CollectiveOp.ALL_REDUCE:
        total = add(inputs)
        return [total] * n
    if op is CollectiveOp.ALL_TO_ALL:
        parts = [t.split(call.dim, n) for t in inputs]
        return [concat([parts[src][dst] for src in range(n)], call.dim) for dst in range(n)]
    if op is CollectiveOp.BROADCAST:
        return [inputs[call.root]] * n
    if op is CollectiveOp.REDUCE:
        total = add(inputs)
        return [total if r == call.root else None for r in range(n)]
    if op is CollectiveOp.SHIFT:
        return [inputs[(r - call.offset) % n] for r in range(n)]
    if op is CollectiveOp.SEND_RECV:
        return [inputs[call.root] if r == call.offset % n else None for r in range(n)]
    raise AssertionError(op)

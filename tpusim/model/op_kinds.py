"""How code outside the op classes acts on an op by its kind: an ``OpVisitor`` has one method per kind, and every op
answers ``accept(visitor)`` with its own. A step program, a closed-form price and a trace label are each one
visitor, so a new kind of op is one class and one method per visitor (mypy names every visitor that lacks it),
never an ``isinstance`` chain to find and extend in each module that handles ops.

The kinds: a distributed GeMM (``layer.GemmOp``), work local to a chip (``layer.LocalOp``), LayerNorm's statistics
all-reduce (``layer.NormStatsOp``), and the start of and wait for a data-parallel collective
(``data_parallel.DataSyncOp``, ``data_parallel.DataWaitOp``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    from tpusim.model.data_parallel import DataSyncOp, DataWaitOp
    from tpusim.model.layer import GemmOp, LocalOp, NormStatsOp

__all__ = ["BlockOpVisitor", "OpVisitor"]

T_co = TypeVar("T_co", covariant=True)


class BlockOpVisitor(Protocol[T_co]):
    """What acts on the ops of a transformer block (``layer.Op``)."""

    def gemm(self, op: GemmOp) -> T_co: ...

    def local(self, op: LocalOp) -> T_co: ...

    def norm_stats(self, op: NormStatsOp) -> T_co: ...


class OpVisitor(BlockOpVisitor[T_co], Protocol[T_co]):
    """What acts on every op of a step program: a block's and the data-parallel ones around them."""

    def data_sync(self, op: DataSyncOp) -> T_co: ...

    def data_wait(self, op: DataWaitOp) -> T_co: ...

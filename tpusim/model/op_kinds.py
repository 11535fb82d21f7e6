"""What every kind of op of a step answers for itself, and how code outside the op classes acts on an op by its
kind, so that a new kind is one class and one method per visitor (mypy names every visitor that lacks it), never
an ``isinstance`` chain to find and extend in each module that handles ops.

An ``OpKind`` has a name and ``accept(visitor)``: it calls the visitor's one method for its kind with itself. A
step program (``program._ChipRun``), a closed-form price (``tuning.layer_costs``) and a trace label
(``labels``) are each one visitor; the visitors live with what they need (a device, a cost model) and this
module, below them all, names only the ops, so ``layer`` never imports the layers that act on its ops.

The kinds: a distributed GeMM (``layer.GemmOp``), work local to a chip (``layer.LocalOp``), LayerNorm's statistics
all-reduce (``layer.NormStatsOp``), and the start of and wait for a data-parallel collective
(``data_parallel.DataSyncOp``, ``data_parallel.DataWaitOp``). The first three make up a transformer block
(``BlockOpKind``); the data-parallel ones join the step's sequence around them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    from tpusim.model.data_parallel import DataSyncOp, DataWaitOp
    from tpusim.model.layer import GemmOp, LocalOp, NormStatsOp

__all__ = ["BlockOpKind", "BlockOpVisitor", "OpKind", "OpVisitor"]

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class BlockOpVisitor(Protocol[T_co]):
    """What acts on the ops of a transformer block: one method per kind, each giving that kind's answer."""

    def gemm(self, op: GemmOp) -> T_co: ...

    def local(self, op: LocalOp) -> T_co: ...

    def norm_stats(self, op: NormStatsOp) -> T_co: ...


class OpVisitor(BlockOpVisitor[T_co], Protocol[T_co]):
    """What acts on every op of a step program: a block's and the data-parallel ones around them."""

    def data_sync(self, op: DataSyncOp) -> T_co: ...

    def data_wait(self, op: DataWaitOp) -> T_co: ...


class OpKind(Protocol):
    """What every op of a step program answers for itself."""

    @property
    def name(self) -> str:
        """The op's name in a step's timeline and per-op rows."""
        ...

    def accept(self, visitor: OpVisitor[T]) -> T:
        """``visitor``'s answer for this op: its method for this op's kind, called with the op."""
        ...


class BlockOpKind(OpKind, Protocol):
    """An op of a transformer block: it needs no data-parallel method of a visitor, and a recomputed pass
    renames it."""

    def accept(self, visitor: BlockOpVisitor[T]) -> T:
        """``visitor``'s answer for this op: its method for this op's kind, called with the op."""
        ...

    def renamed(self, prefix: str) -> BlockOpKind:
        """The same op with ``prefix`` before its name (a recomputed forward op's)."""
        ...


if TYPE_CHECKING:  # mypy holds each kind to its protocol here, naming the kind that misses a method
    _BLOCK_KINDS: tuple[type[BlockOpKind], ...] = (GemmOp, LocalOp, NormStatsOp)
    _STEP_KINDS: tuple[type[OpKind], ...] = (DataSyncOp, DataWaitOp)

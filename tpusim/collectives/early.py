"""A data-independent first transfer a chip program may have started before its op (the prefetch policies).

Every algorithm names the transfers it may start early through ``GemmAlgorithm.early_transfers``: an
all-gather (collective, Wang, FSDP, MeshSlice's first slice), a broadcast (SUMMA's first panel) or a shift
(Cannon's skew) of a data-independent operand. The step program starts them as the policy allows
(docs/algorithms.md#prefetch-policy) and the op's program picks each up by the same description, so one policy
serves every algorithm.
"""

from __future__ import annotations

from dataclasses import dataclass

from tpusim.vocabulary import CollectiveOp

__all__ = ["EARLY_OPS", "EarlyTransfer"]

EARLY_OPS = frozenset({CollectiveOp.ALL_GATHER, CollectiveOp.BROADCAST, CollectiveOp.SHIFT})
"""The collectives a transfer started early can be: each moves an operand the op only reads."""


@dataclass(frozen=True)
class EarlyTransfer:
    """One transfer of ``operand`` over logical axis ``axis``: an all-gather along ``dim``, a broadcast from
    ``root`` or a shift by ``offset`` ranks."""

    operand: str
    op: CollectiveOp
    axis: int
    dim: int = 0
    root: int = 0
    offset: int = 0

    def __post_init__(self) -> None:
        if self.op not in EARLY_OPS:
            raise ValueError(f"{self.op} is not a transfer that can start early; valid: "
                             f"{', '.join(sorted(str(op) for op in EARLY_OPS))}")

    def received_bytes(self, sent_bytes: int, group: int) -> int:
        """The buffer it fills on this chip (what a prefetch budget counts): an all-gather's is the group's
        blocks, a broadcast's or a shift's the one tensor."""
        return sent_bytes * group if self.op is CollectiveOp.ALL_GATHER else sent_bytes

"""The runners' memory checks: a run's estimated peak (``engine.footprint``, from measurements) against what the
machine has, before the run starts (docs/limits.md#memory-estimate).

Only runs whose footprint can outgrow a machine are checked: full fidelity asked for explicitly, data-parallel
steps (their data axis's collectives run on every group at once), verification (a ``--verify`` GeMM holds about
2.5 times its float64 operands: per-chip blocks and the dense product), and every collective (always simulated
chip by chip, its transfers counted per group from the operation's message pattern).
"""

from __future__ import annotations

from tpusim.engine.footprint import (
    BASE_BYTES,
    BYTES_PER_TRANSFER,
    CHIP_POWER,
    FULL_BYTES_PER_CHIP_POWER,
    ROOTED_OPS,
    collective_transfers,
    full_fidelity_bytes,
    step_footprint,
)
from tpusim.limits import check_memory, verify_operand_bytes
from tpusim.topology import MeshMapping
from tpusim.vocabulary import CollectiveOp, Fidelity, Ring

__all__ = ["BASE_BYTES", "BYTES_PER_TRANSFER", "CHIP_POWER", "FULL_BYTES_PER_CHIP_POWER", "check_collective_memory",
           "check_gemm_memory", "check_step_memory", "collective_transfers"]

VERIFY_OPERAND_FACTOR = 2.5
_INSTEAD = "use fidelity auto or symmetric, or fewer chips"


def check_step_memory(mapping: MeshMapping, fidelity: str) -> None:
    """Refuse a step the machine cannot hold: at full fidelity, or with data-parallel collectives too large."""
    needed, what = step_footprint(mapping, fidelity == Fidelity.FULL)
    if needed > BASE_BYTES:
        instead = _INSTEAD if fidelity == Fidelity.FULL else "use fewer data-parallel replicas or fewer chips"
        check_memory(int(needed), what, instead)


def check_gemm_memory(chips: int, fidelity: str, verify: bool, m: int, n: int, k: int) -> None:
    """Refuse a full-fidelity or verified GeMM the machine cannot hold."""
    needed = full_fidelity_bytes(chips) if fidelity == Fidelity.FULL else BASE_BYTES
    if verify:
        needed += VERIFY_OPERAND_FACTOR * verify_operand_bytes(m, n, k)
    if needed > BASE_BYTES:
        what = f"a {'full-fidelity ' if fidelity == Fidelity.FULL else ''}{'verified ' if verify else ''}GeMM " \
               f"of M={m} N={n} K={k} on {chips} chips"
        check_memory(int(needed), what, "drop --verify or use smaller dimensions" if verify else _INSTEAD)


def check_collective_memory(op: CollectiveOp, chips: int, group: int, chunks: int | None, max_chunks: int, *,
                            closed: bool, ring: Ring) -> None:
    """Refuse a collective whose messages the machine cannot hold. ``chunks`` as asked; without it a rooted
    collective chooses its own chunking, charged at the most it may choose (the profile's ``max_chunks``), the
    others run one chunk."""
    if chunks is None:
        chunks = max_chunks if op in ROOTED_OPS else 1
    transfers = collective_transfers(op, chips, group, chunks, closed=closed, ring=ring)
    check_memory(int(BASE_BYTES + BYTES_PER_TRANSFER * transfers),
                 f"the {op} over groups of {group} of {chips} chips ({transfers} transfers)",
                 "use fewer chips on the axis or fewer --chunks")

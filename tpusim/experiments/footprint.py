"""Estimates of the peak memory of one run, checked against what the machine has before the run starts.

The coefficients are measurements (docs/limits.md#memory-estimate): peak resident memory of ``tpusim list
hardware`` (the interpreter and libraries: 48 MB), and of full-fidelity ``tpuv4`` steps of GPT-3 with the
collective algorithm on 8x8, 16x16, 32x16 and 32x32 meshes (56, 82, 132 and 294 MB): above the base they grow
as chips^1.5 (rings grow with the mesh side), 7.5 kB x chips^1.5. A ``--verify`` GeMM holds about 2.5 times its
float64 operands (per-chip blocks and the dense product). Only runs whose footprint can outgrow a machine are
checked: full fidelity asked for explicitly, verification, and every collective (always simulated chip by chip).

A collective's footprint is its messages: ``tpusim collective`` all-gathers of 64 MB on ``tpuv4`` peaked 218 MB
above the base for a 1024-chip line (1,047,552 transfers), 833 MB for a 2048-chip line (4,192,256), 110 MB for
axis 0 of a 64x64 torus (516,096) and 804 MB for the 1024-chip line in 4 chunks (4,190,208): 192 to 214 bytes per
transfer, charged at 215. The transfers are counted per group from the operation's message pattern.
"""

from __future__ import annotations

import math

from tpusim.engine.footprint import BASE_BYTES
from tpusim.limits import check_memory, verify_operand_bytes
from tpusim.vocabulary import CollectiveOp, Fidelity, Ring

__all__ = ["BASE_BYTES", "check_collective_memory", "check_gemm_memory", "check_step_memory", "collective_transfers"]

FULL_BYTES_PER_CHIP_POWER = 7.5e3
CHIP_POWER = 1.5
VERIFY_OPERAND_FACTOR = 2.5
BYTES_PER_TRANSFER = 215.0
_RING_OPS = frozenset({CollectiveOp.ALL_GATHER, CollectiveOp.REDUCE_SCATTER, CollectiveOp.ALL_TO_ALL})
_ROOTED_OPS = frozenset({CollectiveOp.BROADCAST, CollectiveOp.REDUCE})
_INSTEAD = "use fidelity auto or symmetric, or fewer chips"


def _full(chips: int) -> float:
    return BASE_BYTES + FULL_BYTES_PER_CHIP_POWER * math.pow(chips, CHIP_POWER)


def check_step_memory(chips: int, fidelity: str) -> None:
    """Refuse a full-fidelity step the machine cannot hold."""
    if fidelity == Fidelity.FULL:
        check_memory(int(_full(chips)), f"a full-fidelity step on {chips} chips", _INSTEAD)


def check_gemm_memory(chips: int, fidelity: str, verify: bool, m: int, n: int, k: int) -> None:
    """Refuse a full-fidelity or verified GeMM the machine cannot hold."""
    needed = _full(chips) if fidelity == Fidelity.FULL else BASE_BYTES
    if verify:
        needed += VERIFY_OPERAND_FACTOR * verify_operand_bytes(m, n, k)
    if needed > BASE_BYTES:
        what = f"a {'full-fidelity ' if fidelity == Fidelity.FULL else ''}{'verified ' if verify else ''}GeMM " \
               f"of M={m} N={n} K={k} on {chips} chips"
        check_memory(int(needed), what, "drop --verify or use smaller dimensions" if verify else _INSTEAD)


def collective_transfers(op: CollectiveOp, chips: int, group: int, chunks: int, *, closed: bool, ring: Ring) -> int:
    """The transfers a collective of ``op`` makes over every group of ``group`` ranks among ``chips`` chips, each
    message in ``chunks`` chunks: a ring collective moves every rank's shard to every other rank (halves both ways
    on a closed bidirectional ring; an all-reduce is a reduce-scatter and an all-gather), a rooted one relays one
    message down the group, a point-to-point one sends one message per rank."""
    groups = chips // max(group, 1)
    both_ways = 2 if closed and ring is Ring.BIDIRECTIONAL else 1
    if op in _RING_OPS or op is CollectiveOp.ALL_REDUCE:
        per_group = group * (group - 1) * both_ways * (2 if op is CollectiveOp.ALL_REDUCE else 1)
    elif op in _ROOTED_OPS:
        per_group = group - 1
    else:
        per_group = group
    return groups * per_group * chunks


def check_collective_memory(op: CollectiveOp, chips: int, group: int, chunks: int | None, max_chunks: int, *,
                            closed: bool, ring: Ring) -> None:
    """Refuse a collective whose messages the machine cannot hold. ``chunks`` as asked; without it a rooted
    collective chooses its own chunking, charged at the most it may choose (the profile's ``max_chunks``), the
    others run one chunk."""
    if chunks is None:
        chunks = max_chunks if op in _ROOTED_OPS else 1
    transfers = collective_transfers(op, chips, group, chunks, closed=closed, ring=ring)
    check_memory(int(BASE_BYTES + BYTES_PER_TRANSFER * transfers),
                 f"the {op} over groups of {group} of {chips} chips ({transfers} transfers)",
                 "use fewer chips on the axis or fewer --chunks")

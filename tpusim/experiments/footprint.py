"""Estimates of the peak memory of one run, checked against what the machine has before the run starts.

The coefficients are measurements (docs/limits.md#memory-estimate): peak resident memory of ``tpusim list
hardware`` (the interpreter and libraries: 48 MB), and of full-fidelity ``tpuv4`` steps of GPT-3 with the
collective algorithm on 8x8, 16x16, 32x16 and 32x32 meshes (56, 82, 132 and 294 MB): above the base they grow
as chips^1.5 (rings grow with the mesh side), 7.5 kB x chips^1.5. A ``--verify`` GeMM holds about 2.5 times its
float64 operands (per-chip blocks and the dense product). Only runs whose footprint can outgrow a machine are
checked: full fidelity asked for explicitly, and verification.
"""

from __future__ import annotations

import math

from tpusim.limits import check_memory, verify_operand_bytes
from tpusim.vocabulary import Fidelity

__all__ = ["check_gemm_memory", "check_step_memory"]

BASE_BYTES = 48e6
FULL_BYTES_PER_CHIP_POWER = 7.5e3
CHIP_POWER = 1.5
VERIFY_OPERAND_FACTOR = 2.5
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

"""Size limits on what one request, file or sweep may ask for, checked before any work starts.

A request for a billion chips, a hundred million slices or a sweep of a million points would otherwise run
until memory runs out. Each limit here has a default with headroom over the largest real system or ordinary
study it describes, and a user raises it for one run through the environment: ``TPUSIM_LIMITS_<NAME>=<integer>``
(e.g. ``TPUSIM_LIMITS_CHIPS=131072``). The environment reaches every entry point alike (command line, Python
API, experiment files, worker processes). docs/limits.md lists every limit and why its default is what it is.

This module imports nothing from tpusim but the errors, so every layer may check a limit.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from types import MappingProxyType

from tpusim.errors import UserError

__all__ = ["BEYOND_ANY_LIMIT", "ENV_PREFIX", "LIMITS", "LIMIT_DIGITS", "MEMORY_ENV", "Limit", "LimitError",
           "available_memory", "capped_int", "check_memory", "exceeds", "limit_of", "shape_chips", "shorten",
           "verify_operand_bytes"]

ENV_PREFIX = "TPUSIM_LIMITS_"
DOCS = "docs/limits.md"


class LimitError(UserError):
    """A request, file or sweep larger than a size limit (raise the limit in the environment to allow it)."""


@dataclass(frozen=True)
class Limit:
    """One size limit: its name, default and what it counts."""

    name: str
    default: int
    counts: str
    """What the limit counts, as errors name it ("chips", "bytes of --verify operands")."""

    @property
    def env(self) -> str:
        """The environment variable that raises it: ``TPUSIM_LIMITS_CHIPS``."""
        return ENV_PREFIX + self.name.upper()


# Defaults (docs/limits.md#size-limits): a TPU v4 pod has 4096 chips and a TPU v5p pod 8960; 65536 leaves 7x
# headroom over the largest pod. A GeMM dimension of 2**24 holds 8192 sequences of 2048 tokens (16.8M rows).
# --verify holds about twice its operands in memory (per-chip blocks, the dense product): 256 MiB needs ~0.6 GB.
# A measurements table has one training-step simulation per row: the shipped table has 11 rows (8.5 kB); 1000 rows and
# 1 MiB leave about 90x and 120x headroom. A run's results.json holds a few kB per point (2.4 kB for a GeMM point): a
# sweep at the sweep_points limit (100,000 points) stays well under 1 GiB. A disk cache entry is one result, at most a
# few hundred kB (a tuning run's every mesh); 64 MiB leaves over 100x headroom. A YAML document's scalar text with its
# aliases expanded is at most the file (1 MiB) without aliases; 64 MiB lets a file reuse every anchor 64 times over.
# A default step trace (3 layers, 39 chips of a 32x8 mesh) is 45 MB; 1 GiB holds such a trace of 60 layers.
LIMITS: MappingProxyType[str, Limit] = MappingProxyType({limit.name: limit for limit in (
    Limit("chips", 65536, "chips (of a mesh, a topology or a tuning run)"),
    Limit("chunks", 4096, "pipelined chunks per message"),
    Limit("slices", 4096, "MeshSlice slices"),
    Limit("gemm_dim", 2**24, "elements along a GeMM dimension (m, n or k)"),
    Limit("batch", 2**20, "sequences of a global batch"),
    Limit("verify_bytes", 2**28, "bytes of float64 --verify operands (X, W and Y together)"),
    Limit("sweep_points", 100_000, "points of a sweep (grid product plus include)"),
    Limit("file_bytes", 2**20, "bytes of a YAML file"),
    Limit("yaml_nodes", 1_000_000, "YAML nodes after expanding aliases"),
    Limit("yaml_bytes", 2**26, "bytes of YAML scalar text after expanding aliases"),
    Limit("measurement_bytes", 2**20, "bytes of a measurements CSV file"),
    Limit("measurement_rows", 1000, "rows of a measurements CSV file"),
    Limit("results_bytes", 2**30, "bytes of a run's results.json or run_meta.json read back"),
    Limit("cache_entry_bytes", 2**26, "bytes of a disk cache entry read back"),
    Limit("trace_bytes", 2**30, "bytes of a trace file read by summarize"),
)})


def limit_of(name: str) -> int:
    """The limit ``name`` in force: ``$TPUSIM_LIMITS_<NAME>`` if set, else its default."""
    limit = LIMITS[name]
    value = _env_count(limit.env, f"an integer >= 1 (the limit on {limit.counts}; see {DOCS})")
    return limit.default if value is None else value


def _env_count(variable: str, valid: str) -> int | None:
    """The integer >= 1 in ``$variable``, None when it is unset or empty; anything else is a ``LimitError``."""
    text = os.environ.get(variable)
    if text is None or not text.strip():
        return None
    try:
        value = int(text.strip())
    except ValueError:
        value = 0
    if value < 1:
        raise LimitError(f"{variable} {text!r} must be {valid}")
    return value


def exceeds(name: str, amount: int) -> str | None:
    """None when ``amount`` is within the limit ``name``; else what to say after the offending value: the
    limit, what is valid and how to raise it."""
    bound = limit_of(name)
    if amount <= bound:
        return None
    limit = LIMITS[name]
    return (f"exceeds the limit of {bound} {limit.counts}; valid: up to {bound} (raise it with "
            f"{limit.env}=N, see {DOCS})")


LIMIT_DIGITS = 19
"""Digits of an integer that no limit reaches (limits are at most 2**63); longer text is refused before ``int``
(which refuses 4300 digits anyway)."""
BEYOND_ANY_LIMIT: int = 10**LIMIT_DIGITS


def capped_int(digits: str) -> int:
    """The integer a string of decimal digits writes; one too long to convert stands as ``BEYOND_ANY_LIMIT``."""
    return BEYOND_ANY_LIMIT if len(digits) > LIMIT_DIGITS else int(digits)


def shape_chips(shape: str) -> int:
    """The chips of a shape ``"AxBxC"`` (decimal sides), each side as ``capped_int`` converts it: checked against
    the limit ``chips`` before a side too long to convert is converted."""
    return math.prod(capped_int(side) for side in shape.split("x"))


_FLOAT64_BYTES = 8


def verify_operand_bytes(m: int, n: int, k: int) -> int:
    """Bytes of the float64 operands of a ``--verify`` GeMM: X [M,K], W [K,N] and the product Y [M,N]
    (tpusim.gemm.simulate)."""
    return _FLOAT64_BYTES * (m * k + k * n + m * n)


def shorten(text: str, keep: int = 24) -> str:
    """A long value as errors quote it: its first digits and its length (a 332-digit integer is one line)."""
    return text if len(text) <= keep else f"{text[:keep]}... ({len(text)} characters)"


MEMORY_ENV = "TPUSIM_MEMORY_BYTES"
"""Overrides the memory tpusim believes it may use (bytes); otherwise the machine's available memory, or the
process's address-space limit where that is smaller."""


def available_memory() -> int | None:
    """Bytes this process may still use: ``$TPUSIM_MEMORY_BYTES`` if set, else the smaller of the system's
    available memory (Linux ``MemAvailable``) and the address-space limit; None where neither is known."""
    told = _env_count(MEMORY_ENV, f"an integer number of bytes >= 1 (see {DOCS})")
    if told is not None:
        return told
    known: list[int] = []
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    known.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft != resource.RLIM_INFINITY:
            known.append(int(soft))
    except (ImportError, OSError, ValueError):
        pass
    return min(known) if known else None


def memory_exceeded(needed: float) -> int | None:
    """The bytes this process may use (``available_memory``) where ``needed`` exceeds them, else None."""
    available = available_memory()
    return None if available is None or needed <= available else available


def check_memory(needed: int, what: str, instead: str) -> None:
    """Refuse work whose estimated peak memory (``needed`` bytes) exceeds what this process may use."""
    available = memory_exceeded(needed)
    if available is None:
        return
    from tpusim.units import format_size

    raise LimitError(f"{what} needs about {format_size(needed)} by tpusim's measured estimate, more than the "
                     f"{format_size(available)} available here; {instead}, or set {MEMORY_ENV}=N if the estimate "
                     f"is wrong for this machine (see {DOCS})")

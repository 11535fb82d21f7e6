"""Time of on-chip work (GeMMs, HBM-bound vector ops) as pure functions of a chip specification.

The roofline GeMM pads every dimension to the MXU size and takes the larger of compute and HBM time; the
``flops`` model is the MeshSlice authors' plain 2mnk / F. Every non-empty op also pays the chip's fixed
``op_overhead`` (its launch, docs/chip.md#op-overhead). Nothing here knows about simulation time.
"""

from __future__ import annotations

from tpusim.config.hardware import ChipSpec

__all__ = ["ChipModel"]


def _pad(size: int, multiple: int) -> int:
    return -(-size // multiple) * multiple


def _check_dims(m: int, n: int, k: int) -> None:
    if m < 0 or n < 0 or k < 0:
        raise ValueError(f"GeMM dimensions must be >= 0, got m={m}, n={n}, k={k}")


class ChipModel:
    """Compute and HBM timing of one chip."""

    __slots__ = (
        "accumulator_traffic", "gemm_model", "hbm_bandwidth", "hbm_capacity", "mxu_dim", "op_overhead",
        "peak_flops",
    )

    def __init__(self, chip: ChipSpec) -> None:
        self.peak_flops: float = chip.peak_flops
        self.hbm_bandwidth: float = chip.hbm_bandwidth
        self.hbm_capacity: float = chip.hbm_capacity
        self.mxu_dim: int = chip.mxu_dim
        self.gemm_model: str = chip.gemm_model
        self.accumulator_traffic: bool = chip.accumulator_traffic
        self.op_overhead: float = chip.op_overhead

    def gemm_flops(self, m: int, n: int, k: int) -> float:
        """Model FLOPs of an (m x k) @ (k x n) product: 2mnk, without padding."""
        _check_dims(m, n, k)
        return float(2 * m * n * k)

    def gemm_hbm_bytes(self, m: int, n: int, k: int, *, in_bytes: int = 2, out_bytes: int = 2) -> float:
        """HBM bytes the roofline charges: both operands, plus the accumulator's read and write if enabled."""
        _check_dims(m, n, k)
        operands = in_bytes * (m * k + k * n)
        accumulator = 2 * out_bytes * m * n if self.accumulator_traffic else 0
        return float(operands + accumulator)

    def gemm_time(self, m: int, n: int, k: int, *, in_bytes: int = 2, out_bytes: int = 2) -> float:
        """Seconds for an (m x k) @ (k x n) product under the profile's GeMM model; 0 for an empty product."""
        _check_dims(m, n, k)
        if m == 0 or n == 0 or k == 0:
            return 0.0
        if self.gemm_model == "flops":
            return self.op_overhead + 2 * m * n * k / self.peak_flops
        d = self.mxu_dim
        # The MXU processes whole d x d tiles, so a ragged edge costs as much as a full tile.
        compute = 2 * _pad(m, d) * _pad(n, d) * _pad(k, d) / self.peak_flops
        memory = self.gemm_hbm_bytes(m, n, k, in_bytes=in_bytes, out_bytes=out_bytes) / self.hbm_bandwidth
        return self.op_overhead + max(compute, memory)

    def hbm_time(self, nbytes: float) -> float:
        """Seconds for elementwise/vector work that reads and writes ``nbytes`` in total from HBM."""
        if nbytes < 0:
            raise ValueError(f"byte count must be >= 0, got {nbytes}")
        return self.op_overhead + nbytes / self.hbm_bandwidth if nbytes else 0.0

    def op_time(self, flops: float, hbm_bytes: float) -> float:
        """Seconds for a non-GeMM op (e.g. attention) bound by compute or by HBM, whichever is slower."""
        if flops < 0 or hbm_bytes < 0:
            raise ValueError(f"flops and bytes must be >= 0, got flops={flops}, hbm_bytes={hbm_bytes}")
        if not flops and not hbm_bytes:
            return 0.0
        return self.op_overhead + max(flops / self.peak_flops, hbm_bytes / self.hbm_bandwidth)

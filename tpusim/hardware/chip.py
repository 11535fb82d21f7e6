"""Time of on-chip work (GeMMs, vector ops, attention) as pure functions of a chip specification.

The roofline GeMM pads every dimension to the MXU size and takes the larger of compute and HBM time, its output
written once or, where it adds into a partial output, its fp32 accumulator read and written; the ``flops`` model
is the MeshSlice authors' plain 2mnk / F. Other ops take the largest of their MXU, vector-unit and HBM times.
Compute runs at the achievable MXU rate (peak times ``mxu_efficiency``) and HBM at the achievable bandwidth
(``hbm_efficiency``), docs/chip.md#achievable-rates; MFU stays against the nominal peak.
Every non-empty op also pays the chip's fixed ``op_overhead`` (its launch, docs/chip.md#op-overhead). Nothing here
knows about simulation time.
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
    """Compute and HBM timing of one chip, at its achievable rates ``flop_rate``, ``gemm_peak`` and ``hbm_rate``
    (``peak_flops`` and ``hbm_bandwidth`` are the nominal ones)."""

    __slots__ = (
        "accumulator_bytes",
        "accumulator_traffic",
        "flop_rate",
        "gemm_model",
        "gemm_peak",
        "hbm_bandwidth",
        "hbm_capacity",
        "hbm_rate",
        "int8",
        "mxu_dim",
        "op_overhead",
        "peak_flops",
        "vector_rate",
    )

    def __init__(self, chip: ChipSpec) -> None:
        self.peak_flops: float = chip.peak_flops
        self.hbm_bandwidth: float = chip.hbm_bandwidth
        # the rates ops achieve (docs/chip.md#achievable-rates); the nominal ones above are what MFU is against
        self.flop_rate: float = chip.peak_flops * chip.mxu_efficiency
        self.hbm_rate: float = chip.achievable_hbm_bandwidth
        self.hbm_capacity: float = chip.hbm_capacity
        self.mxu_dim: int = chip.mxu_dim
        self.gemm_model: str = chip.gemm_model
        self.accumulator_traffic: bool = chip.accumulator_traffic
        self.accumulator_bytes: int = chip.accumulator_bytes
        self.vector_rate: float | None = chip.vector_rate
        self.op_overhead: float = chip.op_overhead
        # int8 GeMMs: the int8 rate, and each operand element one byte (the output stays bf16)
        self.int8: bool = chip.gemm_precision == "int8"
        if self.int8 and chip.int8_peak_ops is None:
            raise ValueError("int8 GeMMs need the chip's int8_peak_ops")
        peak = chip.int8_peak_ops if self.int8 and chip.int8_peak_ops else chip.peak_flops
        self.gemm_peak: float = peak * chip.mxu_efficiency

    def gemm_flops(self, m: int, n: int, k: int) -> float:
        """Model FLOPs of an (m x k) @ (k x n) product: 2mnk, without padding."""
        _check_dims(m, n, k)
        return float(2 * m * n * k)

    def gemm_hbm_bytes(self, m: int, n: int, k: int, *, in_bytes: int = 2, out_bytes: int = 2,
                       accumulate: bool = False) -> float:
        """HBM bytes the roofline charges: both operands once, plus (if enabled) the output written once or, when
        ``accumulate``, the accumulator read and written at the profile's accumulator precision
        (docs/chip.md#gemm-time)."""
        _check_dims(m, n, k)
        operands = (1 if self.int8 else in_bytes) * (m * k + k * n)
        if not self.accumulator_traffic:
            return float(operands)
        output = 2 * self.accumulator_bytes * m * n if accumulate else out_bytes * m * n
        return float(operands + output)

    def gemm_time(self, m: int, n: int, k: int, *, in_bytes: int = 2, out_bytes: int = 2,
                  accumulate: bool = False) -> float:
        """Seconds for an (m x k) @ (k x n) product under the profile's GeMM model; 0 for an empty product.
        ``accumulate``: the product is added into a partial output kept in HBM between GeMMs."""
        _check_dims(m, n, k)
        if m == 0 or n == 0 or k == 0:
            return 0.0
        if self.gemm_model == "flops":
            return self.op_overhead + 2 * m * n * k / self.gemm_peak
        d = self.mxu_dim
        # The MXU processes whole d x d tiles, so a ragged edge costs as much as a full tile.
        compute = 2 * _pad(m, d) * _pad(n, d) * _pad(k, d) / self.gemm_peak
        memory = self.gemm_hbm_bytes(m, n, k, in_bytes=in_bytes, out_bytes=out_bytes,
                                     accumulate=accumulate) / self.hbm_rate
        return self.op_overhead + max(compute, memory)

    def vector_time(self, operations: float) -> float:
        """Seconds the vector units need for ``operations`` elementwise operations (0 without a vector rate)."""
        return operations / self.vector_rate if self.vector_rate else 0.0

    def hbm_time(self, nbytes: float) -> float:
        """Seconds for elementwise/vector work that reads and writes ``nbytes`` in total from HBM."""
        if nbytes < 0:
            raise ValueError(f"byte count must be >= 0, got {nbytes}")
        return self.op_overhead + nbytes / self.hbm_rate if nbytes else 0.0

    def op_time(self, flops: float, hbm_bytes: float, vector_ops: float = 0.0) -> float:
        """Seconds for a non-GeMM op: the slowest of its MXU FLOPs, its vector-unit operations and its HBM
        traffic, plus the op overhead."""
        if flops < 0 or hbm_bytes < 0 or vector_ops < 0:
            raise ValueError(f"flops, bytes and vector operations must be >= 0, got flops={flops}, "
                             f"hbm_bytes={hbm_bytes}, vector_ops={vector_ops}")
        if not flops and not hbm_bytes and not vector_ops:
            return 0.0
        return self.op_overhead + max(flops / self.flop_rate, hbm_bytes / self.hbm_rate,
                                      self.vector_time(vector_ops))

    def reduction_seconds_per_byte(self, passes: float, element_bytes: int) -> float:
        """Seconds per byte of an elementwise reduction of received data into a local buffer: ``passes`` HBM bytes
        per byte reduced (read two operands, write one) or one vector add per element, whichever is slower."""
        return max(passes / self.hbm_rate, self.vector_time(1.0 / element_bytes))

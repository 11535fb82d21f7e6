"""Models of a hardware profile file (``configs/hardware/*.yaml``): chip, ICI and calibration constants.

Values are SI (FLOP/s, bytes, B/s, seconds). A *physical* profile describes links and hops; a *calibrated*
profile additionally carries the per-op, per-axis constants (beta, lambda, alpha) of the MeshSlice authors'
cost model, which switch the network to the abstract ring-per-axis mode.
"""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import Field, model_validator

from tpusim.config.loader import Bytes, BytesPerSecond, FlopsPerSecond, FrozenModel, Seconds

__all__ = ["Calibration", "ChipSpec", "HardwareProfile", "IciSpec", "OpCalibration"]

Count = Annotated[int, Field(ge=1)]


class ChipSpec(FrozenModel):
    """One chip: compute units, peak rate, HBM, and how a GeMM is timed."""

    peak_flops: FlopsPerSecond
    """Peak FLOP/s used for GeMM time and MFU."""
    peak_flops_informational: FlopsPerSecond | None = None
    """A second quoted peak (e.g. the 249e12 printed compute bound); recorded, never used for timing."""
    tensorcores: Count
    mxus_per_core: Count
    mxu_dim: Count
    """Side of the square systolic array; the roofline model pads every GeMM dimension to it."""
    hbm_capacity: Bytes
    hbm_bandwidth: BytesPerSecond
    gemm_model: Literal["roofline", "flops"]
    """roofline: pad each dim to mxu_dim, max(FLOP / peak, HBM bytes / bandwidth); flops: 2mnk / peak."""
    accumulator_traffic: bool = True
    """Whether the roofline's HBM term counts the accumulator's read and write of the output."""


class IciSpec(FrozenModel):
    """The inter-chip interconnect of a physical network."""

    link_bandwidth: BytesPerSecond
    """One direction of one link (TPUv4: 45e9; the link carries as much again the other way)."""
    hop_latency: Seconds
    """Per physical hop; pipelined, i.e. paid after serialization while the link is already free."""
    launch_overhead: Seconds = 0.0
    """Per collective; holds no link."""


class OpCalibration(FrozenModel):
    """Fitted constants of one collective kind: T = alpha + (n - 1) * (s / beta[axis] + lambda)."""

    bandwidth: tuple[BytesPerSecond, BytesPerSecond]
    """Effective beta on (axis 0, axis 1)."""
    step_latency: Seconds
    """lambda, paid per ring step."""
    launch_overhead: Seconds
    """alpha, paid once per collective."""


class Calibration(FrozenModel):
    """The artifact's calibrated cost model: one OpCalibration per collective kind."""

    all_gather: OpCalibration
    reduce_scatter: OpCalibration
    send_recv: OpCalibration
    send_recv_axis: Literal[0, 1] = 1
    """The axis whose beta_SR every send/recv uses; the authors always use beta_SR[1]."""


class HardwareProfile(FrozenModel):
    """A named hardware profile: what the simulated cluster is made of."""

    name: str = Field(min_length=1)
    description: str
    kind: Literal["physical", "calibrated"]
    base: str | None = None
    """The profile this one was derived from (already merged in; kept for the record)."""
    chip: ChipSpec
    ici: IciSpec
    calibration: Calibration | None = None
    """Required exactly when kind is 'calibrated'."""
    overlap_slowdown: float = Field(1.0, ge=1.0, allow_inf_nan=False)
    """MXU time multiplier while ICI DMA is active; 1.0 turns the effect off."""

    @model_validator(mode="after")
    def _calibration_matches_kind(self) -> Self:
        if self.kind == "calibrated" and self.calibration is None:
            raise ValueError(
                "kind 'calibrated' needs a 'calibration' block (all_gather, reduce_scatter, send_recv)"
            )
        if self.kind == "physical" and self.calibration is not None:
            raise ValueError("kind 'physical' must not have a 'calibration' block; use kind 'calibrated'")
        return self

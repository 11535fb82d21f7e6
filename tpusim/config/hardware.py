"""Models of a hardware profile file (``configs/hardware/*.yaml``): chip, ICI and calibration constants.

Values are SI (FLOP/s, bytes, B/s, seconds). A *physical* profile describes links and hops; a *calibrated*
profile carries instead the per-op, per-axis constants (beta, lambda, alpha) of the MeshSlice authors' cost
model, which run the network as one abstract ring per logical axis. Which one a file is follows its ``kind``
(docs/hardware-profiles.md#profile-files).
"""

from __future__ import annotations

import math
import typing
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from tpusim.config.loader import WHOLE_NUMBER, Bytes, BytesPerSecond, FlopsPerSecond, FrozenModel, Seconds
from tpusim.limits import limit_of
from tpusim.vocabulary import CollectiveOp, MultiAxis, Prefetch

__all__ = [
    "CalibratedProfile",
    "Calibration",
    "ChipSpec",
    "DcnSpec",
    "HardwareProfile",
    "HostSpec",
    "IciSpec",
    "LaunchOverheads",
    "OpCalibration",
    "OverlapLimits",
    "PhysicalProfile",
    "ProfileDocument",
    "SliceRules",
    "kind_defaults",
]

Count = Annotated[int, WHOLE_NUMBER, Field(ge=1)]

XLA_COMBINE_THRESHOLD = 30 * 1024 * 1024 + 7
"""XLA's default threshold of its all-gather, reduce-scatter and all-reduce combiners, in bytes (openxla's
collective_utils.h, quoted in docs/workloads.md#data-parallelism); that the TPU compiler uses the same is an
ASSUMPTION."""
MAX_TRAFFIC_FACTOR = 1000.0
"""Bound of the dimensionless traffic and slowdown factors (real ones are 0 to 3; docs/limits.md): beyond it a
factor only serves to overflow times."""


class ChipSpec(FrozenModel):
    """One chip: compute units, peak rate, HBM, and how a GeMM is timed."""

    peak_flops: FlopsPerSecond
    """Nominal peak FLOP/s: MFU and HFU are against it; GeMMs run at ``mxu_efficiency`` times it."""
    int8_peak_ops: FlopsPerSecond | None = None
    """Peak int8 operations per second of the MXU (None: the profile times no int8 GeMM)."""
    gemm_precision: Literal["bf16", "int8"] = "bf16"
    """The precision GeMMs run at: int8 (set by a request's ``precision``, ``hardware.profiles.with_precision``)
    runs them at ``int8_peak_ops`` with 1-byte operands in the roofline; never set in a profile file."""
    peak_flops_informational: FlopsPerSecond | None = None
    """A second quoted peak (e.g. the 249e12 printed compute bound); recorded, never used for timing."""
    tensorcores: Count
    mxus_per_core: Count
    mxu_dim: Count
    """Side of the square systolic array; the roofline model pads every GeMM dimension to it."""
    hbm_capacity: Bytes
    """Physical HBM per chip."""
    hbm_reserved: Bytes = 0.0
    """HBM the TPU runtime keeps for itself, never available to a program (docs/chip.md#hbm-reserve)."""
    hbm_bandwidth: BytesPerSecond
    """Nominal HBM bandwidth; ops stream at ``hbm_efficiency`` times it."""
    mxu_efficiency: float = Field(1.0, gt=0.0, le=MAX_TRAFFIC_FACTOR, allow_inf_nan=False)
    """Fraction of the peak (bf16 or int8) a GeMM's padded tiles sustain (docs/chip.md#achievable-rates); 1 on
    wire-only and calibrated profiles. Above 1 only in sensitivity variants (``scale.flops``)."""
    hbm_efficiency: float = Field(1.0, gt=0.0, le=MAX_TRAFFIC_FACTOR, allow_inf_nan=False)
    """Fraction of ``hbm_bandwidth`` a streaming op sustains (docs/chip.md#achievable-rates)."""
    gemm_model: Literal["roofline", "flops"]
    """roofline: pad each dim to mxu_dim, max(FLOP / peak, HBM bytes / bandwidth); flops: 2mnk / peak."""
    accumulator_traffic: bool = True
    """Whether the roofline's HBM term counts the output: written once, or (a GeMM that adds into a partial
    output held across GeMMs) the accumulator read and written at ``accumulator_bytes`` per element."""
    accumulator_bytes: Count = 4
    """Bytes per element of a partial output accumulated across GeMMs in HBM (the MXU accumulates in fp32)."""
    vector_rate: FlopsPerSecond | None = None
    """Elementwise operations per second of the vector units (None: vector work is never the bound)."""
    op_overhead: Seconds = 0.0
    """Fixed time of every compute op (GeMM, vector or attention kernel) on top of its compute or HBM time."""
    dma_hbm_traffic: float = Field(0.0, ge=0.0, le=MAX_TRAFFIC_FACTOR, allow_inf_nan=False)
    """HBM bytes charged per byte of collective DMA, taken from the bandwidth of the compute ops it overlaps
    (docs/chip.md#hbm-contention): 1 reads each byte sent once, writes each byte received once and charges a
    reduction its ``ici.reduction_passes``; 0 lets compute and DMA share HBM for free."""

    @property
    def usable_hbm(self) -> float:
        """The HBM a training step may fill: ``hbm_capacity`` less ``hbm_reserved``, bytes."""
        return self.hbm_capacity - self.hbm_reserved

    @property
    def achievable_hbm_bandwidth(self) -> float:
        """HBM bandwidth as ops and DMA stream it: ``hbm_bandwidth`` times ``hbm_efficiency``, B/s."""
        return self.hbm_bandwidth * self.hbm_efficiency


def _every_op(value: object) -> object:
    # one number for every collective is the short form of the mapping
    if isinstance(value, int | float | str) and not isinstance(value, bool):
        return {name: value for name in _OPS}
    return value


_OPS = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all", "broadcast", "reduce", "shift", "send_recv")


class LaunchOverheads(FrozenModel):
    """Software cost of starting one collective, per operation (holds no link); one number sets them all."""

    all_gather: Seconds = 0.0
    reduce_scatter: Seconds = 0.0
    all_reduce: Seconds = 0.0
    all_to_all: Seconds = 0.0
    broadcast: Seconds = 0.0
    reduce: Seconds = 0.0
    shift: Seconds = 0.0
    send_recv: Seconds = 0.0

    def of(self, op: CollectiveOp) -> float:
        value: float = getattr(self, op.value.replace("-", "_"))
        return value


class OverlapLimits(FrozenModel):
    """How many collectives of each operation may be in flight on one chip at once (absent: no limit)."""

    all_gather: Count | None = None
    reduce_scatter: Count | None = None
    all_reduce: Count | None = None
    all_to_all: Count | None = None
    broadcast: Count | None = None
    reduce: Count | None = None
    shift: Count | None = None
    send_recv: Count | None = None

    def of(self, op: CollectiveOp) -> int | None:
        value: int | None = getattr(self, op.value.replace("-", "_"))
        return value

    def describe(self) -> dict[str, int]:
        """The limits that apply, by operation name."""
        return {name.replace("_", "-"): value for name, value in self.model_dump().items() if value is not None}


class IciSpec(FrozenModel):
    """The inter-chip interconnect of a physical network and the software costs of its collectives."""

    link_bandwidth: BytesPerSecond
    """One direction of one link at its line rate (TPUv4: 45e9; the link carries as much again the other way)."""
    link_efficiency: float = Field(1.0, gt=0.0, le=MAX_TRAFFIC_FACTOR, allow_inf_nan=False)
    """Fraction of ``link_bandwidth`` a collective's DMA sustains on one link, one way (docs/chip.md#achievable-rates);
    1 on wire-only profiles."""
    hop_latency: Seconds
    """Per physical hop, on the wire; pipelined, i.e. paid after serialization while the link is already free."""
    launch_overhead: Annotated[LaunchOverheads, BeforeValidator(_every_op)] = LaunchOverheads()
    """Per collective, by operation; holds no link."""
    step_overhead: Seconds = 0.0
    """Software synchronisation of every transfer (each chunk of each ring step or hop) on top of the hop
    latency; it holds the link, as the sender waits for the receiver's handshake before it sends."""
    reduction_passes: float = Field(0.0, ge=0.0, le=MAX_TRAFFIC_FACTOR, allow_inf_nan=False)
    """HBM bytes moved per byte a reduction adds (3: read two operands, write one), at the chip's HBM bandwidth;
    0: reductions cost nothing."""
    max_chunks: Count = 256
    """Most chunks a pipelined broadcast or reduce is cut into (bounds simulation work where chunking is free)."""

    @property
    def achievable_bandwidth(self) -> float:
        """One direction of one link as collectives use it: the line rate times ``link_efficiency``, B/s."""
        return self.link_bandwidth * self.link_efficiency

    @field_validator("max_chunks")
    @classmethod
    def _chunks_within_limit(cls, value: int) -> int:
        limit = limit_of("chunks")
        if value > limit:
            raise ValueError(f"{value} exceeds the limit of {limit} pipelined chunks per message; valid: up to "
                             f"{limit} (raise it with TPUSIM_LIMITS_CHUNKS=N, see docs/limits.md)")
        return value


class DcnSpec(FrozenModel):
    """The data-centre network that joins slices: each host's network links, shared by its chips
    (docs/network.md#dcn)."""

    host_bandwidth: BytesPerSecond
    """One direction of one host's network interfaces together, B/s (a host sends and receives this much at once)."""
    chips_per_host: Count
    """Chips that share one host's network links."""
    latency: Seconds
    """Per transfer, from leaving the sender's link to arriving (pipelined: it holds no link)."""
    launch_overhead: Seconds = 0.0
    """Per DCN collective, holding no link."""
class HostSpec(FrozenModel):
    """The link between a chip and its host's memory, over which activations are offloaded
    (docs/hardware-profiles.md#host-link)."""

    link_bandwidth: BytesPerSecond
    """One direction of one chip's host link (PCIe), in B/s; the other direction carries as much again."""


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
    """What every named hardware profile has: a name, a chip, and how the network is modelled (``kind``).

    Concrete profiles are ``PhysicalProfile`` (directed ICI links) and ``CalibratedProfile`` (the MeshSlice
    authors' abstract ring per logical axis); a profile file is one of the two, chosen by its ``kind``.
    """

    name: str = Field(min_length=1)
    description: str
    kind: str
    base: str | None = None
    """The profile this one was derived from (already merged in; kept for the record)."""
    chip: ChipSpec
    overlap_slowdown: float = Field(1.0, ge=1.0, le=MAX_TRAFFIC_FACTOR, allow_inf_nan=False)
    """MXU time multiplier while ICI DMA is active; 1.0 turns the effect off."""
    prefetch: Prefetch
    """The prefetch policy runs use unless told otherwise."""
    overlap_limits: OverlapLimits = OverlapLimits()
    """How many collectives of each operation may be in flight per chip (docs/network.md#overlap-limits)."""
    combine_threshold: Bytes = XLA_COMBINE_THRESHOLD
    """Consecutive weight matrices of a block whose data-parallel gathers and gradient buckets together stay within
    this many bytes (one chip's tensor-parallel shard, bf16) run as one collective
    (docs/workloads.md#data-parallelism)."""

    @property
    def limits_shown(self) -> str:
        """The overlap limits as results record them: "all-gather=1,reduce-scatter=1" or "unlimited"."""
        limits = self.overlap_limits.describe()
        return ",".join(f"{op}={value}" for op, value in limits.items()) or "unlimited"

    @property
    def multi_axis_shown(self) -> str | None:
        """The multi-axis schedule as results record it; None where there are no physical axes."""
        return None

    @property
    def slice_network(self) -> DcnSpec | None:
        """The data-centre network that joins slices of this hardware; None where the profile has none."""
        return None

    @property
    def most_chunks(self) -> int:
        """The most chunks a collective's message is cut into (``ici.max_chunks``; 1 without links)."""
        return 1

    @property
    def host_link(self) -> HostSpec | None:
        """Each chip's link to host memory (activation offload); None where the profile has none."""
        return None

    @property
    def slice_rules(self) -> SliceRules | None:
        """The slices of this hardware's generation; None: TPUv4's (``tpusim.topology.slices``)."""
        return None


def _shape_sides(shape: str) -> tuple[int, ...]:
    try:
        sides = tuple(int(side) for side in shape.split("x"))
    except ValueError:
        raise ValueError(f"slice shape {shape!r} is not like '4x4x8'") from None
    if min(sides) < 1:
        raise ValueError(f"slice shape {shape!r} needs sides >= 1")
    return sides


def _pairs(value: object) -> object:
    # a mapping in YAML, kept as sorted pairs so that a profile stays hashable
    if isinstance(value, dict):
        try:
            return tuple(sorted(value.items()))
        except TypeError:  # keys of mixed types: left in file order for validation to name the bad one
            return tuple(value.items())
    return value


class SliceRules(FrozenModel):
    """Which slices of a TPU generation can be rented and where their links wrap around
    (docs/network.md#slices-of-each-generation); ``tpusim.topology.slices`` applies them.

    Either ``cube`` (TPUv4, TPUv5p: every side at most a cube side, or every side a multiple of it; slices of
    whole cubes wrap on every axis through the optical switches) or ``shapes`` (TPUv5e, TPUv6e: the published
    shapes, in any axis order; an axis wraps where its side equals ``wrap_side``).
    """

    generation: str = Field(pattern=r"^[a-z][a-z0-9]*$")
    """Prefix of the slice names (``tpuv5p:4x4x8``) and the name a bare ``AxBxC`` is read as."""
    axes: Annotated[int, WHOLE_NUMBER, Field(ge=1, le=3)]
    cube: Count | None = None
    shapes: tuple[str, ...] | None = None
    wrap_side: Count | None = None
    max_chips: Count
    """The largest single slice."""
    defaults: Annotated[tuple[tuple[Count, str], ...], BeforeValidator(_pairs)]
    """The slice used for a chip count when no topology is given (written as a mapping ``chips: shape``)."""

    @field_validator("shapes")
    @classmethod
    def _shapes_parse(cls, shapes: tuple[str, ...] | None) -> tuple[str, ...] | None:
        for shape in shapes or ():
            _shape_sides(shape)
        return shapes

    @model_validator(mode="after")
    def _one_rule(self) -> SliceRules:
        if (self.cube is None) == (self.shapes is None):
            raise ValueError("give exactly one of 'cube' (the cube rule) or 'shapes' (the published shapes)")
        if self.cube is not None and self.wrap_side is not None:
            raise ValueError("'wrap_side' belongs to the 'shapes' rule; cube slices wrap when made of whole cubes")
        for chips, shape in self.defaults:
            sides = _shape_sides(shape)
            if len(sides) != self.axes or math.prod(sides) != chips:
                raise ValueError(f"defaults: {chips}: {shape!r} is not a {self.axes}-axis slice of {chips} chips")
        return self


class PhysicalProfile(HardwareProfile):
    """A cluster of chips joined by directed ICI links (docs/network.md#links)."""

    kind: Literal["physical"]
    ici: IciSpec
    prefetch: Prefetch = Prefetch.PREVIOUS_GEMM
    """Where XLA's scheduler puts it by default: a data-independent gather starts with the GeMM before its own,
    behind that GeMM's collectives (docs/algorithms.md#prefetch-policy)."""
    multi_axis: MultiAxis = MultiAxis.DIMENSIONAL
    """How collectives run over a logical axis laid on several physical axes."""
    slices: SliceRules | None = None
    """The slices a bare ``AxBxC`` topology names and the default slice per chip count; None: TPUv4's."""
    dcn: DcnSpec | None = None
    """The data-centre network between slices; None: the profile runs one slice only."""
    host: HostSpec | None = None
    """Each chip's link to host memory; None: the profile models no host, and offload is refused."""

    @property
    def multi_axis_shown(self) -> str | None:
        return str(self.multi_axis)

    @property
    def slice_network(self) -> DcnSpec | None:
        return self.dcn

    @property
    def most_chunks(self) -> int:
        return self.ici.max_chunks

    @property
    def host_link(self) -> HostSpec | None:
        return self.host

    @property
    def slice_rules(self) -> SliceRules | None:
        return self.slices


class CalibratedProfile(HardwareProfile):
    """The MeshSlice authors' fitted cost model: one abstract ring per logical axis
    (docs/network.md#the-calibrated-network)."""

    kind: Literal["calibrated"]
    calibration: Calibration
    prefetch: Prefetch = Prefetch.IDEAL
    """The authors' accounting by default (a prefetched gather overlaps the GeMM that consumes it)."""


ProfileDocument = Annotated[PhysicalProfile | CalibratedProfile, Field(discriminator="kind")]
"""A profile file: physical or calibrated according to its ``kind``."""


def kind_defaults(field: str) -> list[tuple[str, object]]:
    """(kind, value) for each kind of profile that gives ``field`` a default, e.g. ``[("physical",
    Prefetch.PREVIOUS_GEMM), ("calibrated", Prefetch.IDEAL)]``: what help texts quote as the profile's default."""
    return [(typing.get_args(model.model_fields["kind"].annotation)[0], model.model_fields[field].default)
            for model in (PhysicalProfile, CalibratedProfile)
            if field in model.model_fields and not model.model_fields[field].is_required()]

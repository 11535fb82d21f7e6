"""Named hardware profiles (packaged, see ``tpusim.config.catalog``), profile inheritance, and scaled variants.

A profile file may name a ``base:`` profile; the base's mapping is deep-merged under the file's own (its
``name`` and ``description`` are not inherited). ``scaled_profile`` derives sensitivity-study variants.
"""

from __future__ import annotations

import math
from pathlib import Path
from types import MappingProxyType
from typing import Any

from tpusim.config.catalog import HARDWARE, TRUSTED_DIRS_ENV, inside_trusted, looks_like_path
from tpusim.config.hardware import (
    CalibratedProfile,
    HardwareProfile,
    OpCalibration,
    OverlapLimits,
    PhysicalProfile,
    ProfileDocument,
)
from tpusim.config.loader import deep_merge, load_yaml, validate
from tpusim.errors import ConfigError, InfeasibleError, UnknownNameError
from tpusim.vocabulary import MultiAxis, Precision

__all__ = ["hardware_names", "list_hardware", "load_hardware", "scaled_profile", "with_collective_switches",
           "with_precision", "with_rates"]

_WHAT = "hardware profile"
_KINDS: MappingProxyType[object, type[HardwareProfile]] = MappingProxyType(
    {"physical": PhysicalProfile, "calibrated": CalibratedProfile})
MAX_BASE_DEPTH = 16
"""Profiles in one ``base:`` chain: the packaged ones are at most 2 deep; each level is a recursion of the loader."""
# A child names and describes itself; inheriting these would silently mislabel it.
_NOT_INHERITED = frozenset({"name", "description"})


def hardware_names() -> list[str]:
    """Names of the packaged profiles (or of those in ``$TPUSIM_CONFIG_DIR/hardware``), sorted."""
    return HARDWARE.names()


def list_hardware() -> list[HardwareProfile]:
    """Every named profile, loaded, sorted by name."""
    return sorted((load_hardware(name) for name in hardware_names()), key=lambda profile: profile.name)


def load_hardware(name_or_path: str) -> HardwareProfile:
    """A profile by name (``"tpuv4"``) or by path to a YAML file."""
    path = HARDWARE.resolve(name_or_path)
    shown = HARDWARE.shown(path)
    profile: HardwareProfile = validate(ProfileDocument, _merged_mapping(path, shown, ()), shown)
    if not looks_like_path(name_or_path) and profile.name != name_or_path:
        raise ConfigError(f"{shown}: name: {profile.name!r} must match the file name {name_or_path!r} of a "
                          "named profile")
    return profile


def _merged_mapping(path: Path, shown: str, chain: tuple[Path, ...]) -> dict[str, Any]:
    """The file's mapping with its base chain merged in; ``chain`` holds the files that inherit from it."""
    data = load_yaml(path, _WHAT, shown)
    if not isinstance(data, dict):
        raise ConfigError(f"{shown}: a {_WHAT} must be a mapping of keys, got {type(data).__name__}")
    base = data.get("base")
    if base is None:
        return data
    if not isinstance(base, str) or not base:
        raise ConfigError(f"{shown}: base: {base!r} is not a {_WHAT} name")
    base_path = _locate_base(base, path, shown)
    seen = (*chain, path)
    if base_path in seen:
        cycle = " -> ".join(p.stem for p in (*seen, base_path))
        raise ConfigError(f"{shown}: base: inheritance cycle {cycle}")
    if len(seen) >= MAX_BASE_DEPTH:
        names = [p.stem for p in (*seen, base_path)]
        raise ConfigError(f"{HARDWARE.shown(seen[0])}: base: a chain of more than {MAX_BASE_DEPTH} profiles "
                          f"({' -> '.join(names[:3])} -> ... -> {' -> '.join(names[-2:])}); valid: at most "
                          f"{MAX_BASE_DEPTH} profiles from a file to its last base")
    base_shown = HARDWARE.shown(base_path)
    inherited = _merged_mapping(base_path, base_shown, seen)
    # Validating the base on its own makes its mistakes name its own file, not the child's.
    validate(ProfileDocument, inherited, base_shown)
    # A profile takes from its base only what its own kind has: a calibrated profile based on a physical one
    # inherits the chip, never the links it does not model.
    kind = data.get("kind", inherited.get("kind"))
    own = _KINDS.get(kind if isinstance(kind, str) else None, PhysicalProfile).model_fields  # validated below
    inherited = {key: value for key, value in inherited.items() if key in own and key not in _NOT_INHERITED}
    return deep_merge(inherited, data)


def _locate_base(base: str, child: Path, shown: str) -> Path:
    if looks_like_path(base):
        candidate = Path(base)
        located = (candidate if candidate.is_absolute() else child.parent / candidate).resolve()
        # a profile may build on files beside it, the packaged ones or trusted folders, never on any file at all
        if not inside_trusted(located, child.resolve().parent):
            raise ConfigError(f"{shown}: base: {base!r} is outside the profile's folder; put the base profile "
                              f"beside it or add its folder to ${TRUSTED_DIRS_ENV}")
        return located
    try:
        return HARDWARE.path(base).resolve()
    except UnknownNameError as error:
        raise ConfigError(f"{shown}: base: {error.message}", error.suggestion) from None


def _scaled_op(op: OpCalibration, bandwidth: float, latency: float, overhead: float) -> OpCalibration:
    return op.model_copy(
        update={
            "bandwidth": (op.bandwidth[0] * bandwidth, op.bandwidth[1] * bandwidth),
            "step_latency": op.step_latency * latency,
            "launch_overhead": op.launch_overhead * overhead,
        }
    )


def _check_factor(name: str, value: float, allow_zero: bool) -> None:
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ConfigError(f"scale factor {name}={value!r} must be a finite number {bound}")


def scaled_profile(
    profile: HardwareProfile,
    *,
    bandwidth: float = 1.0,
    latency: float = 1.0,
    overhead: float = 1.0,
    flops: float = 1.0,
    step: float = 1.0,
    op: float = 1.0,
    vector: float = 1.0,
    dma: float = 1.0,
    dcn: float = 1.0,
    hbm: float = 1.0,
) -> HardwareProfile:
    """A copy of ``profile`` for sensitivity studies.

    ``bandwidth`` multiplies the ICI link bandwidth and every calibrated beta, ``latency`` the hop latency and
    every lambda, ``overhead`` every launch overhead and alpha, ``flops`` the peak FLOP/s used for timing,
    ``step`` the software handshake of every physical transfer, ``op`` the fixed time of every compute op,
    ``vector`` the vector units' elementwise rate, ``dma`` the HBM traffic charged for collective DMA,
    ``dcn`` the data-centre network's host bandwidth (whose latency and launch overhead ``latency`` and
    ``overhead`` scale too), ``hbm`` the achieved HBM bandwidth (its efficiency).
    ``flops`` scales the MXU efficiency: the nominal peak, against which MFU is measured, stays. HBM capacity and
    the informational peak are untouched. The name records the factors, e.g.
    ``meshslice-sim[beta*0.5]``.
    """
    _check_factor("bandwidth", bandwidth, allow_zero=False)
    _check_factor("latency", latency, allow_zero=True)
    _check_factor("overhead", overhead, allow_zero=True)
    _check_factor("flops", flops, allow_zero=False)
    _check_factor("step", step, allow_zero=True)
    _check_factor("op", op, allow_zero=True)
    _check_factor("vector", vector, allow_zero=False)
    _check_factor("dma", dma, allow_zero=True)
    _check_factor("dcn", dcn, allow_zero=False)
    _check_factor("hbm", hbm, allow_zero=False)
    factors = {"beta": bandwidth, "lambda": latency, "alpha": overhead, "flops": flops, "step": step, "op": op,
               "vector": vector, "dma": dma, "dcn": dcn, "hbm": hbm}
    tags = [f"{tag}*{value:g}" for tag, value in factors.items() if value != 1.0]
    if not tags:
        return profile
    if step != 1.0 and not isinstance(profile, PhysicalProfile):
        raise ConfigError(f"scale factor step={step:g} applies to physical profiles; {profile.name!r} has no "
                          "per-transfer handshake (its per-step latency is lambda)")
    if vector != 1.0 and profile.chip.vector_rate is None:
        raise ConfigError(f"scale factor vector={vector:g} needs a vector rate; {profile.name!r} has none (its "
                          "vector work is never the bound)")
    if dma != 1.0 and not profile.chip.dma_hbm_traffic:
        raise ConfigError(f"scale factor dma={dma:g} needs HBM contention; {profile.name!r} charges no DMA traffic "
                          "to HBM (chip.dma_hbm_traffic is 0)")
    if dcn != 1.0 and (not isinstance(profile, PhysicalProfile) or profile.dcn is None):
        raise ConfigError(f"scale factor dcn={dcn:g} needs a data-centre network; {profile.name!r} has no dcn block")
    rate = profile.chip.vector_rate * vector if profile.chip.vector_rate is not None else None
    # flops scales the achieved MXU rate, never the nominal peak that MFU is measured against
    chip = profile.chip.model_copy(update={"mxu_efficiency": profile.chip.mxu_efficiency * flops,
                                           "hbm_efficiency": profile.chip.hbm_efficiency * hbm,
                                           "op_overhead": profile.chip.op_overhead * op, "vector_rate": rate,
                                           "dma_hbm_traffic": profile.chip.dma_hbm_traffic * dma})
    update: dict[str, object] = {"name": f"{profile.name}[{','.join(tags)}]", "chip": chip}
    if isinstance(profile, PhysicalProfile):
        update["ici"] = profile.ici.model_copy(
            update={
                "link_bandwidth": profile.ici.link_bandwidth * bandwidth,
                "hop_latency": profile.ici.hop_latency * latency,
                "launch_overhead": profile.ici.launch_overhead.model_copy(
                    update={name: value * overhead for name, value in profile.ici.launch_overhead}),
                "step_overhead": profile.ici.step_overhead * step,
            }
        )
        if profile.dcn is not None:
            update["dcn"] = profile.dcn.model_copy(update={
                "host_bandwidth": profile.dcn.host_bandwidth * dcn, "latency": profile.dcn.latency * latency,
                "launch_overhead": profile.dcn.launch_overhead * overhead})
    elif isinstance(profile, CalibratedProfile):
        cal = profile.calibration
        update["calibration"] = cal.model_copy(
            update={
                name: _scaled_op(getattr(cal, name), bandwidth, latency, overhead)
                for name in ("all_gather", "reduce_scatter", "send_recv")
            }
        )
    return profile.model_copy(update=update)


_LIMITED = ("all_gather", "reduce_scatter", "all_reduce")  # the operations XLA's scheduler limits


def with_collective_switches(profile: HardwareProfile, *, multi_axis: MultiAxis | None = None,
                             overlap_limit: int | str | None = None) -> HardwareProfile:
    """``profile`` with a request's collective switches applied (None keeps the profile's choice).

    ``overlap_limit`` is a count for all-gathers, reduce-scatters and all-reduces alike (the other operations
    keep the profile's limits), or ``"unlimited"`` to lift every limit (docs/network.md#overlap-limits).
    ``multi_axis`` applies to physical profiles only.
    """
    update: dict[str, object] = {}
    if multi_axis is not None:
        if not isinstance(profile, PhysicalProfile):
            raise ConfigError(f"multi-axis {str(multi_axis)!r} applies to physical profiles; {profile.name!r} is "
                              "calibrated (its abstract rings have no physical axes)")
        update["multi_axis"] = multi_axis
    if overlap_limit is not None:
        if overlap_limit == "unlimited":
            update["overlap_limits"] = OverlapLimits()
        else:
            update["overlap_limits"] = profile.overlap_limits.model_copy(
                update=dict.fromkeys(_LIMITED, int(overlap_limit)))
    return profile.model_copy(update=update) if update else profile


def with_precision(profile: HardwareProfile, precision: Precision) -> HardwareProfile:
    """The profile whose GeMMs run at ``precision`` (docs/chip.md#int8-gemms); bf16 is the profile itself."""
    if precision is Precision.BF16:
        return profile
    if profile.chip.int8_peak_ops is None or isinstance(profile, CalibratedProfile):
        kind = "a calibrated profile, fitted to bf16 runs" if isinstance(profile, CalibratedProfile) else "a profile"
        raise InfeasibleError(f"precision int8 needs an int8 rate (chip.int8_peak_ops), which {profile.name!r} "
                              f"({kind}) does not have; use precision bf16, or a physical profile such as 'tpuv5e'")
    chip = profile.chip.model_copy(update={"gemm_precision": str(precision)})
    return profile.model_copy(update={"name": f"{profile.name}[{precision}]", "chip": chip})


def with_rates(profile: HardwareProfile, *, mxu: float | None = None, link: float | None = None
               ) -> HardwareProfile:
    """``profile`` with its MXU efficiency and (physical profiles) ICI link efficiency set where given, as the
    calibration procedure tries them (docs/validation.md#calibration)."""
    update: dict[str, object] = {}
    if mxu is not None:
        update["chip"] = profile.chip.model_copy(update={"mxu_efficiency": mxu})
    if link is not None:
        if not isinstance(profile, PhysicalProfile):
            raise ValueError(f"{profile.name!r} has no ICI links to give an efficiency")
        update["ici"] = profile.ici.model_copy(update={"link_efficiency": link})
    return profile.model_copy(update=update) if update else profile

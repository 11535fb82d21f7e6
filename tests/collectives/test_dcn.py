"""DCN collectives across slices: the SimPy run of the host links equals the closed form (every chip of every host
in step, nothing else on the network) to 1e-9, for 2, 3, 4 and 8 slices and 1 and 4 chips per host; the profiles'
dcn blocks and the dcn scale factor (docs/network.md#dcn)."""

from __future__ import annotations

import pytest

from tpusim.collectives.dcn import dcn_steps, dcn_twin, simulate_dcn
from tpusim.config import DcnSpec, PhysicalProfile
from tpusim.errors import ConfigError, UserError
from tpusim.hardware import load_hardware
from tpusim.hardware.profiles import scaled_profile
from tpusim.vocabulary import CollectiveOp

OPS = (CollectiveOp.ALL_REDUCE, CollectiveOp.REDUCE_SCATTER, CollectiveOp.ALL_GATHER)
NBYTES = 96e6  # a tensor whose chunks are well above the latency (d = 1.0 ms at 2 slices on 48e9 B/s)
# latency below and above a chunk's time, so both pacing regimes of the closed form are run
SPECS = {"latency below a chunk": DcnSpec(host_bandwidth=48e9, chips_per_host=4, latency=10e-6, launch_overhead=50e-6),
         "latency above a host step": DcnSpec(host_bandwidth=48e9, chips_per_host=4, latency=40e-3,
                                              launch_overhead=0.0)}


def _formula(spec: DcnSpec, op: CollectiveOp, slices: int, per_host: int) -> float:
    """Written out: the first ring step ends when the host has sent its chips' chunks; each later step lasts the
    longer of the host's chunks and one chunk plus its latency; the last chunk then arrives."""
    steps = {CollectiveOp.ALL_REDUCE: 2 * (slices - 1)}.get(op, slices - 1)
    chunk = NBYTES / slices / spec.host_bandwidth
    first = per_host * chunk
    later = max(per_host * chunk, chunk + spec.latency)
    return spec.launch_overhead + first + (steps - 1) * later + spec.latency


@pytest.mark.parametrize("name", list(SPECS))
@pytest.mark.parametrize("op", OPS, ids=str)
@pytest.mark.parametrize("slices", [2, 3, 4, 8])
@pytest.mark.parametrize("per_host", [1, 4])
def test_a_dcn_collective_equals_its_closed_form(name: str, op: CollectiveOp, slices: int, per_host: int) -> None:
    spec = SPECS[name]
    chips = 2 * per_host  # two hosts: they share nothing, so both finish at the formula's time
    run = simulate_dcn(spec, op, NBYTES, slices, chips, chips_per_host=per_host)
    twin = dcn_twin(spec, op, NBYTES, slices, chips_per_host=per_host)
    assert run.elapsed_s == pytest.approx(twin, rel=1e-9)
    assert twin == pytest.approx(_formula(spec, op, slices, per_host), rel=1e-12)
    steps = dcn_steps(op, slices)
    # every host link carried its chips' chunks, each held bytes / bandwidth
    held = per_host * steps * NBYTES / slices / spec.host_bandwidth
    assert run.egress_busy_s == pytest.approx((held, held), rel=1e-12)
    assert run.ingress_busy_s == run.egress_busy_s


def test_one_chip_per_host_is_the_plain_ring() -> None:
    spec = SPECS["latency below a chunk"]
    # k steps of one chunk each, each followed by its latency
    assert dcn_twin(spec, CollectiveOp.ALL_REDUCE, NBYTES, 4, 1) == pytest.approx(
        50e-6 + 6 * (NBYTES / 4 / 48e9 + 10e-6), rel=1e-12)


def test_one_slice_moves_nothing() -> None:
    spec = SPECS["latency below a chunk"]
    assert dcn_twin(spec, CollectiveOp.ALL_REDUCE, NBYTES, 1) == 0.0
    assert simulate_dcn(spec, CollectiveOp.ALL_REDUCE, NBYTES, 1, 4).elapsed_s == 0.0


def test_bad_dcn_calls_are_user_errors() -> None:
    spec = SPECS["latency below a chunk"]
    with pytest.raises(UserError, match="does not run over DCN"):
        dcn_steps(CollectiveOp.BROADCAST, 2)
    with pytest.raises(UserError, match="6 chips do not fill whole hosts of 4 chips"):
        simulate_dcn(spec, CollectiveOp.ALL_GATHER, NBYTES, 2, 6)


@pytest.mark.parametrize("name, bandwidth, per_host", [("tpuv4", 25e9, 4), ("tpuv5e", 25e9, 8),
                                                        ("tpuv5p", 25e9, 4), ("tpuv6e", 100e9, 8),
                                                        ("tpuv4-wire", 25e9, 4)])
def test_the_physical_profiles_have_a_dcn(name: str, bandwidth: float, per_host: int) -> None:
    profile = load_hardware(name)
    assert isinstance(profile, PhysicalProfile) and profile.dcn is not None
    assert (profile.dcn.host_bandwidth, profile.dcn.chips_per_host) == (bandwidth, per_host)
    assert profile.dcn.launch_overhead == (0.0 if name == "tpuv4-wire" else pytest.approx(50e-6))


def test_the_dcn_factor_scales_the_host_bandwidth_only() -> None:
    base = load_hardware("tpuv4")
    scaled = scaled_profile(base, dcn=0.5)
    assert isinstance(base, PhysicalProfile) and isinstance(scaled, PhysicalProfile)
    assert base.dcn is not None and scaled.dcn is not None
    assert scaled.dcn.host_bandwidth == base.dcn.host_bandwidth / 2
    assert (scaled.ici, scaled.dcn.latency, scaled.name) == (base.ici, base.dcn.latency, "tpuv4[dcn*0.5]")
    with pytest.raises(ConfigError, match="needs a data-centre network"):
        scaled_profile(load_hardware("meshslice-sim"), dcn=0.5)


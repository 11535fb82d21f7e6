"""Calibrated profiles: the abstract network charges the authors' per-axis closed forms
(docs/network.md#the-calibrated-network).

The constants below are copied from the published calibration tables (docs/hardware-profiles.md#calibrated-profiles),
not read from the profiles, so a wrong
YAML value or a wrong formula both fail.
"""

from __future__ import annotations

import pytest

from tpusim.collectives.device import Device, run_spmd
from tpusim.collectives.factory import network_for
from tpusim.collectives.runtime import CollectiveRuntime
from tpusim.collectives.simulate import CollectiveSpec, simulate_collective
from tpusim.engine.simulation import Simulation
from tpusim.engine.tensor import Tensor
from tpusim.hardware import load_hardware
from tpusim.topology import abstract_mesh
from tpusim.vocabulary import CollectiveOp

MiB = 2**20
# profile -> op family -> (alpha, lambda, (beta axis 0, beta axis 1))
CONSTANTS = {
    "meshslice-tpu-fit": {
        "AG": (13e-6, 5e-6, (27.472e9, 79.751e9)),
        "RdS": (26e-6, 5e-6, (37.506e9, 63.167e9)),
        "SR": (13e-6, 50e-6, (38.801e9, 35.224e9)),
    },
    "meshslice-sim": {
        "AG": (100e-6, 6e-6, (60e9, 60e9)),
        "RdS": (100e-6, 6e-6, (50e9, 50e9)),
        "SR": (100e-6, 6e-6, (38.801e9, 35.224e9)),
    },
}


def _ring(profile: str, family: str, axis: int, steps: int, s: float) -> float:
    alpha, lam, beta = CONSTANTS[profile][family]
    return alpha + steps * (s / beta[axis] + lam)


def expected(profile: str, op: CollectiveOp, axis: int, n: int, s: float, root: int = 0, offset: int = 1) -> float:
    """Closed form for unit size ``s`` (shard, output shard, part or message)."""
    if op in (CollectiveOp.ALL_GATHER, CollectiveOp.ALL_TO_ALL):
        return _ring(profile, "AG", axis, n - 1, s)
    if op is CollectiveOp.REDUCE_SCATTER:
        return _ring(profile, "RdS", axis, n - 1, s)
    if op is CollectiveOp.ALL_REDUCE:
        return _ring(profile, "RdS", axis, n - 1, s) + _ring(profile, "AG", axis, n - 1, s)
    if op in (CollectiveOp.BROADCAST, CollectiveOp.REDUCE):
        alpha, lam, beta = CONSTANTS[profile]["AG" if op is CollectiveOp.BROADCAST else "RdS"]
        return alpha + s / beta[axis] + (n - 1) * lam
    ahead = (offset - (0 if op is CollectiveOp.SHIFT else root)) % n
    hops = min(ahead, n - ahead)
    return _ring(profile, "SR", 1, hops, s) if hops else 0.0  # send/recv always uses beta_SR[1]


def _bytes(op: CollectiveOp, n: int, s: int) -> int:
    if op in (CollectiveOp.REDUCE_SCATTER, CollectiveOp.ALL_REDUCE, CollectiveOp.ALL_GATHER):
        return n * s
    if op is CollectiveOp.ALL_TO_ALL:
        return n * n * s
    return s


def _time(profile: str, rows: int, cols: int, spec: CollectiveSpec) -> tuple[float, float | None]:
    result = simulate_collective(spec, network_for(load_hardware(profile), abstract_mesh(rows, cols)))
    return result.time_s, result.analytic_time_s


def test_all_gather_8x8_axis1_8mib() -> None:
    time, twin = _time("meshslice-tpu-fit", 8, 8, CollectiveSpec(CollectiveOp.ALL_GATHER, 1, 8 * MiB))
    assert time == pytest.approx(13e-6 + 7 * (MiB / 79.751e9 + 5e-6), rel=1e-9)
    assert twin == pytest.approx(time, rel=1e-9)


MESHES = [(8, 8), (32, 8), (4, 16)]


@pytest.mark.parametrize("s", [MiB, 3 * 10**6])
@pytest.mark.parametrize("op", list(CollectiveOp))
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize(("rows", "cols"), MESHES)
@pytest.mark.parametrize("profile", list(CONSTANTS))
def test_table(profile: str, rows: int, cols: int, axis: int, op: CollectiveOp, s: int) -> None:
    n = (rows, cols)[axis]
    for root, offset in ((0, 1), (n - 1, n // 2), (1, n - 1)):
        spec = CollectiveSpec(op, axis, _bytes(op, n, s), root=root, offset=offset)
        time, twin = _time(profile, rows, cols, spec)
        formula = expected(profile, op, axis, n, s, root, offset)
        assert time == pytest.approx(formula, rel=1e-9)
        assert twin == pytest.approx(formula, rel=1e-9)


# docs/network.md#the-calibrated-network worked numbers, s = 1 MiB: (profile, mesh, axis, op, offset, figure in us)
WORKED = [
    ("meshslice-tpu-fit", (8, 8), 1, CollectiveOp.ALL_GATHER, 1, 140.04),
    ("meshslice-tpu-fit", (32, 8), 0, CollectiveOp.ALL_GATHER, 1, 1351.24),
    ("meshslice-tpu-fit", (8, 8), 1, CollectiveOp.REDUCE_SCATTER, 1, 177.20),
    ("meshslice-tpu-fit", (32, 8), 0, CollectiveOp.REDUCE_SCATTER, 1, 1047.68),
    ("meshslice-tpu-fit", (8, 8), 1, CollectiveOp.BROADCAST, 1, 61.15),
    ("meshslice-tpu-fit", (16, 16), 1, CollectiveOp.SHIFT, 8, 651.15),  # Cannon skew n = 16: floor(n/2) hops
    ("meshslice-sim", (32, 8), 0, CollectiveOp.ALL_GATHER, 1, 827.76),
    ("meshslice-sim", (8, 8), 1, CollectiveOp.REDUCE_SCATTER, 1, 288.80),
]


@pytest.mark.parametrize(("profile", "mesh", "axis", "op", "offset", "figure"), WORKED)
def test_reference_worked_numbers(
    profile: str, mesh: tuple[int, int], axis: int, op: CollectiveOp, offset: int, figure: float
) -> None:
    n = mesh[axis]
    time, _ = _time(profile, *mesh, CollectiveSpec(op, axis, _bytes(op, n, MiB), offset=offset))
    assert round(time * 1e6, 2) == figure
    assert time == pytest.approx(expected(profile, op, axis, n, MiB, offset=offset), rel=1e-9)


def test_cannon_skew_formula() -> None:
    time, _ = _time("meshslice-tpu-fit", 16, 16, CollectiveSpec(CollectiveOp.SHIFT, 1, MiB, offset=8))
    assert time == pytest.approx(13e-6 + 8 * (MiB / 35.224e9 + 50e-6), rel=1e-9)


def _program_time(profile: str, rows: int, cols: int, calls) -> float:  # type: ignore[no-untyped-def]
    """Every chip issues ``calls(dev)`` at once and waits for all of them; the simulated end time."""
    sim = Simulation(network_for(load_hardware(profile), abstract_mesh(rows, cols)))
    runtime = CollectiveRuntime(sim, network_for(sim.hardware, sim.mapping))

    def program(dev: Device):  # type: ignore[no-untyped-def]
        yield dev.wait(*calls(dev))

    run_spmd(sim, runtime, program, lambda dev: ())
    return sim.now


def _ag(axis: int, n: int) -> float:
    return expected("meshslice-tpu-fit", CollectiveOp.ALL_GATHER, axis, n, MiB)


def test_one_collective_at_a_time_per_axis() -> None:
    time = _program_time("meshslice-tpu-fit", 8, 8, lambda dev: [
        dev.all_gather(Tensor((MiB,), "int8"), axis=1) for _ in range(3)
    ])
    assert time == pytest.approx(3 * _ag(1, 8), rel=1e-12)


def test_axes_run_concurrently() -> None:
    time = _program_time("meshslice-tpu-fit", 4, 8, lambda dev: [
        dev.all_gather(Tensor((MiB,), "int8"), axis=0), dev.all_gather(Tensor((MiB,), "int8"), axis=1),
    ])
    assert time == pytest.approx(max(_ag(0, 4), _ag(1, 8)), rel=1e-12)


def test_opposite_shifts_share_the_axis() -> None:
    shift = expected("meshslice-tpu-fit", CollectiveOp.SHIFT, 1, 8, MiB)
    t = Tensor((MiB,), "int8")
    both = _program_time("meshslice-tpu-fit", 8, 8, lambda dev: [
        dev.shift(t, axis=1, offset=1), dev.shift(t, axis=1, offset=-1),
    ])
    same = _program_time("meshslice-tpu-fit", 8, 8, lambda dev: [
        dev.shift(t, axis=1, offset=1), dev.shift(t, axis=1, offset=1),
    ])
    assert (both, same) == (pytest.approx(shift, rel=1e-12), pytest.approx(2 * shift, rel=1e-12))


@pytest.mark.parametrize("op", list(CollectiveOp))
@pytest.mark.parametrize(("rows", "cols", "axis"), [(1, 8, 0), (4, 1, 1), (1, 1, 0), (1, 1, 1)])
def test_groups_of_one_take_no_time(rows: int, cols: int, axis: int, op: CollectiveOp) -> None:
    time, twin = _time("meshslice-sim", rows, cols, CollectiveSpec(op, axis, MiB, offset=0))
    assert (time, twin) == (0.0, 0.0)

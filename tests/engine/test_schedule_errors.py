"""Broken schedules: a chip that never joins stalls its group (DeadlockError); disagreeing calls fail."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tpusim.collectives.device import Device, run_spmd
from tpusim.collectives.factory import network_for
from tpusim.collectives.runtime import CollectiveRuntime
from tpusim.engine.simulation import Simulation
from tpusim.engine.tensor import Tensor
from tpusim.errors import DeadlockError, SimulationError
from tpusim.hardware import load_hardware
from tpusim.topology import MeshMapping, abstract_mesh, map_mesh, parse_topology

NETWORKS = {
    "torus-4x4": ("tpuv4", lambda: map_mesh(parse_topology("torus:4x4"), 4, 4)),
    "abstract-4x4": ("meshslice-sim", lambda: abstract_mesh(4, 4)),
}


def _run(name: str, program) -> tuple[MeshMapping, Simulation]:  # type: ignore[no-untyped-def]
    hardware, build = NETWORKS[name]
    mapping = build()
    sim = Simulation(network_for(load_hardware(hardware), mapping))
    runtime = CollectiveRuntime(sim, network_for(sim.hardware, sim.mapping))
    run_spmd(sim, runtime, lambda dev: program(dev), lambda dev: ())
    return mapping, sim


def _skipper(dev: Device):  # type: ignore[no-untyped-def]
    """Chip (0, 0) skips the all-gather the rest of its row group waits on."""
    if dev.index == (0, 0):
        return None
    gathered = yield dev.all_gather(Tensor((4,), "fp64", np.ones(4)), axis=1)
    return gathered


@pytest.mark.parametrize("name", list(NETWORKS))
def test_missing_member_deadlocks_and_names_the_stuck_chips(name: str) -> None:
    mapping = NETWORKS[name][1]()
    with pytest.raises(DeadlockError) as caught:
        _run(name, _skipper)
    message = str(caught.value)
    stuck = [mapping.chip(0, j) for j in (1, 2, 3)]
    named = [int(c) for c in re.findall(r"chip (\d+):", message)]
    assert named == sorted(stuck)
    assert "3 chip program(s) still waiting" in message
    assert message.count("all-gather on axis 1 (group 0") == 3


def test_deadlock_report_shows_the_current_join_count() -> None:
    with pytest.raises(DeadlockError) as caught:
        _run("torus-4x4", _skipper)
    assert str(caught.value).count("3/4 joined") == 3


def _mismatch(field: str):  # type: ignore[no-untyped-def]
    def program(dev: Device):  # type: ignore[no-untyped-def]
        t = Tensor((4,), "fp64", np.ones(4))
        if dev.index != (0, 0):
            return (yield dev.all_gather(t, axis=1))
        if field == "op":
            return (yield dev.reduce_scatter(t, axis=1))
        if field == "bytes":
            return (yield dev.all_gather(Tensor((8,), "fp64", np.ones(8)), axis=1))
        return (yield dev.all_gather(t, axis=1, chunks=2))

    return program


@pytest.mark.parametrize("field", ["op", "bytes", "chunks"])
@pytest.mark.parametrize("name", list(NETWORKS))
def test_collective_mismatch_raises(name: str, field: str) -> None:
    with pytest.raises(SimulationError, match=r"collective mismatch on axis 1, group 0, call #0") as caught:
        _run(name, _mismatch(field))
    assert not isinstance(caught.value, DeadlockError)


def test_second_call_on_an_axis_joins_the_second_instance() -> None:
    """Calls match by per-axis sequence number, whatever the chips do on the other axis in between."""

    def program(dev: Device):  # type: ignore[no-untyped-def]
        t = Tensor((2,), "fp64", np.full(2, float(dev.rank(1))))
        column = None
        if dev.index[0] != 0:  # row 0 joins its column groups last, after its axis-1 work
            column = yield dev.all_reduce(t, axis=0)
        first = yield dev.all_gather(t, axis=1)
        second = yield dev.all_reduce(t, axis=1)
        if dev.index[0] == 0:
            column = yield dev.all_reduce(t, axis=0)
        return first.data.tolist(), second.data.tolist(), column.data.tolist()

    hardware, build = NETWORKS["torus-4x4"]
    sim = Simulation(network_for(load_hardware(hardware), build()))
    out = run_spmd(sim, CollectiveRuntime(sim, network_for(sim.hardware, sim.mapping)), program, lambda dev: ())
    for (_, j), (first, second, column) in out.items():
        assert first == [0.0, 0.0, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0]
        assert second == [6.0, 6.0]
        assert column == [4.0 * j, 4.0 * j]


def test_run_returns_the_end_time_and_counts_events() -> None:
    def program(dev: Device):  # type: ignore[no-untyped-def]
        return (yield dev.all_gather(Tensor((1000,), "int8"), axis=1))

    _, sim = _run("abstract-4x4", program)
    assert sim.now == pytest.approx(100e-6 + 3 * (1000 / 60e9 + 6e-6), rel=1e-12)
    assert sim.events > 0

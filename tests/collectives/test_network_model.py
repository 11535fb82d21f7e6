"""A network model derives other placements of its profile (``Network.over``), moves to another context
(``Network.on``) and pickles as its placement without the context, so a tuner worker rebuilds the same model."""

from __future__ import annotations

import pickle

from tpusim.collectives.calibrated import CalibratedNetwork
from tpusim.collectives.factory import network_for, place_mesh
from tpusim.collectives.physical import PhysicalNetwork
from tpusim.collectives.simulate import CollectiveSpec, simulate_collective
from tpusim.config import PhysicalProfile
from tpusim.engine.context import Context
from tpusim.engine.overrides import parse_slow_links
from tpusim.hardware import load_hardware
from tpusim.vocabulary import CollectiveOp

SHIFT = CollectiveSpec(CollectiveOp.SHIFT, 1, 45_000_000)


def _slowed() -> PhysicalNetwork:
    """tpuv4's 16x4 mesh on a 4x4x4 slice, the z link out of chip 0 (on axis 1's ring) at half speed."""
    hardware = load_hardware("tpuv4")
    mapping = place_mesh(hardware, 16, 4, topology="4x4x4")
    network = network_for(hardware, mapping, context=Context(), link_overrides=parse_slow_links(["0-16:2"], mapping))
    assert isinstance(network, PhysicalNetwork)
    return network


def test_a_pickled_model_is_the_same_model_on_a_fresh_context() -> None:
    network = _slowed()
    before = len(pickle.dumps(network))
    slowed = simulate_collective(SHIFT, network).time_s  # fills the context's memo with the shift's plans
    assert network.context.memo
    blob = pickle.dumps(network)
    assert len(blob) == before  # the context, and what it memoised, stays in this process
    copy = pickle.loads(blob)
    assert type(copy) is PhysicalNetwork and copy.context is not network.context and copy.context.memo == {}
    assert copy.hardware == network.hardware and copy.mapping.describe() == network.mapping.describe()
    assert copy.link_overrides == network.link_overrides
    assert (copy.link_bandwidth == network.link_bandwidth).all()
    assert simulate_collective(SHIFT, copy).time_s == slowed


def test_a_calibrated_model_pickles_too() -> None:
    hardware = load_hardware("meshslice-sim")
    network = network_for(hardware, place_mesh(hardware, 4, 4))
    spec = CollectiveSpec(CollectiveOp.ALL_GATHER, 0, 8 * 2**20)
    copy = pickle.loads(pickle.dumps(network))
    assert type(copy) is CalibratedNetwork
    assert simulate_collective(spec, copy).time_s == simulate_collective(spec, network).time_s


def test_over_places_the_profile_anew_and_on_keeps_the_placement() -> None:
    network = _slowed()
    hardware = network.hardware
    assert isinstance(hardware, PhysicalProfile)
    rate = hardware.ici.achievable_bandwidth
    (link,) = network.link_overrides
    assert network.link_bandwidth[link] == rate / 2
    # another placement, of another slice shape: no overrides (they name this placement's links), same context
    other = network.over(place_mesh(hardware, 4, 4, topology="1x4x4"))
    assert type(other) is PhysicalNetwork and other.context is network.context and other.link_overrides == {}
    assert other.mapping.describe()["topology"] == "tpuv4:1x4x4"
    assert len(other.link_bandwidth) == other.topology.num_links and (other.link_bandwidth == rate).all()
    # the same placement without overrides, on another context
    elsewhere = Context()
    clean = network.over(network.mapping, context=elsewhere)
    assert clean is not network and clean.context is elsewhere and clean.link_overrides == {}
    assert clean.over(clean.mapping) is clean
    # the whole model, overrides and all, on another context
    moved = network.on(elsewhere)
    assert moved.context is elsewhere and moved.link_overrides == network.link_overrides
    assert moved.link_bandwidth[link] == rate / 2
    assert network.on(network.context) is network

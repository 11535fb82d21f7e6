"""D x R x C layouts: D replicas of an R x C mesh, the data axis on whole physical axes (tpusim/topology/pod.py)."""

from __future__ import annotations

import numpy as np
import pytest

import tpusim.api as tp
from tpusim.errors import TopologyError
from tpusim.topology import map_mesh, parse_topology
from tpusim.topology.mapping import DATA_AXIS
from tpusim.topology.pod import map_pod

POD = parse_topology("16x16x16")


def test_a_pod_puts_the_data_axis_on_one_wrapped_axis_and_replicas_on_the_rest() -> None:
    pod = map_pod(POD, 16, 16, 16)
    assert pod.shape == (16, 16, 16)
    assert [POD.axis_names[a] for a in pod.data_axes] == ["z"]
    assert pod.replica.topology is not None and pod.replica.topology.dims == (16, 16)
    assert pod.replica.topology.wrap == (True, True) and pod.replica.topology.axis_names == ("x", "y")
    data = pod.mesh.axes[DATA_AXIS]
    assert (data.size, data.embedding, data.closed, data.max_hops) == (16, "wrapped ring", True, 1)
    assert len(data.groups) == 256


def test_replicas_partition_the_chips_and_each_data_ring_joins_one_place_of_every_replica() -> None:
    pod = map_pod(POD, 16, 16, 16)
    chips = pod.replica_chips
    assert sorted(chips.ravel().tolist()) == list(range(POD.num_chips))
    coords = np.array([POD.coord(int(c)) for c in chips.ravel()]).reshape(16, 256, 3)
    # a replica is one z plane; the same sub-topology chip has the same x, y in every replica
    assert all(len(set(coords[d, :, 2].tolist())) == 1 for d in range(16))
    assert (coords[:, :, :2] == coords[:1, :, :2]).all()
    # replica d is rank d of the data rings
    for group in pod.mesh.axes[DATA_AXIS].groups[:8]:
        assert [int(np.argwhere(chips == chip)[0][0]) for chip in group.members] == list(range(16))


def test_replica_links_are_the_physical_links_between_the_replica_chips() -> None:
    pod = map_pod(parse_topology("4x4x8"), 8, 4, 4)
    sub = pod.replica.topology
    assert sub is not None
    for d in (0, 3, 7):
        for link in range(sub.num_links):
            src, dst = int(sub.link_src[link]), int(sub.link_dst[link])
            physical = int(pod.replica_links[d, link])
            assert (int(pod.topology.link_src[physical]), int(pod.topology.link_dst[physical])) == (
                int(pod.replica_chips[d, src]), int(pod.replica_chips[d, dst]))
    # no replica link is a data-axis link: tensor and data parallelism never share a link
    assert set(pod.replica_links.ravel().tolist()).isdisjoint(
        {link for g in pod.mesh.axes[DATA_AXIS].groups for route in g.fwd_routes + g.bwd_routes for link in route})


def test_one_replica_is_todays_mapping() -> None:
    topology = parse_topology("4x8x8")
    pod = map_pod(topology, 1, 16, 16)
    plain = map_mesh(topology, 16, 16)
    assert pod.replica.describe()["axis0"] == plain.describe()["axis0"]
    assert pod.replica.describe()["axis1"] == plain.describe()["axis1"]
    assert np.array_equal(pod.replica_chips[0][pod.replica.chip_grid.ravel()], plain.chip_grid.ravel())


def test_data_axes_can_be_named_and_their_size_is_checked() -> None:
    topology = parse_topology("4x8x8")
    pod = map_pod(topology, 64, 2, 2, data_axes="y*z")
    assert [topology.axis_names[a] for a in pod.data_axes] == ["y", "z"]
    assert pod.mesh.axes[DATA_AXIS].embedding == "snake"
    with pytest.raises(TopologyError, match="data axes 'x' have 4 chips on 'tpuv4:4x8x8', not the 8"):
        map_pod(topology, 8, 16, 2, data_axes="x")


@pytest.mark.parametrize("layout, message", [
    ((3, 16, 16), "layout 3x16x16 has 768 chips but topology 'tpuv4:4x8x8' has 256; choose D x R x C = 256"),
    ((2, 8, 16), "a data axis of 2 chips cannot take whole physical axes of 'tpuv4:4x8x8' and leave a 8x16 mesh; "
                 "valid data-parallel degrees here: 1, 4, 8, 32, 64, 256"),
])
def test_layouts_that_do_not_fit_are_one_line(layout: tuple[int, int, int], message: str) -> None:
    with pytest.raises(TopologyError) as info:
        map_pod(parse_topology("4x8x8"), *layout)
    assert str(info.value) == message


@pytest.mark.parametrize("op", ["reduce-scatter", "all-reduce", "all-gather"])
def test_data_parallel_gradient_collectives_equal_their_twins(op: str) -> None:
    """The gradient collectives of a 4x4x4 layout on 4x4x4 run over the data view's axis 0 (z): DES = closed form."""
    pod = map_pod(parse_topology("4x4x4"), 4, 4, 4)
    names = pod.topology.axis_names
    axis_map = f"{'*'.join(names[a] for a in pod.data_axes)},x*y"
    result = tp.collective(hardware="tpuv4", topology="4x4x4", mesh="4x16", axis_map=axis_map, axis=0, op=op,
                           bytes="48MB")
    assert result.analytic_time_s is not None
    assert result.time_s == pytest.approx(result.analytic_time_s, rel=1e-9)
    assert result.mapping["axis0"]["physical"] == ["z"]


@pytest.mark.parametrize(("spec", "layout"), [("16x16x16", (16, 16, 16)), ("4x8x8", (64, 2, 2)),
                                              ("4x4x16", (16, 4, 4))])
def test_the_data_rings_are_those_of_the_whole_topology_as_a_d_by_rc_mesh(spec: str,
                                                                           layout: tuple[int, int, int]) -> None:
    """The data axis is placed once, on the pod mesh, by the rules of axis 0 of a D x (R*C) mesh of the whole
    topology (whose other axis is never placed): the same rings, routes and embedding as that mesh's."""
    topology = parse_topology(spec)
    pod = map_pod(topology, *layout)
    names = topology.axis_names
    taken = [names[a] for a in pod.data_axes]
    view = f"{'*'.join(taken)},{'*'.join(n for n in names if n not in taken) or '1'}"
    whole = map_mesh(topology, layout[0], layout[1] * layout[2], view).axes[0]
    data = pod.mesh.axes[DATA_AXIS]
    assert (data.embedding, data.closed, data.max_hops, data.pieces) == (
        whole.embedding, whole.closed, whole.max_hops, whole.pieces)
    rings = {(g.members, g.fwd_routes, g.bwd_routes) for g in data.groups}
    assert rings == {(g.members, g.fwd_routes, g.bwd_routes) for g in whole.groups}

"""Logical mesh mapping: axis assignment, ring embeddings, routes, overrides and the abstract mesh."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpusim.errors import TopologyError
from tpusim.topology import (
    AxisPiece,
    MeshMapping,
    RingEmbedding,
    abstract_mesh,
    generic_topology,
    map_mesh,
    parse_mesh,
    parse_topology,
)
from tpusim.topology.rings import ring_order, snake_path


def _assert_path(mapping: MeshMapping, links: tuple[int, ...], src: int, dst: int) -> None:
    """The links form a connected path from chip src to chip dst."""
    topo = mapping.topology
    assert topo is not None
    assert links, (src, dst)
    here = src
    for link in links:
        assert int(topo.link_src[link]) == here
        here = int(topo.link_dst[link])
    assert here == dst


def check_mapping(mapping: MeshMapping) -> None:
    """Every structural promise of a physical MeshMapping."""
    rows, cols = mapping.shape
    topo = mapping.topology
    assert topo is not None
    grid = mapping.chip_grid
    assert grid.shape == (rows, cols)
    assert sorted(grid.ravel().tolist()) == list(range(topo.num_chips))
    for axis, axis_mapping in enumerate(mapping.axes):
        size = (rows, cols)[axis]
        assert axis_mapping.axis == axis
        assert axis_mapping.size == size
        assert math.prod(p.length for p in axis_mapping.pieces) == size
        assert len(axis_mapping.groups) == (cols, rows)[axis]
        longest = 0
        for g, group in enumerate(axis_mapping.groups):
            members = grid[:, g] if axis == 0 else grid[g, :]
            assert group.members == tuple(members.tolist())
            assert group.closed == axis_mapping.closed
            hops = size if group.closed else size - 1
            assert len(group.fwd_routes) == len(group.bwd_routes) == max(hops, 0)
            for r in range(len(group.fwd_routes)):
                a, b = group.members[r], group.members[(r + 1) % size]
                _assert_path(mapping, group.fwd_routes[r], a, b)
                _assert_path(mapping, group.bwd_routes[r], b, a)
                longest = max(longest, len(group.fwd_routes[r]), len(group.bwd_routes[r]))
            for rank, chip in enumerate(group.members):
                assert mapping.group_of(axis, chip) == (g, rank)
        assert axis_mapping.max_hops == longest
        one_step_cycle = size % 2 == 0 or any(p.is_cyclic(topo) for p in axis_mapping.pieces)
        if axis_mapping.embedding == "snake" and one_step_cycle:
            assert axis_mapping.max_hops == 1
    for i, j in itertools.product(range(rows), range(cols)):
        assert mapping.chip(i, j) == int(grid[i, j])


# --- named cases -----------------------------------------------------------------------------------


def test_16x16_on_4x4x16(topology_mesh) -> None:
    m = topology_mesh("4x4x16", "16x16")
    check_mapping(m)
    assert m.describe() == {
        "mesh": "16x16",
        "topology": "tpuv4:4x4x16",
        "axis0": {"size": 16, "physical": ["x", "y"], "embedding": "snake", "closed": True, "max_hops": 1},
        "axis1": {"size": 16, "physical": ["z"], "embedding": "wrapped ring", "closed": True, "max_hops": 1},
    }
    assert m.axes[0].pieces == (AxisPiece(0, 4, 1, True), AxisPiece(1, 4, 1, True))
    # The x*y snake: row y=0 along x, back over x=3..1 through y=1..3, then up x=0.
    assert m.axes[0].groups[0].members == (0, 1, 2, 3, 7, 6, 5, 9, 10, 11, 15, 14, 13, 12, 8, 4)
    assert m.axes[1].groups[0].members == tuple(16 * z for z in range(16))
    assert m.chip(2, 3) == 2 + 16 * 3


def test_8x8_on_torus_8x8(topology_mesh) -> None:
    m = topology_mesh("torus:8x8", "8x8")
    check_mapping(m)
    assert [a.embedding for a in m.axes] == ["wrapped ring", "wrapped ring"]
    assert [a.physical for a in m.axes] == [("x",), ("y",)]
    assert np.array_equal(m.chip_grid, np.arange(8)[:, None] + 8 * np.arange(8)[None, :])
    assert m.axes[0].groups[3].fwd_routes[7] == (m.topology.link_id(7 + 24, 0 + 24),)  # type: ignore[union-attr]


def test_32x8_on_4x8x8(topology_mesh) -> None:
    m = topology_mesh("4x8x8", "32x8")
    check_mapping(m)
    assert m.describe()["axis0"] == {
        "size": 32, "physical": ["x", "y"], "embedding": "snake", "closed": True, "max_hops": 1,
    }
    assert m.describe()["axis1"] == {
        "size": 8, "physical": ["z"], "embedding": "wrapped ring", "closed": True, "max_hops": 1,
    }


def test_16x16_on_4x8x8_is_split(topology_mesh) -> None:
    m = topology_mesh("4x8x8", "16x16")
    check_mapping(m)
    assert m.describe() == {
        "mesh": "16x16",
        "topology": "tpuv4:4x8x8",
        "axis0": {
            "size": 16, "physical": ["x[0:2]", "y"], "embedding": "split", "closed": True, "max_hops": 1,
        },
        "axis1": {
            "size": 16, "physical": ["x[::2]", "z"], "embedding": "split", "closed": True, "max_hops": 2,
        },
    }
    assert m.axes[0].pieces[0] == AxisPiece(0, 2, 1, False)
    assert m.axes[1].pieces[0] == AxisPiece(0, 2, 2, False)


def test_64x1_is_hamiltonian_cycle_over_the_cube(topology_mesh) -> None:
    m = topology_mesh("4x4x4", "64x1")
    check_mapping(m)
    axis0 = m.axes[0]
    assert axis0.physical == ("x", "y", "z")
    assert (axis0.embedding, axis0.closed, axis0.max_hops) == ("snake", True, 1)
    assert len(axis0.groups) == 1
    assert sorted(axis0.groups[0].members) == list(range(64))
    assert m.axes[1].describe() == {
        "size": 1, "physical": [], "embedding": "single", "closed": False, "max_hops": 0,
    }
    assert m.axes[1].groups[0].fwd_routes == ()


def test_4x4_on_sub_cube_2x2x4(topology_mesh) -> None:
    m = topology_mesh("2x2x4", "4x4")
    check_mapping(m)
    assert m.describe()["axis0"] == {
        "size": 4, "physical": ["x", "y"], "embedding": "snake", "closed": True, "max_hops": 1,
    }
    assert m.describe()["axis1"] == {
        "size": 4, "physical": ["z"], "embedding": "line", "closed": False, "max_hops": 1,
    }
    assert m.chip_grid.tolist() == [[0, 4, 8, 12], [1, 5, 9, 13], [3, 7, 11, 15], [2, 6, 10, 14]]
    line = m.axes[1].groups[0]
    assert len(line.fwd_routes) == 3
    assert line.route(3, 0) == m.topology.route(12, 0)  # type: ignore[union-attr]


def test_odd_mesh_closes_with_a_multi_hop_route(topology_mesh) -> None:
    m = topology_mesh("mesh:3x3", "9x1")
    check_mapping(m)
    ring = m.axes[0].groups[0]
    assert ring.members == (0, 1, 4, 3, 6, 7, 8, 5, 2)
    assert (m.axes[0].embedding, m.axes[0].closed, m.axes[0].max_hops) == ("snake", True, 2)
    assert len(ring.fwd_routes[8]) == 2
    # The way back over the 2-hop closing route is shorter than 8 single hops forward.
    assert ring.route(0, 8) == ring.bwd_routes[8]


def test_ring_route_counts_links_not_steps(topology_mesh) -> None:
    m = topology_mesh("mesh:5x5", "25x1")
    check_mapping(m)
    ring = m.axes[0].groups[0]
    assert m.axes[0].max_hops == 4
    assert len(ring.fwd_routes[24]) == 4
    # 13 steps forward are 13 links; 12 steps back cross the 4-hop closing route: 15 links.
    assert ring.route(0, 13) == sum(ring.fwd_routes[:13], ())
    assert ring.route(0, 14) == sum((ring.bwd_routes[r] for r in range(24, 13, -1)), ())


def test_odd_torus_closes_in_one_hop_through_wrap(topology_mesh) -> None:
    m = topology_mesh("torus:3x5", "15x1")
    check_mapping(m)
    assert (m.axes[0].embedding, m.axes[0].closed, m.axes[0].max_hops) == ("snake", True, 1)


def test_size_two_axis_alone_is_a_line(topology_mesh) -> None:
    m = topology_mesh("torus:2x8", "2x8")
    check_mapping(m)
    assert [(a.embedding, a.closed) for a in m.axes] == [("line", False), ("wrapped ring", True)]


def test_single_chip(topology_mesh) -> None:
    m = topology_mesh("1x1x1", "1x1")
    check_mapping(m)
    assert [a.embedding for a in m.axes] == ["single", "single"]


def test_rows_one_puts_everything_on_axis_1(topology_mesh) -> None:
    m = topology_mesh("4x4x4", "1x64")
    check_mapping(m)
    assert m.axes[1].physical == ("x", "y", "z")
    assert m.axes[0].embedding == "single"


def test_large_pod_maps_quickly_and_bijectively(topology_mesh) -> None:
    m = topology_mesh("16x16x16", "256x16")
    assert sorted(m.chip_grid.ravel().tolist()) == list(range(4096))
    assert m.axes[0].physical == ("x", "y")
    assert m.axes[1].embedding == "wrapped ring"


# --- ring routes -----------------------------------------------------------------------------------


def test_ring_route_shorter_way_and_ties_forward(topology_mesh) -> None:
    m = topology_mesh("4x4x16", "16x16")
    ring = m.axes[1].groups[0]
    topo = m.topology
    assert topo is not None
    assert ring.route(0, 15) == topo.route(0, 16 * 15)
    assert len(ring.route(0, 15)) == 1
    assert ring.route(0, 8) == sum(ring.fwd_routes[:8], ())
    assert ring.route(8, 0) == sum(ring.fwd_routes[8:], ())
    assert ring.route(5, 2) == ring.bwd_routes[4] + ring.bwd_routes[3] + ring.bwd_routes[2]
    assert ring.route(4, 4) == ()
    with pytest.raises(TopologyError, match=r"destination rank 16 is out of range; valid: 0\.\.15"):
        ring.route(0, 16)


def test_ring_embedding_checks_route_count() -> None:
    with pytest.raises(TopologyError, match="needs 3 forward and backward routes"):
        RingEmbedding(members=(0, 1, 2), closed=True, fwd_routes=((),), bwd_routes=((),))


def test_group_of_and_chip_errors(topology_mesh) -> None:
    m = topology_mesh("torus:4x4", "4x4")
    assert m.group_of(0, 6) == (1, 2)
    assert m.group_of(1, 6) == (2, 1)
    with pytest.raises(TopologyError, match="logical axis 2 does not exist"):
        m.group_of(2, 0)
    with pytest.raises(TopologyError, match=r"chip 16 is out of range; valid: 0\.\.15"):
        m.group_of(0, 16)
    with pytest.raises(TopologyError, match=r"row index i 4 is out of range"):
        m.chip(4, 0)


# --- search preferences ----------------------------------------------------------------------------


def test_axis_1_prefers_a_single_whole_physical_axis(topology_mesh) -> None:
    m = topology_mesh("4x4x4", "16x4")
    assert [a.physical for a in m.axes] == [("x", "y"), ("z",)]
    m = topology_mesh("4x4x4", "4x16")
    assert [a.physical for a in m.axes] == [("x",), ("y", "z")]


def test_split_is_used_only_when_no_whole_assignment_exists(topology_mesh) -> None:
    assert topology_mesh("4x4x4", "8x8").describe()["axis0"]["physical"] == ["x[0:2]", "y"]
    assert topology_mesh("4x4x4", "32x2").describe() == {
        "mesh": "32x2",
        "topology": "tpuv4:4x4x4",
        "axis0": {
            "size": 32, "physical": ["x[0:2]", "y", "z"], "embedding": "split", "closed": True, "max_hops": 1,
        },
        "axis1": {"size": 2, "physical": ["x[::2]"], "embedding": "split", "closed": False, "max_hops": 2},
    }


# --- overrides and errors --------------------------------------------------------------------------


def test_axis_map_override(topology_mesh) -> None:
    m = topology_mesh("4x4x16", "16x16", "z,x*y")
    check_mapping(m)
    assert [a.physical for a in m.axes] == [("z",), ("x", "y")]
    assert [a.embedding for a in m.axes] == ["wrapped ring", "snake"]
    m = topology_mesh("4x4x4", "64x1", "z*y*x,1")
    check_mapping(m)
    assert m.axes[0].physical == ("z", "y", "x")
    assert m.axes[0].groups[0].members[:4] == (0, 16, 32, 48)


def test_axis_map_split_round_trips_describe(topology_mesh) -> None:
    auto = topology_mesh("4x8x8", "16x16")
    labels = [a.describe()["physical"] for a in auto.axes]
    m = topology_mesh("4x8x8", "16x16", ",".join("*".join(p) for p in labels))
    check_mapping(m)
    assert m.describe() == auto.describe()
    assert np.array_equal(m.chip_grid, auto.chip_grid)


def test_axis_map_may_name_size_one_axes(topology_mesh) -> None:
    m = topology_mesh("1x4x4", "4x4", "x*y,z")
    assert [a.physical for a in m.axes] == [("y",), ("z",)]


@pytest.mark.parametrize(
    ("spec", "mesh", "axis_map", "message"),
    [
        ("4x4x16", "16x16", "x,z", "--axis-map 'x,z' does not cover physical axis y (size 4)"),
        ("4x4x16", "16x16", "x*x,y*z", "--axis-map 'x*x,y*z' uses physical axis x more than once"),
        (
            "4x4x16", "16x16", "x*w,y*z",
            "--axis-map 'x*w,y*z' names unknown axis 'w'; topology 'tpuv4:4x4x16' has axes x, y, z",
        ),
        ("4x4x16", "16x16", "x*y*z", "--axis-map 'x*y*z' must have exactly two parts separated by one comma"),
        ("4x4x16", "16x16", "x*y,z,1", "--axis-map 'x*y,z,1' must have exactly two parts"),
        ("4x4x16", "16x16", "x+y,z", "--axis-map 'x+y,z': cannot parse 'x+y'"),
        ("4x4x16", "16x16", "x*y,", "--axis-map 'x*y,': cannot parse ''"),
        ("4x4x16", "64x4", "x*y,z", "--axis-map 'x*y,z' gives a 16x16 mesh but the requested mesh is 64x4"),
        ("4x8x8", "16x16", "x[0:3]*y,x[::3]*z", "--axis-map 'x[0:3]*y,x[::3]*z': 'x[0:3]' needs a block"),
        ("4x8x8", "16x16", "x[0:2]*y,z", "--axis-map 'x[0:2]*y,z' splits physical axis x but does not"),
        ("4x8x8", "16x16", "y[0:2]*x,y[::4]*z", "--axis-map 'y[0:2]*x,y[::4]*z' splits physical axis y"),
        ("4x8x8", "16x16", "x[0:2]*y,x*z", "--axis-map 'x[0:2]*y,x*z' uses physical axis x more than once"),
    ],
)
def test_axis_map_errors(topology_mesh, spec: str, mesh: str, axis_map: str, message: str) -> None:
    with pytest.raises(TopologyError) as info:
        topology_mesh(spec, mesh, axis_map)
    assert str(info.value).startswith(message)


def test_mesh_size_mismatch(topology_mesh) -> None:
    with pytest.raises(TopologyError) as info:
        topology_mesh("4x4x16", "8x8")
    assert str(info.value) == (
        "mesh '8x8' has 64 chips but topology 'tpuv4:4x4x16' has 256; choose R and C with R*C = 256"
    )


def test_unmappable_mesh(topology_mesh) -> None:
    with pytest.raises(TopologyError) as info:
        topology_mesh("mesh:6x6", "9x4")
    assert str(info.value).startswith("mesh '9x4' cannot be mapped onto topology 'mesh:6x6'")
    assert info.value.suggestion is not None and "--axis-map" in info.value.suggestion


@pytest.mark.parametrize(
    ("text", "shape"), [("16x16", (16, 16)), ("8", (8, 1)), (" 4x2 ", (4, 2)), ("1x1", (1, 1))]
)
def test_parse_mesh(text: str, shape: tuple[int, int]) -> None:
    assert parse_mesh(text) == shape


@pytest.mark.parametrize("text", ["16x", "0x4", "4x0", "4x4x4", "abc", "", "16X16"])
def test_parse_mesh_errors(text: str) -> None:
    with pytest.raises(TopologyError) as info:
        parse_mesh(text)
    assert str(info.value).startswith(f"cannot parse mesh {text!r}; expected 'RxC'")


def test_map_mesh_rejects_bad_shape() -> None:
    with pytest.raises(TopologyError, match="mesh rows 0 must be an integer >= 1"):
        map_mesh(parse_topology("4x4x4"), 0, 64)


# --- abstract mesh ---------------------------------------------------------------------------------


def test_abstract_mesh() -> None:
    m = abstract_mesh(2, 3)
    assert m.topology is None
    assert m.chip_grid.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert m.describe() == {
        "mesh": "2x3",
        "topology": "abstract",
        "axis0": {"size": 2, "physical": [], "embedding": "abstract ring", "closed": True, "max_hops": 0},
        "axis1": {"size": 3, "physical": [], "embedding": "abstract ring", "closed": True, "max_hops": 0},
    }
    assert [g.members for g in m.axes[0].groups] == [(0, 3), (1, 4), (2, 5)]
    assert m.axes[1].groups[1] == RingEmbedding((3, 4, 5), True, ((), (), ()), ((), (), ()))
    assert m.group_of(0, 4) == (1, 1)
    assert m.axes[1].groups[0].route(0, 2) == ()
    single = abstract_mesh(1, 4)
    assert single.axes[0].embedding == "single"
    assert single.axes[0].groups[2].fwd_routes == ()


# --- ring orders -----------------------------------------------------------------------------------


def test_snake_path_is_one_step_per_move() -> None:
    path = snake_path([3, 2, 2])
    assert path[:4] == [(0, 0, 0), (1, 0, 0), (2, 0, 0), (2, 1, 0)]
    assert sorted(path) == sorted(itertools.product(range(3), range(2), range(2)))
    assert all(sum(abs(a - b) for a, b in zip(p, q, strict=True)) == 1 for p, q in itertools.pairwise(path))


@pytest.mark.parametrize("lengths", [(2, 2), (4, 4), (3, 4), (4, 3), (3, 2, 3), (5, 3, 2), (2, 2, 2, 2)])
def test_ring_order_even_grids_close_in_one_step(lengths: tuple[int, ...]) -> None:
    order = ring_order(lengths, [False] * len(lengths), [n - 1 for n in lengths])
    assert order[0] == (0,) * len(lengths)
    assert sorted(order) == sorted(itertools.product(*(range(n) for n in lengths)))
    closed = [*order, order[0]]
    assert all(sum(abs(a - b) for a, b in zip(p, q, strict=True)) == 1 for p, q in itertools.pairwise(closed))


# --- property --------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(kind=st.sampled_from(["torus", "mesh"]), dims=st.lists(st.integers(1, 6), min_size=1, max_size=3))
@pytest.mark.slow
def test_every_factorization_maps_to_a_valid_bijection(kind: str, dims: list[int]) -> None:
    topo = generic_topology(kind, dims)  # type: ignore[arg-type]
    sizes = [d for d in dims if d > 1]
    chips = topo.num_chips
    for rows in (r for r in range(1, chips + 1) if chips % r == 0):
        cols = chips // rows
        subsets = (s for k in range(len(sizes) + 1) for s in itertools.combinations(sizes, k))
        whole_fits = any(math.prod(subset) == rows for subset in subsets)
        try:
            mapping = map_mesh(topo, rows, cols)
        except TopologyError:
            assert not whole_fits, (dims, rows, cols)
            continue
        check_mapping(mapping)
        assert (mapping.axes[0].embedding == "split") == (not whole_fits)

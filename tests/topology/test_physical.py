"""Physical topologies: link counts, numbering, wraparound, TPUv4 slice rules, parsing and routing."""

from __future__ import annotations

import ast
import pathlib

import numpy as np
import pytest

from tpusim.errors import TopologyError, UserError
from tpusim.topology import (
    DEFAULT_TPUV4_SLICES,
    PhysicalTopology,
    default_tpuv4_slice,
    generic_topology,
    parse_topology,
    tpuv4_slice,
)

# --- link counts and wraparound -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "links", "wrap"),
    [
        ("torus:16x16", 16 * 16 * 4, (True, True)),
        ("mesh:4x4", 2 * (3 * 4) * 2, (False, False)),
        ("4x4x4", 64 * 6, (True, True, True)),
        # x and y: one link each way per pair (2*4 pairs each); z: a 4-chip line in each of 4 columns.
        ("2x2x4", 2 * (8 * 2) + 4 * 3 * 2, (False, False, False)),
        ("2x4x4", 16 * 2 + 2 * (8 * 3 * 2), (False, False, False)),
        ("torus:2x2", 2 * (2 * 2), (False, False)),
        ("torus:2x3", 3 * 2 + 2 * 3 * 2, (False, True)),
        ("mesh:1x4", 3 * 2, (False, False)),
        ("torus:1", 0, (False,)),
        ("4x4x8", 128 * 6, (True, True, True)),
    ],
)
def test_link_counts_and_wrap(spec: str, links: int, wrap: tuple[bool, ...]) -> None:
    topo = parse_topology(spec)
    assert topo.num_links == links
    assert topo.graph.number_of_edges() == links
    assert topo.wrap == wrap
    assert topo.graph.number_of_nodes() == topo.num_chips


def test_size_two_axis_has_one_link_each_way() -> None:
    topo = parse_topology("torus:2x5")
    assert topo.wrap == (False, True)
    for chip in range(topo.num_chips):
        x_links = [d for d in topo.graph.successors(chip) if topo.graph[chip][d]["axis"] == 0]
        assert len(x_links) == 1
    assert topo.neighbor(0, 0, +1) == 1
    assert topo.neighbor(0, 0, -1) is None
    assert topo.neighbor(1, 0, -1) == 0
    assert topo.neighbor(1, 0, +1) is None


def test_degree_on_wrapped_torus() -> None:
    topo = parse_topology("torus:16x16")
    assert {topo.graph.out_degree(c) for c in range(topo.num_chips)} == {4}
    assert {topo.graph.in_degree(c) for c in range(topo.num_chips)} == {4}


def test_link_ids_are_deterministic_and_match_graph() -> None:
    topo = parse_topology("mesh:4x4")
    # chip 0: +x (0->1), +y (0->4); chip 1: +x (1->2), -x (1->0), +y (1->5)
    assert topo.link_src[:5].tolist() == [0, 0, 1, 1, 1]
    assert topo.link_dst[:5].tolist() == [1, 4, 2, 0, 5]
    assert topo.link_axis[:5].tolist() == [0, 1, 0, 0, 1]
    assert topo.link_sign[:5].tolist() == [1, 1, 1, -1, 1]
    for link in range(topo.num_links):
        src, dst = int(topo.link_src[link]), int(topo.link_dst[link])
        data = topo.graph[src][dst]
        assert data == {"link": link, "axis": int(topo.link_axis[link]), "sign": int(topo.link_sign[link])}
        assert topo.link_id(src, dst) == link
    assert parse_topology("mesh:4x4").link_dst.tolist() == topo.link_dst.tolist()


def test_link_arrays_are_read_only() -> None:
    topo = parse_topology("torus:4x4")
    with pytest.raises(ValueError):
        topo.link_src[0] = 5


# --- numbering, neighbours, routes -----------------------------------------------------------------


def test_chip_numbering_row_major_axis0_fastest() -> None:
    topo = parse_topology("4x4x16")
    assert topo.chip_at((1, 2, 3)) == 1 + 4 * (2 + 4 * 3)
    assert topo.coord(57) == (1, 2, 3)
    assert topo.graph.nodes[57]["coord"] == (1, 2, 3)
    assert topo.axis_names == ("x", "y", "z")
    assert all(topo.chip_at(topo.coord(c)) == c for c in range(topo.num_chips))


def test_chip_at_wraps_only_where_wrapped() -> None:
    torus = parse_topology("torus:4x4")
    assert torus.chip_at((-1, 4)) == 3
    mesh = parse_topology("mesh:4x4")
    with pytest.raises(TopologyError, match=r"coordinate \(4, 0\) is outside topology 'mesh:4x4'"):
        mesh.chip_at((4, 0))
    with pytest.raises(TopologyError, match="has 3 axes"):
        mesh.chip_at((0, 0, 0))


def test_axis_names_beyond_three_axes() -> None:
    assert generic_topology("torus", (2, 2, 2, 3)).axis_names == ("a0", "a1", "a2", "a3")


def test_neighbors() -> None:
    torus = parse_topology("torus:4x4")
    assert torus.neighbor(0, 0, -1) == 3
    assert torus.neighbor(0, 1, -1) == 12
    mesh = parse_topology("mesh:4x4")
    assert mesh.neighbor(0, 0, -1) is None
    assert mesh.neighbor(0, 1, +1) == 4
    assert parse_topology("mesh:1x4").neighbor(0, 0, +1) is None
    with pytest.raises(TopologyError, match="sign 2 must be"):
        mesh.neighbor(0, 0, 2)
    with pytest.raises(TopologyError, match="axis 2 is not an axis"):
        mesh.neighbor(0, 2, 1)


def _walk(topo: PhysicalTopology, links: tuple[int, ...]) -> list[int]:
    chips = [int(topo.link_src[links[0]])]
    for link in links:
        assert int(topo.link_src[link]) == chips[-1]
        chips.append(int(topo.link_dst[link]))
    return chips


def test_route_takes_shorter_way_round_and_ties_go_plus() -> None:
    ring = parse_topology("torus:8")
    assert _walk(ring, ring.route(0, 5)) == [0, 7, 6, 5]
    assert _walk(ring, ring.route(0, 4)) == [0, 1, 2, 3, 4]
    assert _walk(ring, ring.route(4, 0)) == [4, 5, 6, 7, 0]
    assert ring.route(3, 3) == ()
    line = parse_topology("mesh:8")
    assert _walk(line, line.route(0, 5)) == [0, 1, 2, 3, 4, 5]
    assert _walk(line, line.route(7, 1)) == [7, 6, 5, 4, 3, 2, 1]


def test_route_is_dimension_ordered() -> None:
    topo = parse_topology("torus:4x4")
    assert _walk(topo, topo.route(0, 5)) == [0, 1, 5]
    assert _walk(topo, topo.route(5, 0)) == [5, 4, 0]
    assert _walk(topo, topo.route(0, 15)) == [0, 3, 15]


def test_link_id_errors() -> None:
    topo = parse_topology("mesh:4x4")
    with pytest.raises(TopologyError, match="chips 0 and 5 are not adjacent in 'mesh:4x4'"):
        topo.link_id(0, 5)
    with pytest.raises(TopologyError) as info:
        topo.link_id(16, 0)
    assert str(info.value) == "chip 16 is not in topology 'mesh:4x4'; valid chip ids are 0..15"


# --- TPUv4 slice rules -----------------------------------------------------------------------------


@pytest.mark.parametrize("spec", ["3x5x8", "2x4x6", "4x4x6", "2x2x8", "tpuv4:4x4x5"])
def test_illegal_slices_rejected_quoting_spec(spec: str) -> None:
    with pytest.raises(TopologyError) as info:
        parse_topology(spec)
    assert str(info.value) == (
        f"illegal TPUv4 slice {spec!r}: every side must be <= 4, or every side a multiple of 4 "
        "(e.g. 2x2x4, 4x4x8)"
    )
    assert isinstance(info.value, UserError)


@pytest.mark.parametrize(
    ("spec", "wrap"),
    [
        ("2x2x4", False),
        ("2x4x4", False),
        ("4x4x4", True),
        ("4x4x8", True),
        ("4x8x8", True),
        ("16x16x16", True),
        ("1x1x1", False),
        ("3x3x3", False),
        ("8x4x12", True),
    ],
)
def test_legal_slices_and_wrap(spec: str, wrap: bool) -> None:
    topo = parse_topology(spec)
    dims = tuple(int(d) for d in spec.split("x"))
    assert topo.dims == dims
    assert topo.name == f"tpuv4:{spec}"
    assert topo.wrap == tuple(wrap and d >= 3 for d in dims)


def test_slice_keeps_user_axis_order() -> None:
    topo = tpuv4_slice((16, 4, 4))
    assert topo.dims == (16, 4, 4)
    assert topo.name == "tpuv4:16x4x4"
    assert parse_topology("tpuv4:16x4x4").dims == (16, 4, 4)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("4x4", "TPUv4 slice '4x4' has 2 sides; a slice needs exactly 3"),
        ("0x4x4", "TPUv4 slice '0x4x4': every side must be an integer >= 1, got 0"),
        ("4x4x", "cannot parse topology '4x4x'; valid forms: a TPUv4 slice 'AxBxC'"),
        ("torus 4x4", "cannot parse topology 'torus 4x4'; valid forms"),
        ("ring:8", "topology 'ring:8' has unknown kind 'ring'; valid forms"),
        ("torus:2x2x2x2x2", "torus topology 'torus:2x2x2x2x2' has 5 axes; valid: 1 to 4 axes"),
        ("mesh:4x0", "mesh topology 'mesh:4x0': every side must be an integer >= 1, got 0"),
    ],
)
def test_parse_errors(spec: str, message: str) -> None:
    with pytest.raises(TopologyError) as info:
        parse_topology(spec)
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


def test_generic_topology_kinds() -> None:
    torus = generic_topology("torus", (16, 16))
    assert torus.name == "torus:16x16"
    assert torus.wrap == (True, True)
    mesh = parse_topology("mesh:4x4x2")
    assert mesh.name == "mesh:4x4x2"
    assert mesh.wrap == (False, False, False)
    with pytest.raises(TopologyError, match="unknown topology kind 'ring'; valid: torus, mesh"):
        generic_topology("ring", (4,))  # type: ignore[arg-type]


def test_tpuv4_slice_rejects_wrong_arity() -> None:
    with pytest.raises(TopologyError, match="TPUv4 slice '4x4x4x4' has 4 sides"):
        tpuv4_slice((4, 4, 4, 4))


# --- default slices --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("chips", "dims"),
    [
        (1, (1, 1, 1)),
        (2, (1, 1, 2)),
        (4, (1, 2, 2)),
        (8, (2, 2, 2)),
        (16, (2, 2, 4)),
        (32, (2, 4, 4)),
        (64, (4, 4, 4)),
        (128, (4, 4, 8)),
        (256, (4, 8, 8)),
        (512, (8, 8, 8)),
        (1024, (8, 8, 16)),
        (2048, (8, 16, 16)),
        (4096, (16, 16, 16)),
    ],
)
def test_default_slices(chips: int, dims: tuple[int, int, int]) -> None:
    topo = default_tpuv4_slice(chips)
    assert topo.dims == dims
    assert topo.num_chips == chips


def test_default_slice_unknown_count() -> None:
    with pytest.raises(TopologyError) as info:
        default_tpuv4_slice(96)
    assert str(info.value) == (
        "no default TPUv4 slice for 96 chips; valid counts: "
        "1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096"
    )
    assert info.value.suggestion is not None and "--topology" in info.value.suggestion
    assert len(DEFAULT_TPUV4_SLICES) == 13


def test_all_default_slices_are_legal() -> None:
    for dims in DEFAULT_TPUV4_SLICES.values():
        assert parse_topology("x".join(map(str, dims))).dims == dims


def test_wrapped_cube_every_chip_has_six_links() -> None:
    topo = parse_topology("4x4x4")
    counts = np.bincount(topo.link_src, minlength=topo.num_chips)
    assert counts.tolist() == [6] * 64


# --- layering --------------------------------------------------------------------------------------


def test_topology_imports_only_errors_and_units_from_tpusim() -> None:
    package = pathlib.Path(__file__).resolve().parents[2] / "tpusim" / "topology"
    allowed = {"tpusim.errors", "tpusim.units", "tpusim.limits"}  # leaf modules: they import only tpusim.errors
    for path in sorted(package.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] != "simpy", path
                if name.startswith("tpusim"):
                    assert name in allowed or name.startswith("tpusim.topology"), (path, name)


@pytest.mark.parametrize("spec", ["torus:16x16", "mesh:4x4", "4x4x4", "2x2x4", "2x4x4", "torus:2x3", "torus:3x5",
                                  "torus:4x6", "4x8x8",
                                  "mesh:1x4", "torus:1", "4x4x8t"])
def test_routes_of_many_pairs_are_each_pairs_route(spec: str) -> None:
    topology = parse_topology(spec)
    chips = np.arange(topology.num_chips)
    sources, targets = np.repeat(chips, len(chips)), np.tile(chips, len(chips))  # every ordered pair, a == b too
    expected = [topology.route(int(a), int(b)) for a, b in zip(sources, targets, strict=True)]
    assert topology.routes(sources, targets) == expected


def test_routes_refuse_a_chip_outside_the_topology() -> None:
    with pytest.raises(TopologyError, match="chip 16 is not in topology"):
        parse_topology("mesh:4x4").routes(np.array([0, 16]), np.array([1, 2]))


@pytest.mark.parametrize("spec", ["torus:16x16", "2x2x4", "torus:3x5", "4x4x8t"])
def test_link_ids_of_many_pairs_are_each_pairs_link(spec: str) -> None:
    topology = parse_topology(spec)
    sources, targets = topology.link_src.reshape(-1, 2), topology.link_dst.reshape(-1, 2)
    assert topology.link_ids(sources, targets).tolist() == [
        [topology.link_id(int(a), int(b)) for a, b in zip(row_a, row_b, strict=True)]
        for row_a, row_b in zip(sources, targets, strict=True)]


def test_link_ids_refuse_chips_that_no_link_joins() -> None:
    with pytest.raises(TopologyError, match="chips 0 and 5 are not adjacent"):
        parse_topology("mesh:4x4").link_ids(np.array([0, 0]), np.array([1, 5]))

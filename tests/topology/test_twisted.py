"""Twisted tori: the wiring rule as links, shortest routes over them, honest mappings and collectives on them."""

from __future__ import annotations

import json
from collections import Counter
from fractions import Fraction

import networkx as nx
import numpy as np
import pytest

from tpusim.cli.main import main
from tpusim.collectives.link_busy import LinkBusy
from tpusim.collectives.network import network_for
from tpusim.collectives.simulate import CollectiveResult, CollectiveSpec, simulate_collective, twin_time
from tpusim.errors import TopologyError
from tpusim.hardware import load_hardware
from tpusim.topology import PhysicalTopology, map_mesh, parse_topology, tpuv4_slice
from tpusim.topology.twisted import shortest_vectors
from tpusim.vocabulary import CollectiveOp

TPUV4 = load_hardware("tpuv4-wire")
SHARD = 1_000_000


def _wrap_links(topology: PhysicalTopology) -> dict[tuple[tuple[int, ...], int, int], tuple[int, ...]]:
    """(source coordinate, axis, sign) -> destination coordinate of every link that crosses a wraparound."""
    found = {}
    for link in range(topology.num_links):
        src, dst = int(topology.link_src[link]), int(topology.link_dst[link])
        axis, sign = int(topology.link_axis[link]), int(topology.link_sign[link])
        if topology.coords[dst, axis] - topology.coords[src, axis] != sign:
            found[(topology.coord(src), axis, sign)] = topology.coord(dst)
    return found


def _distances(topology: PhysicalTopology) -> tuple[int, int]:
    """(diameter, sum of hop counts over all ordered pairs), by BFS over the links."""
    lengths = [d for _, row in nx.all_pairs_shortest_path_length(topology.graph) for d in row.values()]
    return max(lengths), sum(lengths)


def test_spec_forms_name_and_twist() -> None:
    twisted = parse_topology("4x4x8t")
    assert twisted.name == "tpuv4:4x4x8 twisted"
    assert parse_topology("tpuv4:4x4x8t").name == twisted.name
    assert tpuv4_slice((4, 4, 8), twisted=True).name == twisted.name
    assert twisted.twisted and twisted.wrap == (True, True, True)
    assert twisted.twist == ((0, 0, 4), (0, 0, 4), (0, 0, 0))  # x and y land shifted by 4 along z
    assert parse_topology("4x8x8t").twist == ((0, 4, 4), (0, 0, 0), (0, 0, 0))  # x shifted along y and z
    assert parse_topology("8x4x4t").twist == ((0, 0, 0), (4, 0, 0), (4, 0, 0))
    assert [twisted.plain_wrap(a) for a in range(3)] == [False, False, True]
    plain = parse_topology("4x4x8")
    assert plain.twist is None and not plain.twisted and plain.name == "tpuv4:4x4x8"


@pytest.mark.parametrize("spec", ["4x4x8", "4x8x8", "8x4x4", "8x8x16"])
def test_same_links_as_the_plain_torus_but_rewired(spec: str) -> None:
    plain, twisted = parse_topology(spec), parse_topology(spec + "t")
    assert twisted.num_links == plain.num_links == 6 * plain.num_chips
    assert Counter(twisted.link_src.tolist()) == Counter(twisted.link_dst.tolist()) == Counter(
        {chip: 6 for chip in range(twisted.num_chips)})
    pairs = set(zip(twisted.link_src.tolist(), twisted.link_dst.tolist(), strict=True))
    assert len(pairs) == twisted.num_links and {(d, s) for s, d in pairs} == pairs  # every cable both ways
    assert np.array_equal(twisted.link_axis, plain.link_axis) and np.array_equal(twisted.link_sign, plain.link_sign)
    rewired = np.flatnonzero(twisted.link_dst != plain.link_dst)
    # only the wraparound links of the short axes moved
    assert set(twisted.link_axis[rewired].tolist()) == {a for a in range(3) if not twisted.plain_wrap(a)}


def test_every_wrap_link_of_4x4x8_lands_where_the_rule_says() -> None:
    topology = parse_topology("4x4x8t")
    expected = {}
    for y in range(4):
        for z in range(8):
            expected[((3, y, z), 0, +1)] = (0, y, (z + 4) % 8)
            expected[((0, y, z), 0, -1)] = (3, y, (z + 4) % 8)
    for x in range(4):
        for z in range(8):
            expected[((x, 3, z), 1, +1)] = (x, 0, (z + 4) % 8)
            expected[((x, 0, z), 1, -1)] = (x, 3, (z + 4) % 8)
        for y in range(4):
            expected[((x, y, 7), 2, +1)] = (x, y, 0)  # the long axis wraps plainly
            expected[((x, y, 0), 2, -1)] = (x, y, 7)
    assert _wrap_links(topology) == expected
    assert len(expected) == 2 * (32 + 32 + 16)  # both directions of the x, y and z wraparound cables
    at = topology.chip_at
    assert topology.coord(topology.neighbor(at((3, 0, 0)), 0, +1)) == (0, 0, 4)
    assert topology.coord(topology.neighbor(at((0, 0, 5)), 1, -1)) == (0, 3, 1)
    assert topology.coord(topology.neighbor(at((1, 3, 6)), 1, +1)) == (1, 0, 2)
    assert topology.coord(topology.neighbor(at((2, 1, 7)), 2, +1)) == (2, 1, 0)
    link = topology.link_id(at((3, 0, 0)), at((0, 0, 4)))
    assert (topology.link_axis[link], topology.link_sign[link]) == (0, +1)
    with pytest.raises(TopologyError, match="not adjacent"):
        topology.link_id(at((3, 0, 0)), at((0, 0, 0)))


def test_4x8x8_short_axis_lands_shifted_along_both_long_axes() -> None:
    topology = parse_topology("4x8x8t")
    wraps = _wrap_links(topology)
    assert wraps[((3, 0, 0), 0, +1)] == (0, 4, 4)
    assert wraps[((3, 6, 1), 0, +1)] == (0, 2, 5)
    assert wraps[((0, 6, 1), 0, -1)] == (3, 2, 5)
    assert wraps[((2, 7, 3), 1, +1)] == (2, 0, 3)
    assert wraps[((2, 5, 0), 2, -1)] == (2, 5, 7)


def test_chip_at_follows_the_links() -> None:
    topology = parse_topology("4x4x8t")
    for chip in range(topology.num_chips):
        coord = np.array(topology.coord(chip))
        assert topology.chip_at(tuple(coord)) == chip
        for axis in range(3):
            step = np.eye(3, dtype=np.int64)[axis]
            assert topology.chip_at(tuple(coord + step)) == topology.neighbor(chip, axis, +1)
            assert topology.chip_at(tuple(coord - step)) == topology.neighbor(chip, axis, -1)


@pytest.mark.parametrize(("spec", "diameter", "total"), [
    ("4x4x8", 8, 65536), ("4x4x8t", 6, 56320), ("4x8x8", 10, 327680), ("4x8x8t", 6, 282624),
])
def test_diameter_and_average_hops(spec: str, diameter: int, total: int) -> None:
    topology = parse_topology(spec)
    assert _distances(topology) == (diameter, total)
    pairs = topology.num_chips * (topology.num_chips - 1)
    average = {"4x4x8": Fraction(65536, 16256), "4x4x8t": Fraction(56320, 16256),
               "4x8x8": Fraction(327680, 65280), "4x8x8t": Fraction(282624, 65280)}[spec]
    assert Fraction(total, pairs) == average
    assert round(float(average), 4) == {"4x4x8": 4.0315, "4x4x8t": 3.4646, "4x8x8": 5.0196, "4x8x8t": 4.3294}[spec]


@pytest.mark.parametrize("spec", ["4x4x8t", "8x4x4t", "8x8x4t"])
@pytest.mark.slow
def test_routes_are_shortest_paths_over_the_real_links(spec: str) -> None:
    topology = parse_topology(spec)
    distance = dict(nx.all_pairs_shortest_path_length(topology.graph))
    for src in range(topology.num_chips):
        for dst in range(topology.num_chips):
            route = topology.route(src, dst)
            chip = src
            for link in route:
                assert topology.link_src[link] == chip
                chip = int(topology.link_dst[link])
            assert chip == dst and len(route) == distance[src][dst]


def test_route_tie_break() -> None:
    """Of the shortest displacement vectors the lexicographically greatest, walked axis 0 first: (0,0,0) -> (0,0,4)
    is four hops along z, or along x or y through a twisted wraparound; +x wins."""
    topology = parse_topology("4x4x8t")
    at = topology.chip_at
    path = [topology.coord(int(topology.link_dst[link])) for link in topology.route(at((0, 0, 0)), at((0, 0, 4)))]
    assert path == [(1, 0, 0), (2, 0, 0), (3, 0, 0), (0, 0, 4)]


def test_the_tie_break_is_the_plain_torus_rule_on_a_plain_torus() -> None:
    """Run on a plain torus, the twisted machinery picks the vector the dimension-ordered rule walks."""
    plain = parse_topology("4x4x8")
    vectors = shortest_vectors(plain.num_chips, plain.link_src, plain.link_dst, plain.link_axis, plain.link_sign, 3)
    for dst in range(plain.num_chips):
        walked = [0, 0, 0]
        for link in plain.route(0, dst):
            walked[int(plain.link_axis[link])] += int(plain.link_sign[link])
        assert tuple(walked) == vectors[dst]


def test_a_twisted_short_axis_is_a_line_and_the_long_axis_a_ring() -> None:
    topology = parse_topology("4x4x8t")
    lines = map_mesh(topology, 4, 32)
    assert lines.describe()["axis0"] == {"size": 4, "physical": ["x"], "embedding": "line", "closed": False,
                                         "max_hops": 1}
    assert lines.describe()["axis1"] == {"size": 32, "physical": ["y", "z"], "embedding": "snake", "closed": True,
                                         "max_hops": 1}
    assert not lines.axes[0].pieces[0].is_cyclic(topology)
    rings = map_mesh(topology, 16, 8)
    assert rings.describe()["axis1"] == {"size": 8, "physical": ["z"], "embedding": "wrapped ring", "closed": True,
                                         "max_hops": 1}
    # the snake through x and y closes in one hop without any wraparound link
    assert rings.describe()["axis0"]["embedding"] == "snake" and rings.axes[0].max_hops == 1
    for group in (*lines.axes[0].groups, *rings.axes[0].groups, *rings.axes[1].groups):
        for rank, route in enumerate(group.fwd_routes):
            assert route == topology.route(group.members[rank], group.members[(rank + 1) % group.size])


def test_a_block_of_a_twisted_axis_is_multi_hop_with_no_twin_and_no_symmetric_run() -> None:
    mapping = map_mesh(parse_topology("8x8x16t"), 2, 512)
    axis = mapping.describe()["axis1"]
    assert (axis["physical"], axis["embedding"], axis["max_hops"]) == (["x[::2]", "y", "z"], "split", 2)
    assert not mapping.axes[1].pieces[0].is_cyclic(mapping.topology)  # x[::2] would close on a plain 8x8x16
    plain = parse_topology("8x8x16")
    assert map_mesh(plain, 2, 512).axes[1].pieces[0].is_cyclic(plain)
    assert twin_time(CollectiveSpec(CollectiveOp.ALL_GATHER, 1, 512 * SHARD), network_for(TPUV4, mapping)) is None
    assert network_for(TPUV4, mapping).asymmetry(overrides=False) is not None


def _all_gather(topology: PhysicalTopology, rows: int, cols: int, axis: int) -> tuple[CollectiveResult, LinkBusy]:
    """An all-gather of one SHARD per rank over ``axis`` of a rows x cols mesh, and its links' busy seconds."""
    busy = LinkBusy()
    size = (rows, cols)[axis]
    result = simulate_collective(CollectiveSpec(CollectiveOp.ALL_GATHER, axis, size * SHARD),
                                 network_for(TPUV4, map_mesh(topology, rows, cols)), link_busy=busy)
    return result, busy


def test_ring_all_gather_on_the_long_axis_conserves_bytes_on_z_links_only() -> None:
    topology = parse_topology("4x4x8t")
    result, busy = _all_gather(topology, 16, 8, 1)
    assert result.bytes_sent == 16 * 8 * 7 * SHARD  # every rank's shard reaches the 7 others, one hop at a time
    assert result.max_link_bytes == 7 * SHARD / 2  # halves both ways round the ring
    assert result.time_s == pytest.approx(result.analytic_time_s, rel=1e-9)
    assert busy.seconds is not None
    on_z = topology.link_axis == 2
    assert np.all(busy.seconds[on_z] == busy.seconds[on_z][0]) and busy.seconds[on_z][0] > 0
    assert np.all(busy.seconds[~on_z] == 0)


def test_line_all_gather_on_a_twisted_axis_never_uses_the_twisted_links() -> None:
    topology = parse_topology("4x4x8t")
    result, busy = _all_gather(topology, 4, 32, 0)
    assert result.bytes_sent == 32 * 4 * 3 * SHARD  # on a line each shard still crosses 3 links
    assert result.max_link_bytes == 3 * SHARD  # whole shards relayed both ways: the end links carry three
    assert result.time_s == pytest.approx(result.analytic_time_s, rel=1e-9)
    assert busy.seconds is not None
    wraps = np.array([link for link in range(topology.num_links)
                      if topology.coords[topology.link_dst[link], 0] - topology.coords[topology.link_src[link], 0]
                      != topology.link_sign[link]])
    assert np.all(busy.seconds[wraps] == 0)
    assert np.all(busy.seconds[topology.link_axis != 0] == 0)
    reason = network_for(TPUV4, map_mesh(topology, 4, 32)).asymmetry(overrides=False)
    assert reason == "logical axis 0 is a line (no wraparound): ranks finish at different times"


def test_cli_collective_on_a_twisted_slice(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["collective", "--hardware", "tpuv4-wire", "--topology", "tpuv4:4x4x8t", "--mesh", "16x8", "--axis",
            "1", "--op", "all-gather", "--bytes", "8MB", "--json"]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["mapping"]["topology"] == "tpuv4:4x4x8 twisted"
    assert result["bytes_sent"] == 16 * 8 * 7 * SHARD


@pytest.mark.parametrize(("spec", "needle"), [
    ("4x4x6t", "illegal twisted TPUv4 slice '4x4x6t': a twisted torus needs sides k x k x 2k or k x 2k x 2k"),
    ("4x4x4t", "illegal twisted TPUv4 slice '4x4x4t'"),
    ("4x4x16t", "illegal twisted TPUv4 slice '4x4x16t'"),
    ("2x2x4t", "k a multiple of 4"),
    ("torus:4x4x8t", "topology 'torus:4x4x8t': 'torus:' topologies wrap plainly"),
    ("16x16x32t", "TPUv4 slice '16x16x32t' has 8192 chips"),
])
def test_bad_twisted_specs_are_one_line_exit_2(capsys: pytest.CaptureFixture[str], spec: str, needle: str) -> None:
    argv = ["collective", "--hardware", "tpuv4", "--topology", spec, "--mesh", "8x16", "--axis", "0",
            "--op", "all-gather", "--bytes", "64MB", "--json"]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.splitlines()) == 1 and needle in err and "Traceback" not in err

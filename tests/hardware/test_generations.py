"""TPU generations after v4: each profile's slice rules, their wraparound, and runs on their slices.

The published constants themselves are inputs (their sources are in docs/hardware-profiles.md); these tests check
what the simulator does with them: which shapes a generation accepts and where its links wrap, the default slice
per chip count, errors that quote the rule, and collectives on the new networks against their closed forms.
"""

from __future__ import annotations

import math

import pytest

import tpusim.api as tp
from tpusim.cli.main import main
from tpusim.errors import TopologyError
from tpusim.hardware import load_hardware
from tpusim.topology import default_slice, parse_topology
from tpusim.topology.slices import TPUV4_RULES, describe_rules

TWO_D = ["tpuv5e", "tpuv6e"]


def _rules(name: str):  # type: ignore[no-untyped-def]
    profile = load_hardware(name)
    return profile.slices or TPUV4_RULES


@pytest.mark.parametrize("name", TWO_D)
def test_2d_generations_wrap_only_a_full_pod_side(name: str) -> None:
    rules = _rules(name)
    assert parse_topology("16x16", rules).wrap == (True, True)
    assert parse_topology("8x16", rules).wrap == (False, True)
    assert parse_topology("16x8", rules).wrap == (True, False)
    small = parse_topology("4x8", rules)
    assert small.wrap == (False, False) and small.name == f"{name}:4x8"
    # a mesh without wraparound: 2 * (3*8 + 4*7) directed links
    assert small.num_links == 2 * (3 * 8 + 4 * 7)


@pytest.mark.parametrize("name", TWO_D)
@pytest.mark.parametrize("spec", ["4x4x4", "2x16", "16x32", "3x3"])
def test_2d_generations_refuse_unpublished_shapes_quoting_the_rule(name: str, spec: str) -> None:
    with pytest.raises(TopologyError) as info:
        parse_topology(spec, _rules(name))
    assert str(info.value).endswith(describe_rules(_rules(name))) or "sides; a slice needs exactly 2" in str(
        info.value)
    assert repr(spec) in str(info.value)


def test_a_generation_prefix_must_match_the_profile() -> None:
    rules = _rules("tpuv5e")
    assert parse_topology("tpuv5e:8x8", rules).name == "tpuv5e:8x8"
    with pytest.raises(TopologyError, match="unknown kind 'tpuv4'"):
        parse_topology("tpuv4:4x4x4", rules)
    # generic tori stay available on every generation
    assert parse_topology("torus:4x4", rules).wrap == (True, True)


def test_v5p_cubes_and_its_largest_slice() -> None:
    rules = _rules("tpuv5p")
    big = parse_topology("16x16x24", rules)
    assert big.num_chips == 6144 and big.wrap == (True, True, True) and big.name == "tpuv5p:16x16x24"
    assert parse_topology("2x4x4", rules).wrap == (False, False, False)
    with pytest.raises(TopologyError) as info:
        parse_topology("16x16x32", rules)
    assert str(info.value) == (
        "TPUv5p slice '16x16x32' has 8192 chips; the largest TPUv5p slice has 6144 (TPUv5p slices have 3 sides, "
        "every side <= 4 or every side a multiple of 4, at most 6144 chips)")


def test_v4_pod_is_the_largest_v4_slice() -> None:
    assert parse_topology("16x16x16").num_chips == 4096
    with pytest.raises(TopologyError, match="the largest TPUv4 slice has 4096"):
        parse_topology("16x16x32")


@pytest.mark.parametrize("name", ["tpuv4", "tpuv5e", "tpuv5p", "tpuv6e"])
def test_default_slices_have_their_chip_count(name: str) -> None:
    rules = _rules(name)
    for chips, shape in rules.defaults:
        topology = default_slice(chips, rules)
        assert topology.num_chips == chips
        assert topology.name == f"{rules.generation}:{shape}"
        assert math.prod(topology.dims) == chips


def test_no_default_slice_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["step", "--model", "gpt3-175b", "--hardware", "tpuv5e", "--chips", "512", "--mesh", "32x16",
                   "--algorithm", "meshslice", "--ignore-memory"])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2
    assert err[0] == "no default TPUv5e slice for 512 chips; valid counts: 1, 4, 8, 16, 32, 64, 128, 256"


def test_cli_quotes_the_rule_of_the_profile(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["collective", "--hardware", "tpuv6e", "--topology", "4x4x4", "--mesh", "8x8", "--axis", "0",
                   "--op", "all-gather", "--bytes", "1MB"])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2
    assert err[0] == ("TPUv6e slice '4x4x4' has 3 sides; a slice needs exactly 2 (AxB, e.g. 8x16); use "
                      "'torus:...' or 'mesh:...' for other shapes")


@pytest.mark.parametrize("name, topology, mesh", [
    ("tpuv5e", "16x16", "16x16"), ("tpuv6e", "8x16", "8x16"), ("tpuv5p", "4x4x8", "16x8"),
])
@pytest.mark.parametrize("op", ["all-gather", "reduce-scatter"])
def test_collectives_on_new_generations_equal_their_twins(name: str, topology: str, mesh: str, op: str) -> None:
    result = tp.collective(hardware=name, topology=topology, mesh=mesh, axis=1, op=op, bytes="16MB")
    assert result.analytic_time_s is not None
    assert result.time_s == pytest.approx(result.analytic_time_s, rel=1e-9)


@pytest.mark.slow
def test_faster_links_of_v6e_show_in_a_collective() -> None:
    """The same shape on v5e and v6e: v6e's links are twice as fast one way, so the wire part halves."""
    v5e = tp.collective(hardware="tpuv5e", topology="16x16", mesh="16x16", axis=1, op="all-gather",
                        bytes="64MB", scale={"alpha": 0, "lambda": 0, "step": 0})
    v6e = tp.collective(hardware="tpuv6e", topology="16x16", mesh="16x16", axis=1, op="all-gather",
                        bytes="64MB", scale={"alpha": 0, "lambda": 0, "step": 0})
    assert v5e.time_s == pytest.approx(2 * v6e.time_s, rel=1e-9)

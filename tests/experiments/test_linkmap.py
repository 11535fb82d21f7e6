"""Link maps: the busiest-link lines, the PNG they come with, input checks and the atomic write."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tpusim.experiments.linkmap import busiest_links, draw_link_map
from tpusim.topology import parse_topology
from tpusim.topology.physical import PhysicalTopology

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _endpoints(topology: PhysicalTopology, link: int) -> str:
    src = int(topology.link_src[link])
    dst = int(topology.link_dst[link])
    sign = "+" if topology.link_sign[link] > 0 else "-"
    name = topology.axis_names[int(topology.link_axis[link])]
    src_at = ",".join(map(str, topology.coord(src)))
    dst_at = ",".join(map(str, topology.coord(dst)))
    return f"chip {src} ({src_at}) {sign}{name} -> chip {dst} ({dst_at})"


def _is_png(path: Path) -> bool:
    return path.read_bytes()[:8] == PNG_SIGNATURE


def test_busiest_lines_name_the_hottest_links_in_order(tmp_path: Path) -> None:
    topology = parse_topology("4x4x4")
    utilisation = np.zeros(topology.num_links)
    utilisation[7] = 0.9
    utilisation[3] = 0.5
    lines = draw_link_map(topology, utilisation, tmp_path / "map.png", title="two busy links")
    assert len(lines) == 2  # idle links are never listed as "busiest"
    assert lines[0].startswith("link 7: ")
    assert _endpoints(topology, 7) in lines[0]
    assert lines[0].endswith("90.0% busy")
    assert lines[1].startswith("link 3: ")
    assert _endpoints(topology, 3) in lines[1]
    assert lines[1].endswith("50.0% busy")


def test_top_limits_the_lines_and_ties_go_by_link_id() -> None:
    topology = parse_topology("torus:8x8")
    utilisation = np.full(topology.num_links, 0.25)
    utilisation[[40, 10, 200]] = 0.75
    lines = busiest_links(topology, utilisation, top=4)
    assert [line.split(":")[0] for line in lines] == ["link 10", "link 40", "link 200", "link 0"]
    assert busiest_links(topology, utilisation, top=0) == []


def test_a_wraparound_link_is_named_as_one() -> None:
    topology = parse_topology("torus:8x8")
    wrap = next(
        link for link in range(topology.num_links)
        if topology.link_sign[link] > 0 and topology.coord(int(topology.link_src[link]))[0] == 7
        and topology.link_axis[link] == 0
    )
    utilisation = np.zeros(topology.num_links)
    utilisation[wrap] = 1.0
    (line,) = busiest_links(topology, utilisation)
    assert "+x" in line and "(wraparound)" in line
    assert line.endswith("100.0% busy")


@pytest.mark.parametrize("spec", ["4x4x4", "torus:8x8", "mesh:4x4", "torus:16"])
def test_a_valid_png_is_written_and_nothing_else(tmp_path: Path, spec: str) -> None:
    topology = parse_topology(spec)
    utilisation = np.linspace(0.0, 1.0, topology.num_links)
    target = tmp_path / "map.png"
    lines = draw_link_map(topology, utilisation, target, title=spec, top=3)
    assert _is_png(target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["map.png"]
    assert len(lines) == 3 and lines[0].endswith("100.0% busy")


@pytest.mark.parametrize("length", [0, 383, 385])
def test_wrong_length_is_refused_naming_the_expected_length(tmp_path: Path, length: int) -> None:
    topology = parse_topology("4x4x4")
    with pytest.raises(ValueError, match="384"):
        draw_link_map(topology, np.zeros(length), tmp_path / "map.png", title="bad")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("bad", [-0.1, float("nan"), float("inf")])
def test_negative_or_non_finite_values_are_refused(tmp_path: Path, bad: float) -> None:
    topology = parse_topology("mesh:4x4")
    utilisation = np.zeros(topology.num_links)
    utilisation[5] = bad
    with pytest.raises(ValueError, match="link 5"):
        draw_link_map(topology, utilisation, tmp_path / "map.png", title="bad")
    assert list(tmp_path.iterdir()) == []


def test_a_missing_folder_is_named_and_nothing_is_left_behind(tmp_path: Path) -> None:
    topology = parse_topology("mesh:4x4")
    folder = tmp_path / "no-such-folder"
    with pytest.raises(FileNotFoundError, match="no-such-folder"):
        draw_link_map(topology, np.zeros(topology.num_links), folder / "map.png", title="nowhere")
    assert not folder.exists()
    assert list(tmp_path.iterdir()) == []


def test_a_failed_write_keeps_the_old_picture_and_no_temporary(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from matplotlib.figure import Figure

    topology = parse_topology("mesh:4x4")
    target = tmp_path / "map.png"
    draw_link_map(topology, np.zeros(topology.num_links), target, title="first")
    before = target.read_bytes()

    def broken_savefig(self: Figure, handle: object, **kwargs: object) -> None:
        handle.write(b"half a picture")  # type: ignore[attr-defined]
        raise OSError("disk full")

    monkeypatch.setattr(Figure, "savefig", broken_savefig)
    with pytest.raises(OSError, match="disk full"):
        draw_link_map(topology, np.ones(topology.num_links), target, title="second")
    assert target.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["map.png"]


def test_importing_the_module_does_not_import_matplotlib() -> None:
    code = "import sys, tpusim.experiments.linkmap; print('matplotlib' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


@pytest.mark.slow
def test_a_simulated_all_gather_lights_only_its_snake_ring(tmp_path: Path) -> None:
    from tpusim.collectives.call import CollectiveCall
    from tpusim.collectives.device import run_spmd
    from tpusim.collectives.network import network_for, place_mesh
    from tpusim.collectives.runtime import CollectiveRuntime
    from tpusim.engine.simulation import Simulation
    from tpusim.engine.tensor import Tensor
    from tpusim.hardware import load_hardware
    from tpusim.vocabulary import CollectiveOp

    hardware = load_hardware("tpuv4")
    mapping = place_mesh(hardware, 16, 4, topology="4x4x4")
    assert mapping.topology is not None
    sim = Simulation(network_for(hardware, mapping))
    network = network_for(hardware, mapping)
    runtime = CollectiveRuntime(sim, network)
    shard = Tensor((4_000_000,), "int8")

    def program(device):  # type: ignore[no-untyped-def]
        yield runtime.submit(device.chip_id, CollectiveCall(CollectiveOp.ALL_GATHER, 0, shard.nbytes), shard)

    run_spmd(sim, runtime, program, lambda device: ())
    assert sim.links is not None
    utilisation = sim.links.utilisation(sim.now)
    lines = draw_link_map(mapping.topology, utilisation, tmp_path / "allgather.png", title="all-gather", top=64)
    assert _is_png(tmp_path / "allgather.png")
    # Axis 0 of a 16x4 mesh snakes through x and y, so no z link carries anything.
    assert len(lines) == 64
    assert all(" +z " not in line and " -z " not in line for line in lines)


@pytest.mark.slow
def test_a_full_pod_renders(tmp_path: Path) -> None:
    topology = parse_topology("16x16x16")
    plane_zero_plus_x = (topology.link_axis == 0) & (topology.link_sign > 0) & (topology.link_src < 256)
    utilisation = np.where(plane_zero_plus_x, 0.8, 0.0)
    target = tmp_path / "pod.png"
    lines = draw_link_map(topology, utilisation, target, title="pod", top=5)
    assert _is_png(target)
    assert target.stat().st_size < 3_000_000
    assert len(lines) == 5
    assert all(" +x -> " in line and ",0) " in line and line.endswith("80.0% busy") for line in lines)

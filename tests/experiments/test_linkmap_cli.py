"""``--link-map FILE.png`` on ``collective``, ``gemm`` and ``step``: the busy array behind the picture, the busiest
links in the notes, symmetric runs filled in exactly, and paths refused before any simulation."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest

import tpusim.experiments.runners as runners
from tpusim.cli.main import main
from tpusim.collectives.call import CollectiveCall
from tpusim.collectives.device import Device, run_spmd
from tpusim.collectives.link_busy import LinkBusy, run_link_busy
from tpusim.collectives.network import network_for, place_mesh
from tpusim.collectives.runtime import CollectiveRuntime
from tpusim.config import PhysicalProfile
from tpusim.config.requests import CollectiveRequest, GemmRequest, StepRequest, parse_request
from tpusim.engine.context import Context
from tpusim.engine.simulation import Simulation
from tpusim.engine.tensor import Tensor
from tpusim.experiments.linkmap import busiest_links
from tpusim.hardware import load_hardware
from tpusim.topology.physical import PhysicalTopology
from tpusim.units import format_time
from tpusim.vocabulary import CollectiveOp

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
GROUP_BYTES = 64_000_000
ALL_GATHER = ["collective", "--hardware", "tpuv4", "--topology", "4x4x4", "--mesh", "16x4", "--op", "all-gather",
              "--axis", "0", "--bytes", "64MB"]
GEMM = ["gemm", "--hardware", "tpuv4", "--topology", "4x4x4", "--mesh", "16x4", "--algorithm", "meshslice",
        "--dataflow", "os", "--m", "4096", "--n", "4096", "--k", "4096"]
TINY_MODEL = """\
name: tiny
description: test model
layers: 6
hidden: 512
heads: 8
head_dim: 64
ffn: 2048
sequence: 64
vocabulary: 1000
"""


def _fields(argv: list[str]) -> dict[str, str]:
    """The request fields of a command line of ``--flag value`` pairs after the command."""
    return {flag[2:].replace("-", "_"): value for flag, value in zip(argv[1::2], argv[2::2], strict=True)}


def _run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict[str, Any]:
    code, out, err = _run(capsys, [*argv, "--json"])
    assert (code, err) == (0, "")
    payload: dict[str, Any] = json.loads(out)
    return payload


def _busiest_notes(notes: list[str]) -> list[str]:
    return [note.removeprefix("busiest ") for note in notes if note.startswith("busiest link ")]


def _snake_links(topology: PhysicalTopology, mesh: tuple[int, int], axis: int) -> set[int]:
    """Every directed link between ring neighbours of every group of ``axis`` (both ways round)."""
    mapping = place_mesh(load_hardware("tpuv4"), *mesh, topology=topology.name.split(":")[-1])
    return {link for group in mapping.axes[axis].groups
            for route in (*group.fwd_routes, *group.bwd_routes) for link in route}


@pytest.mark.parametrize("multi_axis", ["snake", "dimensional"])
@pytest.mark.slow
def test_an_all_gather_map_names_the_busiest_links_of_its_busy_array(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], multi_axis: str) -> None:
    argv = [*ALL_GATHER, "--multi-axis", multi_axis]
    target = tmp_path / "allgather.png"
    result = _json(capsys, [*argv, "--link-map", str(target)])
    assert target.read_bytes()[:8] == PNG_SIGNATURE
    assert sorted(p.name for p in tmp_path.iterdir()) == ["allgather.png"]

    link_busy = LinkBusy()
    request = cast(CollectiveRequest, parse_request(CollectiveRequest, _fields(argv)))
    again = runners.run_collective(request, Context(), link_busy=link_busy)
    assert again.time_s == result["time_s"]
    topology, seconds = link_busy.topology, link_busy.seconds
    assert topology is not None and seconds is not None and topology.name == "tpuv4:4x4x4"
    utilisation = seconds / result["time_s"]
    assert _busiest_notes(result["notes"]) == busiest_links(topology, utilisation, top=5)
    assert utilisation.max() == result["max_link_utilisation"]

    # Every chip receives the 15 other shards of its group. Every link the schedule uses carries an equal share,
    # every other link nothing.
    profile = load_hardware("tpuv4")
    assert isinstance(profile, PhysicalProfile)
    ici = profile.ici
    shard = GROUP_BYTES / 16
    if multi_axis == "snake":
        # one bidirectional ring of 16: 15 ring steps of a half-shard each way
        used = _snake_links(topology, (16, 4), 0)
        assert len(used) == 128  # a 16-chip snake per plane: 16 of its 32 cables, both ways, in 4 planes
        per_link = 15 * (shard / 2 / ici.achievable_bandwidth + ici.step_overhead)
    else:
        # x then y for one half of each shard, y then x for the other: the 15 shards arrive over the four x and y
        # links of a chip in 3 + 3 ring steps per link
        used = set(np.flatnonzero(topology.link_axis != 2).tolist())  # every x and y link, no z link
        per_link = 15 * shard / 4 / ici.achievable_bandwidth + 6 * ici.step_overhead
    busy = np.flatnonzero(seconds > 0)
    assert set(busy.tolist()) == used
    np.testing.assert_allclose(seconds[busy], per_link, rtol=1e-12)


def test_text_mode_prints_the_busiest_links_as_notes_on_stderr(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "allgather.png"
    code, out, err = _run(capsys, [*ALL_GATHER, "--multi-axis", "snake", "--link-map", str(target)])
    assert code == 0 and target.exists()
    lines = err.splitlines()
    assert lines[0] == (f"note: link map written to {target}: busy time of every directed link / the collective "
                        "(895.103 us)")
    assert lines[1:] == [f"note: busiest link {link}: " + text for link, text in (
        (0, "chip 0 (0,0,0) +x -> chip 1 (1,0,0): 96.9% busy"),
        (2, "chip 0 (0,0,0) +y -> chip 4 (0,1,0): 96.9% busy"),
        (6, "chip 1 (1,0,0) +x -> chip 2 (2,0,0): 96.9% busy"),
        (7, "chip 1 (1,0,0) -x -> chip 0 (0,0,0): 96.9% busy"),
        (12, "chip 2 (2,0,0) +x -> chip 3 (3,0,0): 96.9% busy"),
    )]
    assert "note:" not in out


def test_a_symmetric_run_fills_the_groups_it_did_not_simulate_exactly() -> None:
    hardware = load_hardware("tpuv4")
    mapping = place_mesh(hardware, 16, 4, topology="4x4x4")

    def run(representatives: list[tuple[int, int]] | None) -> tuple[np.ndarray, np.ndarray]:
        sim = Simulation(network_for(hardware, mapping))
        runtime = CollectiveRuntime(sim, network_for(hardware, mapping), representatives=representatives)
        shard = Tensor((1_000_000,), "int8")

        def program(device: Device) -> Any:
            yield runtime.submit(device.chip_id, CollectiveCall(CollectiveOp.ALL_GATHER, 0, shard.nbytes), shard)
            yield runtime.submit(device.chip_id, CollectiveCall(CollectiveOp.REDUCE_SCATTER, 1, 4 * shard.nbytes),
                                 Tensor((4_000_000,), "int8"))

        run_spmd(sim, runtime, program, lambda device: ())
        raw = runtime.network.link_busy(sim)
        filled = run_link_busy(runtime, symmetric=representatives is not None)
        assert raw is not None and filled is not None
        return raw, filled

    raw, symmetric = run([(0, 0)])
    _, full = run(None)
    # one group of each axis ran: 16 x/y ring members of axis 0 and 4 z ring members of axis 1, of 64 chips
    assert 0 < np.count_nonzero(raw) < np.count_nonzero(full) == np.count_nonzero(symmetric)
    np.testing.assert_allclose(symmetric, full, rtol=1e-12)


@pytest.mark.slow
def test_a_symmetric_gemm_map_equals_the_full_fidelity_one(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    maps = {fidelity: tmp_path / f"{fidelity}.png" for fidelity in ("symmetric", "full")}
    results = {fidelity: _json(capsys, [*GEMM, "--fidelity", fidelity, "--link-map", str(path)])
               for fidelity, path in maps.items()}
    assert all(path.read_bytes()[:8] == PNG_SIGNATURE for path in maps.values())
    assert results["symmetric"]["time_s"] == results["full"]["time_s"]
    busy = {}
    for fidelity in maps:
        link_busy = LinkBusy()
        request = cast(GemmRequest, parse_request(GemmRequest, {**_fields(GEMM), "fidelity": fidelity}))
        runners.run_gemm(request, Context(), link_busy=link_busy)
        busy[fidelity] = link_busy.seconds
    assert busy["full"] is not None and busy["symmetric"] is not None
    assert np.count_nonzero(busy["full"]) == 384  # OS MeshSlice gathers over x, y and z
    np.testing.assert_allclose(busy["symmetric"], busy["full"], rtol=1e-12)
    topology = place_mesh(load_hardware("tpuv4"), 16, 4, topology="4x4x4").topology
    assert topology is not None
    for fidelity, result in results.items():
        utilisation = busy[fidelity] / result["time_s"]
        assert _busiest_notes(result["notes"]) == busiest_links(topology, utilisation, top=5)


@pytest.mark.slow
def test_a_step_map_covers_the_whole_extrapolated_step(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "tiny.yaml"
    model.write_text(TINY_MODEL)
    argv = ["step", "--model", str(model), "--hardware", "tpuv4", "--topology", "torus:4x4", "--mesh", "4x4",
            "--algorithm", "meshslice", "--batch", "8", "--slices", "2"]
    target = tmp_path / "step.png"
    result = _json(capsys, [*argv, "--fidelity", "symmetric", "--link-map", str(target)])
    assert target.read_bytes()[:8] == PNG_SIGNATURE
    assert result["simulated_layers"] == [2, 3]
    assert [n for n in result["notes"] if n.startswith("link map")] == [
        f"link map written to {target}: busy time of every directed link / the whole 6-layer step, extrapolated "
        f"from 2 and 3 simulated layers ({format_time(result['step_time_s'])})"]
    busy = {}
    for fidelity, every_layer in (("symmetric", False), ("full", True)):
        link_busy = LinkBusy()
        fields = {**_fields(argv), "fidelity": fidelity, "all_layers": every_layer}
        runners.run_step(cast(StepRequest, parse_request(StepRequest, fields)), Context(), link_busy=link_busy)
        busy[fidelity] = link_busy.seconds
        topology = link_busy.topology
    symmetric, full = busy["symmetric"], busy["full"]
    assert symmetric is not None and full is not None and topology is not None
    assert _busiest_notes(result["notes"]) == busiest_links(topology, symmetric / result["step_time_s"], top=5)
    # two simulated layers of one group per axis, extrapolated and filled in, equal all six layers of every chip
    # (to rounding, which may reorder the ties among the busiest)
    assert np.count_nonzero(full) == topology.num_links == 64
    np.testing.assert_allclose(symmetric, full, rtol=1e-12)


def _no_simulation(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("simulated before the link map was checked")

    # where each simulation is defined (runners may import it lazily) and where runners may hold it
    for module in ("tpusim.collectives.simulate", "tpusim.gemm.simulate", "tpusim.model.step",
                   "tpusim.experiments.runners"):
        for name in ("simulate_collective", "simulate_gemm", "simulate_step"):
            monkeypatch.setattr(f"{module}.{name}", refuse, raising=False)


@pytest.mark.parametrize(("argv", "path", "message"), [
    (ALL_GATHER, "no-such-folder/map.png", "--link-map '{tmp}/no-such-folder/map.png': folder "
                                           "'{tmp}/no-such-folder' does not exist"),
    (ALL_GATHER, "a-folder", "--link-map '{tmp}/a-folder' is a folder; give a .png file path such as "
                             "'{tmp}/a-folder/linkmap.png'"),
    (GEMM, "map.pdf", "--link-map '{tmp}/map.pdf' does not end in .png; the link map is a PNG picture"),
    ([*GEMM, "--fidelity", "analytic"], "map.png",
     "--link-map needs simulated links but --fidelity analytic simulates none; use auto, symmetric or full"),
    (["collective", "--hardware", "meshslice-sim", "--mesh", "4x4", "--op", "all-gather", "--axis", "0",
      "--bytes", "1MB"], "map.png",
     "--link-map: hardware 'meshslice-sim' is an abstract calibrated network without directed links; use a "
     "physical profile (e.g. tpuv4, see 'tpusim list hardware')"),
    (["step", "--model", "gpt3-175b", "--hardware", "tpuv4", "--mesh", "32x8", "--algorithm", "collective"], "",
     "--link-map '' is empty; give a .png file path such as linkmap.png"),
])
def test_bad_link_maps_are_one_line_exit_2_before_any_simulation(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str],
        path: str, message: str) -> None:
    (tmp_path / "a-folder").mkdir()
    _no_simulation(monkeypatch)
    target = str(tmp_path / path) if path else ""
    code, out, err = _run(capsys, [*argv, "--link-map", target])
    assert (code, out) == (2, "")
    assert err == message.format(tmp=tmp_path) + "\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-folder"]
    assert list((tmp_path / "a-folder").iterdir()) == []


def test_an_unwritable_folder_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    _no_simulation(monkeypatch)
    # permissions do not bind every user (root writes anywhere), so the access check itself answers "no"
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    code, _, err = _run(capsys, [*ALL_GATHER, "--link-map", str(tmp_path / "map.png")])
    assert code == 2
    assert err == f"--link-map '{tmp_path}/map.png' is not writable; give a path in a writable folder\n"
    assert list(tmp_path.iterdir()) == []

"""Perfetto traces of a whole training step (``tpusim step --trace``, ``tpusim tune --trace-best``): the JSON is
well formed, names every chip, op, layer and pass, draws collectives as matched flows bound to spans, agrees with
the step's result, and bad trace options fail with one line before anything is written."""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from tpusim.cli.main import main

ROUNDING_US = 0.5e-3  # the trace keeps nanoseconds: each time is within half a nanosecond
NAME = re.compile(r"^(L(?P<layer>\d+) (?P<pass>fwd|recompute|bwd-data|bwd-weight|bwd) |step )\S")
CHIP = re.compile(r"^chip (?P<chip>\d+) \((?P<i>\d+),(?P<j>\d+)\)( critical)?$")


def tiny_model(folder: Path, layers: int) -> Path:
    path = folder / f"tiny{layers}.yaml"
    path.write_text(f"name: tiny{layers}\ndescription: a small transformer for trace tests\nlayers: {layers}\n"
                    "hidden: 512\nheads: 8\nhead_dim: 64\nffn: 2048\nsequence: 128\nvocabulary: 1000\n")
    return path


def step_argv(model: Path, *extra: str) -> list[str]:
    return ["step", "--model", str(model), "--hardware", "tpuv4", "--topology", "torus:4x4", "--mesh", "4x4",
            "--algorithm", "meshslice", "--slices", "2", "--json", *extra]


def run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


class Trace:
    """A loaded trace with its tracks resolved."""

    def __init__(self, path: Path) -> None:
        self.raw = json.loads(path.read_text())
        self.events: list[dict[str, Any]] = self.raw["traceEvents"]
        self.meta: dict[str, Any] = self.raw["otherData"]
        self.spans = [e for e in self.events if e["ph"] == "X"]
        self.tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in self.events if e["name"] == "thread_name"}
        self.processes = {e["pid"]: e["args"]["name"] for e in self.events if e["name"] == "process_name"}

    def track(self, span: dict[str, Any]) -> str:
        return self.tracks[(span["pid"], span["tid"])]

    def busy(self, chip: int, *tracks: str) -> tuple[float, int]:
        """Microseconds of spans on ``tracks`` of ``chip`` (lanes included) and how many spans."""
        chosen = [s for s in self.spans if s["pid"] == chip and self.track(s).split(" (")[0] in tracks]
        return sum(s["dur"] for s in chosen), len(chosen)

    def enclosing(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        return [s for s in self.spans if (s["pid"], s["tid"]) == (event["pid"], event["tid"])
                and s["ts"] <= event["ts"] <= s["ts"] + s["dur"]]


@pytest.fixture(scope="module")
def whole_step(tmp_path_factory: pytest.TempPathFactory) -> tuple[Trace, dict[str, Any]]:
    """A two-layer step, every layer simulated, traced with the default chips."""
    folder = tmp_path_factory.mktemp("trace")
    trace = folder / "step.json"
    out = io.StringIO()  # a module-scoped fixture cannot take capsys
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert main(step_argv(tiny_model(folder, 2), "--trace", str(trace))) == 0
    return Trace(trace), json.loads(out.getvalue())


def test_spans_have_times_and_tracks(whole_step: tuple[Trace, dict[str, Any]]) -> None:
    trace, _ = whole_step
    assert trace.spans
    for span in trace.spans:
        assert {"ts", "dur", "pid", "tid", "name"} <= span.keys()
        assert span["dur"] >= 0
        assert (span["pid"], span["tid"]) in trace.tracks


def test_every_chip_is_named_with_its_mesh_coordinates(whole_step: tuple[Trace, dict[str, Any]]) -> None:
    trace, _ = whole_step
    pids = {e["pid"] for e in trace.events if "pid" in e}
    assert pids == set(trace.processes)
    where = {}
    for pid, name in trace.processes.items():
        match = CHIP.match(name)
        assert match, name
        assert int(match["chip"]) == pid
        where[pid] = (int(match["i"]), int(match["j"]))
    # the default: logical chip (0,0) with its row and column, 4 + 4 - 1 chips of the 4x4 mesh
    assert sorted(where.values()) == sorted({(0, c) for c in range(4)} | {(r, 0) for r in range(4)})
    critical = trace.meta["critical_chip"]
    assert trace.processes[critical].endswith(" critical")
    assert sum(name.endswith(" critical") for name in trace.processes.values()) == 1


def test_tracks_are_compute_collectives_and_ici_ports(whole_step: tuple[Trace, dict[str, Any]]) -> None:
    trace, _ = whole_step
    critical = trace.meta["critical_chip"]
    tracks = {name.split(" (")[0] for (pid, _), name in trace.tracks.items() if pid == critical}
    assert tracks == {"MXU", "vector unit", "HBM stall", "collectives axis 0", "collectives axis 1",
                      "ICI +x", "ICI -x", "ICI +y", "ICI -y"}
    ports = [s for s in trace.spans if trace.track(s).startswith("ICI ")]
    assert all(s["args"]["transfers"] >= 1 and 0 < s["args"]["busy_s"] * 1e6 <= s["dur"] + ROUNDING_US
               for s in ports)


def test_op_names_carry_layer_pass_and_slice(whole_step: tuple[Trace, dict[str, Any]]) -> None:
    trace, _ = whole_step
    layers, passes = set(), set()
    for span in trace.spans:
        match = NAME.match(span["name"])
        assert match, span["name"]
        if match["layer"] is not None:
            layers.add(int(match["layer"]))
            passes.add(match["pass"])
    assert layers == {0, 1}
    assert passes == {"fwd", "bwd-data", "bwd-weight", "bwd"}  # no recomputation at this size
    mxu = {s["name"] for s in trace.spans if trace.track(s) == "MXU"}
    assert {"L1 fwd ff1 S1/2 gemm", "L1 fwd ff1 S2/2 gemm", "L0 bwd-weight qkv S2/2 gemm", "L0 fwd attention"} <= mxu
    collectives = {s["name"] for s in trace.spans if trace.track(s).startswith("collectives")}
    assert {"L1 fwd ff1 all-gather", "L0 fwd ln1.psum all-reduce"} <= collectives


@pytest.mark.slow
def test_flows_pair_sender_port_with_receiver_collective(whole_step: tuple[Trace, dict[str, Any]]) -> None:
    trace, _ = whole_step
    starts = [e for e in trace.events if e["ph"] == "s"]
    finishes = [e for e in trace.events if e["ph"] == "f"]
    assert starts
    assert Counter(e["id"] for e in starts) == Counter(e["id"] for e in finishes)
    assert set(Counter(e["id"] for e in starts).values()) == {1}
    finish = {e["id"]: e for e in finishes}
    for start in starts:
        end = finish[start["id"]]
        assert end["bp"] == "e" and end["name"] == start["name"] and end["cat"] == start["cat"]
        assert start["pid"] != end["pid"]
        assert start["ts"] <= end["ts"]
        assert any(trace.track(s).startswith("ICI ") for s in trace.enclosing(start))
        assert any(trace.track(s).startswith("collectives") and s["name"] == end["name"]
                   for s in trace.enclosing(end))


def test_times_and_compute_agree_with_the_result(whole_step: tuple[Trace, dict[str, Any]]) -> None:
    trace, result = whole_step
    step_us = result["step_time_s"] * 1e6
    assert result["simulated_layers"] == [2]
    assert all(s["ts"] >= -ROUNDING_US and s["ts"] + s["dur"] <= step_us + 2 * ROUNDING_US for s in trace.spans)
    assert max(s["ts"] + s["dur"] for s in trace.spans) == pytest.approx(step_us, abs=2 * ROUNDING_US)
    critical = trace.meta["critical_chip"]
    # one compute queue per chip: its MXU and vector-unit spans never overlap and add up to compute_s
    busy, count = trace.busy(critical, "MXU", "vector unit")
    assert busy == pytest.approx(result["compute_s"] * 1e6, abs=2 * count * ROUNDING_US)
    stall, count = trace.busy(critical, "HBM stall")
    assert result["hbm_stall_s"] > 0
    assert stall == pytest.approx(result["hbm_stall_s"] * 1e6, abs=2 * count * ROUNDING_US)
    assert trace.meta["traced_layers"] == "all 2 layers"
    assert trace.meta["step_time_s"] == result["step_time_s"] == trace.meta["trace_time_s"]
    assert any(note.startswith("trace: all 2 layers") for note in result["notes"])


@pytest.mark.slow
def test_an_extrapolated_step_traces_the_layers_it_simulated(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    trace_path = tmp_path / "step.json"
    code, out, _ = run(capsys, step_argv(tiny_model(tmp_path, 5), "--trace", str(trace_path),
                                         "--trace-chips", "5,6"))
    assert code == 0
    result = json.loads(out)
    trace = Trace(trace_path)
    assert result["simulated_layers"] == [2, 3]
    assert trace.meta["traced_layers"].startswith("layers 0-2 of 5")
    assert {int(m["layer"]) for s in trace.spans if (m := NAME.match(s["name"])) and m["layer"]} == {0, 1, 2}
    assert set(trace.processes) == {5, 6}
    assert trace.meta["critical_chip"] in {5, 6}
    assert trace.meta["traced_chips"] == "5-6"
    assert max(s["ts"] + s["dur"] for s in trace.spans) <= result["step_time_s"] * 1e6
    assert not any("not among the traced chips" in note for note in result["notes"])


def test_api_step_writes_the_same_trace(tmp_path: Path) -> None:
    import tpusim.api as tp

    path = tmp_path / "api.json"
    result = tp.step(model=str(tiny_model(tmp_path, 2)), hardware="tpuv4", topology="torus:4x4", mesh="4x4",
                     algorithm="meshslice", slices=2, trace=str(path), trace_chips="0")
    assert f"trace written to {path}" in result.notes
    assert set(Trace(path).processes) == {0}


@pytest.mark.slow
def test_tune_traces_its_best_choice(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "best.json"
    code, out, _ = run(capsys, ["tune", "--model", str(tiny_model(tmp_path, 2)), "--hardware", "tpuv4",
                                "--chips", "16", "--topology", "torus:4x4", "--trace-best", str(path), "--json"])
    assert code == 0
    result = json.loads(out)
    trace = Trace(path)
    assert trace.meta["mesh"] == result["best"]["mesh"]
    assert trace.meta["step_time_s"] == pytest.approx(result["best"]["step_time_s"], rel=1e-12)
    assert any(note.startswith(f"trace of the best choice ({result['best']['mesh']})") for note in result["notes"])


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--trace-chips", "16"], "trace chips: chip 16 does not exist on the 4x4 mesh; valid: 0-15"),
        (["--trace-chips", "5-2"], "trace chips: chip list '5-2': range '5-2' runs backwards; write it low-high "
                                   "('2-5')"),
        (["--trace-chips", "0,x"], "trace chips: chip list '0,x' is not like '0,3,5-7'"),
    ],
)
def test_bad_trace_chips_fail_before_writing(tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str],
                                             message: str) -> None:
    path = tmp_path / "step.json"
    path.write_text("an earlier trace")
    model = tiny_model(tmp_path, 2)
    code, out, err = run(capsys, step_argv(model, "--trace", str(path), *extra))
    assert (code, out, err) == (2, "", message + "\n")
    assert path.read_text() == "an earlier trace"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([path.name, model.name])


def test_a_trace_in_a_missing_folder_fails_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "missing" / "step.json"
    code, out, err = run(capsys, step_argv(tiny_model(tmp_path, 2), "--trace", str(path)))
    assert (code, out) == (2, "")
    assert err == f"trace path {str(path)!r}: folder {str(path.parent)!r} does not exist\n"
    assert not path.parent.exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_trace_in_a_read_only_folder_fails_with_one_line(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        code, out, err = run(capsys, step_argv(tiny_model(tmp_path, 2), "--trace", str(folder / "t.json")))
    finally:
        folder.chmod(0o700)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and "is not writable" in err
    assert list(folder.iterdir()) == []


def test_tune_trace_options_fail_before_the_search(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["tune", "--model", str(tiny_model(tmp_path, 2)), "--hardware", "tpuv4", "--chips", "16"]
    code, out, err = run(capsys, [*base, "--trace-chips", "3"])
    assert (code, out, err) == (2, "", "trace chips '3' need a trace file (--trace-best FILE)\n")
    code, out, err = run(capsys, [*base, "--trace-best", str(tmp_path / "t.json"), "--trace-chips", "99"])
    assert (code, out, err) == (2, "", "trace chips: chip 99 does not exist on the 16-chip mesh; valid: 0-15\n")
    assert not (tmp_path / "t.json").exists()


def test_lanes_keep_overlapping_collectives_apart(whole_step: tuple[Trace, dict[str, Any]]) -> None:
    trace, _ = whole_step
    by_track: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    for span in trace.spans:
        by_track[(span["pid"], span["tid"])].append((span["ts"], span["ts"] + span["dur"]))
    for spans in by_track.values():
        spans.sort()
        assert all(a[1] <= b[0] + ROUNDING_US for a, b in itertools.pairwise(spans))

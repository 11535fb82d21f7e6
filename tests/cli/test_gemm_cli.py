"""``tpusim gemm`` and ``tpusim list``: output conventions, verification, trace, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tpusim.cli.main import main
from tpusim.experiments.families import FAMILIES  # one shipped experiment per family

BASE = ["gemm", "--hardware", "meshslice-tpu-fit", "--mesh", "4x4", "--algorithm", "collective",
        "--dataflow", "os", "--m", "512", "--n", "256", "--k", "1024"]


def run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_json_is_one_object_with_the_promised_fields(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, [*BASE, "--verify", "--json"])
    assert code == 0
    result = json.loads(out)
    for key in ("time_s", "analytic_time_s", "compute_s", "exposed_comm_s", "idle_s", "bytes_sent",
                "flops_per_chip", "prefetch", "mapping", "max_abs_error"):
        assert key in result
    assert result["time_s"] == pytest.approx(result["analytic_time_s"], rel=1e-9)
    assert result["max_abs_error"] < 1e-9
    assert result["prefetch"] == "ideal"  # the calibrated profiles' default
    assert result["flops_per_chip"] == 2 * (512 / 4) * (256 / 4) * 1024
    assert result["compute_s"] + result["exposed_comm_s"] + result["idle_s"] == pytest.approx(result["time_s"])


def test_physical_default_prefetch_is_previous_gemm(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["gemm", "--hardware", "tpuv4", "--topology", "torus:4x4", "--mesh", "4x4", "--algorithm",
            "collective", "--dataflow", "ls", "--m", "256", "--n", "256", "--k", "256", "--json"]
    code, out, _ = run(capsys, argv)
    assert code == 0
    assert json.loads(out)["prefetch"] == "previous-gemm"


def test_trace_has_a_process_per_chip_and_mxu_tracks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "trace.json"
    argv = ["gemm", "--hardware", "tpuv4", "--topology", "torus:4x4", "--mesh", "4x4", "--algorithm",
            "collective", "--dataflow", "os", "--m", "256", "--n", "256", "--k", "256", "--trace", str(trace),
            "--trace-chips", "0-1"]
    code, _, _ = run(capsys, argv)
    assert code == 0
    events = json.loads(trace.read_text())["traceEvents"]
    pids = {e["pid"] for e in events}
    assert pids == {0, 1}
    tracks = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert "MXU" in tracks
    assert any(t.startswith("ICI ") for t in tracks)
    spans = [e for e in events if e["ph"] == "X"]
    assert spans and all(e["dur"] >= 0 for e in spans)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--algorithm", "colective"], "'colective'"),
        (["--slices", "4"], "--slices 4"),
        (["--variant", "fast"], "'fast'"),
        (["--m", "0"], "'0'"),
        (["--mesh", "3x4"], "3 chips"),
        (["--m", "510"], "510"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str], needle: str) -> None:
    args = list(BASE)
    for flag, value in zip(argv[::2], argv[1::2], strict=True):
        if flag in args:
            args[args.index(flag) + 1] = value
        else:
            args += [flag, value]
    code, out, err = run(capsys, args)
    assert code == 2
    assert out == ""
    assert "Traceback" not in err
    assert 1 <= len(err.strip().splitlines()) <= 2
    assert needle in err


def test_list_algorithms_names_the_registered_ones(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, ["list", "algorithms", "--json"])
    assert code == 0
    names = {a["name"] for a in json.loads(out)["algorithms"]}
    assert "collective" in names


def test_list_hardware(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, ["list", "hardware"])
    assert code == 0
    assert {"tpuv4", "meshslice-tpu-fit", "meshslice-sim"} <= {line.split()[0] for line in out.splitlines()}


ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("what", "folder", "count"), [("hardware", ROOT / "configs" / "hardware", 7),
                                                      ("models", ROOT / "configs" / "models", 10),
                                                      ("experiments", ROOT / "experiments", len(FAMILIES))])
def test_a_listing_of_files_ends_with_their_folder(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                                   what: str, folder: Path, count: int) -> None:
    monkeypatch.delenv("TPUSIM_CONFIG_DIR", raising=False)
    code, out, _ = run(capsys, ["list", what])
    assert code == 0
    assert (len(out.splitlines()), out.splitlines()[-1]) == (count + 1, f"files in {folder}")
    code, out, _ = run(capsys, ["list", what, "--json"])
    assert (code, json.loads(out)["folder"], len(json.loads(out)[what])) == (0, str(folder), count)


def test_a_listing_names_the_config_dir_it_read(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "gpt3-175b.yaml").write_bytes((ROOT / "configs" / "models" / "gpt3-175b.yaml").read_bytes())
    monkeypatch.setenv("TPUSIM_CONFIG_DIR", str(tmp_path))
    code, out, _ = run(capsys, ["list", "models"])
    assert code == 0
    assert out.splitlines()[0].split()[:2] == ["gpt3-175b", "model"]
    assert out.splitlines()[1:] == [f"files in {(tmp_path / 'models').resolve()}"]


def test_other_listings_name_no_folder(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, ["list", "collectives", "--json"])
    assert (code, list(json.loads(out))) == (0, ["collectives"])


@pytest.mark.parametrize(("switch", "axis0"), [([], "x*y dimensional"), (["--multi-axis", "snake"], "x*y snake")])
def test_the_text_output_names_the_slice_a_mesh_was_placed_on(capsys: pytest.CaptureFixture[str], switch: list[str],
                                                              axis0: str) -> None:
    """16 chips of tpuv4 default to the 2x2x4 slice; the text says so, with each logical axis's embedding, and an
    axis of two physical axes by the schedule its collectives ran: tpuv4's dimensional one, or the snake ring."""
    argv = ["gemm", "--hardware", "tpuv4", "--mesh", "4x4", "--algorithm", "collective", "--dataflow", "os",
            "--m", "256", "--n", "256", "--k", "256", *switch]
    code, out, _ = run(capsys, argv)
    assert code == 0
    assert out.splitlines()[1] == f"  network         tpuv4:2x2x4 (axis 0: {axis0}; axis 1: z line)"

"""Files an experiment names by path: confined to its folder (no disclosure of other files), part of the
configuration hash (no resume across an edit), and exclude keys that exist."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.reliability.files import TINY_GEMM_POINT
from tpusim.cli.main import main
from tpusim.config.catalog import TRUSTED_DIRS_ENV
from tpusim.experiments.run import FAULT_ENV
from tpusim.hardware import hardware_names

SECRET = "root:$6$not-a-real-hash:19000:0:99999:7:::\n"

PROFILE = """\
name: mine
base: tpuv4
description: tpuv4 with slower links
kind: physical
ici:
  link_bandwidth: 45e9
"""

STEP_SWEEP = """\
name: uses-a-profile
point:
  kind: collective
  hardware: {hardware}
  topology: torus:4x4
  mesh: 4x4
  axis: 0
  op: all-gather
  bytes: 64MB
sweep:
  grid:
    bytes: [1MB, 2MB, 4MB, 8MB]
"""


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str], str]:
    status = main(argv)
    captured = capsys.readouterr()
    return status, captured.err.strip().splitlines(), captured.out


def test_an_experiment_cannot_read_a_file_outside_its_folder(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    secret = tmp_path / "elsewhere" / "shadow"
    secret.parent.mkdir()
    secret.write_text(SECRET)
    experiment = tmp_path / "exp" / "leak.yaml"
    experiment.parent.mkdir()
    experiment.write_text(STEP_SWEEP.format(hardware="tpuv4").replace(
        "    bytes: [1MB, 2MB, 4MB, 8MB]", f"    hardware: [tpuv4, {secret}]"))
    status, err, out = _run(["run", str(experiment), "--out", str(tmp_path / "out")], capsys)
    assert status == 2
    assert len(err) == 1 and "is outside the experiment's folder" in err[0] and repr(str(secret)) in err[0]
    assert "root" not in err[0].replace(str(tmp_path), "") and "not-a-real-hash" not in err[0] + out
    assert not (tmp_path / "out").exists()


def test_a_trusted_folder_may_hold_referenced_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "mine.yaml").write_text(PROFILE)
    experiment = tmp_path / "exp" / "ok.yaml"
    experiment.parent.mkdir()
    experiment.write_text(STEP_SWEEP.format(hardware=shared / "mine.yaml"))
    assert _run(["run", str(experiment), "--out", str(tmp_path / "a"), "--quiet"], capsys)[0] == 2
    monkeypatch.setenv(TRUSTED_DIRS_ENV, str(shared))
    assert _run(["run", str(experiment), "--out", str(tmp_path / "b"), "--quiet"], capsys)[0] == 0


def test_a_profile_base_outside_its_folder_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    outside = tmp_path / "outside.yaml"
    outside.write_text(PROFILE.replace("name: mine", "name: outside"))
    child = tmp_path / "profiles" / "child.yaml"
    child.parent.mkdir()
    child.write_text(PROFILE.replace("name: mine", "name: child").replace("base: tpuv4", "base: ../outside.yaml"))
    status, err, _ = _run(["collective", "--hardware", str(child), "--topology", "torus:4x4", "--mesh", "4x4",
                           "--axis", "0", "--op", "all-gather", "--bytes", "1MB"], capsys)
    assert status == 2
    assert err == [f"{child}: base: '../outside.yaml' is outside the profile's folder; put the base profile "
                   f"beside it or add its folder to ${TRUSTED_DIRS_ENV}"]


@pytest.mark.slow
def test_resume_refuses_results_computed_from_an_edited_profile(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "mine.yaml").write_text(PROFILE)
    experiment = tmp_path / "sweep.yaml"
    experiment.write_text(STEP_SWEEP.format(hardware="./mine.yaml"))
    killed = subprocess.run([sys.executable, "-m", "tpusim", "run", "sweep.yaml", "--out", "out", "--quiet"],
                            cwd=tmp_path, env=dict(os.environ, **{FAULT_ENV: "1"}), capture_output=True, text=True)
    assert killed.returncode == -9  # killed after its first point
    # the profile changes under the half-finished run: its finished point no longer describes this profile
    (tmp_path / "mine.yaml").write_text(PROFILE.replace("45e9", "4.5e9"))
    resumed = subprocess.run([sys.executable, "-m", "tpusim", "run", "sweep.yaml", "--out", "out", "--resume",
                              "--quiet"], cwd=tmp_path, capture_output=True, text=True)
    assert resumed.returncode == 2
    assert "holds results of a different experiment" in resumed.stderr
    # unchanged, the same resume completes the run
    (tmp_path / "mine.yaml").write_text(PROFILE)
    again = subprocess.run([sys.executable, "-m", "tpusim", "run", "sweep.yaml", "--out", "out", "--resume",
                            "--quiet"], cwd=tmp_path, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr


def test_an_exclude_key_no_point_has_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    experiment = tmp_path / "typo.yaml"
    experiment.write_text("name: typo\n" + TINY_GEMM_POINT + "sweep:\n  grid:\n    m: [64, 128]\n  exclude:\n"
                          "    - {mm: 64}\n")
    status, err, _ = _run(["run", str(experiment), "--out", str(tmp_path / "out")], capsys)
    assert status == 2
    assert err[0].startswith(f"{experiment}: sweep.exclude[0]: unknown key 'mm'; valid keys: algorithm, ")
    assert err[1] == "did you mean 'm'?"
    assert not (tmp_path / "out").exists()


def test_nested_exclude_keys_are_known(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    experiment = tmp_path / "nested.yaml"
    experiment.write_text("name: nested\n" + TINY_GEMM_POINT + "sweep:\n  grid:\n    scale.beta: [1, 2]\n"
                          "  exclude:\n    - {scale.beta: 2}\n")
    status, _, _ = _run(["run", str(experiment), "--out", str(tmp_path / "out"), "--quiet"], capsys)
    assert status == 0
    assert len((tmp_path / "out" / "results.csv").read_text().splitlines()) == 2  # header and one point


def test_a_bug_in_one_point_is_kept_in_its_row_and_the_run_exits_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    import tpusim.experiments.points as points

    real = points._run

    def broken_for_128(point: Any, context: Any) -> dict[str, Any]:
        if getattr(point, "m", None) == 128:
            raise ZeroDivisionError("a planted bug")
        return real(point, context)

    monkeypatch.setattr(points, "_run", broken_for_128)
    experiment = tmp_path / "bug.yaml"
    experiment.write_text("name: bug\n" + TINY_GEMM_POINT + "sweep:\n  grid:\n    m: [64, 128, 256]\n")
    status, err, _ = _run(["run", str(experiment), "--out", str(tmp_path / "out"), "--quiet"], capsys)
    assert status == 1
    assert any("1 point(s) met an internal error" in line for line in err)
    rows = (tmp_path / "out" / "results.csv").read_text().splitlines()
    assert len(rows) == 4  # the header and all three points
    assert "internal error: ZeroDivisionError: a planted bug" in rows[2]
    assert "internal error" not in rows[1] + rows[3]


@pytest.mark.parametrize(("key", "values", "lines"), [
    ("algorithm", "[summa, colective]",
     ["sweep.yaml (sweep point 1): algorithm: unknown algorithm 'colective'; valid: cannon, collective, fsdp, "
      "meshslice, summa, tp1d, wang", "did you mean 'collective'?"]),
    ("hardware", "[meshslice-tpu-fit, tpuv4x]",
     ["sweep.yaml (sweep point 1): hardware: unknown hardware profile 'tpuv4x'; valid: "
      + ", ".join(hardware_names()), "did you mean 'tpuv4'?"]),
])
@pytest.mark.slow
def test_an_unknown_name_in_a_sweep_is_refused_before_any_point_as_a_process(
        tmp_path: Path, key: str, values: str, lines: list[str]) -> None:
    # issue 26 item 15: every point used to be an error row, exit 0
    (tmp_path / "sweep.yaml").write_text("name: names\n" + TINY_GEMM_POINT + f"sweep:\n  grid:\n    {key}: {values}\n")
    environment = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run([sys.executable, "-m", "tpusim", "run", "sweep.yaml", "--out", "out"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, env=environment, check=False)
    assert (done.returncode, done.stdout, done.stderr.splitlines()) == (2, "", lines)
    assert not (tmp_path / "out").exists()
